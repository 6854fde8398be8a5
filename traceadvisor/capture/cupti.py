"""CUPTI detached after the last profiling window.

Kineto attaches CUPTI (NVIDIA's profiling interface) to the process when a CUDA trace starts and, by
default, leaves it attached when the trace ends: it calls ``cuptiFinalize`` only when the environment
variable ``TEARDOWN_CUPTI`` is ``"1"`` (pytorch/pytorch#144455). Attached, CUPTI keeps its callbacks
on every CUDA runtime and driver call, so a program stays slower after the profiler is gone, every
kernel launch included: measured on an H100 (torch 2.11+cu130, bench/after_window_overhead.py) a
host-bound loop of ~400 launches a step ran 30-40 % slower after the window, and at the speed of
an unprofiled run with ``TEARDOWN_CUPTI=1``.

Kineto reads the variable when a trace ends (``CuptiActivityApi::teardownContext``), so it is set
just before the step that ends the schedule's last cycle: earlier cycles of a ``repeat`` schedule
keep CUPTI attached (tearing it down and attaching it again costs each cycle's start). A value the
program or torch set is never changed: torch sets ``"0"`` where Inductor's CUDA graphs run on CUDA
older than 12.6 (CUPTI re-attached after a teardown crashed there, fixed in CUDA 12.6:
pytorch/pytorch#146604); capture leaves it alone below CUDA 12.6 altogether, since CUDA graphs
captured by hand are not in torch's check.
"""

from __future__ import annotations

import os
from typing import Any

ENV = "TEARDOWN_CUPTI"
_MIN_CUDA = (12, 6)


def last_cycle_ending(prof: Any, cycles_done: int, repeat: int) -> bool:
    """Will ``prof.step()`` end the last cycle of a ``repeat``-cycle schedule (``cycles_done`` written)?
    Read by the action's name, so that this module does not import torch."""
    action = getattr(getattr(prof, "current_action", None), "name", None)
    return repeat > 0 and cycles_done == repeat - 1 and action == "RECORD_AND_SAVE"


def teardown_when_trace_ends(prof: Any) -> bool:
    """Ask kineto to detach CUPTI when ``prof``'s trace ends; True if ``TEARDOWN_CUPTI`` was set here."""
    if ENV in os.environ or not profiles_cuda(prof) or not cuda_at_least(_cuda_version(), _MIN_CUDA):
        return False
    os.environ[ENV] = "1"
    return True


def cuda_at_least(version: str | None, minimum: tuple[int, int]) -> bool:
    """Is ``version`` (``torch.version.cuda``, e.g. ``"12.4"``; None without CUDA) at least ``minimum``?"""
    try:
        parts = tuple(int(p) for p in (version or "").split(".")[:2])
    except ValueError:
        return False
    return len(parts) == 2 and parts >= minimum


def _cuda_version() -> str | None:
    import torch

    return getattr(torch.version, "cuda", None)


def profiles_cuda(prof: Any) -> bool:
    """Does ``prof`` record CUDA activity (so CUPTI attaches to the process)?"""
    return any(getattr(a, "name", None) == "CUDA" for a in getattr(prof, "activities", ()) or ())


__all__ = ["ENV", "cuda_at_least", "last_cycle_ending", "profiles_cuda", "teardown_when_trace_ends"]
