"""What ``traceadvisor capture`` records: the profiler schedule and the capture flags."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from traceadvisor.errors import UsageError


@dataclass(frozen=True)
class Schedule:
    """``torch.profiler.schedule`` arguments.

    Defaults, and why:
    - ``skip_first=5``: the first iterations pay one-time costs that are not the loop's steady state:
      CUDA context and cuBLAS/cuDNN handle creation, cuDNN autotuning (``benchmark=True`` times every
      algorithm on the first call of each shape), caching-allocator growth (``cudaMalloc`` until the
      pool covers the peak), torch.compile / Triton compilation of the first call, DataLoader worker
      start-up, and under AMP the GradScaler backing off from its initial 2**16 scale.
    - ``warmup=2``: the profiler's own start-up (CUPTI activation, kineto buffer allocation) distorts the
      first step it records; torch warns when ``warmup=0``. Two steps absorb it and let the first
      recorded step start from a warmed profiler.
    - ``wait=0``: with one cycle there is nothing to wait between.
    - ``active=5``: enough steps to tell the steady state from an outlier (the too-few-steps rule wants
      at least 2), few enough that traces of big models stay small: ``with_stack`` traces grow by
      megabytes per step.
    - ``repeat=1``: one cycle, one trace per rank; ``--repeat N`` (0 = until the program ends) for more.
    """

    skip_first: int = 5
    wait: int = 0
    warmup: int = 2
    active: int = 5
    repeat: int = 1

    def validate(self) -> None:
        for name in ("skip_first", "wait", "warmup", "repeat"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} must be 0 or more, not {getattr(self, name)}")
        if self.active < 1:
            raise UsageError(f"--active must be 1 or more, not {self.active}")

    @property
    def first_active_step(self) -> int:
        """The number of the first recorded step (``ProfilerStep#N``)."""
        return self.skip_first + self.wait + self.warmup

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class CaptureOptions:
    """Everything that shapes a capture besides the program to run.

    Flag defaults let the rules that need them run at low overhead: ``record_shapes`` (shape-based rules:
    fp32 matmul, unfused attention; costs a little per op) and ``with_stack`` (source lines in findings;
    the Python tracer costs more on Python-heavy loops) are on; ``profile_memory`` (an allocation
    event per tensor, the most expensive option and needed by no built-in rule) is off. CUDA
    synchronization events (kineto's ``enable_cuda_sync_events``) are on where CUDA is profiled: the
    sync-point rule reads them, and they cost one CUPTI record per synchronization.
    """

    schedule: Schedule = field(default_factory=Schedule)
    record_shapes: bool = True
    with_stack: bool = True
    profile_memory: bool = False
    sync_events: bool = True
    step_on: str | None = None
    # A program that never steps gets one time window: it starts once ``window_delay_s`` seconds pass
    # without a step and lasts ``window_s`` seconds. The delay must outlast the start-up of training
    # runs, whose first optimizer step can come late (model loading, torch.compile, a framework that
    # builds its optimizer inside fit()): a window started there is recorded for nothing.
    window_delay_s: float = 30.0
    window_s: float = 10.0

    def validate(self) -> None:
        self.schedule.validate()
        for name, value in (("--window-delay", self.window_delay_s), ("--window-s", self.window_s)):
            if not math.isfinite(value) or value < 0:
                raise UsageError(f"{name} must be a number of seconds (0 or more), not {value}")
        if self.window_s == 0:
            raise UsageError("--window-s must be more than 0 seconds")
        if self.step_on is not None and not self.step_on.strip():
            raise UsageError("--step-on needs a function name (NAME or package.module:NAME)")

    def flags(self) -> dict[str, Any]:
        return {
            "record_shapes": self.record_shapes,
            "with_stack": self.with_stack,
            "profile_memory": self.profile_memory,
            "sync_events": self.sync_events,
        }
