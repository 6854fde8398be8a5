"""``traceadvisor.profile``: torch.profiler with a training-loop schedule and an ``Advisor`` attached."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceadvisor.advisor.advisor import Advisor, logger
from traceadvisor.advisor.report import AdvisorReport
from traceadvisor.capture import cupti
from traceadvisor.capture.unprofiled import now_ns, profiler_off

DEFAULT_OUT_DIR = Path("traceadvisor-runs") / "advisor"


@dataclass(frozen=True)
class Window:
    """Which steps are profiled: ``torch.profiler.schedule``'s parameters, with training defaults.

    ``skip_first=10``: the first iterations pay for lazy initialisation, cuDNN/Triton autotuning and
    allocator growth, and are not the steady state. ``warmup=2``: the first step after the
    profiler starts carries its start-up cost (torch warns when warmup is 0). ``active=5``: enough
    steps to judge the steady state (``too-few-steps`` wants 2) while the trace stays small.
    ``repeat=1``: one window per run; ``repeat=0`` profiles a window every cycle until the end.
    """

    skip_first: int = 10
    wait: int = 1
    warmup: int = 2
    active: int = 5
    repeat: int = 1

    def __post_init__(self) -> None:
        if self.active < 1 or min(self.skip_first, self.wait, self.warmup, self.repeat) < 0:
            raise ValueError(f"profiling window needs active >= 1 and the other counts >= 0, not {self}")

    def schedule(self) -> Any:
        import torch.profiler

        return torch.profiler.schedule(
            skip_first=self.skip_first, wait=self.wait, warmup=self.warmup, active=self.active, repeat=self.repeat
        )

    def describe(self) -> str:
        first = self.skip_first + self.wait + self.warmup
        return f"steps {first}-{first + self.active - 1} of each {self.wait + self.warmup + self.active}-step cycle"

    def finished(self, cycles: int) -> bool:
        """Whether the schedule has recorded all its windows."""
        return self.repeat > 0 and cycles >= self.repeat


def default_activities() -> list[Any]:
    """CPU, plus CUDA when a GPU is there."""
    import torch
    from torch.profiler import ProfilerActivity

    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    return acts


def torch_profiler(
    window: Window,
    on_trace_ready: Any,
    *,
    activities: list[Any] | None = None,
    record_shapes: bool = True,
    with_stack: bool = True,
    profile_memory: bool = False,
    with_modules: bool = False,
) -> Any:
    """A ``torch.profiler.profile`` for ``window`` (shapes and stacks on: the rules and the source
    lines of findings need them)."""
    import torch.profiler

    return torch.profiler.profile(
        activities=activities if activities is not None else default_activities(),
        schedule=window.schedule(),
        on_trace_ready=on_trace_ready,
        record_shapes=record_shapes,
        with_stack=with_stack,
        profile_memory=profile_memory,
        with_modules=with_modules,
    )


class AdvisedProfile:
    """A running profiler and its advisor; ``step()`` once per training iteration.

    Attributes not defined here are the torch profiler's (``key_averages()`` and so on).
    """

    def __init__(self, advisor: Advisor, window: Window, profiler_options: dict[str, Any], close_timeout: float):
        self.advisor = advisor
        self.window = window
        self.close_timeout = close_timeout
        self.steps = 0
        self._options = profiler_options
        self.profiler: Any = None
        self._profiling = False  # the profiler is entered and may still record a window
        self._step_num = 0  # the profiler's step_num, counted on after it is exited

    def __enter__(self) -> AdvisedProfile:
        self.profiler = torch_profiler(self.window, self.advisor, **self._options)
        self.profiler.__enter__()
        self._profiling = True
        self.advisor.record_syncs(self.profiler, 0)
        return self

    def step(self) -> None:
        """End a training iteration: advance the schedule, then deliver any report that is ready."""
        started, number = now_ns(), self._step_num
        off = not self._profiling or profiler_off(self.profiler)
        if self._profiling:
            if cupti.last_cycle_ending(self.profiler, self.advisor.cycles, self.window.repeat):
                cupti.teardown_when_trace_ends(self.profiler)  # CUPTI detached with the last trace
            self.profiler.step()
            if self.window.finished(self.advisor.cycles):
                self._exit_profiler()
        self._step_num = self.profiler.step_num if self._profiling else self._step_num + 1
        self.steps += 1
        self.advisor.power.boundary(off, not self._profiling or profiler_off(self.profiler))
        self.advisor.record_syncs(self.profiler if self._profiling else None, self._step_num)
        self.advisor.poll()
        # After poll(): a report's callbacks are the advisor's time, not the program's step.
        self.advisor.unprofiled.boundary(number, off, started, now_ns())

    @property
    def reports(self) -> list[AdvisorReport]:
        return list(self.advisor.reports)

    def _exit_profiler(self) -> None:
        """Every window is recorded: exit the profiler now rather than at the end of the run.

        A profiler left in its schedule's NONE state still opens a ``ProfilerStep#N``
        ``record_function`` in each ``step()`` (~7 µs of host time a step, measured by
        ``bench/after_window_overhead.py``). ``__exit__``, not ``stop()``: it also ends kineto's step
        tracking and finalises an execution-trace observer (``ENABLE_PYTORCH_EXECUTION_TRACE``).
        """
        self._profiling = False
        try:
            self.profiler.__exit__(None, None, None)
        except Exception:
            logger.exception("traceadvisor: could not stop the profiler after its last window; training continues")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if self._profiling:
                self._profiling = False
                self.profiler.__exit__(exc_type, exc, tb)
        finally:
            if self.advisor.cycles == 0:
                logger.warning(
                    "traceadvisor: no profiling window completed: %d steps ran, the schedule records %s",
                    self.steps,
                    self.window.describe(),
                )
            self.advisor.close(self.close_timeout, raise_findings=exc_type is None)

    def __getattr__(self, name: str) -> Any:
        profiler = self.__dict__.get("profiler")
        if profiler is None:
            raise AttributeError(name)
        return getattr(profiler, name)


def profile(
    out_dir: str | Path = DEFAULT_OUT_DIR,
    *,
    skip_first: int = 10,
    wait: int = 1,
    warmup: int = 2,
    active: int = 5,
    repeat: int = 1,
    activities: list[Any] | None = None,
    record_shapes: bool = True,
    with_stack: bool = True,
    profile_memory: bool = False,
    with_modules: bool = False,
    close_timeout: float = 60.0,
    **advisor_options: Any,
) -> AdvisedProfile:
    """Profile a training loop and get advice on it::

        with traceadvisor.profile(out_dir="runs/prof") as prof:
            for batch in loader:
                train_step(batch)
                prof.step()

    The schedule is ``Window``'s (skip 10 steps, wait 1, warm up 2, record 5, once). Reports go to
    logging (logger ``traceadvisor``) and to ``on_findings``; leaving the block waits up to
    ``close_timeout`` seconds for the analysis. Other keyword arguments go to ``Advisor``
    (``on_findings``, ``select``, ``ignore``, ``fail_on``, ``mode``, ``tensorboard``, ...).
    """
    window = Window(skip_first=skip_first, wait=wait, warmup=warmup, active=active, repeat=repeat)
    # close_timeout is the Advisor's too: it bounds the close at interpreter exit when the block is never left.
    advisor = Advisor(out_dir, hook_step=False, close_timeout=close_timeout, **advisor_options)
    options = {
        "activities": activities,
        "record_shapes": record_shapes,
        "with_stack": with_stack,
        "profile_memory": profile_memory,
        "with_modules": with_modules,
    }
    return AdvisedProfile(advisor, window, options, close_timeout)
