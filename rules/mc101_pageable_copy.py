"""MC101: host-device copies from pageable memory or through synchronous copy calls."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceadvisor.rules_api import (
    PINNED_GBPS_PCIE4,
    PINNED_GBPS_PCIE5,
    PINNED_MEASURED_FACTOR,
    Capability,
    Finding,
    Location,
    Rule,
    Severity,
    Trace,
    at_source,
    category_mask,
    evidence_from,
    fmt_ns,
    in_steps,
    launch_location,
    per_step,
    pinned_rate,
    plural,
    replay_basis,
    scenario_saving,
    us,
    worth_reporting,
)

MEMCPY = 1
SYNC_COPY_CALLS = ("cudaMemcpy", "cudaMemcpy2D", "hipMemcpy")
RECOMMENDATION = (
    "Pin the host memory (DataLoader(pin_memory=True) or tensor.pin_memory() once) and copy with "
    ".to(device, non_blocking=True) so copies run at full link bandwidth and overlap compute."
)


@dataclass(frozen=True)
class Options:
    pinned_gbps_pcie4: float = PINNED_GBPS_PCIE4  # pinned H2D rate assumed before sm_90 (PCIe 4.0 x16, ~25 GB/s peak)
    pinned_gbps_pcie5: float = PINNED_GBPS_PCIE5  # pinned H2D rate assumed on sm_90+ (PCIe 5.0 x16, ~50 GB/s measured)
    measured_factor: float = PINNED_MEASURED_FACTOR  # share of the measured pinned rate assumed reachable
    min_impact_pct: float = 0.5  # report only when the estimated saving is at least this share of the steps


class PageableCopy(Rule[Options]):
    """Host-device copies go through pageable memory or block the host.

    ## Why it matters
    A copy from pageable (not page-locked) host memory is staged by the driver through a pinned
    bounce buffer: it runs at a fraction of the link bandwidth and cannot overlap with compute.
    A synchronous copy also blocks the host, so it cannot queue the next kernels meanwhile.

    ## How it shows up in a trace
    GPU memcpy records named `Memcpy HtoD (Pageable -> Device)` / `Memcpy DtoH (Device ->
    Pageable)`, and synchronous `cudaMemcpy` runtime calls. The estimated saving is each pageable
    copy's time beyond what its bytes need at the pinned rate (0.8 × the rate of pinned copies
    measured in the same trace when there are some, else 50 GB/s on sm_90+ / PCIe 5.0 and
    20 GB/s before), plus the host time blocked in synchronous copy calls beyond the copy itself.
    On a trace with steps the saving is a what-if replay instead: the trace replayed without the
    profiler's host cost, then with the pageable copies at the pinned rate and their calls
    returning at once (what follows them moves earlier); a copy that overlaps compute saves less.

    ## How to fix
    Load batches with `DataLoader(pin_memory=True)` or pin tensors once with `tensor.pin_memory()`,
    then copy with `.to(device, non_blocking=True)` so the copy overlaps compute (prefetch the
    next batch on a side stream for full overlap).

    ## Options
    - `pinned_gbps_pcie4`: pinned copy rate assumed on GPUs before sm_90 (GB/s).
    - `pinned_gbps_pcie5`: pinned copy rate assumed on sm_90 and newer (GB/s).
    - `measured_factor`: share of the pinned rate measured in the trace assumed reachable.
    - `min_impact_pct`: report only when the saving is at least this share of the steps.

    ## References
    - https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html
    - https://developer.nvidia.com/blog/how-optimize-data-transfers-cuda-cc/
    - https://docs.nvidia.com/nsight-systems/UserGuide/index.html#cuda-memcpy-async-pageable
    """

    code = "MC101"
    name = "pageable-copy"
    severity = Severity.medium
    requires = frozenset({Capability.gpu})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        g = trace.gpu
        copies = g[g["kind"] == MEMCPY]
        # Names are tested once per distinct name (category_mask), not once per row.
        pageable = copies[category_mask(copies["name"], lambda n: n.str.contains("Pageable", regex=False))]
        rt = trace.runtime
        sync_calls = in_steps(trace, rt[category_mask(rt["name"], lambda n: n.isin(SYNC_COPY_CALLS))])
        if not len(pageable) and not len(sync_calls):
            return
        rate, rate_basis = pinned_rate(trace, opts.measured_factor, opts.pinned_gbps_pcie5, opts.pinned_gbps_pcie4)
        need = pageable["bytes"].fillna(0).to_numpy() / rate
        copy_excess = float(np.maximum(pageable["dur_ns"].to_numpy() - need, 0.0).sum())
        blocked = _blocked_ns(trace, sync_calls)
        impact = copy_excess + blocked
        # With steps the saving is a replay (the copies at the pinned rate, their calls returning at
        # once, everything after them moved): a copy that overlaps compute saves less than its excess.
        replayed = scenario_saving(trace, "pinned") if len(trace.steps.table) else None
        if replayed is not None and replayed.refused is None:
            if replayed.share_pct < opts.min_impact_pct:
                return
            impact = replayed.saving_ns * len(trace.steps.table)
        elif not worth_reporting(trace, impact, opts.min_impact_pct):
            return
        total_bytes, achieved = float(pageable["bytes"].fillna(0).sum()), _achieved_gbps(pageable)
        largest = pageable.nlargest(1, "dur_ns")
        location = launch_location(trace, int(largest["launch"].iloc[0])) if len(pageable) else None
        yield self.finding(
            trace,
            message=_message(pageable, sync_calls, blocked, location)
            + (
                f". Replayed from pinned memory, the step takes {fmt_ns(replayed.saving_ns)} less "
                f"({replayed.share_pct:.0f}% of the {fmt_ns(replayed.before_ns)} predicted unprofiled step; "
                f"{rate_basis})."
                if replayed is not None and replayed.refused is None
                else f". From pinned memory they would need ~{fmt_ns(impact)} less ({rate_basis})."
            ),
            recommendation=RECOMMENDATION,
            impact_ns=impact,
            per_step=per_step(replayed) if replayed is not None and replayed.refused is None else None,
            basis=replay_basis(replayed, f"pageable copies from pinned memory ({rate_basis})")
            if replayed is not None and replayed.refused is None
            else f"pageable copy time beyond the pinned rate ({rate_basis}) plus host time blocked in cudaMemcpy",
            evidence=evidence_from(pageable, category="memcpy"),
            location=location,
            data={
                "pageable_copies": len(pageable),
                "sync_copies": len(sync_calls),
                "bytes": total_bytes,
                "achieved_gbps": achieved,
                "pinned_gbps": rate,
                "excess_us": us(copy_excess),
                "blocked_us": us(blocked),
            },
        )


def _blocked_ns(trace: Trace, sync_calls: pd.DataFrame) -> float:
    """Host time blocked in synchronous copy calls beyond the GPU time of the copies they issued."""
    if not len(sync_calls):
        return 0.0
    g = trace.gpu
    own = g[g["launch"].isin(sync_calls.index)].groupby("launch")["dur_ns"].sum()
    gpu_part = own.reindex(sync_calls.index).fillna(0).to_numpy()
    return float(np.maximum(sync_calls["dur_ns"].to_numpy() - gpu_part, 0).sum())


def _achieved_gbps(pageable: pd.DataFrame) -> float:
    total_dur = float(pageable["dur_ns"].sum())
    return float(pageable["bytes"].fillna(0).sum()) / total_dur if total_dur > 0 else 0.0


def _message(pageable: pd.DataFrame, sync_calls: pd.DataFrame, blocked: float, location: Location | None) -> str:
    parts = []
    if len(pageable):
        kinds = ", ".join(f"{n} ×{c}" for n, c in pageable["name"].astype(str).value_counts().items())
        parts.append(
            f"{plural(len(pageable), 'pageable copy', 'pageable copies')} ({kinds}) moved "
            f"{float(pageable['bytes'].fillna(0).sum()) / 1e6:.1f} MB "
            f"in {fmt_ns(float(pageable['dur_ns'].sum()))} ({_achieved_gbps(pageable):.1f} GB/s)"
        )
    if len(sync_calls):
        parts.append(f"{plural(len(sync_calls), 'synchronous cudaMemcpy call')} blocked the host {fmt_ns(blocked)}")
    return "; ".join(parts) + at_source(location)
