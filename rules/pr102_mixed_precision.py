"""PR102: fp32/TF32 convolutions and matrix products that bf16 autocast would run on the bf16 tensor cores."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd

from traceadvisor.rules_api import (
    Capability,
    Finding,
    Rule,
    Saving,
    Severity,
    Trace,
    evidence_from,
    fmt_ns,
    matrix_kernels,
    op_location,
    pct,
    per_step,
    plural,
    replay_basis,
    roofline_of,
    scenario_saving,
    us,
)

RECOMMENDATION = (
    "Run the forward and the loss under torch.autocast('cuda', dtype=torch.bfloat16) (the backward follows "
    "it; no GradScaler is needed with bf16). Check the step time after: autocast adds a cast per weight and "
    "some host work per op, which a host-bound step pays in full."
)


@dataclass(frozen=True)
class Options:
    min_matrix_pct: float = 10.0  # fp32/TF32 conv and matmul kernels must hold this share of kernel time
    min_saving_pct: float = 2.0  # report only when the replayed saving is this share of the step


class MixedPrecision(Rule[Options]):
    """fp32/TF32 convolutions and matrix products where bf16 autocast would use the bf16 tensor cores.

    ## Why it matters
    Ampere and newer GPUs run bf16 matrix products on the tensor cores at twice their TF32 rate
    and 15x their fp32 CUDA-core rate (H100 SXM: 989 vs 495 vs 67 dense TFLOP/s), and a bf16
    tensor moves half the bytes of an fp32 one. An fp32 model leaves that on the table even with
    TF32 on (cuDNN convolutions use TF32 by default, `torch.backends.cudnn.allow_tf32`).

    ## How it shows up in a trace
    Convolution and matrix-product kernels (the roofline's op classes, or cuBLAS/cuDNN/CUTLASS
    kernel names) run in fp32 or TF32 (`f32f32_tf32f32`, `s1688…tf32`, `sgemm`, `ffma`) and hold
    at least `min_matrix_pct` of kernel time, while bf16/fp16 kernels do not (then autocast already
    runs, and the rule says nothing). The saving is the what-if replay's `bf16` scenario
    (`traceadvisor whatif TRACE --apply bf16`): each kernel's time scales as its roofline roof does
    at the bf16 peak with half the bytes (a compute-bound kernel gains the peak ratio, a
    memory-bound one only the halved bytes, a latency-bound one nothing), and autocast's costs are
    added: a cast kernel per weight (and its gradient back) at the memory bandwidth, and the host
    ops that launch each cast, at what such ops cost in this trace. A host-bound step gains
    nothing from faster kernels and pays the casts: a small ResNet-18 at batch 64 measured 19%
    SLOWER under autocast, and the rule stays silent on its trace. Where fp32 GEMMs run on the CUDA
    cores, `fp32-matmul` reports TF32's saving; this rule then reports only what bf16 saves beyond
    TF32, so the two findings never count the same time twice.

    ## How to fix
    Wrap the forward and the loss in `torch.autocast("cuda", dtype=torch.bfloat16)`; keep the
    optimizer step outside. bf16 keeps fp32's exponent range, so no loss scaling is needed. Measure
    the step after: in host-bound loops autocast's per-op dispatch and casts can cost more than
    the kernels gain (then capture the step in a CUDA graph or compile it first).

    ## Options
    - `min_matrix_pct`: fp32/TF32 convolution and matmul kernels must hold at least this share of
      kernel time (%).
    - `min_saving_pct`: report only when the replayed saving (beyond TF32's) is at least this share
      of the predicted unprofiled step (%).

    ## References
    - https://pytorch.org/docs/stable/amp.html
    - https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices
    - https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet (H100)
    """

    code = "PR102"
    name = "mixed-precision"
    severity = Severity.medium
    requires = frozenset({Capability.gpu, Capability.steps, Capability.peaks})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        k = trace.kernels
        if not len(k):
            return
        mk, half = matrix_kernels(trace)
        full = mk[~half.to_numpy()]
        full_ns = float(full["dur_ns"].sum())
        share = pct(full_ns, float(k["dur_ns"].sum()))
        if not len(full) or share < opts.min_matrix_pct:
            return
        saving = _beyond_tf32(trace, scenario_saving(trace, "bf16"))
        if not saving.reaches(opts.min_saving_pct):
            return
        steps = max(1, len(trace.steps.table))
        peaks = roofline_of(trace).peaks
        bf16 = peaks.flops.get("bf16") if peaks else None
        rate = f" ({bf16 / 1e12:.0f} TFLOP/s bf16)" if bf16 else ""
        top = _top_op(full)
        yield self.finding(
            trace,
            message=(
                f"{plural(len(full) // steps, 'fp32/TF32 convolution and matmul kernel')} per step ran "
                f"{fmt_ns(full_ns / steps)} per step ({share:.0f}% of all kernel time in the trace) "
                "where bf16 autocast would "
                f"use the bf16 tensor cores{rate}."
            ),
            recommendation=RECOMMENDATION,
            per_step=per_step(saving),
            basis=replay_basis(
                saving,
                "fp32/TF32 conv and matmul kernels at their bf16 roofline time, plus autocast's casts"
                + (" (beyond the saving fp32-matmul reports for TF32)" if saving.scenario != "bf16" else ""),
            ),
            evidence=evidence_from(full),
            location=op_location(trace, top),
            data={"matrix_us_per_step": us(full_ns / steps), "kernels": len(full), "share_pct": share},
        )


def _beyond_tf32(trace: Trace, bf16: Saving) -> Saving:
    """The bf16 saving less what TF32 alone saves (fp32-matmul's finding) where TF32 saves anything:
    the time both rules would claim is reported once, by fp32-matmul."""
    tf32 = scenario_saving(trace, "tf32")
    if bf16.refused or tf32.refused or tf32.saving_ns <= 0:
        return bf16
    extra = max(0.0, bf16.saving_ns - tf32.saving_ns)
    return Saving("bf16-beyond-tf32", bf16.before_ns, bf16.before_ns - extra, bf16.changed)


def _top_op(kernels: pd.DataFrame) -> int:
    """The launching op (host row) with the most kernel time, -1 when none is known."""
    known = kernels[kernels["op"].to_numpy() >= 0]
    if not len(known):
        return -1
    return int(known.groupby("op")["dur_ns"].sum().idxmax())
