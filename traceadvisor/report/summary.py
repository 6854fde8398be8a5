"""The per-trace summary of a report: device, window, GPU busy time, steps, top kernels.

All values are plain data (the JSON report's ``traces[]`` entries); renderers only format them.
Times are microseconds as floats computed from exact nanoseconds (``ns / 1000``), so the three
nanosecond decimals survive.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from traceadvisor.analyses import annotation_time
from traceadvisor.analyses.idle import breakdown as idle_breakdown
from traceadvisor.analyses.idle import idle_attribution
from traceadvisor.roofline.summary import summarize as roofline_summary
from traceadvisor.trace import intervals
from traceadvisor.trace.model import Trace, name_codes

# The rule that claims (reports the time of) each idle cause, as the report's idle section names
# it. Not the analyses' to know (a user rule may claim a cause): the engine computes the map from
# the loaded rules (``engine.claimed_by``); until the pipeline passes that map to ``summarize``
# it is written here, equal to the built-in rules' ``claims`` (tests/test_model.py checks it).
# Launch latency is the GPU's own start-up cost between kernels: no rule claims it.
CLAIMED_BY: dict[str, str | None] = {
    "sync": "sync-point",
    "data_loading": "data-loader-bound",
    "optimizer": "optimizer-not-fused",
    "launch_bound": "launch-overhead",
    "launch_latency": None,
    "cpu_op": "idle-gap",
    "unknown": "idle-gap",
}

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
        "annotations": _annotations(trace),
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
    df = idle_attribution(trace)
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
        for b in idle_breakdown(df, CLAIMED_BY)
    ]


def step_frame(summary: dict[str, Any]) -> pd.DataFrame:
    """Steps of a summary as a DataFrame (for renderers)."""
    return pd.DataFrame(summary["steps"])


# -- the annotations section -------------------------------------------------------------------------
# The analysis (``analyses/annotation_time.py``) gives the numbers; which annotation is the
# bottleneck and what to do about it is the report's to say.
# Advice for component names that say what they compute (the reference workloads' labels and
# PyTorch's own annotations), first match wins. Why each: attention's score matrix is O(seq²)
# memory traffic that a fused kernel never writes (FlashAttention, Dao et al. 2022); projections
# are GEMMs whose speed is the tensor-core rate of their dtype; optimizer and zero_grad advice
# follows torch.optim's docs (fused/foreach implementations, set_to_none).
_ANNOTATION_ADVICE: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"score|softmax|weighted_sum|attn_weight|attention_weight", re.I),
        "Use scaled_dot_product_attention: one fused kernel that never writes the seq × seq score matrix.",
    ),
    (
        re.compile(r"scaled_dot_product|sdpa|flash_attention|flash_attn", re.I),
        "Attention already runs fused: only less work (shorter sequences, is_causal=True for causal masks) "
        "or lower precision makes it faster.",
    ),
    (
        re.compile(r"qkv|proj|linear", re.I),
        "These are matmuls: run them in bf16/fp16 (autocast) or TF32 so they use tensor cores, "
        "and compute q, k and v with one matmul.",
    ),
    (
        re.compile(r"^Optimizer\.step#"),
        "Use a fused optimizer (e.g. AdamW(..., fused=True)) or foreach=True: a few kernels for all parameters.",
    ),
    (
        re.compile(r"^Optimizer\.zero_grad#"),
        "Use zero_grad(set_to_none=True) (the default since PyTorch 2.0): no memset kernels.",
    ),
    (
        re.compile(r"DataLoader|dataloader"),
        "Load batches in background workers: DataLoader(num_workers>0, pin_memory=True, persistent_workers=True).",
    ),
    (
        re.compile(r"CompiledFxGraph"),
        "A torch.compile graph: look at its top kernels; mode='max-autotune' tunes its matmuls.",
    ),
)
_GENERIC_ANNOTATION_ADVICE = "Look inside it: nest record_function labels around its parts, or read its top kernels."


def annotation_advice(name: str) -> str:
    """What to do about an annotation that takes the most time, from what its name says it computes."""
    for pattern, text in _ANNOTATION_ADVICE:
        if pattern.search(name):
            return text
    return _GENERIC_ANNOTATION_ADVICE


def annotation_bottleneck(result: annotation_time.AnnotationTime) -> dict[str, Any] | None:
    """The annotation with the most time: ``name``, ``share_pct``, ``advice``, ``message``; None if all are 0."""
    if not len(result.table) or int(result.table["time_ns"].iloc[0]) <= 0:
        return None
    row = result.table.iloc[0]
    name, share = str(row["name"]), float(row["share_pct"])
    tip = annotation_advice(name)
    basis = "" if result.basis == "gpu" else " (CPU time)"
    return {
        "name": name,
        "share_pct": share,
        "advice": tip,
        "message": f"Bottleneck{basis}: {name} ({share:.0f}%). {tip}",
    }


def _annotations(trace: Trace) -> dict[str, Any] | None:
    """The ``annotations`` entry of the JSON report's per-trace summary (times in µs, exact to the ns)."""
    result = annotation_time.annotation_time(trace)
    if result is None:
        return None
    t = result.table
    return {
        "basis": result.basis,
        "total_us": result.total_ns / 1000.0,
        "unannotated_us": result.unannotated_ns / 1000.0,
        "unannotated_pct": 100.0 * result.unannotated_ns / result.total_ns if result.total_ns > 0 else 0.0,
        "rows": [
            {"name": name, "time_us": int(ns) / 1000.0, "share_pct": float(share), "calls": int(calls)}
            for name, ns, share, calls in zip(t["name"], t["time_ns"], t["share_pct"], t["calls"], strict=True)
        ],
        "bottleneck": annotation_bottleneck(result),
    }
