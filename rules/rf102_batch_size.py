"""RF102: the step uses a small share of the GPU's compute peak, and a larger batch would do more per second."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from traceadvisor.rules_api import (
    Capability,
    Finding,
    Rule,
    Saving,
    Severity,
    Trace,
    communication_kernels,
    fmt_ns,
    replay_basis,
    roofline_of,
    scenario_saving,
)

SCENARIO = "batch-size"
RECOMMENDATION = (
    "Raise the batch size (twice the samples per step) if memory allows; activation checkpointing frees room "
    "where it does not. Scale the learning rate with the batch (linear scaling with a warm-up, or re-tune it) "
    "and check convergence."
)
BASIS = "the batch doubled (batch-scaled GPU work by grid waves and roofline, host time kept), per step of samples"
CUDA = 1  # c10::DeviceType::CUDA in the [memory] events' 'Device Type'
LOADER_MARK = "enumerate(DataLoader)#"


@dataclass(frozen=True)
class Options:
    max_peak_pct: float = 30.0  # report only when the step's FLOPs run at most this share of the compute peak
    min_gain_pct: float = 10.0  # report only when the replayed time per sample drops by at least this share
    max_loader_pct: float = 10.0  # report only when fetching batches takes at most this share of the steps


def compute_peak_share(trace: Trace, step_ns: float) -> float | None:
    """The share (%) of the compute peak the steps' modelled FLOPs use: the time those FLOPs need at
    each kernel's peak (the roofline's ``peak_tflops``: bf16 tensor cores for a bf16 GEMM, ...) over
    the steps' time (the predicted unprofiled step x steps). None when no kernel has FLOPs."""
    rk = roofline_of(trace).kernels
    if not len(rk) or not step_ns > 0:
        return None
    lo = int(trace.steps.table["cpu_start_ns"].min())
    rk = rk[(rk["ts_ns"].to_numpy() >= lo) & ~rk.index.isin(communication_kernels(trace))]
    flops, peak = rk["flops"].to_numpy(dtype=np.float64), rk["peak_tflops"].to_numpy(dtype=np.float64) * 1e12
    ok = np.isfinite(flops) & (flops > 0) & np.isfinite(peak) & (peak > 0)
    if not ok.any():
        return None
    at_peak_ns = float((flops[ok] / peak[ok]).sum() * 1e9)
    return 100.0 * at_peak_ns / (step_ns * len(trace.steps.table))


def per_sample(saving: Saving) -> Saving:
    """The doubled batch's replay as a time per sample: the after step holds twice the samples, so the
    samples of one step now take half of it. ``saving_ns`` is then the time saved per step's worth of
    samples (never more than the step), ``share_pct`` the drop in time per sample. The doubled step is
    never taken shorter than the step: the scenario only lengthens GPU work (a replay that ends a step
    earlier with longer kernels is one whose waits the trace does not record, HTA's rank0)."""
    after = max(saving.after_ns, saving.before_ns)
    return Saving(saving.scenario, saving.before_ns, after / 2.0, saving.changed, saving.refused)


def loader_share(trace: Trace, step_ns: float) -> float:
    """The share (%) of the steps' time the host spends fetching batches (the DataLoader's
    ``enumerate(DataLoader)#...__next__`` annotations): per-sample host work (loading, transforms,
    collation) that grows with the batch, which the replay keeps at its measured time."""
    ann = trace.annotations
    mine = ann[ann["name"].astype(str).str.startswith(LOADER_MARK).to_numpy()]
    if not len(mine) or not step_ns > 0:
        return 0.0
    t = trace.steps.table
    inside = (mine["ts_ns"] >= t["cpu_start_ns"].min()) & (mine["ts_ns"] < t["cpu_end_ns"].max())
    return 100.0 * float(mine.loc[inside, "dur_ns"].sum()) / (step_ns * len(t))


def memory_note(trace: Trace) -> str:
    """What the trace's memory events say about room for twice the batch ('' without them): the
    allocation that comes and goes within the window (activations, their gradients, temporaries)
    doubles with the batch; what stays (weights, gradients, optimizer state) does not."""
    mem = trace.memory
    mem = mem[(mem["device_type"] == CUDA) & mem["total_allocated"].notna()]
    if not len(mem):
        return " The trace has no memory events (profile_memory=True would show the headroom)."
    low, peak = float(mem["total_allocated"].min()), float(mem["total_allocated"].max())
    props = trace.device_properties() or {}
    total = props.get("totalGlobalMem")
    need = low + 2.0 * (peak - low)
    of_total = f" of {float(total) / 1e9:.1f} GB" if isinstance(total, int | float) and total > 0 else ""
    return (
        f" Memory: {peak / 1e9:.2f} GB allocated at the peak{of_total}, {(peak - low) / 1e9:.2f} GB of it "
        f"freed within the window; twice the batch needs ~{need / 1e9:.2f} GB."
    )


