"""What the framework callbacks share: a profiling window over the training steps and its advisor.

Each rank profiles the same steps and writes its own trace (``cycle<N>/rank<R>.json.gz``); only
the reporting rank (0) analyses its trace and reports, unless ``analyze_all_ranks`` is set (then
every rank analyses its own trace, and rank 0 still reports alone).

``fail_on`` with several processes: if rank 0 alone raised, the other ranks would wait for it in
their next collective (the gradient all-reduce) until the process group times out. So the ranks
decide together, at the step where a window closes (the same step on every rank: they run the same
schedule): rank 0 waits there for that analysis (up to ``close_timeout``), then all ranks reduce
"stop?" and, if so, all raise ``AdvisorFindingsError`` at that step. Only runs with ``fail_on``
and more than one process pay this wait.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceadvisor.advisor.advisor import Advisor, AdvisorFindingsError, logger
from traceadvisor.advisor.profiling import Window, torch_profiler
from traceadvisor.advisor.report import AdvisorReport


@dataclass
class CallbackOptions:
    """The options both callbacks take (see their docstrings)."""

    out_dir: str | Path | None = None
    window: Window = field(default_factory=Window)
    on_findings: Callable[[AdvisorReport], object] | Iterable[Callable[[AdvisorReport], object]] | None = None
    analyze_all_ranks: bool = False
    close_timeout: float = 60.0
    profiler: dict[str, Any] = field(default_factory=dict)  # activities, record_shapes, with_stack, ...
    advisor: dict[str, Any] = field(default_factory=dict)  # select, ignore, fail_on, mode, tensorboard, ...


class ProfilingCallback:
    """What both framework callbacks share: their options (a ``Window``, profiler and ``Advisor``
    options), the ``log_metrics`` switch and the running session. The framework's hooks and the
    arguments documentation are in the subclasses (``lightning``, ``transformers``)."""

    def __init__(
        self,
        out_dir: str | Path | None = None,
        *,
        skip_first: int = 10,
        wait: int = 1,
        warmup: int = 2,
        active: int = 5,
        repeat: int = 1,
        on_findings: Callable[[AdvisorReport], object] | Iterable[Callable[[AdvisorReport], object]] | None = None,
        log_metrics: bool = True,
        analyze_all_ranks: bool = False,
        activities: list[Any] | None = None,
        record_shapes: bool = True,
        with_stack: bool = True,
        profile_memory: bool = False,
        with_modules: bool = False,
        close_timeout: float = 60.0,
        **advisor_options: Any,
    ) -> None:
        super().__init__()
        self.options = CallbackOptions(
            out_dir=out_dir,
            window=Window(skip_first=skip_first, wait=wait, warmup=warmup, active=active, repeat=repeat),
            on_findings=on_findings,
            analyze_all_ranks=analyze_all_ranks,
            close_timeout=close_timeout,
            profiler={
                "activities": activities,
                "record_shapes": record_shapes,
                "with_stack": with_stack,
                "profile_memory": profile_memory,
                "with_modules": with_modules,
            },
            advisor=advisor_options,
        )
        self.log_metrics = log_metrics
        self.session: TrainingProfiler | None = None

    @property
    def reports(self) -> list[AdvisorReport]:
        """The reports delivered so far (on the reporting rank)."""
        return list(self.session.advisor.reports) if self.session is not None else []


class TrainingProfiler:
    """One profiling session over a framework's training loop: started at train start, stepped
    at each optimizer step, finished at train end (or on an exception)."""

    def __init__(
        self,
        options: CallbackOptions,
        out_dir: Path,
        rank: int,
        reporting: bool,
        sink: Callable[[AdvisorReport], object],
        world_size: int = 1,
        agree: Callable[[bool], bool] | None = None,
    ) -> None:
        self.options = options
        self.reporting = reporting
        self._unjudged: list[AdvisorReport] = []
        callbacks: list[Callable[[AdvisorReport], object]] = []
        if reporting:
            callbacks.extend([sink, self._unjudged.append])
            user = options.on_findings
            if user is not None:
                callbacks.extend([user] if callable(user) else list(user))
        self.advisor = Advisor(
            out_dir,
            on_findings=callbacks,
            rank=rank,
            analyze=reporting or options.analyze_all_ranks,
            report=reporting,
            hook_step=False,
            close_timeout=options.close_timeout,  # also the bound of the close at interpreter exit
            **options.advisor,
        )
        # Several processes with fail_on: decide together (see the module docstring).
        self._collective = self.advisor.fail_on is not None and world_size > 1 and agree is not None
        self._agree = agree
        self.profiler: Any = torch_profiler(options.window, self.advisor, **options.profiler)
        self.profiler.start()
        self._profiling = True
        self.steps = 0

    def step(self) -> None:
        """After an optimizer step: advance the schedule and deliver ready reports.

        Only ``AdvisorFindingsError`` (asked for with ``fail_on``) leaves this method.
        """
        cycles = self.advisor.cycles
        if self._profiling:
            try:
                self.profiler.step()
                self.steps += 1
                if self.options.window.finished(self.advisor.cycles):
                    self._stop_profiler()  # every window recorded: no per-step profiler cost from here on
            except Exception:
                logger.exception("traceadvisor: the profiler failed; profiling stops, training continues")
                self._stop_profiler()
        if not self._collective:
            self.advisor.poll()
        elif self.advisor.cycles > cycles:
            self._decide()
        else:
            self.advisor.poll(raise_findings=False)

    def _decide(self) -> None:
        """Every rank, at the same step: stop all together if rank 0's reports meet ``fail_on``."""
        assert self._agree is not None and self.advisor.fail_on is not None
        if self.reporting:
            self.advisor.wait(self.options.close_timeout, raise_findings=False)
        tripped = next((r for r in self._unjudged if r.at_least(self.advisor.fail_on)), None)
        self._unjudged.clear()
        if self._agree(tripped is not None):
            raise AdvisorFindingsError(tripped, self.advisor.fail_on)

    def _stop_profiler(self) -> None:
        if not self._profiling:
            return
        self._profiling = False
        try:
            self.profiler.stop()
        except Exception:
            logger.exception("traceadvisor: could not stop the profiler")

    def finish(self, raise_findings: bool) -> None:
        """Stop profiling (a window still recording is saved) and wait for the analyses.

        ``raise_findings`` is false when training itself failed: then there is nothing to decide
        together (other ranks may be gone) and nothing raises.
        """
        cycles = self.advisor.cycles
        self._stop_profiler()
        if self._collective and raise_findings:
            if self.advisor.cycles > cycles:
                self._decide()  # the stop saved a last window: every rank is here (train end)
            raise_findings = False
        if self.advisor.cycles == 0:
            logger.warning(
                "traceadvisor: no profiling window completed: %d steps ran, the schedule records %s",
                self.steps,
                self.options.window.describe(),
            )
        try:
            self.advisor.close(self.options.close_timeout, raise_findings=raise_findings)
        except AdvisorFindingsError:
            raise
        except Exception:
            logger.exception("traceadvisor: error while finishing; training is not affected")
