"""The roofline: GPU peaks (datasheet, measured, configured), op FLOP/byte models, per-kernel bounds.

``Trace.roofline`` (a ``view.Roofline``) is computed once per trace and shared by the report and
the rules; ``summary.summarize`` is the report's ``roofline`` section. This package namespace
imports neither numpy nor pandas (configuration is read before the trace decodes): the
table-building modules ``view`` and ``summary`` are imported by name.
"""

from traceadvisor.roofline.gpus import DTYPES, GPUS, GpuSpec, lookup, match
from traceadvisor.roofline.models import Work, op_work
from traceadvisor.roofline.peaks import GpuConfig, Peaks, parse_gpu_table, resolve_peaks
from traceadvisor.roofline.profile import (
    DeviceProfile,
    ProfileError,
    default_profile_dir,
    find_device_profile,
    load_device_profile,
    profile_filename,
    save_device_profile,
)

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
    "op_work",
    "parse_gpu_table",
    "profile_filename",
    "resolve_peaks",
    "save_device_profile",
]
