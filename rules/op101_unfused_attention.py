"""OP101: attention computed as matmul → softmax → matmul with materialized scores."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import prod

import numpy as np

from traceadvisor import Finding, Rule, Severity, Trace
from traceadvisor.rules_api import Capability, evidence_from, location_of, parse_raw

SOFTMAX_OPS = {"aten::softmax", "aten::_softmax", "aten::_safe_softmax"}
SOFTMAX_BWD_OPS = {"aten::_softmax_backward_data"}
MATMUL_OPS = {"aten::bmm", "aten::baddbmm", "aten::matmul", "aten::mm"}
SDPA_MARKERS = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")


@dataclass(frozen=True)
class Options:
    min_seq: int = 128  # score matrices smaller than this (L or S) are not worth a fused kernel
    min_share_pct: float = 5.0  # report only when the score path takes this share of kernel time
    flash_efficiency: float = 0.4  # share of the tensor-core peak a fused attention kernel reaches


def _peak(trace: Trace, dtype: str) -> float | None:
    """Dense tensor-core FLOP/s for the attention's dtype (``bf16``, ``fp16``; fp32 runs as TF32) from
    the shared peak table (``traceadvisor/roofline/gpus.py``; a device profile or configuration
    replaces it). Falls back to fp16 (no bf16 before sm80) and to the fp32 rate (no TF32)."""
    peaks = trace.roofline.peaks
    if peaks is None:
        return None
    f = peaks.flops
    if dtype in ("bf16", "fp16"):
        return f.get(dtype) or f.get("fp16")
    return f.get("tf32") or f.get("fp32")


class UnfusedAttention(Rule):
    """Attention is computed with materialized score matrices instead of a fused SDPA kernel.

    ## Why it matters
    `softmax(Q·Kᵀ)·V` written as two matmuls and a softmax writes the full L×S score matrix (and
    its softmax, mask, dropout and gradients) to memory for every head: O(L·S) traffic and memory
    that a fused flash-attention kernel never materializes. Fused kernels are several times faster
    at long sequence lengths and need far less activation memory.

    ## How it shows up in a trace
    A softmax op (`aten::softmax`/`_softmax`) whose input ends in an L×S score matrix
    (L, S ≥ `min_seq`), with `bmm`/`matmul`/`baddbmm` ops that produce or consume matrices of that
    shape, and no SDPA / flash / efficient / cuDNN attention op in the trace's launching ops. The
    score path is the GPU time of the kernels launched by ops that read or write score-shaped
    tensors: the two matmuls, softmax, the elementwise ops on the scores, and their backward. The
    saving is that time minus a fused estimate: 4·B·H·L·S·D FLOPs forward (plus 2.5× for the
    backward when a softmax backward is present) at `flash_efficiency` of the tensor-core peak.

    ## How to fix
    Replace the matmul/softmax/matmul block with
    `torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)` (or pass
    `attn_mask`); it dispatches to flash, memory-efficient or cuDNN attention kernels. In
    Hugging Face models set `attn_implementation="sdpa"` (or `"flash_attention_2"`).

    ## Options
    - `min_seq`: minimum L and S of the score matrix.
    - `min_share_pct`: report only when the score path takes at least this share of kernel time.
    - `flash_efficiency`: share of the tensor-core peak assumed for the fused kernel (default 0.4).

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html
    - https://arxiv.org/abs/2205.14135 (FlashAttention)
    - https://pytorch.org/tutorials/intermediate/scaled_dot_product_attention_tutorial.html
    """

    code = "OP101"
    name = "unfused-attention"
    severity = Severity.medium
    requires = frozenset({Capability.gpu, Capability.shapes, Capability.peaks})
    Options = Options

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts: Options = self.options
        ops = trace.ops
        k = trace.kernels
        if not len(ops) or not len(k):
            return
        names = ops["name"].astype(str)
        if names.str.contains("|".join(SDPA_MARKERS)).any():
            return
        soft = ops[names.isin(SOFTMAX_OPS)]
        scores: set[tuple[int, int, int]] = set()  # (batch·heads, L, S)
        dtype = "fp32"
        for dims_raw, types_raw in zip(soft["input_dims"], soft["input_types"], strict=True):
            dims = parse_raw(dims_raw)
            if not dims or not dims[0] or len(dims[0]) < 3:
                continue
            shape = dims[0]
            if shape[-1] >= opts.min_seq and shape[-2] >= opts.min_seq:
                scores.add((prod(shape[:-2]), shape[-2], shape[-1]))
                types = [str(t) for t in parse_raw(types_raw) or []]
                dtype = "bf16" if "c10::BFloat16" in types else "fp16" if "c10::Half" in types else dtype
        if not scores:
            return
        k = k[k["op"] >= 0]
        launching_rows = np.unique(k["op"].to_numpy())
        launching = trace.host.loc[launching_rows]
        score_rows: list[int] = []
        fwd_flops = 0.0
        has_bwd = False
        matmuls = 0
        for row, name, dims_raw in zip(
            launching.index, launching["name"].astype(str), launching["input_dims"], strict=True
        ):
            dims = parse_raw(dims_raw)
            if not dims:
                continue
            shapes = [d for d in dims if isinstance(d, list) and len(d) >= 2 and all(isinstance(x, int) for x in d)]
            hit = False
            if name in MATMUL_OPS and len(shapes) >= 2:
                a, b = shapes[-2], shapes[-1]
                out = (prod(a[:-2]) if len(a) > 2 else 1, a[-2], b[-1])
                ins = [(prod(s[:-2]) if len(s) > 2 else 1, s[-2], s[-1]) for s in (a, b)]
                for bh, lq, sk in scores:
                    if out == (bh, lq, sk):  # Q·Kᵀ produces the scores
                        hit = True
                        fwd_flops += 2.0 * bh * lq * sk * a[-1]
                    elif any(i in ((bh, lq, sk), (bh, sk, lq)) for i in ins):  # P·V and the backward
                        hit = True
                if hit:
                    matmuls += 1
            elif shapes:
                s = shapes[0]
                key = (prod(s[:-2]) if len(s) > 2 else 1, s[-2], s[-1])
                hit = key in scores
                if hit and name in SOFTMAX_BWD_OPS:
                    has_bwd = True
            if hit:
                score_rows.append(int(row))
        if not score_rows or matmuls < 2:
            return
        mine = k[k["op"].isin(score_rows)]
        path_ns = float(mine["dur_ns"].sum())
        kernel_ns = float(k["dur_ns"].sum())
        share = 100.0 * path_ns / kernel_ns if kernel_ns else 0.0
        if share < opts.min_share_pct:
            return
        # With a backward, dP = dO·Vᵀ also produces score-shaped output: halve to keep Q·Kᵀ only.
        if has_bwd:
            fwd_flops /= 2.0
        # P·V has the same FLOPs as Q·Kᵀ; the fused backward does about 2.5× the forward.
        flops = 2.0 * fwd_flops * (3.5 if has_bwd else 1.0)
        peak = _peak(trace, dtype)
        if not peak:
            return
        fused_ns = flops / (opts.flash_efficiency * peak) * 1e9
        saving = max(0.0, path_ns - fused_ns)
        bh, lq, sk = max(scores, key=lambda t: t[0] * t[1] * t[2])
        first = trace.host.loc[score_rows[0]]
        location = location_of(trace, int(first["pid"]), int(first["tid"]), int(first["ts_ns"]))
        yield self.finding(
            trace,
            message=(
                f"Attention materializes {lq}×{sk} score matrices ({bh} batch·heads): matmul → softmax → matmul "
                f"and their elementwise/backward ops take {path_ns / 1e3:.1f} µs ({share:.0f}% of kernel time) "
                f"without a fused SDPA kernel."
            ),
            recommendation=(
                "Use torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) (or attn_mask=...) "
                "instead of matmul/softmax/matmul."
            ),
            impact_ns=saving,
            basis=(
                f"score-path kernel time minus a fused kernel at {opts.flash_efficiency:.0%} of the "
                f"{dtype if dtype != 'fp32' else 'TF32'} tensor-core peak ({peak / 1e12:.0f} TFLOP/s; "
                f"{flops / 1e9:.0f} GFLOP)"
            ),
            evidence=evidence_from(mine),
            location=location,
            data={"score_path_us": path_ns / 1e3, "fused_us": fused_ns / 1e3, "backward": has_bwd, "L": lq, "S": sk},
        )
