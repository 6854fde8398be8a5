"""GK301: hot kernels whose grids leave most of the GPU's SMs empty."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceadvisor.rules_api import (
    Capability,
    Evidence,
    Finding,
    Rule,
    Severity,
    Trace,
    communication_kernels,
    fmt_ns,
    op_location,
    plural,
    us,
)

RECOMMENDATION = (
    "Give these kernels more parallel work: batch more rows per launch, parallelise over the "
    "reduced/scanned dimension (split-K / tiled reduction), or launch more, smaller blocks "
    "in custom kernels."
)


@dataclass(frozen=True)
class Options:
    min_kernel_pct: float = 5.0  # a kernel (by name) must take at least this share of kernel time
    max_coverage: float = 0.6  # report kernels whose time-weighted SM coverage is below this
    min_mean_us: float = 20.0  # shorter kernels are launch-latency bound, not occupancy bound


class LowOccupancy(Rule[Options]):
    """Hot kernels launch grids that fill only a fraction of the SMs.

    ## Why it matters
    A kernel whose grid has fewer blocks than the GPU has SMs (132 on an H100) leaves the other
    SMs idle for its whole duration: a 1-block grid uses under 1% of the chip. When such a kernel
    is hot, the GPU looks busy in the timeline while doing a small fraction of the work it could.

    ## How it shows up in a trace
    Communication kernels (NCCL/RCCL collectives and transfers) are left out: they use a few
    SMs by design and mostly wait for the other ranks. Of the other kernels, those (grouped by
    name) that take at least `min_kernel_pct` of their time, last at least `min_mean_us` on
    average, and whose
    time-weighted SM coverage is below `max_coverage`. Coverage is Kineto's `blocks per SM`
    (capped at 1), or grid blocks / SM count (from `deviceProperties`) when that is missing. The
    impact, each kernel's time × (1 − coverage), is an upper bound: it assumes the work would
    spread perfectly over all SMs.

    ## How to fix
    Give the kernel more parallel work: batch more rows or micro-batches per launch, reshape so
    the reduced/scanned dimension is not the only parallel one, pick a split-K or
    parallel-reduction implementation, or for a custom Triton/CUDA kernel launch more, smaller
    blocks (tile the long dimension). Tiny tensors are better fused into a larger kernel
    (`torch.compile`).

    ## Options
    - `min_kernel_pct`: minimum share of kernel time of a kernel name to be considered.
    - `max_coverage`: report kernels whose SM coverage is below this fraction.
    - `min_mean_us`: ignore kernels shorter than this on average (launch-latency bound, default 20 µs).

    ## References
    - https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#occupancy
    - https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#hardware-implementation
    """

    code = "GK301"
    name = "low-occupancy"
    severity = Severity.medium
    requires = frozenset({Capability.gpu})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        k = _compute_kernels(trace)
        total = float(k["dur_ns"].sum()) if len(k) else 0.0
        if total <= 0:
            return
        sms = int((trace.device_properties() or {}).get("numSms", 0) or 0)
        df = _with_coverage(k, sms)
        hot = _hot(df, total, opts) if len(df) else df
        if not len(hot):
            return
        names = [str(n) for n in hot.index]
        hot_codes = df["name"].cat.categories.get_indexer(hot.index)  # distinct names: one code each
        worst = df[np.isin(df["name"].cat.codes.to_numpy(), hot_codes)].nlargest(5, "dur_ns")
        top = hot.iloc[0]
        short = names[0] if len(names[0]) <= 90 else names[0][:87] + "..."
        unit = "CU" if trace.platform == "rocm" else "SM"  # AMD's compute units are NVIDIA's SMs
        fill = "fills" if len(hot) == 1 else "fill"
        yield self.finding(
            trace,
            message=(
                f"{plural(len(hot), 'hot kernel')} {fill} few {unit}s: {short} runs {fmt_ns(top['dur_ns'])} "
                f"({top['pct']:.0f}% of the trace's kernel time less communication) with "
                f"{plural(int(top['blocks']), 'block')}, {100 * top['coverage']:.0f}% {unit} coverage"
                f"{f' of {sms} {unit}s' if sms else ''}; low-occupancy kernels "
                f"take {fmt_ns(hot['dur_ns'].sum())} in all."
            ),
            recommendation=RECOMMENDATION,
            impact_ns=float((hot["dur_ns"] * (1.0 - hot["coverage"])).sum()),
            basis="upper bound: kernel time × (1 − SM coverage), as if the work spread over all SMs",
            evidence=_evidence(worst),
            location=op_location(trace, int(worst.iloc[0]["op"])) if "op" in worst else None,
            data={
                "kernels": names,
                "coverage": [float(c) for c in hot["coverage"]],
                "low_occupancy_us": us(hot["dur_ns"].sum()),
            },
        )


def _compute_kernels(trace: Trace) -> pd.DataFrame:
    """The kernels less communication (NCCL/RCCL): those launch one block per channel by design,
    and their time is mostly waiting for the other ranks, so few SMs says nothing to fix there."""
    k = trace.kernels
    comm = communication_kernels(trace)
    return k[~k.index.isin(comm)] if len(comm) else k


def _with_coverage(k: pd.DataFrame, sms: int) -> pd.DataFrame:
    """The kernels whose SM coverage is known, with it and their grid's block count. Coverage is
    Kineto's ``blocks per SM`` (capped at 1), else grid blocks / SM count (``deviceProperties``)."""
    blocks = (k["grid_x"].clip(lower=1) * k["grid_y"].clip(lower=1) * k["grid_z"].clip(lower=1)).astype(float)
    bps = k["blocks_per_sm"].astype(float)
    coverage = np.where(bps.notna() & (bps > 0), bps.clip(upper=1.0), np.nan)
    if sms > 0:
        by_grid = (blocks / sms).clip(upper=1.0).to_numpy()
        coverage = np.where(np.isnan(coverage), by_grid, coverage)
    # Only the columns used below: a copy of the whole kernel table costs more than the rule.
    cols = ["name", "ts_ns", "dur_ns", "stream", *(["op"] if "op" in k else [])]
    df = k[cols].assign(coverage=coverage, blocks=blocks)
    return df[df["coverage"].notna()]


def _hot(df: pd.DataFrame, total: float, opts: Options) -> pd.DataFrame:
    """Kernels by name that are hot, long enough and low in coverage, most time first."""
    df = df.assign(weighted=df["coverage"] * df["dur_ns"])
    g = (
        df[["name", "dur_ns", "weighted", "blocks"]]
        .groupby("name", observed=True)
        .agg(
            dur_ns=("dur_ns", "sum"),
            weighted=("weighted", "sum"),
            n=("dur_ns", "size"),
            blocks=("blocks", "median"),
        )
    )
    g["coverage"] = g["weighted"] / g["dur_ns"]
    g["pct"] = 100.0 * g["dur_ns"] / total
    g["mean_us"] = g["dur_ns"] / g["n"] / 1e3
    hot = g[
        (g["pct"] >= opts.min_kernel_pct) & (g["coverage"] < opts.max_coverage) & (g["mean_us"] >= opts.min_mean_us)
    ]
    return hot.sort_values("dur_ns", ascending=False)


def _evidence(worst: pd.DataFrame) -> list[Evidence]:
    return [
        Evidence(
            name=f"{str(r.name)[:100]} (grid {int(r.blocks)} blocks, {100 * r.coverage:.0f}% of SMs)",
            ts_us=int(r.ts_ns) / 1000.0,
            dur_us=int(r.dur_ns) / 1000.0,
            stream=int(r.stream),
        )
        for r in worst.itertuples()
    ]
