"""Triton vector add: ``out = x + y`` over large fp32 vectors, the memory-bound baseline.

The kernel of Triton's first tutorial: each program adds one block of 1024 elements. It does one
addition per 12 bytes moved, so its speed is set by memory bandwidth alone.

## Lesson
A custom Triton kernel has no aten operator behind it, so nothing in an ordinary trace says how
many bytes it moved: the Triton launch records of ``traceadvisor capture`` (a ``triton::add_kernel
grid=(..) bytes=..`` op around each launch) give the roofline its bytes. With them the kernel's
achieved bandwidth can be compared with the GPU's (``traceadvisor calibrate``): a well-written
elementwise kernel reaches 80-90% of it, and only fusing it with its neighbours makes it faster.

## What analyze should say
``add_kernel`` is the top kernel with nearly all of the GPU time; the GPU is busy through the
steps (no idle-gap or launch-overhead findings at the default size). With the launch records the
kernel shows as memory-bound, its bytes being three times the vector size in bytes per launch.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from traceadvisor.workloads import harness

NAME = "vector-add"
BLOCK = 1024


def parser() -> argparse.ArgumentParser:
    """Options: ``--n`` elements per vector, and the common ones."""
    p = harness.parser(NAME, __doc__)
    p.add_argument(
        "--n", type=harness.positive_int, default=None, help="elements per vector (default 2^26 on GPU, 4096 on CPU)"
    )
    return p


@functools.cache
def kernel(interpreted: bool) -> Any:
    """The jitted ``add_kernel`` (built once per Triton mode; see ``harness.interpreting``)."""
    import triton
    import triton.language as tl

    def metadata(grid: Any, _meta: Any, args: dict[str, Any]) -> dict[str, Any]:
        # One addition per element: what the launch records report as the kernel's FLOPs.
        return {"flops": int(args["n"])}

    @triton.jit(launch_metadata=metadata)  # type: ignore[untyped-decorator]
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + y, mask=mask)

    return add_kernel


def add(x: Any, y: Any, out: Any) -> Any:
    """``out = x + y`` with the Triton kernel (tensors on the same device, contiguous, same size)."""
    triton = harness.triton_for(x.device.type)
    n = x.numel()
    kernel(harness.interpreting())[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out


def build(args: argparse.Namespace) -> harness.Step:
    """Allocate the vectors, check one result against torch, return one iteration."""
    import torch

    dev = harness.device(args.device)
    harness.triton_for(dev)
    harness.seed(args.seed)
    n = harness.pick(dev, args.n, 1 << 26, 4096)
    x = torch.randn(n, device=dev)
    y = torch.randn(n, device=dev)
    out = torch.empty_like(x)
    harness.check("vector add", add(x, y, out), x + y, atol=0.0, rtol=0.0)

    def step() -> object:
        return add(x, y, out)

    return step


def main(argv: list[str]) -> None:
    """Run the workload as ``traceadvisor capture --workload vector-add [ARGS]`` does."""
    harness.main(parser, build, argv)
