"""OP103: 16-bit matrix products on dimensions off a multiple of 8 run cuBLAS's slow unaligned kernels."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from traceadvisor.rules_api import (
    Capability,
    Finding,
    Rule,
    Severity,
    Trace,
    evidence_from,
    fmt_ns,
    op_location,
    pct,
    per_step,
    plural,
    replay_basis,
    runs_compiled,
    scenario_saving,
    unaligned_products,
    us,
)

RECOMMENDATION = (
    "Pad the odd dimension to a multiple of 64 (e.g. a vocabulary of 50257 to 50304, as nanoGPT does: the extra "
    "logits are never targets, and can be sliced off or masked), or torch.compile the model (Inductor pads "
    "matrix-product shapes itself: torch._inductor.config.shape_padding)."
)

# Where torch.compile already runs, it is not advice: Inductor left this product unpadded (its
# shape padding benchmarks the padded GEMM and keeps the faster one).
RECOMMENDATION_COMPILED = (
    "Pad the odd dimension to a multiple of 64 in the model itself (e.g. a vocabulary of 50257 to 50304, as nanoGPT "
    "does: the extra logits are never targets, and can be sliced off or masked); torch.compile already runs here and "
    "left this product unpadded."
)


def recommendation(trace: Trace) -> str:
    """The fix, without suggesting torch.compile where the trace shows it in use."""
    return RECOMMENDATION_COMPILED if runs_compiled(trace) else RECOMMENDATION


@dataclass(frozen=True)
class Options:
    min_share_pct: float = 2.0  # the unaligned products must hold this share of kernel time
    min_saving_pct: float = 1.0  # report only when the replayed saving is this share of the step


class UnalignedGemm(Rule[Options]):
    """bf16/fp16 matrix products with a dimension that is not a multiple of 8 run on slow kernels.

    ## Why it matters
    cuBLAS runs a 16-bit GEMM on its fast tensor-core kernels only when M, N and K are
    multiples of 8 (16 bytes); otherwise it falls back to kernels that load one element at a
    time (CUTLASS `align1`/`align2` tiles). nanoGPT's vocabulary of 50,257 puts the LM head's
    three GEMMs (forward, and the two of the backward) on those kernels: on an H100 they ran at
    90-140 TFLOP/s while the model's other GEMMs reached 360, and padding the vocabulary to
    50,304 cut a GPU-bound step by 34%.

    ## How it shows up in a trace
    Needs `record_shapes` and a known GPU. Matrix-product ops (`aten::mm`, `addmm`, `bmm`,
    `baddbmm`, `matmul`, `linear`) on bf16/fp16/fp8 inputs whose M, N or K (from the input
    shapes) is not a multiple of 16 bytes of elements, taking at least `min_share_pct` of
    kernel time. The saving is the what-if replay's `pad-gemm` scenario
    (`traceadvisor whatif TRACE --apply pad-gemm`): each such kernel re-timed at the FLOP rate
    the trace's aligned products of the same dtype achieve (FLOP-weighted; never longer than
    measured), replayed without the profiler's host cost; a host-bound step saves what the
    replay says, often nothing. With fewer than three aligned products to take a rate from,
    the scenario refuses and the rule is silent.

    ## How to fix
    Pad the dimension to a multiple of 64: for a vocabulary, enlarge the embedding and the LM
    head (`vocab_size=50304`); the extra logits are never targets, so the loss is unchanged
    (slice them off before sampling). For hidden sizes, pick multiples of 64. Or
    `torch.compile` the model: Inductor pads matrix-product shapes when that is faster
    (`torch._inductor.config.shape_padding`, on by default).

    ## Options
    - `min_share_pct`: report only when the unaligned products take at least this share of
      kernel time (%).
    - `min_saving_pct`: report only when the replayed saving is at least this share of the
      predicted unprofiled step (%).

    ## References
    - https://docs.nvidia.com/cuda/cublas/#tensor-core-usage
    - https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html#requirements-tc
    - https://github.com/karpathy/nanoGPT/blob/master/train.py (vocab_size 50304)
    """

    code = "OP103"
    name = "unaligned-gemm"
    severity = Severity.medium
    requires = frozenset({Capability.gpu, Capability.shapes, Capability.peaks})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        k = trace.kernels
        if not len(k):
            return
        bad = unaligned_products(trace)
        if not len(bad):
            return
        gemm_ns = int(bad["dur_ns"].sum())
        share = pct(gemm_ns, int(k["dur_ns"].sum()))
        if share < opts.min_share_pct:
            return
        saving = scenario_saving(trace, "pad-gemm")
        if not saving.reaches(opts.min_saving_pct):
            return
        worst = bad.loc[bad["dur_ns"].idxmax()]
        shapes = sorted({(int(m), int(n), int(kk)) for m, n, kk in zip(bad["m"], bad["n"], bad["kdim"], strict=True)})
        odd = sorted({d for s in shapes for d in s if d % 8})
        achieved = float(bad["flops"].sum()) / gemm_ns * 1e9 / 1e12 if gemm_ns else 0.0
        rate = float(worst["rate"]) / 1e12
        shown = ", ".join(f"{m}×{n}×{kk}" for m, n, kk in shapes[:3])
        yield self.finding(
            trace,
            message=(
                f"{plural(len(bad), 'bf16/fp16 GEMM kernel')} on dimensions off a multiple of 8 "
                f"({', '.join(str(d) for d in odd[:3])}; M×N×K {shown}) ran {fmt_ns(gemm_ns)} ({share:.0f}% of kernel "
                f"time) at {achieved:.0f} TFLOP/s, where the trace's aligned GEMMs reach {rate:.0f} TFLOP/s."
            ),
            recommendation=recommendation(trace),
            per_step=per_step(saving),
            basis=replay_basis(saving, f"the unaligned GEMMs at the aligned GEMMs' {rate:.0f} TFLOP/s"),
            evidence=evidence_from(bad),
            location=op_location(trace, int(worst["op"])),
            data={
                "gemm_us": us(gemm_ns),
                "kernels": len(bad),
                "odd_dims": odd,
                "achieved_tflops": achieved,
                "aligned_tflops": rate,
                "saving_per_step_us": us(saving.saving_ns),
            },
        )
