"""Self-attention through ``F.scaled_dot_product_attention``: the fused (flash) attention kernel.

The same layer as ``attention-naive`` (``attention.py``), with the score, softmax and weighted
sum replaced by one ``scaled_dot_product_attention`` call, labelled as such. On an H100 in bf16
PyTorch dispatches it to a flash-attention kernel (cuDNN or FlashAttention-2) that keeps the
scores on chip.

## Lesson
The fix for the naive workload, measured: one kernel instead of four passes over a
``seq × seq`` matrix, no O(seq²) memory, and the layer's time goes back to the projections and
the attention FLOPs.

## What analyze should say
The annotation table shows ``scaled_dot_product_attention`` with a much smaller share than the
naive workload's ``scores`` + ``softmax`` + ``weighted_sum``, and the projections take a larger
share of a shorter step; the unfused-attention rule (OP101) does not fire. The top kernel is a
flash-attention kernel (``flash_fwd…`` or ``cudnn…``), compute-bound in the roofline.
"""

from __future__ import annotations

import argparse

from traceadvisor.workloads import attention, harness

NAME = "attention-sdpa"


def parser() -> argparse.ArgumentParser:
    """Options: batch, sequence length, heads, head size, causal mask, and the common ones."""
    return attention.parser(NAME, __doc__)


def build(args: argparse.Namespace) -> harness.Step:
    """The attention layer with the fused SDPA kernel (see ``attention.build``)."""
    return attention.build(args, "sdpa")


def main(argv: list[str]) -> None:
    """Run the workload as ``traceadvisor capture --workload attention-sdpa [ARGS]`` does."""
    harness.main(parser, build, argv)
