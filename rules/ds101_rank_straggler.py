"""DS101: one rank is the straggler; every other rank waits for it inside the collectives."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from traceadvisor.rules_api import Finding, Location, RankRule, RankRun, Severity, fmt_ns

# What the straggler did in its extra time, by class (traceml's classes), and the change to make.
ADVICE = {
    "input": (
        "its input pipeline: its DataLoader fetches take {excess} longer per step than the other ranks'",
        "Speed up rank {rank}'s input: DataLoader(num_workers>0, pin_memory=True, persistent_workers=True, "
        "prefetch_factor=2+), move decoding or augmentation out of __getitem__, and check that rank's data shard "
        "(larger files, a slower disk or a remote filesystem).",
    ),
    "host": (
        "host code outside any op: {excess} more per step than the other ranks before its first collective{where}",
        "Remove or move the host work rank {rank} does before its forward{where}: run it in a DataLoader "
        "worker or on another thread, or give every rank its share (preprocessing, logging, checkpoint I/O "
        "and Python loops are the usual ones).",
    ),
    "compute": (
        "more compute: its ops before its first collective take {excess} longer per step than the other ranks'",
        "Balance the work: rank {rank} computes more or slower (a larger or longer batch, uneven sequence lengths, "
        "a slower or throttled device). Bucket batches by length, shard evenly (DistributedSampler with "
        "drop_last), and check that device's clocks and temperature.",
    ),
    "h2d": (
        "host-to-device copies: {excess} more per step than the other ranks",
        "Copy rank {rank}'s batches from pinned memory with non_blocking=True (DataLoader(pin_memory=True)) "
        "and check its PCIe link and NUMA placement.",
    ),
}


@dataclass(frozen=True)
class Options:
    min_share_pct: float = 5.0  # the wait it causes, % of the step, below which it is noise
    min_last_pct: float = 50.0  # it arrives last at this share of the collectives at least


class RankStraggler(RankRule[Options]):
    """One rank arrives late at the collectives and every other rank waits for it.

    ## Why it matters
    An implicit-sync collective (all-reduce, all-gather, reduce-scatter, all-to-all) ends only
    when its last member arrives, so one slow rank sets the step time of all of them: each other
    rank spends the difference inside the collective, waiting. The usual reading of such a run is
    wrong twice: the waiting ranks' NCCL or gloo kernels look long ("communication-bound"), and the
    straggler itself looks fine, since it waits least.

    ## How it shows up in a trace
    Collectives matched across ranks (``Seq``, else their order per process group): the straggler
    starts last in at least ``min_last_pct`` % of them and has the smallest total wait. Its class
    comes from its lead, from the step's start to its first collective, against the other ranks'
    median lead: DataLoader fetches (input), host code outside any op (host), ops (compute),
    host-to-device copies (H2D). The saving is replayed across ranks with collectives as the edges
    between them: the straggler brought to the others' pace, each collective ending its transfer
    time after its last member arrives.

    ## How to fix
    Fix what the class names on that rank: its input pipeline, its host-side work, its share of
    the compute (uneven batches or sequence lengths, a throttled device) or its copies. Tuning
    NCCL or the bucket size does not help: the time is the straggler's, not the network's.

    ## Options
    - `min_share_pct`: the wait it causes, in % of the step, below which nothing is reported
      (default 5).
    - `min_last_pct`: the share of the collectives it must arrive last at (default 50).

    ## References
    - TraceLens collective report (straggler summary): https://github.com/AMD-AGI/TraceLens
    - HTA straggler analysis: https://hta.readthedocs.io/
    - traceml straggler classes (PR #165): https://github.com/traceopt-ai/traceml
    """

    code = "DS101"
    name = "rank-straggler"
    severity = Severity.high

    def check_ranks(self, run: RankRun) -> Iterator[Finding]:
        s = run.straggler
        opts = self.options
        if s is None or s.cls == "unknown" or s.pct_arrived_last < opts.min_last_pct:
            return
        b = run.breakdown
        step_ns = float(b["step_ns"].mean()) if len(b) else 0.0
        if step_ns <= 0 or s.saving_per_step_ns < opts.min_share_pct / 100.0 * step_ns:
            return
        what, fix = ADVICE[s.cls]
        location, where = None, ""
        if s.cls == "host":
            location, where = _host_site(run, s.rank)
        excess = fmt_ns(s.excess_by_class_ns.get(s.cls, s.excess_lead_ns))
        others = [int(r) for r in run.ranks["rank"].tolist() if int(r) != s.rank]
        yield self.rank_finding(
            run,
            message=(
                f"Rank {s.rank} is the straggler: it arrives last at {s.pct_arrived_last:.0f}% of the collectives, "
                f"and {_waiters(others)} for it inside them; what it does in its extra time is "
                + what.format(excess=excess, where=where)
                + f". Bringing it to the others' pace saves {fmt_ns(s.saving_per_step_ns)} per step on every rank."
            ),
            recommendation=fix.format(rank=s.rank, where=where),
            ranks=[s.rank],
            saving_per_step_ns=s.saving_per_step_ns,
            step_ns=step_ns,
            scenario="straggler-removed",
            basis="replay across ranks: the straggler at the median pace of the others, collectives as edges",
            location=location,
            data={
                "straggler_rank": s.rank,
                "class": s.cls,
                "pct_arrived_last": round(s.pct_arrived_last, 1),
                "excess_lead_us": {k: round(v / 1e3, 3) for k, v in s.excess_by_class_ns.items()},
                "waiting_ranks": others,
                "steps": s.steps,
            },
        )


def _host_site(run: RankRun, rank: int) -> tuple[Location | None, str]:
    """The user's source line where the straggler spends its longest host gaps (needs stacks)."""
    gaps = run.host_gaps[run.host_gaps["rank"] == rank] if len(run.host_gaps) else run.host_gaps
    gaps = gaps[gaps["line"] >= 0] if len(gaps) else gaps
    if not len(gaps):
        return None, ""
    gaps = gaps.assign(dur=gaps["end_ns"] - gaps["start_ns"])
    top = gaps.groupby(["file", "line", "function", "line_kind"])["dur"].sum().sort_values(ascending=False)
    (file, line, function, kind), _ = next(iter(top.items()))
    return Location(
        file=str(file), line=int(line), function=str(function), line_kind=str(kind)
    ), f" (in {function}, {file}:{line})"


def _waiters(others: list[int]) -> str:
    if len(others) == 1:
        return f"rank {others[0]} waits"
    return f"the other {len(others)} ranks wait"
