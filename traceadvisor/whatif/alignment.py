"""The ``pad-gemm`` scenario: 16-bit matrix products whose dimensions are not a multiple of 8.

cuBLAS runs a bf16/fp16 GEMM on its fast tensor-core kernels only when every matrix's leading
dimension and base address are 16-byte aligned, i.e. M, N and K multiples of 8 elements
(cuBLAS documentation, "Tensor Core Usage"; NVIDIA's Matrix Multiplication Background User's
Guide, "Tensor Core Requirements"). Otherwise it falls back to kernels that load one element at a
time (CUTLASS's ``align1``/``align2`` tiles, often the old sm75 ``s1688`` ones): nanoGPT's
vocabulary of 50,257 makes the LM head's three GEMMs run at 90-140 TFLOP/s on an H100 where the
model's aligned GEMMs reach 330+ (p12_gpt_compile_before). Padding the dimension (the vocabulary
to 50,304, a multiple of 64; or letting torch.compile pad it, ``torch._inductor.config.shape_padding``)
brings back the aligned kernels.

The scenario re-times each unaligned product's kernels at the FLOP rate the trace's aligned
products of the same dtype achieve (FLOP-weighted: the larger products weigh most), never longer
than measured; the padding's extra work (under 0.1% for 50,257 -> 50,304) is not counted. No
constant is fitted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceadvisor.roofline.view import of as roofline_of
from traceadvisor.trace.columns import parse_raw
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.refused import Refused
from traceadvisor.whatif.replay import Overrides

# 16 bytes of 2-byte (bf16/fp16) or 1-byte (fp8) elements: the alignment cuBLAS's tensor-core
# kernels need (module docstring). fp32 is left out: its SIMT and TF32 kernels are another rule's.
ALIGN_ELEMENTS = {"bf16": 8, "fp16": 8, "fp8": 16}
# Too few aligned products to measure a rate from: the scenario refuses rather than guess a peak.
MIN_ALIGNED_KERNELS = 3


def gemm_dims(name: str, dims_raw: object) -> tuple[int, int, int] | None:
    """(M, N, K) of a matrix-product op from its recorded input shapes; None when not a product
    the shapes describe (a batch dimension of ``bmm`` is not a matrix dimension)."""
    dims = parse_raw(dims_raw)
    if not isinstance(dims, list):
        return None
    shapes = [d for d in dims if isinstance(d, list) and d]
    try:
        if name in ("aten::mm", "aten::bmm", "aten::matmul") and len(shapes) >= 2:
            a, b = shapes[0], shapes[1]
            if len(a) >= 2 and len(b) >= 2:
                return int(np.prod(a[:-1])) if name == "aten::matmul" else int(a[-2]), int(b[-1]), int(a[-1])
        if name in ("aten::addmm", "aten::baddbmm") and len(shapes) >= 3:
            a, b = shapes[1], shapes[2]
            return int(a[-2]), int(b[-1]), int(a[-1])
        if name == "aten::linear" and len(shapes) >= 2:
            x, w = shapes[0], shapes[1]
            return int(np.prod(x[:-1])), int(w[0]), int(x[-1])
    except (TypeError, ValueError, IndexError):
        return None
    return None


def _products(trace: Trace) -> pd.DataFrame:
    """The trace's 16-bit matrix-product kernels in the analysis window, with their op's (M, N, K),
    whether all three are aligned, and their achieved FLOP/s."""
    roof = roofline_of(trace)
    lo, hi, _ = trace.analysis_window
    k = roof.in_window(lo, hi)
    k = k[(k["op_class"] == "matmul").to_numpy() & k["dtype"].isin(list(ALIGN_ELEMENTS)).to_numpy()]
    k = k[(k["flops"] > 0).to_numpy() & (k["dur_ns"] > 0).to_numpy() & (k["op"] >= 0).to_numpy()]
    if not len(k):
        return k.assign(m=[], n=[], kdim=[], aligned=[])
    host = trace.host
    at = host.index.get_indexer(k["op"].to_numpy())
    names = host["name"].astype(str).to_numpy()[at]
    raw = host["input_dims"].to_numpy()[at]
    cache: dict[tuple[str, object], tuple[int, int, int] | None] = {}
    mnk = []
    for n, d in zip(names.tolist(), raw.tolist(), strict=True):
        key = (n, d)
        if key not in cache:
            cache[key] = gemm_dims(n, d)
        mnk.append(cache[key] or (0, 0, 0))
    arr = np.array(mnk, dtype=np.int64).reshape(-1, 3)
    per = k["dtype"].map(ALIGN_ELEMENTS).to_numpy(dtype=np.int64)
    known = (arr > 0).all(axis=1)
    aligned = known & ((arr % per[:, None]) == 0).all(axis=1)
    out = k.assign(m=arr[:, 0], n=arr[:, 1], kdim=arr[:, 2], aligned=aligned)
    return out[known]


def unaligned_products(trace: Trace) -> pd.DataFrame:
    """The unaligned 16-bit products' kernels (``_products`` rows), each with ``rate`` (the aligned
    products' FLOP/s of its dtype, NaN when too few aligned ones ran) and ``padded_ns`` (its time at
    that rate, never above measured)."""
    p = _products(trace)
    bad = p[~p["aligned"].to_numpy(dtype=bool)]
    rates: dict[str, float] = {}
    for dtype, g in p[p["aligned"].to_numpy(dtype=bool)].groupby("dtype", observed=True):
        if len(g) >= MIN_ALIGNED_KERNELS:
            rates[str(dtype)] = float(g["flops"].sum()) / float(g["dur_ns"].sum()) * 1e9
    rate = bad["dtype"].astype(str).map(rates).astype(float).to_numpy()
    padded = np.minimum(bad["flops"].to_numpy(dtype=np.float64) / rate * 1e9, bad["dur_ns"].to_numpy())
    return bad.assign(rate=rate, padded_ns=padded)


def pad_gemm(trace: Trace) -> Overrides:
    """Each unaligned 16-bit product's kernels at the aligned products' FLOP rate."""
    bad = unaligned_products(trace)
    if not len(bad):
        raise Refused("no bf16/fp16 matrix product with a dimension off a multiple of 8 (with shapes)")
    bad = bad[np.isfinite(bad["padded_ns"].to_numpy())]
    if not len(bad):
        raise Refused(f"fewer than {MIN_ALIGNED_KERNELS} aligned products of the same dtype to take a rate from")
    new = np.maximum(np.rint(bad["padded_ns"].to_numpy()).astype(np.int64), 1)
    return Overrides(gpu_dur_ns={int(r): int(d) for r, d in zip(bad.index.tolist(), new.tolist(), strict=True)})
