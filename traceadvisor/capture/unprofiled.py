"""Step times measured outside the profiler's active window, with no device synchronisation.

The profiler slows what it records (a host callback per op, per Python frame with stacks on), so a
recorded step is longer than the program's real one. The skipped and wait steps of the schedule run
with the profiler off; the wall time between two step boundaries the ``StepClock`` already sees (two
``prof.step()`` calls) is then the program's own step time, and costs two ``perf_counter_ns`` calls.

Why host wall time is the step time (docs/capture.md): CUDA launches are asynchronous, so one
boundary-to-boundary interval is the host's time, not the GPU's. In steady state they agree when the
loop waits for the GPU once per step (a ``loss.item()``, a ``.cpu()``, a ``cudaStreamSynchronize``:
the host cannot run ahead) or when the launch queue is bounded (the host blocks once about a
thousand launches are pending, an observed depth, so over many steps its pace is the GPU's). They do
not agree for a loop with no sync whose steps are shorter than the queue: the host runs ahead, and
the times measure launch speed until the queue fills. The median over several steps is what the report shows.

The first step (it begins at the program's start, not at a boundary) and a step ended by the end of
the run (it ends at the program's exit, after whatever follows the loop) are not steps of the loop:
they are never measured.

Nor is a step that runs while CUPTI is still attached from an earlier CUDA trace: Kineto detaches it
when a trace ends only with ``TEARDOWN_CUPTI=1`` (capture/cupti.py sets it for the last cycle), and
attached its callbacks slow every CUDA call of the program with the profiler off (the GPU pairs, in
one process: a per-parameter AdamW step 9.1 ms detached, 12.7 and 14.6 ms attached;
fixtures/pairs12_runs/cupti_ab/). The wait steps between the cycles of a ``repeat`` schedule are such
steps; they are counted apart (``cupti_attached_steps``), never as the program's step time.
"""

from __future__ import annotations

import json
import time
from typing import Any

TRACE_KEY = "traceadvisor"


class UnprofiledSteps:
    """The step times seen with the profiler off, as ``(step number, microseconds)``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.times: list[tuple[int, float]] = []
        # profiler-off steps run while CUPTI stayed attached after a CUDA trace: not the program's speed
        self.attached: list[int] = []
        self.cupti_attached = False
        self._last_boundary_ns: int | None = None

    def trace_ended(self, profiles_cuda: bool, teardown_env: str | None) -> None:
        """A trace just ended: CUPTI stays attached after a CUDA trace unless ``TEARDOWN_CUPTI`` was
        ``"1"`` when it ended (``teardown_env``, the variable's value then)."""
        if profiles_cuda:
            self.cupti_attached = teardown_env != "1"

    def boundary(self, step: int, unprofiled: bool, started_ns: int, ended_ns: int) -> None:
        """Step ``step`` ended at ``started_ns`` (before ``prof.step()``); the next began at ``ended_ns``
        (after it). The profiler's own work at the boundary (starting, exporting) is in neither step."""
        if unprofiled and self._last_boundary_ns is not None:
            if self.cupti_attached:
                self.attached.append(step)
            else:
                self.times.append((step, (started_ns - self._last_boundary_ns) / 1000))
        self._last_boundary_ns = ended_ns

    def forget_boundary(self) -> None:
        """The next step is not a loop step (the run ends): do not measure it."""
        self._last_boundary_ns = None

    def key(self, profiled_steps: list[int]) -> dict[str, Any]:
        """The trace's top-level ``"traceadvisor"`` value."""
        return {
            "unprofiled_step_us": [us for _, us in self.times],
            "unprofiled_steps": [step for step, _ in self.times],
            "profiled_steps": list(profiled_steps),
            "cupti_attached_steps": list(self.attached),
            "source": self.source,
        }


def now_ns() -> int:
    return time.perf_counter_ns()


_RECORDING = ("RECORD", "RECORD_AND_SAVE")


def profiler_off(prof: Any) -> bool:
    """Is ``prof`` (a ``torch.profiler.profile``) off in its current step (``ProfilerAction.NONE``:
    a skipped or wait step)? Read by name so that this module does not import torch."""
    return getattr(getattr(prof, "current_action", None), "name", None) == "NONE"


def recorded_steps(prof: Any) -> list[int]:
    """The steps of the cycle ``prof`` hands to ``on_trace_ready``: the run of recording steps just
    before its current step (``prof.step()`` advances ``step_num`` before it calls it), from its schedule."""
    schedule, current = getattr(prof, "schedule", None), getattr(prof, "step_num", None)
    if not callable(schedule) or not isinstance(current, int):
        return []
    steps: list[int] = []
    n = current - 1
    while n >= 0 and getattr(schedule(n), "name", None) in _RECORDING and len(steps) < 1_000_000:
        steps.append(n)
        n -= 1
    return steps[::-1]


def with_key(trace_json: bytes, value: dict[str, Any]) -> bytes:
    """``trace_json`` (a Chrome trace object) with ``"traceadvisor": value`` as its first key.

    Spliced in front, not parsed and rewritten: a trace is often hundreds of MB, and the loader reads
    the keys before ``traceEvents`` as a small JSON object of their own (trace/reader.py).
    """
    start = len(trace_json) - len(trace_json.lstrip())
    if trace_json[start : start + 1] != b"{":
        raise ValueError("the trace is not a JSON object")
    rest = trace_json[start + 1 :]
    separator = b"," if rest.strip()[:1] not in (b"}", b"") else b""
    head = b'{"' + TRACE_KEY.encode() + b'": ' + json.dumps(value).encode() + separator
    return head + rest


__all__ = ["TRACE_KEY", "UnprofiledSteps", "now_ns", "profiler_off", "recorded_steps", "with_key"]
