"""The report's steps: each profiler step's CPU and GPU spans and the main device's busy time in it."""

from __future__ import annotations

import numpy as np

from traceadvisor.report.model import StepSummary
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
