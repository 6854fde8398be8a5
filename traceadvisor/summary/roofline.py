"""The report's ``roofline`` section: peaks used and their sources, time by bound, top kernels.

JSON-ready numbers (no NaN; times in µs from exact ns). Only kernels that start inside the analysis
window count (the roofline's own table, ``roofline.of(trace)``, covers them all), and no
communication kernel (``analyses.communication``): ``kernel_time_us`` is the other kernels' time.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from traceadvisor import roofline
from traceadvisor.analyses.communication import communication_kernels
from traceadvisor.report.model import BoundShare, RooflineKernel, RooflinePeaks, RooflineSummary
from traceadvisor.roofline.peaks import Peaks
from traceadvisor.roofline.view import BASIS_TEXT
from traceadvisor.summary.units import pct
from traceadvisor.trace.model import Trace

TOP_KERNELS = 10
BOUNDS = ("compute", "memory", "latency", "unknown")


def roofline_summary(trace: Trace) -> RooflineSummary:
    """``traces[].roofline``: what the roofline of ``trace`` says about its window."""
    r = roofline.of(trace)
    peaks = _peaks(r.peaks) if r.peaks is not None else None
    if not len(trace.kernels):
        return RooflineSummary(r.peaks is not None, r.reason, peaks)
    lo, hi, _ = trace.analysis_window
    all_k = trace.kernels
    # The kernel time the roofline's shares are of leaves communication (NCCL/RCCL) out, as the
    # roofline does: a collective's time is mostly waiting for the other ranks, not work on a roof.
    all_k = all_k[~all_k.index.isin(communication_kernels(trace))]
    inside = all_k[(all_k["ts_ns"] >= lo) & (all_k["ts_ns"] < hi)]
    kernel_ns = int(inside["dur_ns"].sum())
    k = r.in_window(lo, hi)
    modelled_ns = int(k["dur_ns"].sum())
    if not len(k):
        return RooflineSummary(
            r.peaks is not None, r.reason, peaks, kernel_ns / 1000.0, modelled_ns / 1000.0, pct(modelled_ns, kernel_ns)
        )
    by = k.groupby("bound")["dur_ns"].agg(["sum", "count"])
    by_bound = tuple(
        BoundShare(b, int(by.at[b, "sum"]) / 1000.0, pct(int(by.at[b, "sum"]), modelled_ns), int(by.at[b, "count"]))
        for b in BOUNDS
        if b in by.index
    )
    top = top_kernels(k, kernel_ns)
    return RooflineSummary(
        available=r.peaks is not None,
        reason=r.reason,
        peaks=peaks,
        kernel_time_us=kernel_ns / 1000.0,
        modelled_time_us=modelled_ns / 1000.0,
        modelled_pct=pct(modelled_ns, kernel_ns),
        by_bound=by_bound,
        top_kernels=top,
        # What the figures of the kernels shown rest on (op models, Triton launch records).
        bases={b: BASIS_TEXT[b] for b in dict.fromkeys(t.basis for t in top)},
    )


def _peaks(p: Peaks) -> RooflinePeaks:
    """The peaks as the report states them: TFLOP/s per dtype (None: the GPU has no such unit)."""
    return RooflinePeaks(
        device=p.device,
        model=p.model,
        sm_count=p.sm_count,
        memory_bandwidth_gbs=p.memory_bandwidth_gbs,
        tflops={k: (None if v is None else v / 1e12) for k, v in p.flops.items()},
        sources=dict(p.sources),
        note=p.note,
    )


def top_kernels(k: pd.DataFrame, kernel_ns: int, n: int = TOP_KERNELS) -> tuple[RooflineKernel, ...]:
    """The ``n`` kernels (by name, launching op and dtype) with the most time, with their figures."""
    keys = [k["name"].astype(str), k["op_name"].astype(str), k["dtype"].astype(str)]
    g = k.groupby(keys, sort=False)
    agg = g.agg(
        count=("dur_ns", "size"),
        dur=("dur_ns", "sum"),
        flops=("flops", "sum"),
        flops_n=("flops", "count"),  # 0: no FLOPs known (a Triton kernel that declares none)
        basis=("basis", "first"),
        nbytes=("bytes", "sum"),
        roof=("roof_time_ns", "sum"),
        roof_n=("roof_time_ns", "count"),
        peak=("peak_tflops", "first"),
        figure=("peak_figure", "first"),
    ).sort_values("dur", ascending=False)
    top = agg.head(n)
    # The bound with the most time among each group's kernels.
    by_bound = k.groupby([*keys, k["bound"]], sort=False)["dur_ns"].sum().reset_index()
    by_bound.columns = ["name", "op", "dtype", "bound", "dur"]
    main = by_bound.sort_values("dur", ascending=False, kind="stable").drop_duplicates(["name", "op", "dtype"])
    main_bound = dict(zip(zip(main["name"], main["op"], main["dtype"], strict=True), main["bound"], strict=True))
    out = []
    for (name, op, dtype), r in top.iterrows():
        secs = r["dur"] / 1e9
        out.append(
            RooflineKernel(
                name=name,
                op=op,
                dtype=dtype,
                count=int(r["count"]),
                time_us=int(r["dur"]) / 1000.0,
                share_pct=pct(int(r["dur"]), kernel_ns),
                gflop=float(r["flops"]) / 1e9 if r["flops_n"] else None,
                mbytes=float(r["nbytes"]) / 1e6,
                intensity=_num(r["flops"] / r["nbytes"]) if r["nbytes"] > 0 and r["flops_n"] else None,
                achieved_tflops=_num(r["flops"] / secs / 1e12) if secs > 0 and r["flops_n"] else None,
                achieved_gbs=_num(r["nbytes"] / secs / 1e9) if secs > 0 else None,
                peak_tflops=_num(r["peak"]),
                peak_figure=str(r["figure"]) or None,
                roof_pct=_num(100.0 * r["roof"] / r["dur"]) if r["dur"] > 0 and r["roof_n"] else None,
                bound=str(main_bound[(name, op, dtype)]),
                basis=str(r["basis"]),
            )
        )
    return tuple(out)


def _num(v: Any) -> float | None:
    """A finite float, or None (NaN and infinity have no JSON form)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
