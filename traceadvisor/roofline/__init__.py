"""The roofline: GPU peaks (datasheet, measured, configured), op FLOP/byte models, per-kernel bounds.

``of(trace)`` (a ``view.Roofline``) is computed once per trace and shared by the report (whose
``roofline`` section ``summary/roofline.py`` builds from it) and the rules. This package namespace
imports neither numpy nor pandas (configuration is read before the trace decodes): the
table-building module ``view`` is imported by name, and ``of`` imports ``view`` when first called
(a trace exists then, so pandas is loaded anyway).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceadvisor.roofline.gpus import DTYPES, GPUS, GpuSpec, lookup, match
from traceadvisor.roofline.models import Work, op_work
from traceadvisor.roofline.peaks import Peaks, parse_gpu_table, resolve_peaks
from traceadvisor.roofline.profile import (
    DeviceProfile,
    ProfileError,
    default_profile_dir,
    find_device_profile,
    load_device_profile,
    profile_filename,
    save_device_profile,
)
from traceadvisor.trace.device import GpuConfig

if TYPE_CHECKING:
    from traceadvisor.roofline.view import Roofline
    from traceadvisor.trace.model import Trace


def of(trace: Trace) -> Roofline:
    """The roofline of ``trace`` (``view.of``: memoised per trace, peaks from ``trace.gpu_config``)."""
    # Imported here, not at the top: the package is imported with the configuration, before
    # pandas (see above); ``view`` does not import this package, so this hides no import cycle.
    from traceadvisor.roofline import view

    return view.of(trace)


__all__ = [
    "DTYPES",
    "GPUS",
    "DeviceProfile",
    "GpuConfig",
    "GpuSpec",
    "Peaks",
    "ProfileError",
    "Work",
    "default_profile_dir",
    "find_device_profile",
    "load_device_profile",
    "lookup",
    "match",
    "of",
    "op_work",
    "parse_gpu_table",
    "profile_filename",
    "resolve_peaks",
    "save_device_profile",
]
