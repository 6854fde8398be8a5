"""PyTorch Lightning: ``TraceAdvisorCallback`` profiles a window of training steps and reports.

::

    from traceadvisor.integrations.lightning import TraceAdvisorCallback

    trainer = lightning.Trainer(callbacks=[TraceAdvisorCallback(skip_first=20, active=5)])

Works with ``lightning`` (``lightning.pytorch``) and ``pytorch_lightning``: the class subclasses the
``Callback`` of whichever is installed (``lightning`` first). Lightning calls callback hooks by name,
so it also works in the other package's ``Trainer``; ``callback_class("pytorch_lightning")`` gives a
class based on that package's ``Callback`` explicitly.

Reports go to the console (stderr: the first report and any with a medium or high finding;
``console=False`` turns it off) and Python logging (logger ``traceadvisor``; the others),
to every ``trainer.loggers`` entry as
metrics (``log_metrics``; ``traceadvisor/findings_high`` and so on, at the trainer's global step),
to the TensorBoard logger as Markdown text, and to ``on_findings``. Under several processes every
rank writes its trace and rank 0 analyses and reports. The framework is imported only when the
class is first used.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any

from traceadvisor.advisor.advisor import logger
from traceadvisor.advisor.report import AdvisorReport
from traceadvisor.errors import UsageError
from traceadvisor.integrations.common import ProfilingCallback, TrainingProfiler

PACKAGES = ("lightning.pytorch", "pytorch_lightning")


class _LightningAdvisor(ProfilingCallback):
    """The callback's behaviour; ``callback_class`` mixes it into the framework's ``Callback``.

    Arguments:
        out_dir: where traces go; default ``<trainer.log_dir>/traceadvisor``.
        skip_first, wait, warmup, active, repeat: the profiled steps (``torch.profiler.schedule``);
            a step is one training batch (``on_train_batch_end``).
        on_findings: a callable (or several) receiving each report, on rank 0.
        select, ignore, fail_on, keep_traces, mode, tensorboard, ...: passed to ``Advisor``.
        log_metrics: send report metrics to ``trainer.loggers`` (default true).
        analyze_all_ranks: every rank analyses its own trace (rank 0 still reports alone).
        activities, record_shapes, with_stack, profile_memory, with_modules: profiler options.
        close_timeout: seconds to wait for analyses at the end of training.
    """

    _package: str = ""
    _trainer: Any = None

    def __reduce__(self) -> tuple[Any, ...]:
        # The class is made at run time, so pickle cannot find it by name; rebuild it instead.
        return (_rebuild, (self._package,), {**self.__dict__, "session": None, "_trainer": None})

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._trainer = trainer
        # trainer.log_dir broadcasts rank 0's folder, so every rank writes under the same one.
        base = self.options.out_dir or Path(trainer.log_dir or trainer.default_root_dir) / "traceadvisor"
        try:
            self.session = TrainingProfiler(
                self.options,
                Path(base),
                int(trainer.global_rank),
                bool(trainer.is_global_zero),
                self._report,
                world_size=int(trainer.world_size),
                agree=lambda flag: bool(trainer.strategy.reduce_boolean_decision(flag, all=False)),
            )
        except (UsageError, ValueError):
            raise  # bad options: say so before training starts
        except Exception:
            logger.exception("traceadvisor: could not start profiling; training continues without it")
            self.session = None

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.session is not None:
            self.session.step()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish(raise_findings=True)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._finish(raise_findings=False)

    def _finish(self, raise_findings: bool) -> None:
        if self.session is not None and not self.session.advisor.closed:
            self.session.finish(raise_findings)

    def _report(self, report: AdvisorReport) -> None:
        """Rank 0's sink: the report's metrics to each Lightning logger, its text to TensorBoard."""
        trainer = self._trainer
        if trainer is None or not self.log_metrics:
            return
        metrics = report.metrics()
        for lg in trainer.loggers:
            lg.log_metrics(metrics, step=trainer.global_step)
            if "TensorBoard" in type(lg).__name__:
                lg.experiment.add_text(
                    f"traceadvisor/report/rank{report.rank}", report.render("markdown"), trainer.global_step
                )
            lg.save()


def callback_class(package: str | None = None) -> type:
    """``TraceAdvisorCallback`` based on ``package``'s ``Callback`` (default: the first installed)."""
    for name in (package,) if package else PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        return _build(name)
    raise ImportError("TraceAdvisorCallback needs lightning (pip install lightning) or pytorch_lightning")


@functools.cache
def _build(package: str) -> type:
    base = importlib.import_module(package).Callback
    attrs = {
        "__module__": __name__,
        "__qualname__": "TraceAdvisorCallback",
        "__doc__": _LightningAdvisor.__doc__,
        "_package": package,
    }
    return type("TraceAdvisorCallback", (_LightningAdvisor, base), attrs)


def _rebuild(package: str) -> Any:
    """Unpickling (``ddp_spawn`` sends callbacks to its processes): an instance of the same class."""
    cls: Any = _build(package)
    return cls.__new__(cls)


def __getattr__(name: str) -> Any:
    if name == "TraceAdvisorCallback":
        return callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
