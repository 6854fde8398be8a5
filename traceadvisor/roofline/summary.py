"""The report's ``roofline`` section: peaks used and their sources, time by bound, top kernels.

Plain data (JSON-ready: no NaN, times in µs from exact ns). Only kernels that start inside the
analysis window count, as for the summary's ``top_kernels``.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from traceadvisor.roofline.view import BASIS_TEXT, of
from traceadvisor.trace.model import Trace

TOP_KERNELS = 10
BOUNDS = ("compute", "memory", "latency", "unknown")


def summarize(trace: Trace) -> dict[str, Any]:
    """``traces[].roofline`` of the JSON report."""
    r = of(trace)
    out: dict[str, Any] = {
        "available": r.peaks is not None,
        "reason": r.reason,
        "peaks": r.peaks.to_dict() if r.peaks is not None else None,
        "kernel_time_us": 0.0,
        "modelled_time_us": 0.0,
        "modelled_pct": 0.0,
        "by_bound": [],
        "top_kernels": [],
        "bases": {},
    }
    if not len(trace.kernels):
        return out
    lo, hi, _ = trace.analysis_window
    all_k = trace.kernels
    inside = all_k[(all_k["ts_ns"] >= lo) & (all_k["ts_ns"] < hi)]
    kernel_ns = int(inside["dur_ns"].sum())
    k = r.in_window(lo, hi)
    modelled_ns = int(k["dur_ns"].sum())
    out["kernel_time_us"] = kernel_ns / 1000.0
    out["modelled_time_us"] = modelled_ns / 1000.0
    out["modelled_pct"] = _pct(modelled_ns, kernel_ns)
    if not len(k):
        return out
    by = k.groupby("bound")["dur_ns"].agg(["sum", "count"])
    out["by_bound"] = [
        {
            "bound": b,
            "time_us": int(by.at[b, "sum"]) / 1000.0,
            "share_pct": _pct(int(by.at[b, "sum"]), modelled_ns),
            "kernels": int(by.at[b, "count"]),
        }
        for b in BOUNDS
        if b in by.index
    ]
    out["top_kernels"] = top_kernels(k, kernel_ns)
    # What the figures of the kernels shown rest on (op models, Triton launch records).
    out["bases"] = {b: BASIS_TEXT[b] for b in dict.fromkeys(t["basis"] for t in out["top_kernels"])}
    return out


def top_kernels(k: pd.DataFrame, kernel_ns: int, n: int = TOP_KERNELS) -> list[dict[str, Any]]:
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
            {
                "name": name,
                "op": op,
                "dtype": dtype,
                "count": int(r["count"]),
                "time_us": int(r["dur"]) / 1000.0,
                "share_pct": _pct(int(r["dur"]), kernel_ns),
                "gflop": float(r["flops"]) / 1e9 if r["flops_n"] else None,
                "mbytes": float(r["nbytes"]) / 1e6,
                "intensity": _num(r["flops"] / r["nbytes"]) if r["nbytes"] > 0 and r["flops_n"] else None,
                "achieved_tflops": _num(r["flops"] / secs / 1e12) if secs > 0 and r["flops_n"] else None,
                "achieved_gbs": _num(r["nbytes"] / secs / 1e9) if secs > 0 else None,
                "peak_tflops": _num(r["peak"]),
                "peak_figure": str(r["figure"]) or None,
                "roof_pct": _num(100.0 * r["roof"] / r["dur"]) if r["dur"] > 0 and r["roof_n"] else None,
                "bound": str(main_bound[(name, op, dtype)]),
                "basis": str(r["basis"]),
            }
        )
    return out


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


__all__ = ["BOUNDS", "TOP_KERNELS", "summarize", "top_kernels"]
