"""OP102: cuDNN transposes NCHW tensors to NHWC and back around every convolution."""

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
    layout_transposes,
    nhwc_batch_norm_ns,
    op_location,
    pct,
    per_step,
    plural,
    replay_basis,
    scenario_saving,
    us,
)

RECOMMENDATION = (
    "Use channels_last: model = model.to(memory_format=torch.channels_last) and "
    "x = x.to(memory_format=torch.channels_last) for the inputs; cuDNN then runs its NHWC kernels on the "
    "tensors as they are."
)


@dataclass(frozen=True)
class Options:
    min_share_pct: float = 3.0  # the transposes must hold this share of kernel time
    min_saving_pct: float = 1.0  # report only when the replayed saving is this share of the step


class ChannelsLast(Rule[Options]):
    """Convolutions on NCHW tensors: cuDNN transposes them to NHWC and back around every convolution.

    ## Why it matters
    The tensor-core convolution kernels cuDNN picks on Volta and newer GPUs compute in NHWC.
    Given NCHW (PyTorch's default) tensors, cuDNN transposes the input and the filter to NHWC
    before each convolution and the result back after it, forward and backward: pure memory
    traffic, and, in a host-bound loop, a kernel launch each. channels_last tensors are NHWC
    already and skip all of it.

    ## How it shows up in a trace
    Kernels named `nchwToNhwcKernel` / `nhwcToNchwKernel` (cuDNN's precompiled transposes) are
    launched by convolution ops (`aten::cudnn_convolution`, `aten::convolution_backward`) and hold
    at least `min_share_pct` of kernel time; the convolution kernels themselves are the NHWC
    implicit GEMMs (`…nhwckrsc_nhwc…`). The saving is the what-if replay's `channels-last`
    scenario (`traceadvisor whatif TRACE --apply channels-last`): the transposes take no GPU time
    and no host time for their launches or for cuDNN's set-up of each (the gap before a launch,
    at most the trace's median in-op gap); the convolution kernels keep their time (they are the
    same NHWC kernels); training batch norm's NCHW kernels run as their channels_last
    counterparts: cuDNN's (`bn_fw_tr_1C11…`, `bn_bw_1C11…`) as its persistent NHWC kernels, which
    PyTorch picks for channels_last inputs in training, and ATen's (`batch_norm_*_kernel`, which run
    under autocast) as its `…_channels_last_kernel`s (modelled from each op's input size and the
    trace's own elementwise bandwidth; needs `record_shapes`). Pooling and elementwise kernels keep
    their time.

    ## How to fix
    Convert the model and its inputs to channels_last:
    `model.to(memory_format=torch.channels_last)` and
    `x.to(memory_format=torch.channels_last)`. Convolutions, batch norm, ReLU and pooling keep the
    layout; the first view or reshape to a flat tensor (before the classifier) returns to NCHW.

    ## Options
    - `min_share_pct`: the transposes must hold at least this share of kernel time (%).
    - `min_saving_pct`: report only when the replayed saving is at least this share of the
      predicted unprofiled step (%).

    ## References
    - https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html
    - https://docs.nvidia.com/deeplearning/performance/dl-performance-convolutional/index.html#tensor-layout
    """

    code = "OP102"
    name = "channels-last"
    severity = Severity.medium
    requires = frozenset({Capability.gpu, Capability.steps})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        k = trace.kernels
        tk = layout_transposes(trace) if len(k) else k
        if not len(tk):
            return
        t_ns = float(tk["dur_ns"].sum())
        share = pct(t_ns, float(k["dur_ns"].sum()))
        if share < opts.min_share_pct:
            return
        saving = scenario_saving(trace, "channels-last")
        if not saving.reaches(opts.min_saving_pct):
            return
        steps = max(1, len(trace.steps.table))
        convs = tk["op"].nunique()
        bn = nhwc_batch_norm_ns(trace)
        bn_ns = float(k.loc[list(bn), "dur_ns"].sum()) if bn else 0.0
        bn_text = (
            f" Training batch norm ran its NCHW kernels, {fmt_ns(bn_ns / steps)} per step; on channels_last "
            f"tensors its channels_last kernels would take about {fmt_ns(sum(bn.values()) / steps)}."
            if bn
            else ""
        )
        yield self.finding(
            trace,
            message=(
                "cuDNN transposed NCHW tensors to NHWC and back around "
                f"{plural(convs // steps, 'convolution op')} per step: "
                f"{plural(len(tk) // steps, 'transpose kernel')}, {fmt_ns(t_ns / steps)} per step "
                f"({share:.0f}% of all kernel time in the trace)." + bn_text
            ),
            recommendation=RECOMMENDATION,
            per_step=per_step(saving),
            basis=replay_basis(
                saving,
                "cuDNN's layout transposes, their launches and set-up removed"
                + (", batch norm on its channels_last kernels" if bn else ""),
            ),
            evidence=evidence_from(tk),
            location=op_location(trace, int(tk["op"].iat[0])),
            data={
                "transpose_us_per_step": us(t_ns / steps),
                "transposes": len(tk),
                "share_pct": share,
                "nchw_batch_norm_us_per_step": us(bn_ns / steps),
                "nhwc_batch_norm_us_per_step": us(sum(bn.values()) / steps),
            },
        )
