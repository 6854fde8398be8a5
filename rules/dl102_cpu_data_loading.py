"""DL102: on a CPU-only trace, the steps spend a large share fetching batches on the training thread."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from traceadvisor.rules_api import (
    Capability,
    Finding,
    Rule,
    Severity,
    Trace,
    evidence_of,
    fmt_ms,
    in_steps,
    location_of,
    measured_unprofiled_ns,
)

LOADER_MARK = "DataLoader"
SINGLE_PROCESS = "_SingleProcessDataLoaderIter"  # the iterator of DataLoader(num_workers=0)
BASIS = (
    "the DataLoader fetches on the training thread per step: what worker processes can take off it "
    "when they keep up (an upper bound; the step's own work stays)"
)


@dataclass(frozen=True)
class Options:
    min_share_pct: float = 10.0  # report when the fetches take at least this share of the step


class CpuDataLoading(Rule[Options]):
    """On a CPU-only trace, the training thread spends a large share of each step fetching batches.

    ## Why it matters
    A run captured on a CPU (checking the input pipeline on a laptop, a CPU job) has no GPU timeline
    for the GPU rules, but its steps still show where the host time goes. Batches built on the
    training thread (`num_workers=0`) are time the step waits for; on a GPU the same fetches leave
    the GPU idle (`data-loader-bound`).

    ## How it shows up in a trace
    A trace without GPU activity whose steps hold `enumerate(DataLoader)#...__next__` annotations
    taking at least `min_share_pct` % of the step on the training thread. The source line is the
    user's innermost frame in the middle of the longest fetch (`Dataset.__getitem__` or the
    collate function, with stacks). The saving is the fetch time per step, an upper bound: worker
    processes take it off the training thread when they keep up; the step is the one measured with
    the profiler off when the trace carries it (`traceadvisor capture`), else the profiled one.

    ## How to fix
    `DataLoader(num_workers=N, persistent_workers=True, prefetch_factor=2-4)`; make `__getitem__`
    cheaper (decode once and cache, read fewer and larger files, move augmentation to the batch).

    ## Options
    - `min_share_pct`: the share of the step the fetches must take to be reported (default 10).

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
        ann = trace.annotations
        loader = ann[ann["name"].astype(str).str.contains(LOADER_MARK, regex=False).to_numpy()]
        loader = in_steps(trace, loader)
        if not len(loader):
            return
        t = trace.steps.table
        steps = len(t)
        profiled_step = float((t["cpu_end_ns"] - t["cpu_start_ns"]).mean())
        fetch = float(loader["dur_ns"].sum()) / steps
        share = 100.0 * fetch / profiled_step if profiled_step > 0 else 0.0
        if share < self.options.min_share_pct:
            return
        measured = measured_unprofiled_ns(trace)
        step = measured if measured is not None else profiled_step
        saving = min(fetch, step)
        longest = loader.loc[loader["dur_ns"].idxmax()]
        where = location_of(
            trace, int(longest["pid"]), int(longest["tid"]), int(longest["ts_ns"] + longest["dur_ns"] // 2)
        )
        single = bool(loader["name"].astype(str).str.contains(SINGLE_PROCESS, regex=False).any())
        site = f", most in {where.function} ({where.file}:{where.line})" if where is not None else ""
        worst = loader.nlargest(5, "dur_ns")
        yield self.finding(
            trace,
            message=(
                f"The steps spend {fmt_ms(fetch)} of their {fmt_ms(profiled_step)} ({share:.0f}%, profiled) "
                f"fetching batches from the DataLoader on the training thread{site}"
                + (" (num_workers=0: every batch is built between steps)" if single else "")
                + ". On a GPU this time would leave the GPU idle; note also that syncs such as .item() cost "
                "nothing in a CPU-only run and will on a GPU."
            ),
            recommendation=(
                ("Use worker processes: " if single else "")
                + "DataLoader(num_workers=N, persistent_workers=True, prefetch_factor=2-4); make __getitem__ "
                "cheaper (decode once and cache, fewer and larger reads, augment per batch)."
            ),
            per_step=("data-workers", saving, step),
            basis=BASIS,
            evidence=evidence_of(worst, worst["name"].astype(str)),
            location=where,
            data={
                "fetch_per_step_us": round(fetch / 1e3, 3),
                "share_pct": round(share, 1),
                "single_process": single,
                "step_basis": "measured unprofiled" if measured is not None else "profiled",
            },
        )
