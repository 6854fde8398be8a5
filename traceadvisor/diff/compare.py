"""``diff_runs``: two analysed runs compared at every level (docs/diff.md)."""

from __future__ import annotations

from traceadvisor.diff.breakdown import breakdown
from traceadvisor.diff.findings import compare_findings
from traceadvisor.diff.model import Diff, RankDelta
from traceadvisor.diff.run import Run
from traceadvisor.diff.steps import compare_steps
from traceadvisor.diff.tables import kernels, ops


def _rank_deltas(before: Run, after: Run) -> tuple[RankDelta, ...]:
    rb, ra = before.report.ranks, after.report.ranks
    if rb is None or ra is None:
        return ()
    b = {r.rank: round(r.step_us * 1000) for r in rb.rows}
    a = {r.rank: round(r.step_us * 1000) for r in ra.rows}
    return tuple(RankDelta(k, b.get(k), a.get(k)) for k in sorted(set(b) | set(a)))


def diff_runs(before: Run, after: Run) -> Diff:
    profiled, unprofiled = compare_steps(before, after)
    return Diff(
        before=before.path,
        after=after.path,
        before_traces=len(before.traces),
        after_traces=len(after.traces),
        before_steps=before.steps,
        after_steps=after.steps,
        profiled=profiled,
        unprofiled=unprofiled,
        breakdown=breakdown(before, after),
        kernels=kernels(before, after),
        ops=ops(before, after),
        findings=compare_findings(before.report.findings, after.report.findings, before.steps, after.steps),
        ranks=_rank_deltas(before, after),
    )
