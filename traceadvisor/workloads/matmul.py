"""Triton blocked matrix multiplication ``C = A @ B`` (fp16 by default), a compute-bound kernel.

The kernel of Triton's third tutorial: each program computes one ``BLOCK_M × BLOCK_N`` tile of C,
walking K in ``BLOCK_K`` steps with ``tl.dot`` (tensor cores) and an fp32 accumulator; programs
are ordered in groups of ``GROUP_M`` rows of tiles so that neighbouring programs reuse the same
tiles of A and B from the L2 cache. One fixed configuration per dtype replaces the tutorial's
autotuner, so the trace holds one kernel and no benchmarking launches. ``--dtype`` picks fp16,
bf16, tf32 (fp32 tensors, TF32 tensor-core products) or fp32 (IEEE fp32 products, no tensor
cores); ``--impl torch`` runs ``torch.matmul`` (cuBLAS) on the same tensors.

## Lesson
A matmul of this size does 2·M·N·K FLOPs on 2·(M·K + K·N + M·N) bytes: hundreds of FLOPs per
byte, far right of the ridge point, so its speed is set by the tensor cores and the precision
they run in. fp32 without TF32 runs on the CUDA cores at a fraction of the tensor-core rate.

## What analyze should say
``matmul_kernel`` is the top kernel; with its launch records (flops = 2·M·N·K, declared by the
kernel's ``launch_metadata``, bytes = A + B + C) it shows as compute-bound, and its achieved
FLOP/s can be compared with the calibrated matmul FLOP/s of its dtype. ``--dtype fp32 --impl
torch`` with TF32 off is what the fp32-matmul rule (PR101) flags.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from traceadvisor.workloads import harness

NAME = "matmul"
DTYPES = ("fp16", "bf16", "tf32", "fp32")
# On the CPU every Triton program is interpreted in Python: 2×2 tiles of 16, four K steps.
CPU_SIZE = {"m": 32, "n": 32, "k": 64}


def parser() -> argparse.ArgumentParser:
    """Options: ``--m``, ``--n``, ``--k``, ``--dtype``, ``--impl``, and the common ones."""
    p = harness.parser(NAME, __doc__)
    for dim in ("m", "n", "k"):
        p.add_argument(
            f"--{dim}",
            type=harness.positive_int,
            default=None,
            help=f"size (default 8192 on GPU, {CPU_SIZE[dim]} on CPU)",
        )
    p.add_argument("--dtype", choices=DTYPES, default="fp16", help="operand precision (default fp16)")
    p.add_argument("--impl", choices=("triton", "torch"), default="triton", help="triton (default) or torch (cuBLAS)")
    return p


@functools.cache
def kernel(interpreted: bool) -> Any:
    """The jitted ``matmul_kernel`` (built once per Triton mode)."""
    import triton
    import triton.language as tl

    def metadata(grid: Any, _meta: Any, args: dict[str, Any]) -> dict[str, Any]:
        # A multiply and an add per (m, n, k): the FLOPs the launch records report.
        return {"flops": 2 * int(args["M"]) * int(args["N"]) * int(args["K"])}

    @triton.jit(launch_metadata=metadata)  # type: ignore[untyped-decorator]
    def matmul_kernel(  # type: ignore[no-untyped-def]
        a_ptr,
        b_ptr,
        c_ptr,
        M,
        N,
        K,
        stride_am,
        stride_ak,
        stride_bk,
        stride_bn,
        stride_cm,
        stride_cn,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        pid = tl.program_id(0)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        # Grouped ordering: GROUP_M rows of tiles are finished before moving right, for L2 reuse.
        num_pid_in_group = GROUP_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))

    return matmul_kernel


def torch_dtype(name: str) -> Any:
    """The torch dtype of the operands for a ``--dtype`` name (tf32 and fp32 both hold fp32)."""
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32, "fp32": torch.float32}[name]


def matmul(a: Any, b: Any, precision: str = "tf32") -> Any:
    """``a @ b`` with the Triton kernel; ``precision`` (``tf32`` or ``ieee``) applies to fp32 operands."""
    import torch

    triton = harness.triton_for(a.device.type)
    (m, k), (_, n) = a.shape, b.shape
    c = torch.empty((m, n), device=a.device, dtype=a.dtype)
    if a.device.type == "cuda":
        # The tutorial's first CUDA configuration (128×256 tiles); fp32 tiles are twice as large
        # in shared memory, so K steps are halved to keep three pipeline stages within an SM's.
        block_m, block_n, block_k, warps, stages = 128, 256, 64 if a.element_size() == 2 else 32, 8, 3
    else:
        block_m, block_n, block_k, warps, stages = 16, 16, 16, 1, 1
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    kernel(harness.interpreting())[grid](
        a,
        b,
        c,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        GROUP_M=8,
        PRECISION=precision,
        num_warps=warps,
        num_stages=stages,
    )
    return c


def build(args: argparse.Namespace) -> harness.Step:
    """Allocate A and B, check one product against torch, return one iteration."""
    import torch

    dev = harness.device(args.device)
    harness.triton_for(dev)
    harness.seed(args.seed)
    m, n, k = (harness.pick(dev, getattr(args, d), 8192, CPU_SIZE[d]) for d in ("m", "n", "k"))
    if dev == "cpu" and args.dtype == "bf16" and args.impl == "triton":
        # The interpreter computes with numpy, which has no bfloat16: the products come out wrong.
        raise harness.WorkloadError(
            "bf16 Triton kernels do not run under TRITON_INTERPRET; use fp16 or fp32 on the CPU"
        )
    dtype = torch_dtype(args.dtype)
    # Scaled so that the products are O(1): one tolerance fits every size.
    a = (torch.randn(m, k, device=dev) / k**0.25).to(dtype)
    b = (torch.randn(k, n, device=dev) / k**0.25).to(dtype)
    precision = "ieee" if args.dtype == "fp32" else "tf32"
    torch.backends.cuda.matmul.allow_tf32 = False
    want = torch.matmul(a.double(), b.double()) if dev == "cpu" else torch.matmul(a.float(), b.float())
    # What --impl torch runs with: TF32 tensor cores only for --dtype tf32.
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
    if args.impl == "triton":

        def product() -> Any:
            return matmul(a, b, precision)

    else:

        def product() -> Any:
            return torch.matmul(a, b)

    tol = 2e-3 if args.dtype == "fp32" else 3e-2
    harness.check(f"{args.impl} {args.dtype} matmul", product(), want, atol=tol, rtol=tol)

    def step() -> object:
        return product()

    return step


def main(argv: list[str]) -> None:
    """Run the workload as ``traceadvisor capture --workload matmul [ARGS]`` does."""
    harness.main(parser, build, argv)
