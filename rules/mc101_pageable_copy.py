"""MC101: host-device copies from pageable memory or through synchronous copy calls."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from traceadvisor.rules_api import Capability, Finding, Rule, Severity, Trace, category_mask, evidence_from, location_of

MEMCPY = 1
SYNC_COPY_CALLS = ("cudaMemcpy", "cudaMemcpy2D", "hipMemcpy")


@dataclass(frozen=True)
class Options:
    pinned_gbps_pcie4: float = 20.0  # pinned H2D rate assumed before sm_90 (PCIe 4.0 x16, ~25 GB/s peak)
    pinned_gbps_pcie5: float = 50.0  # pinned H2D rate assumed on sm_90+ (PCIe 5.0 x16, ~50 GB/s measured)
    measured_factor: float = 0.8  # share of the pinned rate measured in the trace that is assumed reachable
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
        opts: Options = self.options
        g = trace.gpu
        copies = g[g["kind"] == MEMCPY]
        # Names are tested once per distinct name (category_mask), not once per row.
        names = copies["name"]
        pageable = copies[category_mask(names, lambda n: n.str.contains("Pageable", regex=False))]
        pinned = copies[
            category_mask(names, lambda n: n.str.contains("Pinned", regex=False)) & (copies["bytes"] >= 1 << 20)
        ]
        rt = trace.runtime
        sync_calls = rt[category_mask(rt["name"], lambda n: n.isin(SYNC_COPY_CALLS))]
        steps = trace.steps.table
        if len(steps):
            sync_calls = sync_calls[trace.step_of(sync_calls["ts_ns"].to_numpy()) >= 0]
        if not len(pageable) and not len(sync_calls):
            return
        if len(pinned):
            rate = opts.measured_factor * float(pinned["bytes"].sum()) / float(pinned["dur_ns"].sum())  # bytes/ns
            rate_basis = f"{opts.measured_factor:.1f} × pinned copies measured in this trace ({rate:.1f} GB/s)"
        else:
            props = trace.device_properties() or {}
            gbps = opts.pinned_gbps_pcie5 if int(props.get("computeMajor", 0) or 0) >= 9 else opts.pinned_gbps_pcie4
            rate = gbps
            rate_basis = f"{gbps:.0f} GB/s assumed pinned rate"
        need = pageable["bytes"].fillna(0).to_numpy() / rate
        excess = np.maximum(pageable["dur_ns"].to_numpy() - need, 0.0)
        copy_excess = float(excess.sum())
        blocked = 0.0
        if len(sync_calls):
            own = g[g["launch"].isin(sync_calls.index)].groupby("launch")["dur_ns"].sum()
            gpu_part = own.reindex(sync_calls.index).fillna(0).to_numpy()
            blocked = float(np.maximum(sync_calls["dur_ns"].to_numpy() - gpu_part, 0).sum())
        impact = copy_excess + blocked
        window = trace.analysed_ns
        if window <= 0 or 100.0 * impact / window < opts.min_impact_pct:
            return
        total_bytes = float(pageable["bytes"].fillna(0).sum())
        total_dur = float(pageable["dur_ns"].sum())
        achieved = total_bytes / total_dur if total_dur > 0 else 0.0
        location = None
        src = pageable.nlargest(1, "dur_ns") if len(pageable) else None
        if src is not None and int(src["launch"].iloc[0]) >= 0:
            r = rt.loc[int(src["launch"].iloc[0])]
            location = location_of(trace, int(r["pid"]), int(r["tid"]), int(r["ts_ns"]))
        kinds = ", ".join(f"{n} ×{c}" for n, c in pageable["name"].astype(str).value_counts().items())
        parts = []
        if len(pageable):
            parts.append(
                f"{len(pageable)} pageable copies ({kinds}) moved {total_bytes / 1e6:.1f} MB in "
                f"{total_dur / 1e3:.1f} µs ({achieved:.1f} GB/s)"
            )
        if len(sync_calls):
            parts.append(f"{len(sync_calls)} synchronous cudaMemcpy calls blocked the host {blocked / 1e3:.1f} µs")
        where = f" at {location.file}:{location.line}" if location else ""
        yield self.finding(
            trace,
            message=(
                "; ".join(parts) + f"{where}. From pinned memory they would need ~{impact / 1e3:.1f} µs less "
                f"({rate_basis})."
            ),
            recommendation=(
                "Pin the host memory (DataLoader(pin_memory=True) or tensor.pin_memory() once) and copy with "
                ".to(device, non_blocking=True) so copies run at full link bandwidth and overlap compute."
            ),
            impact_ns=impact,
            basis=f"pageable copy time beyond the pinned rate ({rate_basis}) plus host time blocked in cudaMemcpy",
            evidence=evidence_from(pageable, category="memcpy"),
            location=location,
            data={
                "pageable_copies": len(pageable),
                "sync_copies": len(sync_calls),
                "bytes": total_bytes,
                "achieved_gbps": achieved,
                "pinned_gbps": rate,
                "excess_us": copy_excess / 1e3,
                "blocked_us": blocked / 1e3,
            },
        )
