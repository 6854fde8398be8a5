"""OP301: the loss over a large vocabulary runs in fp32, eagerly, and takes a large share of GPU time."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import prod

import numpy as np
import pandas as pd

from traceadvisor.rules_api import (
    MAX_INPUT_LINKS,
    Capability,
    Finding,
    Rule,
    Severity,
    Trace,
    category_mask,
    evidence_from,
    fmt_ns,
    op_location,
    parse_raw,
    pct,
    per_step,
    replay_basis,
    roofline_of,
    scenario_saving,
    us,
)

LOSS_OPS = ("aten::_log_softmax", "aten::log_softmax")
RECOMMENDATION = (
    "Compute the loss without an fp32 copy of the logits: torch.compile the loss (or the model with it), "
    "or use a fused / chunked cross-entropy (e.g. Liger Kernel's LigerFusedLinearCrossEntropyLoss)."
)
BASIS = "the loss's kernels on logits-sized tensors replaced by a fused cross-entropy reading the bf16 logits once"


@dataclass(frozen=True)
class Options:
    min_vocab: int = 8192  # a log_softmax over a last dim this large is a loss over a vocabulary
    min_share_pct: float = 10.0  # report only when the loss's kernels take this share of kernel time
    min_saving_pct: float = 2.0  # ... and the replayed saving is this share of the step


def _logits(ops: pd.DataFrame, min_vocab: int) -> tuple[int, int, str, int] | None:
    """(elements, vocabulary, dtype, host row) of the largest log_softmax input over a last dim ≥
    ``min_vocab``; None without one (or without shapes)."""
    loss = ops[category_mask(ops["name"], lambda n: n.isin(LOSS_OPS))]
    best: tuple[int, int, str, int] | None = None
    for row, dims_raw, types_raw in zip(
        loss.index.tolist(), loss["input_dims"].to_numpy(), loss["input_types"].to_numpy(), strict=True
    ):
        dims, types = parse_raw(dims_raw), parse_raw(types_raw)
        shape = dims[0] if isinstance(dims, list) and dims and isinstance(dims[0], list) else None
        if shape and len(shape) >= 2 and shape[-1] >= min_vocab and (best is None or prod(shape) > best[0]):
            best = (int(prod(shape)), int(shape[-1]), str(types[0]) if types else "", int(row))
    return best


class CrossEntropy(Rule[Options]):
    """The cross-entropy over a large vocabulary materializes fp32 logits and their gradient.

    ## Why it matters
    A language model's loss `F.cross_entropy(logits.float(), targets)` over a 50k vocabulary
    casts the bf16 logits (tokens × vocabulary) to an fp32 copy, runs `log_softmax` over it,
    writes a zero-filled fp32 gradient, runs the `log_softmax` backward and casts the gradient
    back: five or more full passes over the largest tensor of the step, all memory-bound. On a
    small GPT trainer (6 × 384, vocabulary 50,257) these kernels took 44% of GPU time. A fused or
    chunked cross-entropy reads the bf16 logits once to compute the loss and once more to write
    the gradient.

    ## How it shows up in a trace
    Needs `record_shapes` and a known GPU. A `log_softmax` on fp32 whose input's last dim is at
    least `min_vocab` marks the loss (on bf16 logits there is no fp32 copy to remove); its
    kernels are the non-GEMM kernels (casts, log_softmax, fills, the backward) whose input or
    output has as many elements as the logits. The rule
    reports when they take at least `min_share_pct` of the kernel time and the replayed saving
    (scenario `fused-cross-entropy`, `traceadvisor whatif`: those kernels replaced by passes over
    the bf16 logits, 2 bytes each forward and 4 backward, at the bandwidth the trace's big kernels
    reach) is at least `min_saving_pct` of the predicted unprofiled step. A host-bound step gains
    nothing from faster loss kernels: the replay says so and the rule stays silent (compiling the
    loss of such a trainer measured 5% slower on an H100).

    ## How to fix
    `torch.compile` the loss (or the model including it): Inductor fuses the cast, the
    log-sum-exp and the gradient into a few kernels and never materializes fp32 logits. Or use a
    fused / chunked cross-entropy (Liger Kernel's `LigerCrossEntropyLoss` or
    `LigerFusedLinearCrossEntropyLoss`, which also avoids materializing the logits). Do not
    cast the logits to fp32 yourself: `F.cross_entropy` on bf16 logits accumulates in fp32.

    ## Options
    - `min_vocab`: the last dim of a log_softmax input that marks a loss over a vocabulary.
    - `min_share_pct`: report only when the loss's kernels take at least this share of kernel time.
    - `min_saving_pct`: report only when the replayed saving is at least this share of the
      predicted unprofiled step.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.functional.cross_entropy.html
    - https://github.com/linkedin/Liger-Kernel (fused linear cross-entropy)
    - https://pytorch.org/docs/stable/generated/torch.compile.html
    """

    code = "OP301"
    name = "cross-entropy"
    severity = Severity.medium
    requires = frozenset({Capability.gpu, Capability.shapes, Capability.peaks})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        logits = _logits(trace.ops, opts.min_vocab) if len(trace.ops) else None
        if logits is None:
            return
        numel, vocab, dtype, row = logits
        if dtype != "float":  # bf16/fp16 logits: no fp32 copy to remove
            return
        k = roofline_of(trace).kernels
        k = k[trace.step_of(k["ts_ns"].to_numpy()) >= 0]
        cols = ["out_numel", *[f"in_numel_{i}" for i in range(MAX_INPUT_LINKS)]]
        mine = k[np.isin(k[cols].to_numpy(), [numel]).any(axis=1) & (k["op_class"] != "matmul").to_numpy()]
        loss_ns, kernel_ns = float(mine["dur_ns"].sum()), float(k["dur_ns"].sum())
        share = pct(loss_ns, kernel_ns)
        if share < opts.min_share_pct:
            return
        saving = scenario_saving(trace, "fused-cross-entropy")
        if not saving.reaches(opts.min_saving_pct):
            return
        steps = max(1, len(trace.steps.table))
        yield self.finding(
            trace,
            message=(
                f"The loss over a {vocab}-word vocabulary runs on fp32 logits ({numel / 1e6:.0f} M elements): "
                f"its {len(mine) // steps} casts, log_softmax, fills and backward kernels per step take "
                f"{fmt_ns(loss_ns / steps)} per step ({share:.0f}% of kernel time in the steps)."
            ),
            recommendation=RECOMMENDATION,
            per_step=per_step(saving),
            basis=replay_basis(saving, BASIS),
            evidence=evidence_from(trace.kernels.loc[mine.index], category="kernel"),
            location=op_location(trace, row),
            data={"vocab": vocab, "logits": numel, "loss_us": us(loss_ns), "share_pct": share},
        )
