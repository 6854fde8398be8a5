"""The report's idle section: GPU idle time per primary cause, the rule that claims each cause, and
the cause's largest detail (``analyses.idle``: each gap counted once)."""

from __future__ import annotations

from collections.abc import Mapping

from traceadvisor.analyses.idle import breakdown, idle_attribution
from traceadvisor.report.model import IdleCauseSummary
from traceadvisor.summary.units import pct, us
from traceadvisor.trace.model import Trace


def idle_breakdown(trace: Trace, claimed_by: Mapping[str, str | None]) -> tuple[IdleCauseSummary, ...]:
    """``traces[].idle_breakdown``, largest cause first. ``claimed_by`` (idle cause → rule name, None:
    unclaimed) is the engine's, computed from the loaded rules (``engine.claimed_by``)."""
    gaps = idle_attribution(trace)
    total = int(gaps["dur_ns"].sum())
    return tuple(
        IdleCauseSummary(
            cause=b.cause,
            idle_us=us(b.idle_ns),
            gaps=b.gaps,
            share_pct=pct(b.idle_ns, total),
            claimed_by=b.claimed_by,
            top_detail=b.top_detail,
            top_detail_us=us(b.top_detail_ns),
        )
        for b in breakdown(gaps, claimed_by)
    )
