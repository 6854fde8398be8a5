"""The multi-head self-attention layer that the three attention workloads run, one implementation each.

The layer marks its components with ``torch.profiler.record_function`` so that ``analyze`` can
report GPU time per component: ``qkv_projection``, then either ``scores`` / ``softmax`` /
``weighted_sum`` (naive: the ``seq × seq`` score matrix is materialised), or
``scaled_dot_product_attention`` (PyTorch's fused kernel), or ``flash_attention`` (the Triton
kernel of ``attention_flash``), then ``output_projection``. It runs forward only, under
``torch.inference_mode``, in bf16 on the GPU (fp32 on the CPU).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from traceadvisor.workloads import harness

IMPLS = ("naive", "sdpa", "flash")


def parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """Options of the attention workloads: batch, sequence length, heads, head size, causal mask."""
    p = harness.parser(name, doc)
    p.add_argument("--batch", type=harness.positive_int, default=None, help="batch size (default 4 on GPU, 1 on CPU)")
    p.add_argument(
        "--seq", type=harness.positive_int, default=None, help="sequence length (default 2048 on GPU, 32 on CPU)"
    )
    p.add_argument("--heads", type=harness.positive_int, default=None, help="heads (default 16 on GPU, 2 on CPU)")
    p.add_argument(
        "--head-dim",
        type=harness.positive_int,
        choices=(16, 32, 64, 128),
        default=None,
        help="size of each head (default 64 on GPU, 16 on CPU)",
    )
    p.add_argument("--causal", action="store_true", help="mask future positions (decoder attention)")
    return p


def make_layer(d_model: int, heads: int, impl: str, causal: bool, flash: Callable[..., Any] | None = None) -> Any:
    """The attention layer as an ``nn.Module`` (torch is imported here, not at module import).
    ``flash``: the core of ``impl == "flash"``, given by ``attention_flash`` (which imports this
    module: importing it back from here would make the two a cycle)."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.profiler import record_function

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.out = nn.Linear(d_model, d_model)

        def project(self, x: Any) -> tuple[Any, Any, Any]:
            """q, k, v as ``(batch, heads, seq, head_dim)`` views of one projection."""
            b, n, d = x.shape
            q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
            return q, k, v

        def core(self, q: Any, k: Any, v: Any) -> Any:
            """softmax(q kᵀ / √d) v, by this layer's implementation, each component labelled."""
            if impl == "naive":
                n = q.shape[-2]
                with record_function("scores"):
                    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
                    if causal:
                        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
                        scores = scores.masked_fill(future, float("-inf"))
                with record_function("softmax"):
                    weights = scores.softmax(dim=-1)
                with record_function("weighted_sum"):
                    return weights @ v
            if impl == "sdpa":
                with record_function("scaled_dot_product_attention"):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            if flash is None:
                raise ValueError(f"attention implementation {impl!r} needs its core function")
            with record_function("flash_attention"):
                return flash(q, k, v, causal=causal)

        def forward(self, x: Any) -> Any:
            b, n, d = x.shape
            with record_function("qkv_projection"):
                q, k, v = self.project(x)
            o = self.core(q, k, v)
            with record_function("output_projection"):
                return self.out(o.transpose(1, 2).reshape(b, n, d))

    return SelfAttention()


def reference(q: Any, k: Any, v: Any, causal: bool) -> Any:
    """Attention computed plainly in fp32 (the check of every implementation)."""
    import torch

    q, k, v = q.float(), k.float(), v.float()
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return scores.softmax(dim=-1) @ v


def build(args: argparse.Namespace, impl: str, flash: Callable[..., Any] | None = None) -> harness.Step:
    """Make the layer and its input, check the attention core against ``reference``, return one forward."""
    import torch

    dev = harness.device(args.device)
    if impl == "flash":
        harness.triton_for(dev)
    harness.seed(args.seed)
    batch = harness.pick(dev, args.batch, 4, 1)
    seq = harness.pick(dev, args.seq, 2048, 32)
    heads = harness.pick(dev, args.heads, 16, 2)
    head_dim = harness.pick(dev, args.head_dim, 64, 16)
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    layer = make_layer(heads * head_dim, heads, impl, args.causal, flash).to(device=dev, dtype=dtype).eval()
    x = torch.randn(batch, seq, heads * head_dim, device=dev, dtype=dtype)
    with torch.inference_mode():
        q, k, v = layer.project(x)
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
        harness.check(f"{impl} attention", layer.core(q, k, v), reference(q, k, v, args.causal), atol=tol, rtol=tol)

    def step() -> object:
        with torch.inference_mode():
            return layer(x)

    return step
