"""OP101: attention computed as matmul → softmax → matmul with materialized scores."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np
import pandas as pd

from traceadvisor.rules_api import (
    Capability,
    Finding,
    Rule,
    Severity,
    Trace,
    category_mask,
    distinct_signatures,
    evidence_from,
    fmt_ns,
    names_at,
    op_location,
    parse_raw,
    pct,
    per_step,
    replay_basis,
    scenario_saving,
    us,
)

SOFTMAX_OPS = {"aten::softmax", "aten::_softmax", "aten::_safe_softmax"}
SOFTMAX_BWD_OPS = {"aten::_softmax_backward_data"}
MATMUL_OPS = {"aten::bmm", "aten::baddbmm", "aten::matmul", "aten::mm"}
SDPA_MARKERS = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")
Score = tuple[int, int, int]  # (batch·heads, L, S) of a score matrix
RECOMMENDATION = (
    "Use torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) (or attn_mask=...) "
    "instead of matmul/softmax/matmul."
)


@dataclass(frozen=True)
class Options:
    min_seq: int = 128  # score matrices smaller than this (L or S) are not worth a fused kernel
    min_share_pct: float = 5.0  # report only when the score path takes this share of kernel time
    min_saving_pct: float = 1.0  # report only when the replayed saving is this share of the step


def _unfused_scores(ops: pd.DataFrame, min_seq: int) -> tuple[set[Score], str]:
    """The score matrices the softmax ops read and the attention's dtype (``_score_shapes``); none
    when a fused attention op (SDPA, flash, memory-efficient, cuDNN) ran."""
    names = ops["name"]
    if category_mask(names, lambda n: n.str.contains("|".join(SDPA_MARKERS))).any():
        return set(), "fp32"
    return _score_shapes(ops[category_mask(names, lambda n: n.isin(SOFTMAX_OPS))], min_seq)


def _score_shapes(soft: pd.DataFrame, min_seq: int) -> tuple[set[Score], str]:
    """The (batch·heads, L, S) score matrices the softmax ops read (L, S ≥ ``min_seq``), and the
    attention's dtype: that of the last such softmax in 16 bits (``bf16``/``fp16``), else ``fp32``."""
    if not len(soft):
        return set(), "fp32"
    dims_col, types_col = soft["input_dims"].to_numpy(), soft["input_types"].to_numpy()
    sig, _ = distinct_signatures(soft, np.arange(len(soft)), ("input_dims", "input_types"))
    scores: set[Score] = set()
    labels: list[str] = []
    # Signatures in order of first appearance, so the set is filled in the order of the ops.
    for p in np.unique(sig, return_index=True)[1]:
        dims = parse_raw(dims_col[p])
        label = ""
        if dims and dims[0] and len(dims[0]) >= 3:
            shape = dims[0]
            if shape[-1] >= min_seq and shape[-2] >= min_seq:
                scores.add((prod(shape[:-2]), shape[-2], shape[-1]))
                types = [str(t) for t in parse_raw(types_col[p]) or []]
                label = "bf16" if "c10::BFloat16" in types else "fp16" if "c10::Half" in types else ""
        labels.append(label)
    per_op = np.array(labels, dtype=object)[sig]
    sixteen = np.flatnonzero(per_op != "")
    return scores, str(per_op[sixteen[-1]]) if len(sixteen) else "fp32"


@dataclass(frozen=True, slots=True)
class ScoreRole:
    """What an op with given inputs does to the score matrices."""

    hit: bool = False  # reads or writes score-shaped tensors: on the score path
    matmul: bool = False  # a matrix product on the score path (Q·Kᵀ, P·V or their backward)
    softmax_bwd: bool = False  # the softmax backward of the scores


def _batched(shape: list[int]) -> Score:
    """(batch, rows, cols) of a matrix or a batch of matrices."""
    return prod(shape[:-2]) if len(shape) > 2 else 1, shape[-2], shape[-1]


def _score_role(name: str, dims_raw: Any, scores: set[Score]) -> ScoreRole:
    dims = parse_raw(dims_raw)
    if not dims:
        return ScoreRole()
    shapes = [d for d in dims if isinstance(d, list) and len(d) >= 2 and all(isinstance(x, int) for x in d)]
    if name in MATMUL_OPS and len(shapes) >= 2:
        a, b = shapes[-2], shapes[-1]
        out = (_batched(a)[0], a[-2], b[-1])
        ins = (_batched(a), _batched(b))
        hit = False
        for bh, lq, sk in scores:
            if out == (bh, lq, sk):  # Q·Kᵀ produces the scores
                hit = True
            elif any(i in ((bh, lq, sk), (bh, sk, lq)) for i in ins):  # P·V and the backward
                hit = True
        return ScoreRole(hit=hit, matmul=hit)
    if shapes:  # softmax, the elementwise ops on the scores (mask, scale, dropout) and their backward
        hit = _batched(shapes[0]) in scores
        return ScoreRole(hit=hit, softmax_bwd=hit and name in SOFTMAX_BWD_OPS)
    return ScoreRole()


