"""Triton fused softmax over the rows of a matrix, against the unfused eager version.

The kernel of Triton's second tutorial: one program per row loads the row once, subtracts its
maximum, exponentiates, normalises and writes the row once. ``--impl naive`` computes the same
softmax in five eager operations (max, subtract, exp, sum, divide), each a kernel that reads and
writes the whole matrix; ``--impl torch`` is ``torch.softmax`` (a fused CUDA kernel).

## Lesson
Fusion is what makes memory-bound work fast: the fused kernel moves each element twice (one read,
one write), the eager chain about eight times, and launches five kernels instead of one. Same
FLOPs, several times the time.

## What analyze should say
Triton: ``softmax_kernel`` is the top kernel, one launch per step, memory-bound in the roofline
with its launch records (bytes = input + output). Naive: five elementwise and reduction kernels
per step (max, sub, exp, sum, div) share the GPU time, each memory-bound: fuse them (the Triton
kernel, ``torch.softmax`` or ``torch.compile``).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

from traceadvisor.workloads import harness

NAME = "softmax"
IMPLS = ("triton", "naive", "torch")


def parser() -> argparse.ArgumentParser:
    """Options: ``--rows``, ``--cols``, ``--impl``, and the common ones."""
    p = harness.parser(NAME, __doc__)
    p.add_argument("--rows", type=harness.positive_int, default=None, help="rows (default 8192 on GPU, 16 on CPU)")
    p.add_argument("--cols", type=harness.positive_int, default=None, help="columns (default 4096 on GPU, 96 on CPU)")
    p.add_argument("--impl", choices=IMPLS, default="triton", help="triton (fused, default), naive (eager) or torch")
    return p


@functools.cache
def kernel(interpreted: bool) -> Any:
    """The jitted ``softmax_kernel`` (built once per Triton mode)."""
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0)  # subtracting the maximum keeps exp from overflowing
        num = tl.exp(x)
        tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)

    return softmax_kernel


def softmax(x: Any) -> Any:
    """Row softmax of a 2-D tensor with the Triton kernel (a whole row fits in one block)."""
    import torch

    triton = harness.triton_for(x.device.type)
    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    # More warps for longer rows, as the tutorial does, so each thread holds a few elements.
    warps = 16 if block >= 8192 else 8 if block >= 2048 else 4
    out = torch.empty_like(x)
    kernel(harness.interpreting())[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=block, num_warps=warps)
    return out


def naive_softmax(x: Any) -> Any:
    """Row softmax in five eager operations (each reads and writes the whole matrix)."""
    m = x.max(dim=1, keepdim=True).values
    z = x - m
    num = z.exp()
    den = num.sum(dim=1, keepdim=True)
    return num / den


def build(args: argparse.Namespace) -> harness.Step:
    """Allocate the matrix, check one result against ``torch.softmax``, return one iteration."""
    import torch

    dev = harness.device(args.device)
    harness.triton_for(dev)
    harness.seed(args.seed)
    rows = harness.pick(dev, args.rows, 8192, 16)
    cols = harness.pick(dev, args.cols, 4096, 96)
    x = torch.randn(rows, cols, device=dev)
    impls: dict[str, Callable[[Any], Any]] = {
        "triton": softmax,
        "naive": naive_softmax,
        "torch": lambda t: torch.softmax(t, dim=1),
    }
    fn = impls[args.impl]
    harness.check(f"{args.impl} softmax", fn(x), torch.softmax(x, dim=1), atol=1e-6, rtol=1e-4)

    def step() -> object:
        return fn(x)

    return step


def main(argv: list[str]) -> None:
    """Run the workload as ``traceadvisor capture --workload softmax [ARGS]`` does."""
    harness.main(parser, build, argv)
