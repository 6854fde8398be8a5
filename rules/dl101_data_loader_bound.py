"""DL101: steps wait for the DataLoader while the GPU idles."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from traceadvisor.rules_api import (
    Capability,
    ClaimedIdle,
    Finding,
    IdleCause,
    Rule,
    Saving,
    Severity,
    Trace,
    event_location,
    evidence_of,
    fmt_ns,
    idle_of,
    in_steps,
    per_step,
    replay_basis,
    scenario_saving,
    share_of_steps_text,
    unprofiled_idle_cap_ns,
    us,
    worth_reporting,
)

LOADER_MARK = "DataLoader"
SINGLE_PROCESS = "_SingleProcessDataLoaderIter"  # the iterator of DataLoader(num_workers=0)
RECOMMENDATION = (
    "Set DataLoader(num_workers=N) (start near the CPU cores per GPU), persistent_workers=True, "
    "prefetch_factor=2-4 and pin_memory=True with .to(device, non_blocking=True); make __getitem__ cheaper."
)


@dataclass(frozen=True)
class Options:
    min_idle_pct: float = 1.0  # report only when loader-caused GPU idle is at least this share of the steps
    profiler_event_us: float | None = None  # a flat profiler cost per recorded event; None: the fitted costs


class DataLoaderBound(Rule[Options]):
    """The GPU idles while the training loop waits for the next batch from the DataLoader.

    ## Why it matters
    When fetching a batch takes longer than the GPU needs for a step, the GPU waits for input:
    faster kernels do not help until the input pipeline keeps up.

    ## How it shows up in a trace
    `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` (or
    `_MultiProcessingDataLoaderIter`) annotations inside the steps, overlapping GPU idle. The
    rule claims the idle gaps the attribution gives to data loading (the next work was launched
    late and a `__next__` span on the launching thread holds the middle of the wait). On a trace
    with steps the saving is a what-if replay: the trace replayed without the profiler's host cost,
    then with the fetches inside the steps taking no host time (batches prefetched by worker
    processes: the best case, an upper bound; `whatif/host_stalls.py`). Without steps it is that
    idle less the profiler's own host cost of the events recorded in it (each at its kind's fitted
    cost, e.g. the Python frames of `__getitem__`), never more than the idle the predicted unprofiled
    steps leave (steps x (step - GPU busy per step)).
    `_SingleProcessDataLoaderIter` means `num_workers=0`: batches are produced on the training
    thread itself.

    ## How to fix
    Use worker processes (`DataLoader(num_workers=N)`), keep them alive with
    `persistent_workers=True`, prefetch more batches (`prefetch_factor`), pin batches
    (`pin_memory=True`) and copy with `non_blocking=True`; make `__getitem__` cheaper (decode
    once, cache) or move augmentation to the GPU.

    ## Options
    - `min_idle_pct`: report only when the loader-caused GPU idle is at least this share of the steps.
    - `profiler_event_us`: a flat host cost per recorded op, annotation or Python frame for the idle
      figures, instead of the fitted cost of each kind (default: unset, the fitted
      costs the replay uses; `0` gives the raw idle).

    ## References
    - https://pytorch.org/docs/stable/data.html#multi-process-data-loading
    - https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#enable-async-data-loading-and-augmentation
    """

    code = "DL101"
    name = "data-loader-bound"
    severity = Severity.medium
    requires = frozenset({Capability.gpu})
    claims = frozenset({IdleCause.data_loading})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        ann = trace.annotations
        loader = ann[ann["name"].astype(str).str.contains(LOADER_MARK, regex=False).to_numpy()]
        if not len(loader):
            return
        idle = ClaimedIdle.of(idle_of(trace, IdleCause.data_loading), opts.profiler_event_us, trace)
        idle = replace(idle, recoverable_ns=min(idle.recoverable_ns, unprofiled_idle_cap_ns(trace)))
        if not worth_reporting(trace, idle.recoverable_ns, opts.min_idle_pct):
            return
        loader = in_steps(trace, loader)
        single = bool(loader["name"].astype(str).str.contains(SINGLE_PROCESS, regex=False).any())
        wait = int(loader["dur_ns"].sum())
        worst = loader.nlargest(5, "dur_ns")
        # With steps, the saving is a replay: the fetches take no host time (loaded by workers while
        # the step runs: the best case, whatif/host_stalls.py); what the GPU then still waits for stays.
        replayed = scenario_saving(trace, "data-workers") if len(trace.steps.table) else None
        use = replayed is not None and replayed.refused is None
        yield self.finding(
            trace,
            message=_message(trace, wait, idle, single, replayed if use else None),
            recommendation=("Use worker processes: " if single else "") + RECOMMENDATION,
            impact_ns=idle.recoverable_ns,
            per_step=per_step(replayed) if use and replayed is not None else None,
            basis=replay_basis(replayed, REPLAY_BASIS)
            if use and replayed is not None
            else (
                "GPU idle while the launching thread was inside DataLoader __next__, less the profiler's own "
                "host cost of "
                + (
                    "the events recorded in those gaps (the fitted cost of each kind)"
                    if opts.profiler_event_us is None
                    else f"{opts.profiler_event_us:g} µs per event recorded in those gaps"
                )
            ),
            evidence=evidence_of(worst, worst["name"].astype(str)),
            location=event_location(trace, worst.iloc[0]) if len(worst) else None,
            data={
                "wait_us": us(wait),
                "idle_us": us(idle.raw_ns),
                "recoverable_us": us(idle.recoverable_ns),
                "single_process": single,
            },
        )


REPLAY_BASIS = (
    "the DataLoader fetches in the steps take no host time (batches prefetched by worker processes: the "
    "best case, an upper bound of the saving)"
)


def _message(trace: Trace, wait: int, idle: ClaimedIdle, single: bool, replayed: Saving | None) -> str:
    per_step = wait / max(len(trace.steps.table), 1)
    mode = (
        f" The loader is single-process ({SINGLE_PROCESS}, num_workers=0): batches are built on the training thread."
        if single
        else ""
    )
    return (
        f"The steps waited {fmt_ns(wait)} for the DataLoader ({fmt_ns(per_step)} per step) and the GPU idled "
        f"{fmt_ns(idle.raw_ns)} ({share_of_steps_text(trace, idle.raw_ns)}) meanwhile"
        + (
            f". Replayed with the batches ready when asked for (loaded by workers meanwhile), the step takes "
            f"{fmt_ns(replayed.saving_ns)} less ({replayed.share_pct:.0f}% of the "
            f"{fmt_ns(replayed.before_ns)} predicted unprofiled step; "
            "the best case: workers slower than the step would leave a stall of their own)."
            if replayed is not None
            else f" (about {fmt_ns(idle.recoverable_ns)} without the profiler)."
        )
        + mode
    )
