"""Hugging Face ``transformers``: ``TraceAdvisorCallback``, a ``TrainerCallback`` that profiles a
window of optimizer steps and reports.

::

    from traceadvisor.integrations.transformers import TraceAdvisorCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds)
    TraceAdvisorCallback.attach(trainer, skip_first=20, active=5)   # or callbacks=[TraceAdvisorCallback()]
    trainer.train()

Reports go to the console (stderr: the first report and any with a medium or high finding;
``console=False`` turns it off) and Python logging (logger ``traceadvisor``; the others),
to ``on_findings``, and as metrics through
``Trainer.log`` (so every ``report_to`` integration, TensorBoard, W&B, MLflow, ..., receives
``traceadvisor/findings_high`` and the rest, and ``trainer.state.log_history`` records them). A
callback does not receive the trainer from ``transformers``: ``attach(trainer)`` (or
``bind(trainer)``) gives it one; without it the metrics are only appended to
``state.log_history``, in the form ``Trainer.log`` gives them. Under several processes every rank
writes its trace and the main process (``state.is_world_process_zero``) analyses and reports.
``transformers`` is imported only when the class is first used.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from traceadvisor.advisor.advisor import logger
from traceadvisor.advisor.profiling import DEFAULT_OUT_DIR
from traceadvisor.advisor.report import AdvisorReport
from traceadvisor.errors import UsageError
from traceadvisor.integrations.common import ProfilingCallback, TrainingProfiler


class _TransformersAdvisor(ProfilingCallback):
    """The callback's behaviour; mixed into ``transformers.TrainerCallback`` on first use.

    Arguments:
        out_dir: where traces go; default ``<args.output_dir>/traceadvisor``.
        skip_first, wait, warmup, active, repeat: the profiled steps (``torch.profiler.schedule``);
            a step is one optimizer step (``on_step_end``; gradient accumulation steps are inside it).
        on_findings: a callable (or several) receiving each report, in the main process.
        trainer: the ``Trainer``, to log metrics through ``Trainer.log`` (or call ``bind``/``attach``).
        select, ignore, fail_on, keep_traces, mode, tensorboard, ...: passed to ``Advisor``.
        log_metrics: log report metrics (default true).
        analyze_all_ranks: every rank analyses its own trace (the main process still reports alone).
        activities, record_shapes, with_stack, profile_memory, with_modules: profiler options.
        close_timeout: seconds to wait for analyses at the end of training.
    """

    _state: Any = None

    def __init__(self, out_dir: str | Path | None = None, *, trainer: Any = None, **options: Any) -> None:
        super().__init__(out_dir, **options)
        self.trainer = trainer

    @classmethod
    def attach(cls, trainer: Any, **options: Any) -> Any:
        """Create the callback for ``trainer``, bind it, and add it to the trainer's callbacks."""
        callback = cls(trainer=trainer, **options)
        trainer.add_callback(callback)
        return callback

    def bind(self, trainer: Any) -> Any:
        """Log metrics through ``trainer.log`` from now on; returns the callback."""
        self.trainer = trainer
        return self

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._state = state
        base = self.options.out_dir or (
            Path(args.output_dir) / "traceadvisor" if getattr(args, "output_dir", None) else DEFAULT_OUT_DIR
        )
        try:
            self.session = TrainingProfiler(
                self.options,
                Path(base),
                int(args.process_index),
                bool(state.is_world_process_zero),
                self._report,
                world_size=int(args.world_size),
                agree=lambda flag: _any_rank(flag, args.device),
            )
        except (UsageError, ValueError):
            raise  # bad options: say so before training starts
        except Exception:
            logger.exception("traceadvisor: could not start profiling; training continues without it")
            self.session = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._state = state
        if self.session is not None:
            self.session.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._state = state
        if self.session is not None and not self.session.advisor.closed:
            self.session.finish(raise_findings=True)

    def _report(self, report: AdvisorReport) -> None:
        """The main process's sink: the report's metrics as a ``Trainer.log`` entry."""
        if not self.log_metrics:
            return
        metrics = report.metrics()
        if self.trainer is not None:
            self.trainer.log(metrics)
        elif self._state is not None:
            self._state.log_history.append({**metrics, "step": self._state.global_step})


def _any_rank(flag: bool, device: Any) -> bool:
    """Whether ``flag`` is set on any rank (a collective: every rank calls it at the same step)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    # NCCL reduces only CUDA tensors; args.device is this rank's device (cuda:N, or cpu under gloo).
    t = torch.tensor([int(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


@functools.cache
def callback_class() -> type:
    """``TraceAdvisorCallback`` (a ``transformers.TrainerCallback``)."""
    try:
        from transformers import TrainerCallback
    except ImportError:
        raise ImportError("TraceAdvisorCallback needs transformers (pip install transformers)") from None
    attrs = {"__module__": __name__, "__qualname__": "TraceAdvisorCallback", "__doc__": _TransformersAdvisor.__doc__}
    return type("TraceAdvisorCallback", (_TransformersAdvisor, TrainerCallback), attrs)


def __getattr__(name: str) -> Any:
    if name == "TraceAdvisorCallback":
        return callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
