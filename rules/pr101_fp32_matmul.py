"""PR101: fp32 matrix products run on the CUDA cores instead of the tensor cores (sm80+)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from math import prod

from traceadvisor import Finding, Rule, Severity, Trace
from traceadvisor.rules_api import Capability, evidence_from, location_of, parse_raw

MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
# Non-tensor-core fp32 GEMM families: cuBLAS/CUTLASS SIMT SGEMM, gemv, and the sm80 xmma "ffma"
# kernels (fp32 in, fp32 math: f32f32_f32f32); the TF32 variant is named f32f32_tf32f32.
_FP32_KERNEL = re.compile(r"sgemm|gemmSN|gemv|_ffma_|f32f32_f32f32", re.IGNORECASE)
_TC_KERNEL = re.compile(r"tf32|tensorop|hmma|wgmma|nvjet|bf16|f16|s1688|s16816|h1688|h16816|i8816", re.IGNORECASE)
_FLOAT_TYPES = {"float", "float32"}


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
    peaks = trace.roofline.peaks
    if peaks is None:
        return None
    fp32, tf32 = peaks.flops.get("fp32"), peaks.flops.get("tf32")
    if not fp32 or not tf32:
        return None
    return fp32, tf32


def matmul_flops(name: str, dims: list | None) -> float | None:
    """2·M·N·K (times the batch) of a matrix product from its input dims."""
    if not dims:
        return None
    try:
        if name == "aten::mm":
            (m, k), (_, n) = dims[0], dims[1]
            return 2.0 * m * n * k
        if name == "aten::addmm":
            (m, k), (_, n) = dims[1], dims[2]
            return 2.0 * m * n * k
        if name == "aten::bmm":
            (b, m, k), (_, _, n) = dims[0], dims[1]
            return 2.0 * b * m * n * k
        if name == "aten::baddbmm":
            (b, m, k), (_, _, n) = dims[1], dims[2]
            return 2.0 * b * m * n * k
        if name == "aten::linear":
            x, w = dims[0], dims[1]
            return 2.0 * prod(x[:-1]) * x[-1] * w[0]
        if name == "aten::matmul":
            a, b = dims[0], dims[1]
            if len(a) < 2 or len(b) < 2:
                return None
            return 2.0 * prod(a[:-1]) * a[-1] * b[-1]
    except (TypeError, ValueError, IndexError):
        return None
    return None


class Fp32Matmul(Rule):
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
    time at a realistic share of the TF32 peak, computed from the FLOPs (2·M·N·K from the input
    dims); time beyond what the FLOPs need at `fp32_efficiency` of the fp32 peak (latency of tiny
    GEMMs) is kept, and no op saves more than its time × (1 − 1/max_speedup).

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
    Options = Options

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts: Options = self.options
        peaks = _peaks(trace)
        if peaks is None:
            return
        fp32_peak, tf32_peak = peaks
        k = trace.kernels
        if not len(k):
            return
        names = k["name"].astype(str)
        fp32 = names.str.contains(_FP32_KERNEL) & ~names.str.contains(_TC_KERNEL) & (k["op"] >= 0)
        cand = k[fp32]
        if not len(cand):
            return
        ops = trace.host.loc[cand["op"].to_numpy()]
        cand = cand[ops["name"].astype(str).isin(MATMUL_OPS).to_numpy()]
        if not len(cand):
            return
        per_op = cand.groupby("op")["dur_ns"].sum()
        gemm_ns = 0
        saving_ns = 0.0
        flops_total = 0.0
        kept_ops = []
        for row, dur in per_op.items():
            h = trace.host.loc[int(row)]
            types = parse_raw(h["input_types"]) or []
            if types and not any(str(t) in _FLOAT_TYPES for t in types):
                continue
            kept_ops.append(int(row))
            gemm_ns += int(dur)
            flops = matmul_flops(str(h["name"]), parse_raw(h["input_dims"]))
            floor = dur / opts.max_speedup
            if flops:
                flops_total += flops
                # Time beyond what the FLOPs need at a realistic fp32 rate is latency/memory cost
                # that TF32 does not remove (tiny GEMMs); the rest shrinks to the TF32 rate.
                fixed = max(0.0, dur - flops / (opts.fp32_efficiency * fp32_peak) * 1e9)
                tf32_ns = max(fixed + flops / (opts.tf32_efficiency * tf32_peak) * 1e9, floor)
            else:
                tf32_ns = max(dur * fp32_peak / tf32_peak / opts.tf32_efficiency, floor)
            saving_ns += max(0.0, dur - tf32_ns)
        if not kept_ops:
            return
        kernel_ns = int(k["dur_ns"].sum())
        share = 100.0 * gemm_ns / kernel_ns if kernel_ns else 0.0
        if share < opts.min_gemm_pct or saving_ns < opts.min_saving_pct / 100.0 * trace.analysed_ns:
            return
        mine = cand[cand["op"].isin(kept_ops)]
        achieved = flops_total / (gemm_ns / 1e9) / 1e12 if gemm_ns and flops_total else None
        first = trace.host.loc[kept_ops[0]]
        location = location_of(trace, int(first["pid"]), int(first["tid"]), int(first["ts_ns"]))
        top_kernel = str(mine.groupby("name", observed=True)["dur_ns"].sum().idxmax())
        rate = f", {achieved:.1f} TFLOP/s achieved" if achieved else ""
        yield self.finding(
            trace,
            message=(
                f"{len(kept_ops)} fp32 matmul ops ran {gemm_ns / 1e3:.1f} µs ({share:.0f}% of kernel time) on "
                f"non-tensor-core kernels{rate} (e.g. {top_kernel[:80]}); TF32 is off."
            ),
            recommendation=(
                'Enable TF32: torch.set_float32_matmul_precision("high") or '
                "torch.backends.cuda.matmul.allow_tf32 = True; or use torch.autocast('cuda', dtype=torch.bfloat16)."
            ),
            impact_ns=saving_ns,
            basis=(
                f"fp32 GEMM time minus the time at {opts.tf32_efficiency:.0%} of the TF32 peak "
                f"({tf32_peak / 1e12:.0f} TFLOP/s) from 2·M·N·K, keeping the time beyond "
                f"{opts.fp32_efficiency:.0%} of the fp32 peak"
            ),
            evidence=evidence_from(mine),
            location=location,
            data={
                "gemm_us": gemm_ns / 1e3,
                "ops": len(kept_ops),
                "tflops": achieved,
                "saving_us": saving_ns / 1e3,
            },
        )
