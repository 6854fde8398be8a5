"""GK102: launch-bound steps: the host issues small kernels slower than the GPU runs them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceadvisor.rules_api import (
    BLOCKING_CALLS,
    GRAPH_LAUNCHES,
    PROFILER_EVENT_COST_NS,
    Capability,
    Evidence,
    Finding,
    IdleCause,
    Rule,
    Severity,
    Trace,
    idle_attribution,
    intervals,
    location_of,
)


@dataclass(frozen=True)
class Options:
    min_short_pct: float = 50.0  # share of kernels shorter than their launch call that makes a step launch-bound
    max_busy_pct: float = 70.0  # ... while the GPU is busy less than this share of the step
    min_launch_pct: float = 3.0  # ... and launch calls take at least this share of the step
    max_graph_pct: float = 50.0  # a step whose kernel time is at least this share graph-replayed is already captured
    profiler_event_us: float = PROFILER_EVENT_COST_NS / 1000  # the profiler's host cost per recorded event


class LaunchOverhead(Rule[Options]):
    """Steps are launch-bound: the host spends longer launching kernels than the GPU runs them.

    ## Why it matters
    Each eager op costs the host a few microseconds to dispatch and launch. When kernels are
    shorter than that, the GPU finishes each one before the next arrives and starves, however
    fast the kernels are.

    ## How it shows up in a trace
    Per step: most kernels (≥ 50%) run shorter than their `cudaLaunchKernel` call, the GPU is busy
    less than 70% of the step, and launch calls take ≥ 3% of it. Kernels replayed from a CUDA
    graph (`cudaGraphLaunch`) are not counted, and a step whose kernel time is mostly graph
    replay is already captured: the rule does not fire on it. The rule claims the idle gaps the
    attribution calls `launch_bound` (the next work was launched late after a short host
    interval: dispatch overhead, not a CPU stall) in those steps; the saving of CUDA Graphs or
    `torch.compile(mode="reduce-overhead")` is that idle less the profiler's own host cost of the
    events recorded in it (`profiler_event_us` each), which an unprofiled run does not pay. A step
    that synchronizes with the GPU cannot be captured in a graph: such steps are reported without
    a saving, pointing at `sync-point` first.

    ## How to fix
    Capture the step in a CUDA graph (`torch.cuda.graphs`, `torch.cuda.make_graphed_callables`)
    or compile it with `torch.compile(mode="reduce-overhead")`; fuse small ops with
    `torch.compile`, use foreach/fused optimizers, or increase the batch size so each kernel does
    more work.

    ## Options
    - `min_short_pct`: share of kernels shorter than their launch call that marks a step (%).
    - `max_busy_pct`: a step is starved when the GPU is busy less than this share of it (%).
    - `min_launch_pct`: launch calls must take at least this share of the step (%).
    - `max_graph_pct`: a step whose kernel time is at least this share graph-replayed is left alone (%).
    - `profiler_event_us`: the profiler's host cost per recorded op, annotation or Python frame
      (default 3 µs, measured on the fixtures' before/after pairs with record_shapes and with_stack).

    ## References
    - https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs
    - https://pytorch.org/docs/stable/generated/torch.compile.html
    - https://hta.readthedocs.io/en/latest/source/features/cuda_kernel_launch_stats.html
    """

    code = "GK102"
    name = "launch-overhead"
    severity = Severity.medium
    requires = frozenset({Capability.gpu, Capability.steps})
    claims = frozenset({IdleCause.launch_bound})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts: Options = self.options
        steps = trace.steps.table
        steps = steps[steps["gpu_start_ns"] >= 0].reset_index(drop=True)
        dev = trace.device_ids[0]
        rt = trace.runtime
        k = trace.kernels
        k = k[(k["device"] == dev) & (k["launch"] >= 0)]
        if not len(k) or not len(steps):
            return
        lrows = k["launch"].to_numpy()
        graph = rt["name"].isin(GRAPH_LAUNCHES).to_numpy()[lrows] | (k["graph_id"].to_numpy() > 0)
        launch_dur = rt["dur_ns"].to_numpy()[lrows]
        kdur = k["dur_ns"].to_numpy()
        n = len(steps)
        pos = _step_pos(trace, steps, rt["ts_ns"].to_numpy()[lrows])
        inside = pos >= 0
        eager = inside & ~graph

        def per_step(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
            return np.bincount(pos[mask], weights=values[mask], minlength=n)

        kernels = per_step(np.ones(len(k)), eager)
        short = per_step(np.ones(len(k)), eager & (kdur < launch_dur))
        launch_ns = per_step(launch_dur.astype(np.float64), eager)
        eager_ns = per_step(kdur.astype(np.float64), eager)
        graph_ns = per_step(kdur.astype(np.float64), inside & graph)
        cpu_s, cpu_e = steps["cpu_start_ns"].to_numpy(), steps["cpu_end_ns"].to_numpy()
        gpu_s, gpu_e = steps["gpu_start_ns"].to_numpy(), steps["gpu_end_ns"].to_numpy()
        span = np.maximum(cpu_e, gpu_e) - np.minimum(cpu_s, gpu_s)
        bs, be = trace.busy_intervals(dev)
        busy = intervals.covered(bs, be, gpu_s, gpu_e)
        with np.errstate(divide="ignore", invalid="ignore"):
            short_pct = np.where(kernels > 0, 100.0 * short / kernels, 0.0)
            busy_pct = np.where(span > 0, 100.0 * busy / span, 100.0)
            launch_pct = np.where(span > 0, 100.0 * launch_ns / span, 0.0)
            graph_pct = np.where(eager_ns + graph_ns > 0, 100.0 * graph_ns / (eager_ns + graph_ns), 0.0)
        bound = (
            (kernels > 0)
            & (short_pct >= opts.min_short_pct)
            & (busy_pct < opts.max_busy_pct)
            & (launch_pct >= opts.min_launch_pct)
            & (graph_pct < opts.max_graph_pct)
        )
        if not bound.any():
            return
        # A CUDA graph cannot capture a step that synchronizes with the GPU.
        calls = rt[rt["name"].isin(BLOCKING_CALLS).to_numpy()]
        sync_pos = _step_pos(trace, steps, calls["ts_ns"].to_numpy())
        syncs = np.bincount(sync_pos[sync_pos >= 0], minlength=n)
        capturable = bound & (syncs == 0)

        gaps = idle_attribution(trace)
        gaps = gaps[gaps["cause"] == "launch_bound"]
        gap_pos = _step_pos(trace, steps, rt["ts_ns"].to_numpy()[gaps["launch_row"].to_numpy()])
        event_ns = opts.profiler_event_us * 1000
        recoverable = np.maximum(gaps["dur_ns"].to_numpy() - gaps["host_events"].to_numpy() * event_ns, 0.0)
        ok = gap_pos >= 0
        idle_raw = np.bincount(gap_pos[ok], weights=gaps["dur_ns"].to_numpy()[ok].astype(np.float64), minlength=n)
        idle_rec = np.bincount(gap_pos[ok], weights=recoverable[ok], minlength=n)
        saving = float(idle_rec[capturable].sum())

        n_bound = int(bound.sum())
        sel = bound[np.maximum(pos, 0)] & eager
        first = int(np.flatnonzero(sel)[0])
        lr = rt.loc[int(lrows[first])]
        location = location_of(trace, int(lr["pid"]), int(lr["tid"]), int(lr["ts_ns"]))
        top = k[sel]["name"].astype(str).value_counts().head(3)
        tops = ", ".join(f"{nm[:60]} ×{c}" for nm, c in top.items())
        per = kernels[bound].sum() / n_bound
        short_all = 100.0 * short[bound].sum() / max(kernels[bound].sum(), 1)
        med = float(np.median(kdur[sel])) / 1e3
        head = (
            f"{n_bound} of {len(steps)} steps are launch-bound: {per:.0f} kernels per step, {short_all:.0f}% shorter "
            f"than their launch call (median kernel {med:.1f} µs), GPU busy {busy_pct[bound].mean():.0f}% of the step; "
            f"the GPU idled {idle_raw[bound].sum() / 1e3:.1f} µs waiting for launches. Most launched: {tops}."
        )
        blocked = int((bound & ~capturable).sum())
        if capturable.any():
            message = head + (
                f" CUDA Graphs would save about {saving / 1e3:.1f} µs "
                f"({saving / capturable.sum() / 1e3:.1f} µs per step) without the profiler."
            )
            if blocked:
                message += f" {blocked} of the steps synchronize with the GPU: no graph until those syncs go."
            rec = (
                'Capture the step with CUDA Graphs (torch.cuda.graphs / torch.compile(mode="reduce-overhead")), '
                "fuse small ops with torch.compile, use foreach/fused optimizers, or raise the batch size."
            )
        else:
            message = head + (
                f" The steps synchronize with the GPU ({syncs[bound].sum() / n_bound:.0f} blocking calls per step), "
                "which a CUDA graph cannot capture: no saving is claimed until the syncs are gone (see sync-point)."
            )
            rec = (
                "Remove the host-device syncs in the step first (see sync-point), then capture it with CUDA Graphs "
                '(torch.compile(mode="reduce-overhead")); meanwhile fuse small ops with torch.compile or raise the '
                "batch size."
            )
        worst = gaps[ok & capturable[np.maximum(gap_pos, 0)]].nlargest(5, "dur_ns")
        evidence = [
            Evidence(name=f"GPU idle until {d} was launched", ts_us=s / 1000, dur_us=du / 1000)
            for s, du, d in zip(worst["start_ns"], worst["dur_ns"], worst["detail"], strict=True)
        ]
        yield self.finding(
            trace,
            message=message,
            recommendation=rec,
            impact_ns=saving,
            basis=(
                "GPU idle in launch-bound steps that a CUDA graph can capture, where the next kernel was launched "
                "late after a short host interval (dispatch overhead), less the profiler's own "
                f"{opts.profiler_event_us:g} µs per event recorded in those gaps; CPU stalls are idle-gap's"
            ),
            evidence=evidence,
            location=location,
            data={
                "launch_bound_steps": n_bound,
                "capturable_steps": int(capturable.sum()),
                "kernels_per_step": float(per),
                "short_pct": float(short_all),
                "busy_pct": float(busy_pct[bound].mean()),
                "median_kernel_us": med,
                "launch_bound_idle_us": float(idle_raw[bound].sum()) / 1e3,
                "saving_us": saving / 1e3,
            },
        )


def _step_pos(trace: Trace, steps: pd.DataFrame, ts: np.ndarray) -> np.ndarray:
    """Position in ``steps`` of the step whose CPU window holds each host time (-1 outside)."""
    number = trace.step_of(ts)
    index = pd.Index(steps["step"].to_numpy())
    return np.where(number >= 0, index.get_indexer(number), -1)
