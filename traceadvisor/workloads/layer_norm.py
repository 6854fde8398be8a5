"""Triton layer normalisation (forward) over the rows of an fp16 matrix.

The forward kernel of Triton's layer-norm tutorial: one program per row computes the row's mean
and variance in fp32 over ``BLOCK``-wide chunks, then writes ``(x - mean) * rstd * w + b`` and
saves ``mean`` and ``rstd`` for a backward pass. ``--impl torch`` runs
``torch.nn.functional.layer_norm`` on the same tensors.

## Lesson
Normalisations do a handful of FLOPs per element: their time is the bytes they move (read x,
write y) divided by the bandwidth. The row is read three times, but only the first read comes
from DRAM; the others hit the L1/L2 caches, so the kernel still runs near the memory roof. Such
kernels are sped up by moving fewer bytes (fusing them with what comes before or after, or a
narrower dtype), not by more FLOP/s.

## What analyze should say
``layer_norm_fwd`` is the top kernel, one launch per step; with its launch records (bytes = x, y,
weight, bias, mean and rstd) it shows as memory-bound, close to the calibrated bandwidth.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from traceadvisor.workloads import harness

NAME = "layer-norm"
EPS = 1e-5


def parser() -> argparse.ArgumentParser:
    """Options: ``--rows``, ``--cols``, ``--impl``, and the common ones."""
    p = harness.parser(NAME, __doc__)
    p.add_argument("--rows", type=harness.positive_int, default=None, help="rows (default 8192 on GPU, 16 on CPU)")
    p.add_argument("--cols", type=harness.positive_int, default=None, help="columns (default 8192 on GPU, 200 on CPU)")
    p.add_argument("--impl", choices=("triton", "torch"), default="triton", help="triton (default) or torch")
    return p


@functools.cache
def kernel(interpreted: bool) -> Any:
    """The jitted ``layer_norm_fwd`` (built once per Triton mode)."""
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def layer_norm_fwd(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0)
        X += row * stride
        Y += row * stride
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            acc += tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / N
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
            x = tl.where(cols < N, x - mean, 0.0)
            acc += x * x
        rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        tl.store(Mean + row, mean)
        tl.store(Rstd + row, rstd)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            w = tl.load(W + cols, mask=mask)
            b = tl.load(B + cols, mask=mask)
            x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(Y + cols, (x - mean) * rstd * w + b, mask=mask)

    return layer_norm_fwd


def layer_norm(x: Any, weight: Any, bias: Any) -> Any:
    """Layer norm over the last dimension of a 2-D tensor with the Triton kernel."""
    import torch

    triton = harness.triton_for(x.device.type)
    rows, cols = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(rows, device=x.device, dtype=torch.float32)
    rstd = torch.empty(rows, device=x.device, dtype=torch.float32)
    # At most 64 KiB of the row per chunk (the tutorial's limit), more warps for wider chunks.
    block = min(65536 // x.element_size(), triton.next_power_of_2(cols))
    warps = min(max(block // 256, 1), 8)
    kernel(harness.interpreting())[(rows,)](
        x, y, weight, bias, mean, rstd, x.stride(0), cols, EPS, BLOCK=block, num_warps=warps
    )
    return y


def build(args: argparse.Namespace) -> harness.Step:
    """Allocate the input and parameters, check one result against torch, return one iteration."""
    import torch
    import torch.nn.functional as F

    dev = harness.device(args.device)
    harness.triton_for(dev)
    harness.seed(args.seed)
    rows = harness.pick(dev, args.rows, 8192, 16)
    cols = harness.pick(dev, args.cols, 8192, 200)
    dtype = torch.float16 if dev == "cuda" else torch.float32
    x = torch.randn(rows, cols, device=dev, dtype=dtype)
    weight = torch.rand(cols, device=dev, dtype=dtype)
    bias = torch.rand(cols, device=dev, dtype=dtype)

    def reference(t: Any) -> Any:
        return F.layer_norm(t, (cols,), weight, bias, EPS)

    def triton_impl(t: Any) -> Any:
        return layer_norm(t, weight, bias)

    fn = triton_impl if args.impl == "triton" else reference
    want = F.layer_norm(x.float(), (cols,), weight.float(), bias.float(), EPS)
    tol = 1e-2 if dtype == torch.float16 else 1e-4
    harness.check(f"{args.impl} layer norm", fn(x), want, atol=tol, rtol=tol)

    def step() -> object:
        return fn(x)

    return step


def main(argv: list[str]) -> None:
    """Run the workload as ``traceadvisor capture --workload layer-norm [ARGS]`` does."""
    harness.main(parser, build, argv)
