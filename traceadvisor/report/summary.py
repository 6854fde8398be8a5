"""The per-trace summary of a report: device, window, GPU busy time, steps, top kernels.

All values are plain data (the JSON report's ``traces[]`` entries); renderers only format them.
Times are microseconds as floats computed from exact nanoseconds (``ns / 1000``), so the three
nanosecond decimals survive.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceadvisor.analyses import annotation_time
from traceadvisor.analyses.idle import breakdown as idle_breakdown
from traceadvisor.roofline.summary import summarize as roofline_summary
from traceadvisor.trace import intervals
from traceadvisor.trace.model import Trace, name_codes

TOP_KERNELS = 10


def us(ns: int | float | np.integer[Any]) -> float:
    """Nanoseconds to microseconds (exact to the nanosecond decimal)."""
    return int(ns) / 1000.0


def summarize(trace: Trace) -> dict[str, Any]:
    """The ``traces[]`` entry of the JSON report for one trace."""
    lo, hi, basis = trace.analysis_window
    window = hi - lo
    devices = []
    for dev in trace.device_ids:
        busy = trace.busy_ns(dev, lo, hi)
        devices.append(
            {
                "id": dev,
                "busy_us": us(busy),
                "idle_us": us(window - busy),
                "busy_pct": _pct(busy, window),
                "kernel_count": int(((trace.gpu["device"] == dev) & (trace.gpu["kind"] == 0)).sum()),
            }
        )
    main_dev = trace.device_ids[0] if trace.device_ids else None
    busy_main_ns = trace.busy_ns(main_dev, lo, hi) if main_dev is not None else 0
    return {
        "path": trace.path,
        "rank": trace.rank,
        "platform": trace.platform,
        "device": _device(trace, main_dev),
        "window_us": us(window),
        "window_start_us": us(lo),
        "window_basis": basis,
        "gpu_busy_us": us(busy_main_ns),
        "gpu_idle_us": us(window - busy_main_ns) if devices else 0.0,
        "gpu_busy_pct": devices[0]["busy_pct"] if devices else 0.0,
        "kernel_count": len(trace.kernels),
        "devices": devices,
        "steps": _steps(trace, main_dev),
        "top_kernels": _top_kernels(trace),
        "idle_breakdown": _idle_breakdown(trace),
        "roofline": roofline_summary(trace),
        "annotations": annotation_time.summary(trace),
        "capture": dict(trace.meta.flags),
        "warnings": list(trace.meta.warnings),
    }


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def _device(trace: Trace, dev: int | None) -> dict[str, Any] | None:
    props = trace.device_properties(dev)
    if props is None and dev is None:
        return None
    out: dict[str, Any] = {"id": dev}
    if props:
        out["name"] = props.get("name")
        if "computeMajor" in props:
            out["compute_capability"] = f"{props.get('computeMajor')}.{props.get('computeMinor')}"
        for src, dst in (("numSms", "sm_count"), ("totalGlobalMem", "memory_bytes")):
            if src in props:
                out[dst] = props[src]
    return out


def _steps(trace: Trace, dev: int | None) -> list[dict[str, Any]]:
    t = trace.steps.table
    if not len(t):
        return []
    gpu_start, gpu_end = t["gpu_start_ns"].to_numpy(), t["gpu_end_ns"].to_numpy()
    busy_ns = np.zeros(len(t), dtype=np.int64)
    has = gpu_start >= 0
    if dev is not None and has.any():  # every step's busy time in one pass over the busy intervals
        s, e = trace.busy_intervals(dev)
        busy_ns[has] = intervals.covered(s, e, gpu_start[has], gpu_end[has])
    out = []
    for name, step, cpu_start, cpu_end, gs, ge, basis, busy in zip(
        t["name"].tolist(),
        t["step"].tolist(),
        t["cpu_start_ns"].tolist(),
        t["cpu_end_ns"].tolist(),
        gpu_start.tolist(),
        gpu_end.tolist(),
        t["gpu_basis"].tolist(),
        busy_ns.tolist(),
        strict=True,
    ):
        has_gpu = gs >= 0
        gpu_dur = ge - gs if has_gpu else 0
        out.append(
            {
                "name": name,
                "step": int(step),
                "cpu_start_us": us(cpu_start),
                "cpu_dur_us": us(cpu_end - cpu_start),
                "gpu_start_us": us(gs) if has_gpu else None,
                "gpu_dur_us": us(gpu_dur),
                "gpu_busy_us": us(busy),
                "gpu_busy_pct": _pct(busy, gpu_dur),
                "gpu_window_basis": basis,
            }
        )
    return out


def _top_kernels(trace: Trace) -> list[dict[str, Any]]:
    k = trace.kernels
    if not len(k):
        return []
    lo, hi, _ = trace.analysis_window
    inside = k[(k["end_ns"] > lo) & (k["ts_ns"] < hi)]
    if not len(inside):
        inside = k
    total = int(inside["dur_ns"].sum())
    grp = _sum_and_count_by_name(inside).sort_values("sum", ascending=False).head(TOP_KERNELS)
    return [
        {"name": str(name), "count": int(r["count"]), "total_us": us(r["sum"]), "share_pct": _pct(r["sum"], total)}
        for name, r in grp.iterrows()
    ]


def _sum_and_count_by_name(kernels: pd.DataFrame) -> pd.DataFrame:
    """Total ``dur_ns`` (``sum``) and ``count`` of each kernel name, names in order of first appearance:
    ``groupby("name", observed=True, sort=False)["dur_ns"].agg(["sum", "count"])`` on the name codes."""
    codes, categories = name_codes(kernels["name"])
    dur = kernels["dur_ns"].to_numpy()
    named = codes >= 0
    codes, dur = codes[named], dur[named]
    sums = np.zeros(len(categories), dtype=np.int64)
    np.add.at(sums, codes, dur)
    counts = np.bincount(codes, minlength=len(categories)).astype(np.int64)
    seen, first = np.unique(codes, return_index=True)
    order = seen[np.argsort(first, kind="stable")]
    return pd.DataFrame({"sum": sums[order], "count": counts[order]}, index=pd.Index(categories[order], name="name"))


def _idle_breakdown(trace: Trace) -> list[dict[str, Any]]:
    """Idle time per primary cause (each gap counted once), the rule that claims it, and its top detail."""
    df = trace.idle_attribution
    total = int(df["dur_ns"].sum())
    return [
        {
            "cause": b.cause,
            "idle_us": us(b.idle_ns),
            "gaps": b.gaps,
            "share_pct": _pct(b.idle_ns, total),
            "claimed_by": b.claimed_by,
            "top_detail": b.top_detail,
            "top_detail_us": us(b.top_detail_ns),
        }
        for b in idle_breakdown(df)
    ]


def step_frame(summary: dict[str, Any]) -> pd.DataFrame:
    """Steps of a summary as a DataFrame (for renderers)."""
    return pd.DataFrame(summary["steps"])
