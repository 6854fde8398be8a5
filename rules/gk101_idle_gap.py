"""GK101: the GPU sits idle inside steps while the host does something else."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pandas as pd

from traceadvisor.rules_api import (
    PROFILER_EVENT_US,
    Capability,
    ClaimedIdle,
    Finding,
    IdleCause,
    Location,
    Rule,
    Severity,
    Trace,
    event_location,
    evidence_of,
    fmt_us,
    idle_attribution,
    share_of_steps,
    us,
    worth_reporting,
)

MINE = frozenset({IdleCause.cpu_op, IdleCause.unknown})  # the idle causes this rule claims
GPU_SIDE = "next work already queued (GPU-side wait)"
BASIS = (
    "GPU idle while the host stalled in CPU work or the queued work waited on the GPU side, less the "
    "profiler's own cost of {:g} µs per event recorded in those gaps (the other causes of idle are other rules')"
)


@dataclass(frozen=True)
class Options:
    min_gap_us: float = 5.0  # gaps shorter than this are launch latency, not an idle problem
    min_idle_pct: float = 2.0  # report only when the recoverable idle is at least this share of the steps
    profiler_event_us: float = PROFILER_EVENT_US  # the profiler's host cost per recorded event


class IdleGap(Rule[Options]):
    """The GPU idles inside steps; each gap is attributed to what the host was doing.

    ## Why it matters
    Every microsecond the GPU waits for the host is lost throughput: the step cannot finish
    faster than the host feeds the GPU. Idle time inside the steady state is the first thing to
    remove before tuning kernels.

    ## How it shows up in a trace
    Gaps between the merged busy intervals (kernels, copies, memsets on all streams) of the device
    inside the steps' GPU windows. Each gap gets one primary cause (`idle_breakdown` in the
    report): a synchronization, the DataLoader, a per-tensor optimizer step, launch-bound
    dispatch of small ops, a CPU stall (a host interval over 200 µs without a launch, named by the
    CPU op or region that filled it), launch latency, or a GPU-side wait (the next work was
    already queued). `sync-point`, `data-loader-bound`, `optimizer-not-fused` and
    `launch-overhead` claim their causes; this rule claims CPU stalls and GPU-side waits, so no
    gap is counted twice. The impact is the claimed idle less the profiler's own host cost of the
    events it recorded inside those gaps (`profiler_event_us` each), which an unprofiled run does
    not pay.

    ## How to fix
    Look at the named CPU op or region: move host work (Python bookkeeping, logging, metric
    computation, CPU preprocessing) off the critical path, overlap it with GPU work, or compile
    the step with `torch.compile(model)` so the host issues fewer, larger kernels. For GPU-side
    waits, check the cross-stream dependencies (`cudaStreamWaitEvent`, `wait_stream`) that hold
    the queued work back.

    ## Options
    - `min_gap_us`: gaps shorter than this are not counted (default 5 µs).
    - `min_idle_pct`: report only when the recoverable claimed idle is at least this share of the steps.
    - `profiler_event_us`: the profiler's host cost per recorded op, annotation or Python frame
      (default 3 µs, measured on the fixtures' before/after pairs with record_shapes and with_stack).

    ## References
    - https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html
    - https://hta.readthedocs.io/en/latest/source/features/idle_time_breakdown.html
    """

    code = "GK101"
    name = "idle-gap"
    severity = Severity.medium
    requires = frozenset({Capability.gpu})
    claims = MINE

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        gaps = idle_attribution(trace)
        gaps = gaps[gaps["dur_ns"] >= opts.min_gap_us * 1000]
        if not len(gaps):
            return
        mine = ClaimedIdle.of(gaps[gaps["cause"].isin(MINE)], opts.profiler_event_us)
        if not worth_reporting(trace, mine.recoverable_ns, opts.min_idle_pct):
            return
        by_detail = mine.gaps.groupby("detail")["dur_ns"].sum().sort_values(ascending=False)
        top_name, top_ns = str(by_detail.index[0]), int(by_detail.iloc[0])
        causes = gaps.groupby("cause")["dur_ns"].sum().sort_values(ascending=False)
        breakdown = ", ".join(f"{c} {fmt_us(v)}{_owner(self.claimed_by, str(c))}" for c, v in causes.items())
        worst = mine.gaps.nlargest(5, "dur_ns")
        labels = (f"GPU idle: {c}, {d or 'unknown'}" for c, d in zip(worst["cause"], worst["detail"], strict=True))
        total = int(gaps["dur_ns"].sum())
        yield self.finding(
            trace,
            message=(
                f"GPU idle {fmt_us(total)} in {len(gaps)} gaps of {opts.min_gap_us:g} µs or more "
                f"({share_of_steps(trace, total):.1f}% of the steps). {fmt_us(mine.raw_ns)} of it is not another "
                f"rule's cause (CPU stalls, GPU-side waits), most in {top_name} ({fmt_us(top_ns)}); about "
                f"{fmt_us(mine.recoverable_ns)} of that would remain without the profiler. Idle by cause: {breakdown}."
            ),
            recommendation=_recommendation(top_name),
            impact_ns=mine.recoverable_ns,
            basis=BASIS.format(opts.profiler_event_us),
            evidence=evidence_of(worst, labels, start="start_ns"),
            location=_location(trace, mine.gaps, top_name),
            data={
                "idle_us": us(total),
                "claimed_us": us(mine.raw_ns),
                "recoverable_us": us(mine.recoverable_ns),
                "gaps": len(gaps),
                "top_op": top_name,
                "by_cause_us": {str(c): us(int(v)) for c, v in causes.items()},
            },
        )


def _location(trace: Trace, mine: pd.DataFrame, top_name: str) -> Location | None:
    """The source line of the host op that held the longest gap of the top detail, when the gap
    started (the op may have begun long before)."""
    first = mine[mine["detail"] == top_name].nlargest(1, "dur_ns").iloc[0]
    if first["host_row"] < 0:
        return None
    h = trace.host.loc[int(first["host_row"])]
    return event_location(trace, h, at_ns=max(int(h["ts_ns"]), int(first["start_ns"])))


def _recommendation(top_name: str) -> str:
    if top_name == GPU_SIDE:
        return (
            "The GPU waited with work already queued: check the cross-stream dependencies (cudaStreamWaitEvent, "
            "stream.wait_stream) and collectives that hold it back, and overlap them with independent work."
        )
    return (
        f"Take {top_name} off the critical path: overlap it with GPU work or move it out of the step "
        "(to DataLoader workers, or every N steps); compile the step with torch.compile(model) to cut "
        "per-op host overhead."
    )


def _owner(claimed_by: Mapping[str, str | None], cause: str) -> str:
    owner = claimed_by.get(cause)
    return "" if owner == IdleGap.name else f" ({owner or 'unclaimed'})"
