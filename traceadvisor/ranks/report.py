"""The multi-rank report's plain data: the ``ranks`` section and single-rank findings named by rank
and merged across ranks (computation here, presentation in ``report/render_*``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from traceadvisor.ranks.combine import RankRun
from traceadvisor.report.finding import Finding
from traceadvisor.report.model import RankRow, RanksSummary, Report


def ranks_section(run: RankRun) -> RanksSummary:
    a = run.alignment
    if a.method == "collective-end":
        alignment = f"collective-end (residual {a.residual_ns / 1e3:.1f} µs over {a.n_instances} collectives)"
        if a.refused:
            alignment += "; refused, not applied: " + "; ".join(a.warnings)
    else:
        alignment = a.method
    host_of = dict(zip(run.ranks["rank"].tolist(), run.ranks["host"].tolist(), strict=True))
    comp = run.comparison()
    rows = tuple(
        RankRow(
            rank=int(r.rank),
            host=str(host_of.get(int(r.rank), "")),
            step_us=float(r.step_ns) / 1e3,
            compute_us=float(r.compute_ns) / 1e3,
            exposed_wait_us=float(r.exposed_wait_ns) / 1e3,
            exposed_transfer_us=float(r.exposed_transfer_ns) / 1e3,
            memcpy_exposed_us=float(r.memcpy_exposed_ns) / 1e3,
            idle_us=float(r.idle_ns) / 1e3,
            straggler=bool(r.straggler),
        )
        for r in comp.itertuples()
    )
    m = run.matching
    return RanksSummary(
        alignment=alignment,
        offsets_us={str(h): float(v) / 1e3 for h, v in a.offsets_ns.items()},
        match_key=m.key_kind,
        coverage_pct=100.0 * m.coverage,
        collectives=int((m.instance >= 0).any() and m.instance.max() + 1),
        rows=rows,
        straggler=run.straggler.rank if run.straggler is not None else None,
        problems=run.problems,
    )


def merge_findings(findings: Sequence[Finding], rank_of_path: Mapping[str, int]) -> list[Finding]:
    """Each single-rank finding named by its rank; the same finding on several ranks (same rule,
    same source line, same first evidence) reported once, the largest with all the ranks listed."""
    groups: dict[tuple[object, ...], list[Finding]] = {}
    for f in findings:
        r = rank_of_path.get(f.trace)
        f = replace(f, ranks=(r,) if r is not None and not f.ranks else f.ranks)
        loc = (f.location.file, f.location.line, f.location.function) if f.location else None
        key = (f.code, loc, f.evidence[0].name if f.evidence else None)
        groups.setdefault(key, []).append(f)
    out: list[Finding] = []
    for same in groups.values():
        best = max(same, key=lambda f: (f.impact.time_us if f.impact else 0.0, f.severity.rank))
        ranks = tuple(sorted({r for f in same for r in f.ranks}))
        out.append(replace(best, ranks=ranks))
    return out


def focus(report: Report, rank: int) -> Report:
    """``--rank N``: the report about one rank: its trace, the findings that name it (cross-rank
    ones included), the rank table kept whole for comparison."""
    if report.ranks is None and not any(t.rank == rank for t in report.traces):
        return report
    return replace(
        report,
        traces=tuple(t for t in report.traces if t.rank == rank),
        findings=tuple(f for f in report.findings if rank in f.ranks),
    )
