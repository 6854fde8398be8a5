"""Self-attention written out by hand: the ``seq × seq`` score matrix is materialised in memory.

``scores = q kᵀ / √d`` (a batched matmul and a scaling pass), ``softmax(scores)``, then
``weights v``: every step writes and reads two ``batch × heads × seq × seq`` tensors (512 MiB each
in bf16 at the default sizes), which is exactly what a fused attention kernel avoids. The layer
(``attention.py``) labels ``qkv_projection``, ``scores``, ``softmax``, ``weighted_sum`` and
``output_projection``.

## Lesson
Attention's cost grows with the square of the sequence length, and when the score matrix is
materialised that cost is memory traffic, not FLOPs: at seq 2048 the score and softmax passes
take most of the layer's GPU time although the projections do comparable FLOPs. The fix is not a
faster matmul but not writing the matrix at all: ``F.scaled_dot_product_attention``.

## What analyze should say
The annotation table names ``scores`` or ``softmax`` as the bottleneck (the two passes over the
seq × seq matrix; which is larger depends on the GPU: softmax took 42% on an H200) and advises
``scaled_dot_product_attention``; the unfused-attention rule (OP101, needs ``record_shapes``)
fires on the bmm → softmax → bmm chain. Compare with the ``attention-sdpa`` workload's trace.
"""

from __future__ import annotations

import argparse

from traceadvisor.workloads import attention, harness

NAME = "attention-naive"


def parser() -> argparse.ArgumentParser:
    """Options: batch, sequence length, heads, head size, causal mask, and the common ones."""
    return attention.parser(NAME, __doc__)


def build(args: argparse.Namespace) -> harness.Step:
    """The attention layer with the materialised score matrix (see ``attention.build``)."""
    return attention.build(args, "naive")


def main(argv: list[str]) -> None:
    """Run the workload as ``traceadvisor capture --workload attention-naive [ARGS]`` does."""
    harness.main(parser, build, argv)
