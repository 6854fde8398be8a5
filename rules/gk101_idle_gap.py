"""GK101: the GPU sits idle inside steps while the host does something else."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from traceadvisor import Finding, Rule, Severity, Trace
from traceadvisor.rules_api import Capability, Evidence, location_of

# Causes another rule owns (and claims the time of): reported here in the breakdown only.
OWNED_ELSEWHERE = {"sync": "sync-point", "data_loading": "data-loader-bound", "launch_latency": "launch-overhead"}


@dataclass(frozen=True)
class Options:
    min_gap_us: float = 5.0  # gaps shorter than this are launch latency, not an idle problem
    min_idle_pct: float = 2.0  # report only when the GPU idles at least this share of the steps


class IdleGap(Rule):
    """The GPU idles inside steps; each gap is attributed to what the host was doing.

    ## Why it matters
    Every microsecond the GPU waits for the host is lost throughput: the step cannot finish
    faster than the host feeds the GPU. Idle time inside the steady state is the first thing to
    remove before tuning kernels.

    ## How it shows up in a trace
    Gaps between the merged busy intervals (kernels, copies, memsets on all streams) of the device
    inside the steps' GPU windows. Each gap gets one primary cause: a blocking synchronize call,
    the DataLoader, a CPU op that delayed the next launch (named), launch latency, or unknown.
    This rule claims the gaps caused by CPU ops and unknown causes; `sync-point`,
    `data-loader-bound` and `launch-overhead` claim theirs, so no gap is counted twice.

    ## How to fix
    Look at the named CPU op: move host work (Python bookkeeping, logging, metric computation)
    off the critical path, overlap it with GPU work, or compile the step with
    `torch.compile(model)` so the host issues fewer, larger kernels. Avoid host-side decisions that
    depend on GPU results inside the step.

    ## Options
    - `min_gap_us`: gaps shorter than this are not counted (default 5 µs).
    - `min_idle_pct`: report only when the claimed idle time is at least this share of the steps.

    ## References
    - https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html
    - https://hta.readthedocs.io/en/latest/source/features/idle_time_breakdown.html
    """

    code = "GK101"
    name = "idle-gap"
    severity = Severity.medium
    requires = frozenset({Capability.gpu})
    Options = Options

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts: Options = self.options
        gaps = trace.idle_attribution
        gaps = gaps[gaps["dur_ns"] >= opts.min_gap_us * 1000]
        if not len(gaps):
            return
        mine = gaps[~gaps["cause"].isin(list(OWNED_ELSEWHERE))]
        claimed = int(mine["dur_ns"].sum())
        total = int(gaps["dur_ns"].sum())
        window = trace.analysed_ns
        if window <= 0 or 100.0 * claimed / window < opts.min_idle_pct:
            return
        by_detail = mine.groupby("detail")["dur_ns"].sum().sort_values(ascending=False)
        top_name, top_ns = str(by_detail.index[0]), int(by_detail.iloc[0])
        worst = mine.nlargest(5, "dur_ns")
        evidence = [
            Evidence(name=f"idle before next launch ({d or 'unknown'})", ts_us=s / 1000, dur_us=du / 1000)
            for s, du, d in zip(worst["start_ns"], worst["dur_ns"], worst["detail"], strict=True)
        ]
        location = None
        first = worst.iloc[0]
        if first["host_row"] >= 0:
            h = trace.host.loc[int(first["host_row"])]
            location = location_of(trace, int(h["pid"]), int(h["tid"]), int(h["ts_ns"]))
        causes = gaps.groupby("cause")["dur_ns"].sum().sort_values(ascending=False)
        breakdown = ", ".join(f"{c} {v / 1e3:.1f} µs" for c, v in causes.items())
        yield self.finding(
            trace,
            message=(
                f"GPU idle {total / 1e3:.1f} µs in {len(gaps)} gaps ({100 * total / window:.1f}% of the steps); "
                f"{claimed / 1e3:.1f} µs while the host ran CPU work, most in {top_name} "
                f"({top_ns / 1e3:.1f} µs). Idle by cause: {breakdown}."
            ),
            recommendation=(
                f"Take {top_name} off the critical path: overlap it with GPU work or move it out of the step; "
                "compile the step with torch.compile(model) to cut per-op host overhead."
            ),
            impact_ns=claimed,
            basis="GPU idle time while the host was busy in CPU ops or unknown work (other causes are other rules')",
            evidence=evidence,
            location=location,
            data={"idle_us": total / 1e3, "claimed_us": claimed / 1e3, "gaps": len(gaps), "top_op": top_name},
        )