class UnfusedAttention(Rule[Options]):
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
    saving is a what-if replay (scenario `sdpa`, `traceadvisor whatif`): each run of score-path
    kernels becomes one flash-attention kernel doing the run's matmul FLOPs (5/4 of them for the
    backward, which recomputes Q·Kᵀ) at 0.6 of the FLOP/s the trace's own GEMMs reach (cuDNN's
    flash kernels against the projections' GEMMs on an H100), and the run's eager ops one
    dispatch; the replayed unprofiled step before minus after.

    ## How to fix
    Replace the matmul/softmax/matmul block with
    `torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)` (or pass
    `attn_mask`); it dispatches to flash, memory-efficient or cuDNN attention kernels. In
    Hugging Face models set `attn_implementation="sdpa"` (or `"flash_attention_2"`).

    ## Options
    - `min_seq`: minimum L and S of the score matrix.
    - `min_share_pct`: report only when the score path takes at least this share of kernel time.
    - `min_saving_pct`: report only when the replayed saving is at least this share of the
      predicted unprofiled step (default 1%).

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html
    - https://arxiv.org/abs/2205.14135 (FlashAttention)
    - https://pytorch.org/tutorials/intermediate/scaled_dot_product_attention_tutorial.html
    """

    code = "OP101"
    name = "unfused-attention"
    severity = Severity.medium
    requires = frozenset({Capability.gpu, Capability.shapes, Capability.peaks})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        ops, k = trace.ops, trace.kernels
        if not len(ops) or not len(k):
            return
        scores, dtype = _unfused_scores(ops, opts.min_seq)
        if not scores:
            return
        k = k[k["op"].to_numpy() >= 0]
        path = _score_path(trace.host, k, scores)
        if not path.rows or path.matmuls < 2:
            return
        mine = k[k["op"].isin(path.rows)]
        path_ns = float(mine["dur_ns"].sum())
        share = pct(path_ns, float(k["dur_ns"].sum()))
        if share < opts.min_share_pct:
            return
        saving = scenario_saving(trace, "sdpa")
        if not saving.reaches(opts.min_saving_pct):
            return
        bh, lq, sk = max(scores, key=lambda t: t[0] * t[1] * t[2])
        yield self.finding(
            trace,
            message=(
                f"Attention materializes {lq}×{sk} score matrices ({bh} batch·heads): matmul → softmax → matmul "
                f"and their elementwise/backward ops take {fmt_ns(path_ns)} ({share:.0f}% of all kernel "
                f"time in the trace) "
                f"without a fused SDPA kernel."
            ),
            recommendation=RECOMMENDATION,
            per_step=per_step(saving),
            basis=replay_basis(saving, f"score-path kernels ({dtype}) replaced by one flash-attention kernel per run"),
            evidence=evidence_from(mine),
            location=op_location(trace, path.rows[0]),
            data={"score_path_us": us(path_ns), "backward": path.backward, "L": lq, "S": sk},
        )


@dataclass(frozen=True)
class ScorePath:
    """The launching ops on the score path and what a fused kernel would compute instead."""

    rows: list[int]  # host rows of the ops that read or write score-shaped tensors, in row order
    matmuls: int  # matrix products among them
    backward: bool  # a softmax backward of the scores ran


def _score_path(host: pd.DataFrame, k: pd.DataFrame, scores: set[Score]) -> ScorePath:
    """The score path among the ops that launched kernels ``k``. Each distinct (name, input dims)
    is read once: a model repeats its layers' shapes in every step."""
    launching_rows = np.unique(k["op"].to_numpy())
    pos = host.index.get_indexer(launching_rows)
    launching_rows, pos = launching_rows[pos >= 0], pos[pos >= 0]
    sig, first = distinct_signatures(host, pos, ("input_dims",))
    dims_col = host["input_dims"].to_numpy()
    roles = [_score_role(n, dims_col[p], scores) for n, p in zip(names_at(host, first), first, strict=True)]
    count = np.bincount(sig, minlength=len(roles)).astype(np.float64)  # ops per signature
    hit = np.array([r.hit for r in roles], dtype=bool)
    return ScorePath(
        rows=launching_rows[hit[sig]].tolist(),
        matmuls=int(count[np.array([r.matmul for r in roles], dtype=bool)].sum()),
        backward=any(r.softmax_bwd for r in roles),
    )
