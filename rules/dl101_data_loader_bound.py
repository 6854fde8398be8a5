"""DL101: steps wait for the DataLoader while the GPU idles."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from traceadvisor.rules_api import (
    PROFILER_EVENT_COST_NS,
    Capability,
    Evidence,
    Finding,
    IdleCause,
    Rule,
    Severity,
    Trace,
    idle_attribution,
    location_of,
    recoverable_ns,
)

LOADER_MARK = "DataLoader"


@dataclass(frozen=True)
class Options:
    min_idle_pct: float = 1.0  # report only when loader-caused GPU idle is at least this share of the steps
    profiler_event_us: float = PROFILER_EVENT_COST_NS / 1000  # the profiler's host cost per recorded event


class DataLoaderBound(Rule[Options]):
    """The GPU idles while the training loop waits for the next batch from the DataLoader.

    ## Why it matters
    When fetching a batch takes longer than the GPU needs for a step, the GPU waits for input:
    faster kernels do not help until the input pipeline keeps up.

    ## How it shows up in a trace
    `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` (or
    `_MultiProcessingDataLoaderIter`) annotations inside the steps, overlapping GPU idle. The
    rule claims the idle gaps the attribution gives to data loading (the next work was launched
    late and a `__next__` span on the launching thread holds the middle of the wait); the impact
    is that idle less the profiler's own host cost of the events recorded in it
    (`profiler_event_us` each, e.g. the Python frames of `__getitem__`).
    `_SingleProcessDataLoaderIter` means `num_workers=0`: batches are produced on the training
    thread itself.

    ## How to fix
    Use worker processes (`DataLoader(num_workers=N)`), keep them alive with
    `persistent_workers=True`, prefetch more batches (`prefetch_factor`), pin batches
    (`pin_memory=True`) and copy with `non_blocking=True`; make `__getitem__` cheaper (decode
    once, cache) or move augmentation to the GPU.

    ## Options
    - `min_idle_pct`: report only when the loader-caused GPU idle is at least this share of the steps.
    - `profiler_event_us`: the profiler's host cost per recorded op, annotation or Python frame
      (default 3 µs, measured on the fixtures' before/after pairs with record_shapes and with_stack).

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
        opts: Options = self.options
        ann = trace.annotations
        loader = ann[ann["name"].astype(str).str.contains(LOADER_MARK, regex=False).to_numpy()]
        if not len(loader):
            return
        gaps = idle_attribution(trace)
        gaps = gaps[gaps["cause"] == "data_loading"]
        idle_raw = int(gaps["dur_ns"].sum())
        idle = recoverable_ns(gaps, opts.profiler_event_us * 1000)
        window = trace.analysed_ns
        if window <= 0 or 100.0 * idle / window < opts.min_idle_pct:
            return
        steps = trace.steps.table
        if len(steps):
            loader = loader[trace.step_of(loader["ts_ns"].to_numpy()) >= 0]
        names = loader["name"].astype(str)
        single = bool(names.str.contains("_SingleProcessDataLoaderIter", regex=False).any())
        wait = int(loader["dur_ns"].sum())
        n_steps = max(len(steps), 1)
        first = loader.nlargest(1, "dur_ns").iloc[0] if len(loader) else None
        location = (
            location_of(trace, int(first["pid"]), int(first["tid"]), int(first["ts_ns"])) if first is not None else None
        )
        worst = loader.nlargest(5, "dur_ns")
        evidence = [
            Evidence(name=str(n), ts_us=s / 1000, dur_us=d / 1000)
            for n, s, d in zip(worst["name"].astype(str), worst["ts_ns"], worst["dur_ns"], strict=True)
        ]
        mode = (
            " The loader is single-process (_SingleProcessDataLoaderIter, num_workers=0): batches are built on "
            "the training thread."
            if single
            else ""
        )
        rec = (
            "Set DataLoader(num_workers=N) (start near the CPU cores per GPU), persistent_workers=True, "
            "prefetch_factor=2-4 and pin_memory=True with .to(device, non_blocking=True); make __getitem__ cheaper."
        )
        if single:
            rec = "Use worker processes: " + rec
        yield self.finding(
            trace,
            message=(
                f"The steps waited {wait / 1e3:.1f} µs for the DataLoader ({wait / n_steps / 1e3:.1f} µs per step) "
                f"and the GPU idled {idle_raw / 1e3:.1f} µs ({100 * idle_raw / window:.1f}% of the steps) meanwhile "
                f"(about {idle / 1e3:.1f} µs without the profiler).{mode}"
            ),
            recommendation=rec,
            impact_ns=idle,
            basis=(
                "GPU idle while the launching thread was inside DataLoader __next__, less the profiler's own "
                f"{opts.profiler_event_us:g} µs per event recorded in those gaps"
            ),
            evidence=evidence,
            location=location,
            data={
                "wait_us": wait / 1e3,
                "idle_us": idle_raw / 1e3,
                "recoverable_us": idle / 1e3,
                "single_process": single,
            },
        )
