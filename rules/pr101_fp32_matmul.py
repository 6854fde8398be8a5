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
    fmt_ns,
    names_at,
    op_location,
    op_work,
    parse_raw,
    pct,
    per_step,
    plural,
    replay_basis,
    roofline_of,
    scenario_saving,
    us,
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
    min_saving_pct: float = 0.5  # report only when the replayed saving is at least this share of the step


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
    kernels are named `tf32`, `nvjet`, `wgmma`, …). The saving is the what-if replay's `tf32`
    scenario (`traceadvisor whatif TRACE --apply tf32`): the trace's dependency graph replayed
    without the profiler's host cost, then again with the fp32 GEMM kernels at fp32 / TF32 peak
    FLOP/s of their time; the difference of the two step times. A GEMM off the critical path (the
    step waits on the host, or on other streams) saves what the replay says, not its own time.
    PR101 is about TF32 being off; running the model in bf16 (`mixed-precision`) is a further
    step that rule reports beyond this one.

    ## How to fix
    Allow TF32 for matmuls: `torch.backends.cuda.matmul.allow_tf32 = True` or
    `torch.set_float32_matmul_precision("high")`; or run the model under
    `torch.autocast("cuda", dtype=torch.bfloat16)` for larger gains. TF32 keeps fp32 range with a
    10-bit mantissa, which is enough for training almost every network.

    ## Options
    - `min_gemm_pct`: report only when the fp32 GEMMs take at least this share of kernel time.
    - `min_saving_pct`: report only when the replayed saving is at least this share of the
      predicted unprofiled step (%).

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
        cand = _fp32_gemm_kernels(trace, k)
        ops = _fp32_ops(trace.host, cand) if len(cand) else None
        if ops is None:
            return
        gemm_ns = int(ops.dur.sum())
        share = pct(gemm_ns, int(k["dur_ns"].sum()))
        if share < opts.min_gemm_pct:
            return
        saving = scenario_saving(trace, "tf32")
        if not saving.reaches(opts.min_saving_pct):
            return
        mine = cand[cand["op"].isin(ops.rows)]
        flops = ops.flops_total
        achieved = flops / (gemm_ns / 1e9) / 1e12 if gemm_ns and flops else None
        top_kernel = str(mine.groupby("name", observed=True)["dur_ns"].sum().idxmax())
        rate = f", {achieved:.1f} TFLOP/s achieved" if achieved else ""
        yield self.finding(
            trace,
            message=(
                f"{plural(len(ops.rows), 'fp32 matmul op')} ran {fmt_ns(gemm_ns)} ({share:.0f}% of all kernel "
                f"time in the trace) on "
                f"non-tensor-core kernels{rate} (e.g. {top_kernel[:80]}); TF32 is off."
            ),
            recommendation=RECOMMENDATION,
            per_step=per_step(saving),
            basis=replay_basis(
                saving,
                f"fp32 GEMM kernels at fp32/TF32 peak FLOP/s ({peaks[0] / 1e12:.0f}/{peaks[1] / 1e12:.0f} TFLOP/s) "
                "of their time",
            ),
            evidence=evidence_from(mine),
            location=op_location(trace, int(ops.rows[0])),
            data={
                "gemm_us": us(gemm_ns),
                "ops": len(ops.rows),
                "tflops": achieved,
                "saving_per_step_us": us(saving.saving_ns),
            },
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
