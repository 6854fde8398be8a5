"""The report's steps: each profiler step's CPU and GPU spans and the main device's busy time in it."""

from __future__ import annotations

import numpy as np

from traceadvisor.report.model import HostStallSummary, StepSummary, StepVariation
from traceadvisor.summary.units import pct, us
from traceadvisor.trace import intervals
from traceadvisor.trace.model import Trace


def step_summaries(trace: Trace, dev: int | None) -> tuple[StepSummary, ...]:
    """``traces[].steps``, in the order of ``trace.steps``; busy time is ``dev``'s (0 without one)."""
    t = trace.steps.table
    if not len(t):
        return ()
    gpu_start, gpu_end = t["gpu_start_ns"].to_numpy(), t["gpu_end_ns"].to_numpy()
    busy_ns = np.zeros(len(t), dtype=np.int64)
    has = gpu_start >= 0
    if dev is not None and has.any():  # every step's busy time in one pass over the busy intervals
        s, e = trace.busy_intervals(dev)
        busy_ns[has] = intervals.covered(s, e, gpu_start[has], gpu_end[has])
    out = []
    for name, step, cpu_start, cpu_end, gs, ge, basis, busy in zip(
        t["name"].tolist(),
        t["step"].tolist(),
        t["cpu_start_ns"].tolist(),
        t["cpu_end_ns"].tolist(),
        gpu_start.tolist(),
        gpu_end.tolist(),
        t["gpu_basis"].tolist(),
        busy_ns.tolist(),
        strict=True,
    ):
        has_gpu = gs >= 0
        gpu_dur = ge - gs if has_gpu else 0
        out.append(
            StepSummary(
                name=name,
                step=int(step),
                cpu_start_us=us(cpu_start),
                cpu_dur_us=us(cpu_end - cpu_start),
                gpu_start_us=us(gs) if has_gpu else None,
                gpu_dur_us=us(gpu_dur),
                gpu_busy_us=us(busy),
                gpu_busy_pct=pct(busy, gpu_dur),
                gpu_window_basis=basis,
            )
        )
    return tuple(out)


# Steps are flagged as unstable when the slowest spans at least this many times the fastest. A
# ratio, not a coefficient of variation: a capture records few steps (3 to 5 by default), where
# one outlier (the first step after warm-up growing the allocator's pools or autotuning cuDNN or
# Triton kernels, a data-loader stall, a checkpoint) moves a CV little but is what makes a mean
# per step describe no real step; and the ratio is what a reader checks against the steps table.
# Steady loops stay well under it: the bundled GPU captures vary by 1.0x to 1.8x (sub-ms steps
# jitter most), so 2x means one step did other work, and the savings per step are averages over it.
UNSTABLE_STEP_RATIO = 2.0


def step_spans_ns(trace: Trace) -> np.ndarray:
    """Each step's own span (ns, in the order of ``trace.steps``): from its CPU start to the later of
    its CPU end and its GPU end; but a step whose GPU work began only after its CPU part had ended
    (the host ran ahead and the GPU was still busy with earlier steps) spans its GPU work alone. From
    its CPU start it would also hold the backlog of the steps before it: in a GPU-bound loop the
    spans would grow by a step each (p12_tf32_before: 5.4, 10.8, 16.2 ms for three 5.4 ms steps) and
    read as steps varying 2-3x."""
    t = trace.steps.table
    cpu_start, cpu_end = t["cpu_start_ns"].to_numpy(), t["cpu_end_ns"].to_numpy()
    gpu_start = t["gpu_start_ns"].to_numpy()
    has_gpu = gpu_start >= 0
    gpu_end = np.where(has_gpu, t["gpu_end_ns"].to_numpy(), cpu_end)
    begin = np.where(has_gpu & (gpu_start > cpu_end), gpu_start, cpu_start)
    return np.asarray(np.maximum(cpu_end, gpu_end) - begin)


def step_variation(trace: Trace) -> StepVariation | None:
    """How far the profiled steps' spans differ (``traces[].step_variation``; each step's span as
    ``step_spans_ns`` gives it). None with fewer than two steps of positive span."""
    t = trace.steps.table
    if len(t) < 2:
        return None
    cpu_start = t["cpu_start_ns"].to_numpy()
    span = step_spans_ns(trace)
    keep = np.flatnonzero(span > 0)
    if len(keep) < 2:
        return None
    spans = span[keep]
    lo, hi = int(spans.min()), int(spans.max())
    slowest = int(keep[int(spans.argmax())])
    ratio = hi / lo
    return StepVariation(
        min_us=us(lo),
        max_us=us(hi),
        ratio=ratio,
        slowest=str(t["name"].iloc[slowest]),
        slowest_is_first=slowest == int(np.argmin(cpu_start)),
        steps=len(keep),
        unstable=ratio >= UNSTABLE_STEP_RATIO,
    )


def host_stalls(trace: Trace) -> tuple[HostStallSummary, ...]:
    """``traces[].host_stalls``: the window's one-off host stalls, and what the predicted unprofiled
    step leaves out of each (``profiler_cost.stall_regions``)."""
    from traceadvisor.whatif.one_off_stalls import one_off_stalls
    from traceadvisor.whatif.profiler_cost import stall_regions

    taken = {(r.thread, r.start_ns, r.end_ns) for r in stall_regions(trace)}
    out = []
    for s in one_off_stalls(trace):
        left = s.removed_ns if (s.thread, s.start_ns, s.end_ns) in taken else 0
        out.append(
            HostStallSummary(
                step=s.step,
                pid=s.thread >> 32,
                tid=s.thread & 0xFFFFFFFF,
                name=s.name,
                start_us=us(s.start_ns),
                dur_us=us(s.end_ns - s.start_ns),
                excess_us=us(s.excess_ns),
                usual_us=us(s.usual_ns),
                left_out_us=us(left),
            )
        )
    return tuple(out)
