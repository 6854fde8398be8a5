"""The report's annotations section: time per top-level user annotation, and which one is the
bottleneck with what to do about it.

The analysis (``analyses/annotation_time.py``) gives the numbers; the advice is the report's to say.
"""

from __future__ import annotations

import re

import pandas as pd

from traceadvisor.analyses.annotation_time import AnnotationTime, annotation_time
from traceadvisor.report.model import AnnotationRow, AnnotationSummary, Bottleneck
from traceadvisor.trace.model import Trace

# Advice for component names that say what they compute (the reference workloads' labels and
# PyTorch's own annotations), first match wins. Why each: attention's score matrix is O(seq²)
# memory traffic that a fused kernel never writes (FlashAttention, Dao et al. 2022); projections
# are GEMMs whose speed is the tensor-core rate of their dtype; optimizer and zero_grad advice
# follows torch.optim's docs (fused/foreach implementations, set_to_none).
_ADVICE: tuple[tuple[re.Pattern[str], str], ...] = (
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
        re.compile(r"^nccl:|^c10d::|^gloo:|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all", re.I),
        "Communication: its time is mostly waiting for the other ranks and the transfer, not compute here. "
        "Overlap it with compute (DDP's bucketed all-reduce during backward, FSDP prefetch), look for a "
        "straggling rank, or communicate less (no_sync() under gradient accumulation, bf16 gradients).",
    ),
    (
        re.compile(r"CompiledFxGraph"),
        "A torch.compile graph: look at its top kernels; mode='max-autotune' tunes its matmuls.",
    ),
)
_GENERIC_ADVICE = "Look inside it: nest record_function labels around its parts, or read its top kernels."
_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
# Optimizer advice where the trace shows a multi-tensor implementation already runs: its aten ops
# are named _fused_<optimizer>_ (fused=True) and _foreach_<op> (foreach=True, torch.optim's default
# on CUDA since 2.0), so recommending either where its ops run is advice the trace contradicts.
_OPTIMIZER_FUSED_RUNS = (
    "The optimizer already runs fused kernels (aten::_fused_*): its time is the parameters' bytes; "
    "only fewer or lower-precision optimizer states, or stepping less often, make it faster."
)
_OPTIMIZER_FOREACH_RUNS = (
    "The optimizer already runs foreach kernels (aten::_foreach_*): fused=True (e.g. AdamW(..., fused=True)) "
    "does the whole update in one kernel per group of tensors instead of one per elementwise step."
)
# The Bottleneck line is named only when the top-level annotations hold at least this share of the
# time (GPU time of the work launched in the steps, or CPU time): below it, most of the time is
# outside every annotation, and the largest annotation is not where the time goes.
MIN_ANNOTATED_PCT = 50.0
FUSED_MARK, FOREACH_MARK = "_fused_", "_foreach_"


def annotation_advice(name: str, in_use: frozenset[str] = frozenset()) -> str:
    """What to do about an annotation that takes the most time, from what its name says it computes,
    never recommending what runs already (``in_use``: the multi-tensor marks, ``_fused_`` or
    ``_foreach_``, of ops the trace shows)."""
    if _OPTIMIZER_STEP.search(name) and FUSED_MARK in in_use:
        return _OPTIMIZER_FUSED_RUNS
    if _OPTIMIZER_STEP.search(name) and FOREACH_MARK in in_use:
        return _OPTIMIZER_FOREACH_RUNS
    for pattern, text in _ADVICE:
        if pattern.search(name):
            return text
    return _GENERIC_ADVICE


def annotated_pct(result: AnnotationTime) -> float:
    """The share of the time (``total_ns``) inside top-level annotations."""
    return 100.0 * (result.total_ns - result.unannotated_ns) / result.total_ns if result.total_ns > 0 else 0.0


def annotation_bottleneck(result: AnnotationTime, in_use: frozenset[str] = frozenset()) -> Bottleneck | None:
    """The annotation with the most time and the advice for it; None when every annotation took 0,
    or when the annotations hold less than ``MIN_ANNOTATED_PCT`` of the time (the bottleneck may
    then be anywhere outside them)."""
    if not len(result.table) or int(result.table["time_ns"].iloc[0]) <= 0:
        return None
    if annotated_pct(result) < MIN_ANNOTATED_PCT:
        return None
    row = result.table.iloc[0]
    name, share = str(row["name"]), float(row["share_pct"])
    tip = annotation_advice(name, in_use)
    basis = "" if result.basis == "gpu" else " (CPU time)"
    return Bottleneck(name, share, tip, f"Bottleneck{basis}: {name} ({share:.0f}%). {tip}")


def multi_tensor_in_use(trace: Trace) -> frozenset[str]:
    """Which multi-tensor marks (``_fused_``, ``_foreach_``) the names of the trace's ops hold."""
    names = trace.ops["name"]
    cats = names.cat.categories if isinstance(names.dtype, pd.CategoricalDtype) else pd.Index(names.unique())
    text = cats.astype(str)
    return frozenset(m for m in (FUSED_MARK, FOREACH_MARK) if bool(text.str.contains(m, regex=False).any()))


def annotation_summary(trace: Trace) -> AnnotationSummary | None:
    """``traces[].annotations`` (times in µs, exact to the ns); None without user annotations."""
    result = annotation_time(trace)
    if result is None:
        return None
    t = result.table
    return AnnotationSummary(
        basis=result.basis,
        total_us=result.total_ns / 1000.0,
        unannotated_us=result.unannotated_ns / 1000.0,
        unannotated_pct=100.0 * result.unannotated_ns / result.total_ns if result.total_ns > 0 else 0.0,
        rows=tuple(
            AnnotationRow(name, int(ns) / 1000.0, float(share), int(calls))
            for name, ns, share, calls in zip(t["name"], t["time_ns"], t["share_pct"], t["calls"], strict=True)
        ),
        bottleneck=annotation_bottleneck(result, multi_tensor_in_use(trace)),
    )
