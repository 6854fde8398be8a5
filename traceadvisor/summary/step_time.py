"""The report's step time: profiled, and predicted without the profiler, with GPU busy on both.

A profiled step is slower than the real one: the profiler's host cost (whatif/profiler_cost.py)
stretches host-bound steps, and GPU busy over a stretched step reads low (a 12.2 ms step shows as
20-25 ms and "GPU busy 46%" where the real figure is ~80%). The report shows both, so no profiled
figure is taken for the real one. Both step times are the spacing of step ends (``step_time_ns``):
the rate of the loop, whether the host or the GPU sets it.
"""

from __future__ import annotations

import math

from traceadvisor.report.model import StepTime
from traceadvisor.summary.units import us
from traceadvisor.trace import intervals
from traceadvisor.trace.columns import KERNEL
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.profiler_cost import CALIBRATION_TOLERANCE, fitted_calibration, measured_unprofiled_ns
from traceadvisor.whatif.replay import measured_replay
from traceadvisor.whatif.savings import predicted_step_ns
from traceadvisor.whatif.scenarios import runs_compiled, step_time_ns

# The bundled profiler costs are fitted on eager code. Where a trace recorded torch.compile'd code
# with stacks, the profiler's cost of the generated wrapper is taken from the gaps between its calls
# (``profiler_cost.wrapper_gaps``), and its launchers' from their records: on the compile pairs'
# compiled sides (H100 and H200) the uncalibrated prediction lands at -38% to +73%, within 10% on
# 16 of 36 traces (``python bench/compiled_steps.py``; per-frame costs alone: -73% to +283%, 3 of
# 36), where eager steps land within 10% on half the traces.
COMPILED_WITH_STACKS_CAVEAT = (
    "torch.compile'd code recorded with stacks: the profiler's cost of its generated wrapper and launchers "
    "is modelled to about ±20%; time steps without the profiler (traceadvisor capture does) to calibrate"
)


def unprofiled_basis(trace: Trace, predicted_ns: float | None = None) -> tuple[str, str | None]:
    """What the predicted unprofiled step rests on (``calibrated``: steps timed without the
    profiler that the trace carries, or given with ``--step-time``; ``uncalibrated``: the bundled
    costs alone), and a caveat where the bundled costs are known to be unreliable for this trace,
    or where the calibration could not reach the measured step (``predicted_ns``: the prediction)."""
    measured = measured_unprofiled_ns(trace)
    if measured is not None:
        scale = fitted_calibration(trace).kernel_scale
        if scale != 1.0:
            # a GPU-bound step that the host's cost cannot fit: the kernels ran at another speed
            # around the window than in it (the SM clock: under the power limit a sustained loop runs
            # its GEMMs 4-6% longer than a short window right after the profiler's start,
            # fixtures/item_gpu_phases/)
            return "calibrated", (
                f"the steps measured without the profiler fit kernels {abs(scale - 1) * 100:.1f}% "
                + ("slower" if scale > 1 else "faster")
                + " than in the profiled window (the GPU's clock, e.g. under its power limit): the "
                "prediction scales them; kernel times elsewhere in the report are the window's"
            )
        if predicted_ns is None or abs(predicted_ns - measured) <= CALIBRATION_TOLERANCE * measured:
            return "calibrated", None
        if predicted_ns > measured:
            # calibration's factor stopped at its bound: even 4x the profiler's costs taken out
            # leave a longer step (the GPU's work, or host time no cost explains)
            return "calibrated", (
                f"the measured step ({measured / 1e3:.3f} µs) is out of the replay's reach: this trace's GPU work "
                "or host time takes longer; it may be another program, batch size or machine"
            )
        # the profiler only adds host time: a measured step longer than the profiled one is drift
        return "calibrated", (
            f"the measured step ({measured / 1e3:.3f} µs) is longer than the profiled one, which the profiler "
            "cannot explain (it only adds host time): the bundled costs are kept"
        )
    if len(trace.frames) and runs_compiled(trace):
        return "uncalibrated", COMPILED_WITH_STACKS_CAVEAT
    return "uncalibrated", None


def step_time(trace: Trace, dev: int | None) -> StepTime | None:
    """``traces[].step_time``; None without steps or without a GPU."""
    t = trace.steps.table
    if not len(t) or dev is None:
        return None
    profiled = step_time_ns(measured_replay(trace), measured=True)
    predicted = predicted_step_ns(trace)
    if math.isnan(profiled) or profiled <= 0:
        return None
    # GPU work per step: the device's busy time over the steps' GPU windows, per step. The kernels
    # keep their durations without the profiler (it costs host time), so the same figure divides
    # both step times, unless the calibration found them running at another speed.
    gs, ge = t["gpu_start_ns"].to_numpy(), t["gpu_end_ns"].to_numpy()
    has = gs >= 0
    s, e = trace.busy_intervals(dev)
    busy = float(intervals.covered(s, e, gs[has], ge[has]).sum()) / max(int(has.sum()), 1)
    unprofiled_busy = busy + (fitted_calibration(trace).kernel_scale - 1.0) * _kernel_ns_per_step(trace, dev)
    unprofiled = None if math.isnan(predicted) or predicted <= 0 else predicted
    basis, caveat = unprofiled_basis(trace, unprofiled) if unprofiled is not None else (None, None)
    return StepTime(
        profiled_step_us=us(profiled),
        unprofiled_step_us=us(unprofiled) if unprofiled is not None else None,
        gpu_busy_per_step_us=us(busy),
        gpu_busy_profiled_pct=min(100.0, 100.0 * busy / profiled),
        gpu_busy_unprofiled_pct=min(100.0, 100.0 * unprofiled_busy / unprofiled) if unprofiled is not None else None,
        unprofiled_basis=basis,
        unprofiled_caveat=caveat,
    )


def _kernel_ns_per_step(trace: Trace, dev: int) -> float:
    """The kernel time of ``dev`` inside the steps' GPU windows, per step (what a kernel scale
    lengthens or shortens)."""
    t = trace.steps.table
    gs, ge = t["gpu_start_ns"].to_numpy(), t["gpu_end_ns"].to_numpy()
    has = gs >= 0
    g = trace.gpu
    k = g[((g["kind"] == KERNEL) & (g["device"] == dev)).to_numpy()]
    if not len(k) or not has.any():
        return 0.0
    ts = k["ts_ns"].to_numpy()
    sel = (ts >= gs[has].min()) & (ts < ge[has].max())
    return float(k["dur_ns"].to_numpy()[sel].sum()) / int(has.sum())
