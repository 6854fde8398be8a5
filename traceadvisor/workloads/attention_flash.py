"""Self-attention whose core is a Triton flash-attention forward kernel (FlashAttention-2 style).

``flash_attention_fwd`` gives each program a block of ``BLOCK_M`` queries of one (batch, head); it
walks the keys and values in blocks of ``BLOCK_N``, keeping a running maximum and sum of the
softmax (the online softmax) and an fp32 accumulator, so the score matrix never leaves the
registers. The layer around it is the naive and SDPA workloads' layer (``attention.py``), labelled
``qkv_projection``, ``flash_attention``, ``output_projection``.

## Lesson
A fused kernel written by hand is as invisible to operator-level tools as it is fast: there is
no aten op for it, so its FLOPs (4·batch·heads·seq²·head_dim, half of that with ``--causal``)
and bytes are known only from the kernel's own ``launch_metadata`` and the launch records that
``traceadvisor capture`` writes. With them the roofline places it like any cuBLAS or SDPA kernel.

## What analyze should say
The annotation table shows ``flash_attention`` with a share close to SDPA's (and far below the
naive workload's ``scores`` + ``softmax`` + ``weighted_sum``); the unfused-attention rule (OP101)
stays quiet. ``flash_attention_fwd`` has launch records (grid = (seq / 128, batch·heads), bytes =
q + k + v + output, declared FLOPs) and shows as compute-bound in the roofline.
"""

from __future__ import annotations

import argparse
import functools
import math
from typing import Any

from traceadvisor.workloads import attention, harness

NAME = "attention-flash"


def parser() -> argparse.ArgumentParser:
    """Options: batch, sequence length, heads, head size, causal mask, and the common ones."""
    return attention.parser(NAME, __doc__)


@functools.cache
def kernel(interpreted: bool) -> Any:
    """The jitted ``flash_attention_fwd`` (built once per Triton mode)."""
    import triton
    import triton.language as tl

    def metadata(grid: Any, _meta: Any, args: dict[str, Any]) -> dict[str, Any]:
        # Two matmuls of seq × seq × head_dim per (batch, head): q kᵀ and p v; causal skips half.
        q = args["Q"]
        z, h, n, d = (int(s) for s in q.shape)
        flops = 4 * z * h * n * n * d
        return {"flops": flops // 2 if args["CAUSAL"] else flops}

    @triton.jit(launch_metadata=metadata)  # type: ignore[untyped-decorator]
    def flash_attention_fwd(  # type: ignore[no-untyped-def]
        Q,
        K,
        V,
        Out,
        sm_scale,
        stride_qz,
        stride_qh,
        stride_qm,
        stride_qd,
        stride_kz,
        stride_kh,
        stride_kn,
        stride_kd,
        stride_vz,
        stride_vh,
        stride_vn,
        stride_vd,
        stride_oz,
        stride_oh,
        stride_om,
        stride_od,
        H,
        N_CTX,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        CAUSAL: tl.constexpr,
    ):
        start_m = tl.program_id(0)
        off_hz = tl.program_id(1)
        off_z = off_hz // H
        off_h = off_hz % H
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        q_ptrs = Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
        q = tl.load(q_ptrs, mask=offs_m[:, None] < N_CTX, other=0.0)
        k_base = K + off_z * stride_kz + off_h * stride_kh
        v_base = V + off_z * stride_vz + off_h * stride_vh
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        # exp(x) = exp2(x · log2 e): exp2 is the hardware instruction.
        qk_scale = sm_scale * 1.4426950408889634
        if CAUSAL:  # keys after the block's last query are all masked: stop before them
            hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
        else:
            hi = N_CTX
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + offs_n
            k = tl.load(
                k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd, mask=cols[None, :] < N_CTX, other=0.0
            )
            qk = tl.dot(q, k) * qk_scale
            valid = cols[None, :] < N_CTX
            if CAUSAL:
                valid = valid & (offs_m[:, None] >= cols[None, :])
            qk = tl.where(valid, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            p = tl.math.exp2(qk - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(
                v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=cols[:, None] < N_CTX, other=0.0
            )
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m_i = m_new
        acc = acc / l_i[:, None]
        o_ptrs = Out + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
        tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_CTX)

    return flash_attention_fwd


def flash_attention(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
    """softmax(q kᵀ / √d) v for ``(batch, heads, seq, head_dim)`` tensors with the Triton kernel."""
    import torch

    triton = harness.triton_for(q.device.type)
    z, h, n, d = q.shape
    if d not in (16, 32, 64, 128):
        raise harness.WorkloadError(f"flash attention needs a head size of 16, 32, 64 or 128, not {d}")
    out = torch.empty((z, h, n, d), device=q.device, dtype=q.dtype)
    if q.device.type == "cuda":
        # 128 queries per program, 64 keys per step: the tutorial's Hopper choice for d ≤ 128.
        block_m, block_n, warps, stages = 128, 64, 4 if d <= 64 else 8, 3
    else:
        block_m, block_n, warps, stages = 16, 16, 1, 1
    grid = (triton.cdiv(n, block_m), z * h)
    kernel(harness.interpreting())[grid](
        q,
        k,
        v,
        out,
        1.0 / math.sqrt(d),
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *out.stride(),
        h,
        n,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        HEAD_DIM=d,
        CAUSAL=causal,
        num_warps=warps,
        num_stages=stages,
    )
    return out


def build(args: argparse.Namespace) -> harness.Step:
    """The attention layer with the Triton flash kernel as its core (see ``attention.build``)."""
    return attention.build(args, "flash", flash_attention)


def main(argv: list[str]) -> None:
    """Run the workload as ``traceadvisor capture --workload attention-flash [ARGS]`` does."""
    harness.main(parser, build, argv)
