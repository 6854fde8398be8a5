"""DL102: on a CPU-only trace, the steps spend a large share fetching batches on the training thread."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceadvisor.rules_api import (
    Capability,
    Finding,
    Rule,
    Severity,
    Trace,
    evidence_of,
    fmt_ns,
    in_steps,
    location_of,
    measured_unprofiled_ns,
    profiler_ns_in_spans,
    us,
)

LOADER_MARK = "DataLoader"
SINGLE_PROCESS = "_SingleProcessDataLoaderIter"  # the iterator of DataLoader(num_workers=0)
BASIS = (
    "the DataLoader fetches on the training thread per step, less the profiler's own cost of the events "
    "recorded in them: what worker processes can take off the training thread when they keep up (an upper "
    "bound; the step's own work stays)"
)
RECOMMENDATION = (
    "DataLoader(num_workers=N, persistent_workers=True, prefetch_factor=2-4); make __getitem__ cheaper "
    "(decode once and cache, fewer and larger reads, augment per batch)."
)


@dataclass(frozen=True)
class Options:
    min_share_pct: float = 10.0  # report when the fetches take at least this share of the step
    # Below this fetch per step, handing batches over from worker processes (pickling into shared memory,
    # a queue round trip: a few hundred µs a batch) costs about what it saves: noise, not a fix.
    min_fetch_ms: float = 1.0
    profiler_event_us: float | None = None  # a flat profiler cost per recorded op or frame; None: the fitted costs


class CpuDataLoading(Rule[Options]):
    """On a CPU-only trace, the training thread spends a large share of each step fetching batches.

    ## Why it matters
    A run captured on a CPU (checking the input pipeline on a laptop, a CPU job) has no GPU timeline
    for the GPU rules, but its steps still show where the host time goes. Batches built on the
    training thread (`num_workers=0`) are time every step waits for; on a GPU the same fetches leave
    the GPU idle (`data-loader-bound`).

    ## How it shows up in a trace
    A trace without GPU activity whose steps hold `enumerate(DataLoader)#...__next__` annotations.
    The fetch per step is their time less the profiler's own cost of the ops and Python frames
    recorded inside them (each at its kind's fitted cost, the replay's: with `with_stack` a slow
    `__getitem__` records several frames per sample). It is reported when it is at least `min_fetch_ms` (below that the
    hand-over from worker processes costs about what it saves) and at least `min_share_pct` % of the
    step: the step measured with the profiler off when the trace carries it (`traceadvisor capture`),
    else the profiled step less the profiler's cost of all its events. The source line is the
    user's innermost frame in the middle of the longest fetch (`Dataset.__getitem__` or the collate
    function, with stacks). The saving is the fetch per step, an upper bound: worker processes take
    it off the training thread when they keep up.
    On one rank of a distributed run (`distributedInfo.world_size` > 1) the step follows the slowest
    rank, so one rank's fetch says nothing about the run's saving: the finding is low, carries no
    saving, and points to the cross-rank analysis (`rank-straggler` with all ranks' traces).

    ## How to fix
    `DataLoader(num_workers=N, persistent_workers=True, prefetch_factor=2-4)`; make `__getitem__`
    cheaper (decode once and cache, read fewer and larger files, move augmentation to the batch).

    ## Options
    - `min_share_pct`: the share of the step the fetches must take to be reported (default 10).
    - `min_fetch_ms`: the smallest fetch per step reported (default 1 ms).
    - `profiler_event_us`: a flat host cost per recorded op or Python frame instead of the fitted
      cost of each kind (default: unset, the fitted costs).

    ## References
    - https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading
    """

    code = "DL102"
    name = "cpu-data-loading"
    severity = Severity.medium
    requires = frozenset({Capability.steps})

    def check(self, trace: Trace) -> Iterator[Finding]:
        if len(trace.gpu):
            return  # with a GPU, data-loader-bound judges the fetches by the GPU idle they cause
        opts = self.options
        ann = trace.annotations
        loader = ann[ann["name"].astype(str).str.contains(LOADER_MARK, regex=False).to_numpy()]
        loader = in_steps(trace, loader)
        if not len(loader):
            return
        t = trace.steps.table
        steps = len(t)
        profiled_step = float((t["cpu_end_ns"] - t["cpu_start_ns"]).mean())
        fetch_profiled = float(loader["dur_ns"].sum()) / steps
        fetch = max(0.0, fetch_profiled - _profiler_ns_inside(trace, loader, opts.profiler_event_us) / steps)
        # The step without the profiler: measured when the trace carries it, else the profiled step less
        # the profiler's cost of every event in it. The step's other work stays after the fix, so the
        # saving never exceeds the step less that work (a busier machine while profiling than while the
        # unprofiled steps ran would otherwise let the fetch claim the whole step).
        in_steps_ns = _profiler_ns_inside(trace, _step_spans(trace), opts.profiler_event_us)
        estimated = max(fetch, profiled_step - in_steps_ns / steps)
        measured = measured_unprofiled_ns(trace)
        step = measured if measured is not None else estimated
        saving = min(fetch, max(0.0, step - (estimated - fetch)))
        share = 100.0 * saving / step if step > 0 else 0.0
        if saving < opts.min_fetch_ms * 1e6 or share < opts.min_share_pct:
            return
        longest = loader.loc[loader["dur_ns"].idxmax()]
        where = location_of(
            trace, int(longest["pid"]), int(longest["tid"]), int(longest["ts_ns"] + longest["dur_ns"] // 2)
        )
        single = bool(loader["name"].astype(str).str.contains(SINGLE_PROCESS, regex=False).any())
        site = f", most in {where.function} ({where.file}:{where.line})" if where is not None else ""
        worst = loader.nlargest(5, "dur_ns")
        world = trace.meta.world_size
        basis = "measured unprofiled" if measured is not None else "profiled less the profiler's cost"
        data = {
            "fetch_per_step_us": us(fetch),
            "fetch_profiled_per_step_us": us(fetch_profiled),
            "saving_per_step_us": us(saving),
            "step_us": us(step),
            "share_pct": share,
            "single_process": single,
            "step_basis": basis,
        }
        message = (
            f"The steps spend {fmt_ns(fetch)} fetching batches from the DataLoader on the training thread{site}"
            + (" (num_workers=0: every batch is built between steps)" if single else "")
        )
        if world is not None and world > 1:
            # One rank of several: the run waits for its slowest rank at each collective, so what this
            # rank's fetch costs the run is decided across ranks (rank-straggler), not here.
            yield self.finding(
                trace,
                message=message + f" ({share:.0f}% of this rank's {fmt_ns(step)} step). This trace is one rank "
                f"of {world}: whether the fetch lengthens the run's step depends on the other ranks; analyse all "
                "ranks' traces together (rank-straggler) for the saving.",
                recommendation=("Use worker processes: " if single else "") + RECOMMENDATION,
                evidence=evidence_of(worst, worst["name"].astype(str)),
                location=where,
                data={**data, "world_size": world},
                severity=Severity.low,
            )
            return
        yield self.finding(
            trace,
            message=message + f"; taken off the training thread, {fmt_ns(saving)} of the {fmt_ns(step)} step "
            f"({share:.0f}%; step {basis}) goes. On a GPU this time would leave the GPU idle.",
            recommendation=("Use worker processes: " if single else "") + RECOMMENDATION,
            per_step=("data-workers", saving, step, (), basis == "measured unprofiled"),
            step_basis="measured unprofiled" if basis == "measured unprofiled" else "predicted unprofiled",
            basis=BASIS,
            evidence=evidence_of(worst, worst["name"].astype(str)),
            location=where,
            data=data,
        )


def _step_spans(trace: Trace) -> pd.DataFrame:
    """The steps' CPU windows as spans on the thread that ran them (the step annotation's)."""
    ann = trace.annotations
    marks = ann[ann["name"].astype(str).str.startswith("ProfilerStep#").to_numpy()]
    return marks[["ts_ns", "dur_ns", "pid", "tid"]]


def _profiler_ns_inside(trace: Trace, spans: pd.DataFrame, profiler_event_us: float | None) -> float:
    """The profiler's own host time inside ``spans`` on their own threads: the fitted per-kind costs
    the replay removes there (None), or ``profiler_event_us`` per op and Python frame recorded."""
    if profiler_event_us is not None:
        return profiler_event_us * 1e3 * _events_inside(trace, spans)
    ends = (spans["ts_ns"] + spans["dur_ns"]).to_numpy().astype(np.int64)
    starts = spans["ts_ns"].to_numpy().astype(np.int64)
    return float(profiler_ns_in_spans(trace, spans["pid"].to_numpy(), spans["tid"].to_numpy(), starts, ends).sum())


def _events_inside(trace: Trace, spans: pd.DataFrame) -> int:
    """Ops and Python frames the profiler recorded strictly inside ``spans`` on their own threads;
    the spans themselves are not counted."""
    total = 0
    for table in (trace.host, trace.frames):
        by_thread = {k: np.sort(g["ts_ns"].to_numpy()) for k, g in table.groupby(["pid", "tid"], sort=False)}
        for pid, tid, ts, dur in spans[["pid", "tid", "ts_ns", "dur_ns"]].itertuples(index=False):
            starts = by_thread.get((pid, tid))
            if starts is None:
                continue
            lo = int(np.searchsorted(starts, int(ts), side="right"))
            hi = int(np.searchsorted(starts, int(ts) + int(dur), side="left"))
            total += max(0, hi - lo)
    return total