class BatchSize(Rule[Options]):
    """The steps use a small share of the GPU's compute peak and a larger batch would process more samples per second.

    ## Why it matters
    A training or inference step has a cost that does not depend on the batch: the host dispatches
    every op and launches every kernel once per step, small kernels pay a fixed latency, a kernel
    whose grid does not fill the GPU leaves SMs idle, and the optimizer updates every parameter once
    per step. A small batch spreads that cost over few samples, and the GPU runs far below its
    peak (a small GPT trainer at batch 16 used ~13% of an H100's bf16 peak). Doubling the batch
    adds GPU work but no host work, so the time per sample drops.

    ## How it shows up in a trace
    The modelled FLOPs of the steps' kernels (the roofline's per-op model; `record_shapes` needed)
    take a small share of the predicted unprofiled step at the GPU's peak for each kernel's dtype.
    The gain is a what-if replay (`traceadvisor whatif TRACE --apply batch-size`): the trace
    replayed without the profiler's host cost, then with the batch doubled, where every GPU record
    launched in the steps outside the optimizer's annotations (and outside communication) grows by
    what its grid and the roofline allow (a kernel whose grid fills less than one wave of the GPU
    gets its extra blocks for free; none runs faster than ~70-85% of its roof; none more than
    doubles), and the host keeps its time. The finding gives the time per sample before
    (step / samples) and after (step' / 2 samples) in its message and data (`per_sample_gain_pct`,
    `per_sample_saving_us`: the time saved per step's worth of samples). It carries no impact: the
    gain is not a saving on the same work (the steps then hold other samples and the optimisation
    changes), so it is not ranked against the savings of fixes. With `profile_memory`, the peak
    allocation and the estimate at twice the batch.

    ## How to fix
    Double the batch (or raise it until the time per sample stops dropping), if memory allows; if it
    does not, activation checkpointing or a smaller model state (bf16 weights, a fused or 8-bit
    optimizer) frees room. A larger batch changes the optimisation: scale the learning rate (linear
    scaling with warm-up is a common start) and check convergence.

    ## Options
    - `max_peak_pct`: report only when the steps' FLOPs use at most this share of the compute peak.
    - `min_gain_pct`: report only when the replayed time per sample drops by at least this share.
    - `max_loader_pct`: report only when fetching batches (the DataLoader's `__next__`) takes at most
      this share of the steps: loading, transforms and collation grow with the batch, and the
      replay keeps the host's time.

    ## References
    - https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html#wave-quant
    - https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#features-and-technical-specifications
    - https://arxiv.org/abs/1706.02677 (linear learning-rate scaling with the batch)
    """

    code = "RF102"
    name = "batch-size"
    severity = Severity.medium
    requires = frozenset({Capability.gpu, Capability.steps, Capability.shapes, Capability.peaks})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        if not len(trace.steps.table) or not len(trace.kernels):
            return
        doubled = scenario_saving(trace, SCENARIO)
        if doubled.refused is not None:
            return
        peak_pct = compute_peak_share(trace, doubled.before_ns)
        if peak_pct is None or peak_pct > opts.max_peak_pct:
            return
        if loader_share(trace, doubled.before_ns) > opts.max_loader_pct:
            return  # the host's per-sample work would grow too: the replay's gain would not hold
        gain = per_sample(doubled)
        if gain.share_pct < opts.min_gain_pct:
            return
        # No impact: the gain is not a saving on the same work (the step then holds other samples, and
        # the optimisation changes with the batch), so it is not ranked against the fixes' savings.
        yield self.finding(
            trace,
            message=(
                f"The steps' FLOPs use {peak_pct:.1f}% of the GPU's compute peak. Replayed with twice the batch, "
                f"the step takes {fmt_ns(doubled.after_ns)} instead of {fmt_ns(doubled.before_ns)} "
                f"(predicted unprofiled): {gain.share_pct:.0f}% less time per sample "
                f"({100.0 * doubled.before_ns / gain.after_ns - 100.0:.0f}% more samples per second), "
                "if memory allows." + memory_note(trace)
            ),
            recommendation=RECOMMENDATION,
            data={
                "peak_pct": peak_pct,
                "step_us": doubled.before_ns / 1e3,
                "doubled_step_us": doubled.after_ns / 1e3,
                "per_sample_gain_pct": gain.share_pct,
                "per_sample_saving_us": gain.saving_ns / 1e3,
                "scenario": SCENARIO,
                "basis": replay_basis(gain, BASIS),
            },
        )
