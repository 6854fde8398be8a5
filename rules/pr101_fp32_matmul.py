"""PR101: fp32 matrix products run on the CUDA cores instead of the tensor cores (sm80+)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.rules_api import (
    Capability,
    Finding,
    Rule,
    Severity,
    Trace,
    category_mask,
    distinct_signatures,
    evidence_from,
    fmt_us,
    names_at,
    op_location,
    op_work,
    parse_raw,
    pct,
    roofline_of,
    us,
    worth_reporting,
)

MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
# Non-tensor-core fp32 GEMM families: cuBLAS/CUTLASS SIMT SGEMM, gemv, and the sm80 xmma "ffma"
# kernels (fp32 in, fp32 math: f32f32_f32f32); the TF32 variant is named f32f32_tf32f32.
_FP32_KERNEL = re.compile(r"sgemm|gemmSN|gemv|_ffma_|f32f32_f32f32", re.IGNORECASE)
_TC_KERNEL = re.compile(r"tf32|tensorop|hmma|wgmma|nvjet|bf16|f16|s1688|s16816|h1688|h16816|i8816", re.IGNORECASE)
_FLOAT_TYPES = {"float", "float32"}
RECOMMENDATION = (
    'Enable TF32: torch.set_float32_matmul_precision("high") or '
    "torch.backends.cuda.matmul.allow_tf32 = True; or use torch.autocast('cuda', dtype=torch.bfloat16)."
)


@dataclass(frozen=True)
class Options:
    min_gemm_pct: float = 10.0  # report only when fp32 GEMMs take at least this share of kernel time
    tf32_efficiency: float = 0.75  # share of the TF32 peak a large GEMM reaches
    fp32_efficiency: float = 0.8  # share of the fp32 peak a large GEMM reaches (the rest of a kernel is fixed cost)
    max_speedup: float = 8.0  # cap of the per-op speedup estimate
    min_saving_pct: float = 0.5  # report only when the estimated saving is at least this share of the steps


def _peaks(trace: Trace) -> tuple[float, float] | None:
    """Dense fp32 (CUDA cores) and TF32 (tensor cores) FLOP/s of the trace's GPU, from the shared
    peak table (``traceadvisor/roofline/gpus.py``; a measured device profile or configuration
    replaces them). ``None`` on GPUs without TF32 tensor cores (before sm80)."""
    peaks = roofline_of(trace).peaks
    if peaks is None:
        return None
    fp32, tf32 = peaks.flops.get("fp32"), peaks.flops.get("tf32")
    if not fp32 or not tf32:
        return None
    return fp32, tf32


def _sig_model(name: str, dims_raw: Any, types_raw: Any) -> tuple[bool, float]:
    """Whether an op with these inputs is an fp32 product (float inputs, or no recorded types),
    and its FLOPs from the shared op model (``roofline/models.py``: 2·M·N·K, times the batch); NaN
    when the shapes do not give them."""
    types = parse_raw(types_raw) or []
    if types and not any(str(t) in _FLOAT_TYPES for t in types):
        return False, np.nan
    work = op_work(name, parse_raw(dims_raw), types)
    return True, work.flops if work is not None and work.flops > 0 else np.nan


class Fp32Matmul(Rule[Options]):
    """fp32 matrix products run as SIMT SGEMM kernels although the GPU has TF32 tensor cores.

    ## Why it matters
    On Ampere and newer GPUs (compute capability 8.0+) the tensor cores run fp32 matrix products
    in TF32 several times faster than the CUDA cores run them in full fp32 (H100 SXM: 495 vs 67
    dense TFLOP/s; A100: 156 vs 19.5). PyTorch keeps TF32 off for matmuls by default, so an fp32
    model pays the full fp32 price for every GEMM.

    ## How it shows up in a trace
    The device reports compute capability 8.0 or more; `aten::mm`, `addmm`, `bmm`, `baddbmm`,
    `matmul` or `linear` ops with float inputs (`record_shapes`) launch non-tensor-core GEMM
    kernels (`sgemm`, `gemmSN`, `gemv`, or cuBLAS xmma `f32f32_f32f32 … ffma` kernels; the TF32
    kernels are named `tf32`, `nvjet`, `wgmma`, …). The saving is each op's GPU time minus its
    time at a realistic share of the TF32 peak, computed from the FLOPs (2·M·N·K times the batch,
    from the input dims, by the roofline's op model); time beyond what the FLOPs need at
    `fp32_efficiency` of the fp32 peak (latency of tiny GEMMs) is kept, and no op saves more than
    its time × (1 − 1/max_speedup). An op whose shapes give no FLOPs is scaled by
    fp32 peak / (`tf32_efficiency` × TF32 peak).

    ## How to fix
    Allow TF32 for matmuls: `torch.backends.cuda.matmul.allow_tf32 = True` or
    `torch.set_float32_matmul_precision("high")`; or run the model under
    `torch.autocast("cuda", dtype=torch.bfloat16)` for larger gains. TF32 keeps fp32 range with a
    10-bit mantissa, which is enough for training almost every network.

    ## Options
    - `min_gemm_pct`: report only when the fp32 GEMMs take at least this share of kernel time.
    - `tf32_efficiency`: share of the TF32 peak assumed for the estimate (default 0.75).
    - `fp32_efficiency`: share of the fp32 peak a large SGEMM reaches (default 0.8).
    - `max_speedup`: cap of the per-op speedup estimate (default 8).
    - `min_saving_pct`: report only when the estimated saving is at least this share of the steps.

    ## References
    - https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices
    - https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet (H100)
    - https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
    """

    code = "PR101"
    name = "fp32-matmul"
    severity = Severity.medium
    requires = frozenset({Capability.gpu, Capability.shapes, Capability.peaks})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        peaks = _peaks(trace)
        k = trace.kernels
        if peaks is None or not len(k):
            return
        fp32_peak, tf32_peak = peaks
        cand = _fp32_gemm_kernels(trace, k)
        ops = _fp32_ops(trace.host, cand) if len(cand) else None
        if ops is None:
            return
        saving_ns = ops.tf32_saving_ns(fp32_peak, tf32_peak, opts)
        gemm_ns = int(ops.dur.sum())
        share = pct(gemm_ns, int(k["dur_ns"].sum()))
        if share < opts.min_gemm_pct or not worth_reporting(trace, saving_ns, opts.min_saving_pct):
            return
        mine = cand[cand["op"].isin(ops.rows)]
        flops = ops.flops_total
        achieved = flops / (gemm_ns / 1e9) / 1e12 if gemm_ns and flops else None
        top_kernel = str(mine.groupby("name", observed=True)["dur_ns"].sum().idxmax())
        rate = f", {achieved:.1f} TFLOP/s achieved" if achieved else ""
        yield self.finding(
            trace,
            message=(
                f"{len(ops.rows)} fp32 matmul ops ran {fmt_us(gemm_ns)} ({share:.0f}% of kernel time) on "
                f"non-tensor-core kernels{rate} (e.g. {top_kernel[:80]}); TF32 is off."
            ),
            recommendation=RECOMMENDATION,
            impact_ns=saving_ns,
            basis=(
                f"fp32 GEMM time minus the time at {opts.tf32_efficiency:.0%} of the TF32 peak "
                f"({tf32_peak / 1e12:.0f} TFLOP/s) from 2·M·N·K, keeping the time beyond "
                f"{opts.fp32_efficiency:.0%} of the fp32 peak"
            ),
            evidence=evidence_from(mine),
            location=op_location(trace, int(ops.rows[0])),
            data={"gemm_us": us(gemm_ns), "ops": len(ops.rows), "tflops": achieved, "saving_us": us(saving_ns)},
        )


def _fp32_gemm_kernels(trace: Trace, k: pd.DataFrame) -> pd.DataFrame:
    """Non-tensor-core fp32 GEMM kernels launched by a matrix-product op."""
    fp32 = category_mask(k["name"], lambda n: n.str.contains(_FP32_KERNEL) & ~n.str.contains(_TC_KERNEL))
    fp32 &= k["op"].to_numpy() >= 0
    if not fp32.any():
        return k.iloc[:0]
    cand = k[fp32]
    host = trace.host
    is_matmul = category_mask(host["name"], lambda n: n.isin(MATMUL_OPS))
    pos = host.index.get_indexer(cand["op"].to_numpy())
    return cand[(pos >= 0) & is_matmul[pos]]


@dataclass(frozen=True)
class Fp32Ops:
    """The fp32 matrix-product ops, each with its fp32 GEMM kernels' GPU time and its FLOPs."""

    rows: npt.NDArray[np.int64]  # host rows of the ops
    dur: npt.NDArray[np.int64]  # GPU time of each op's fp32 GEMM kernels
    flops: npt.NDArray[np.float64]  # each op's FLOPs (NaN: the shapes do not give them)

    @property
    def flops_total(self) -> float:
        return float(np.where(~np.isnan(self.flops), self.flops, 0.0).sum())

    def tf32_saving_ns(self, fp32_peak: float, tf32_peak: float, opts: Options) -> float:
        """GPU time saved by running the ops in TF32. Time beyond what the FLOPs need at a realistic
        fp32 rate is latency/memory cost that TF32 does not remove (tiny GEMMs); the rest shrinks to
        the TF32 rate. Without FLOPs the whole op speeds up by the ratio of the peaks."""
        dur_f = self.dur.astype(np.float64)
        floor = dur_f / opts.max_speedup
        modelled = ~np.isnan(self.flops)
        f = np.where(modelled, self.flops, 0.0)
        fixed = np.maximum(0.0, dur_f - f / (opts.fp32_efficiency * fp32_peak) * 1e9)
        tf32_ns = np.where(
            modelled,
            np.maximum(fixed + f / (opts.tf32_efficiency * tf32_peak) * 1e9, floor),
            np.maximum(dur_f * fp32_peak / tf32_peak / opts.tf32_efficiency, floor),
        )
        return float(np.maximum(0.0, dur_f - tf32_ns).sum())


def _fp32_ops(host: pd.DataFrame, cand: pd.DataFrame) -> Fp32Ops | None:
    """The launching ops of ``cand`` that are fp32 products (``None``: none is). Types and FLOPs are
    read once per distinct (name, input dims, input types): a model repeats its layers' shapes in
    every step."""
    per_op = cand.groupby("op")["dur_ns"].sum()  # GPU time of each op's fp32 GEMM kernels
    op_pos = host.index.get_indexer(per_op.index.to_numpy())
    sig, first = distinct_signatures(host, op_pos, ("input_dims", "input_types"))
    dims_col, types_col = host["input_dims"].to_numpy(), host["input_types"].to_numpy()
    models = [_sig_model(n, dims_col[p], types_col[p]) for n, p in zip(names_at(host, first), first, strict=True)]
    keep = np.array([m[0] for m in models], dtype=bool)[sig]
    if not keep.any():
        return None
    return Fp32Ops(
        rows=per_op.index.to_numpy()[keep],
        dur=per_op.to_numpy()[keep],
        flops=np.array([m[1] for m in models], dtype=np.float64)[sig][keep],
    )
