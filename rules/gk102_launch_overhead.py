"""GK102: launch-bound steps: the host issues small kernels slower than the GPU runs them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.rules_api import (
    BLOCKING_CALLS,
    GRAPH_LAUNCHES,
    Capability,
    Finding,
    IdleCause,
    Rule,
    Saving,
    Severity,
    Trace,
    busy_in_windows,
    evidence_of,
    fmt_ns,
    fmt_time,
    idle_of,
    launch_location,
    per_step,
    recoverable_ns_per_gap,
    replay_basis,
    scenario_saving,
    step_positions,
    steps_on_gpu,
    us,
)

F64 = npt.NDArray[np.float64]

BASIS = (
    "each step's launches between syncs replayed from CUDA graphs (the host runs one graph launch instead "
    "of the captured ops; the kernels run back to back)"
)
GRAPH_RECOMMENDATION = (
    'Capture the step with CUDA Graphs (torch.cuda.graphs / torch.compile(mode="reduce-overhead")), '
    "fuse small ops with torch.compile, use foreach/fused optimizers, or raise the batch size."
)
SYNC_FIRST_RECOMMENDATION = (
    "Remove the host-device syncs in the step first (see sync-point), then capture it with CUDA Graphs "
    '(torch.compile(mode="reduce-overhead")); meanwhile fuse small ops with torch.compile or raise the '
    "batch size."
)


@dataclass(frozen=True)
class Options:
    min_short_pct: float = 50.0  # share of kernels shorter than their launch call that makes a step launch-bound
    max_busy_pct: float = 70.0  # ... while the GPU is busy less than this share of the step
    min_launch_pct: float = 3.0  # ... and launch calls take at least this share of the step
    max_graph_pct: float = 50.0  # a step whose kernel time is at least this share graph-replayed is already captured
    min_saving_pct: float = 3.0  # report only when the replayed saving reaches this share of the unprofiled step
    profiler_event_us: float | None = None  # a flat profiler cost per recorded event (idle figures); None: fitted


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
    interval: dispatch overhead, not a CPU stall) in those steps. The saving is a what-if replay:
    the trace's dependency graph replayed without the profiler's host cost, then again with each
    step's launches between two syncs captured in a CUDA graph (the host runs one graph launch
    instead of the captured ops, and the kernels run back to back); the saving is the difference of
    the two step times. A sync splits the graph (a graph cannot capture it), so a step full of syncs
    saves less, and the message points at `sync-point`. A replayed saving below `min_saving_pct`
    of the step is not reported: profiled steps look more launch-bound than they are.

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
    - `min_saving_pct`: the smallest replayed saving reported, as a share of the predicted unprofiled step (%).
    - `profiler_event_us`: a flat host cost per recorded op, annotation or Python frame for the idle
      figures of the message, instead of the fitted cost of each kind (default: unset, the fitted
      costs the replay uses; `0` gives the raw idle).

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
        opts = self.options
        steps = steps_on_gpu(trace)
        dev = trace.device_ids[0]
        sk = _step_kernels(trace, steps, dev) if len(steps) else None
        if sk is None:
            return
        bound, busy_pct = _launch_bound(trace, steps, sk, dev, opts)
        if not bound.any():
            return
        # A CUDA graph cannot capture a sync: the replayed scenario splits each step's graphs at its
        # blocking calls, so the saving counts only what graphs between the syncs recover.
        syncs = _syncs_per_step(trace, steps)
        capturable = bound & (syncs == 0)
        idle = _launch_bound_idle(trace, steps, opts.profiler_event_us)
        replayed = scenario_saving(trace, "cuda-graphs")
        if replayed.share_pct < opts.min_saving_pct:
            return  # launch-bound as profiled, but without the profiler graphs would not pay
        saving = replayed.saving_ns
        sel = bound[np.maximum(sk.pos, 0)] & sk.eager  # the eager kernels of the launch-bound steps
        data = _data(sk, sel, bound, capturable, busy_pct, idle, saving)
        top = sk.kernels[sel]["name"].astype(str).value_counts().head(3)
        gaps = idle.gaps[(idle.pos >= 0) & capturable[np.maximum(idle.pos, 0)]]
        worst = gaps.nlargest(5, "dur_ns")
        labels = (f"GPU idle until {d} was launched" for d in worst["detail"])
        yield self.finding(
            trace,
            message=_head(len(steps), data, top) + _saving_text(capturable, bound, syncs, replayed),
            recommendation=GRAPH_RECOMMENDATION if capturable.any() else SYNC_FIRST_RECOMMENDATION,
            per_step=per_step(replayed),
            basis=replay_basis(replayed, BASIS),
            evidence=evidence_of(worst, labels, start="start_ns"),
            location=launch_location(trace, int(sk.launch_rows[np.flatnonzero(sel)[0]])),
            data=data,
        )


@dataclass(frozen=True)
class StepKernels:
    """The device's kernels that have a launch record, and per step (positions in the steps table)
    the figures the launch-bound test reads. A kernel belongs to the step its launch call starts in;
    kernels replayed from a CUDA graph are not eager."""

    kernels: pd.DataFrame
    launch_rows: npt.NDArray[np.int64]  # each kernel's runtime row
    pos: npt.NDArray[np.intp]  # each kernel's step position (-1: outside the steps)
    eager: npt.NDArray[np.bool_]  # inside a step and not graph-replayed
    count: F64  # eager kernels per step
    short: F64  # ... of which shorter than their launch call
    launch_ns: F64  # time in the eager kernels' launch calls per step
    eager_ns: F64  # eager kernel time per step
    graph_ns: F64  # graph-replayed kernel time per step


def _step_kernels(trace: Trace, steps: pd.DataFrame, dev: int) -> StepKernels | None:
    rt = trace.runtime
    k = trace.kernels
    k = k[(k["device"] == dev) & (k["launch"] >= 0)]
    if not len(k):
        return None
    lrows = k["launch"].to_numpy()
    graph = rt["name"].isin(GRAPH_LAUNCHES).to_numpy()[lrows] | (k["graph_id"].to_numpy() > 0)
    launch_dur = rt["dur_ns"].to_numpy()[lrows]
    kdur = k["dur_ns"].to_numpy()
    pos = step_positions(trace, steps, rt["ts_ns"].to_numpy()[lrows])
    inside = pos >= 0
    eager = inside & ~graph

    def per_step(values: np.ndarray, mask: np.ndarray) -> F64:
        return np.asarray(np.bincount(pos[mask], weights=values[mask], minlength=len(steps)), dtype=np.float64)

    return StepKernels(
        kernels=k,
        launch_rows=lrows,
        pos=pos,
        eager=eager,
        count=per_step(np.ones(len(k)), eager),
        short=per_step(np.ones(len(k)), eager & (kdur < launch_dur)),
        launch_ns=per_step(launch_dur.astype(np.float64), eager),
        eager_ns=per_step(kdur.astype(np.float64), eager),
        graph_ns=per_step(kdur.astype(np.float64), inside & graph),
    )


def _launch_bound(
    trace: Trace, steps: pd.DataFrame, sk: StepKernels, dev: int, opts: Options
) -> tuple[npt.NDArray[np.bool_], F64]:
    """Which steps are launch-bound, and the GPU busy share of each step (%)."""
    cpu_s, cpu_e = steps["cpu_start_ns"].to_numpy(), steps["cpu_end_ns"].to_numpy()
    gpu_s, gpu_e = steps["gpu_start_ns"].to_numpy(), steps["gpu_end_ns"].to_numpy()
    span = np.maximum(cpu_e, gpu_e) - np.minimum(cpu_s, gpu_s)
    busy = busy_in_windows(trace, dev, gpu_s, gpu_e)
    kernel_ns = sk.eager_ns + sk.graph_ns
    with np.errstate(divide="ignore", invalid="ignore"):
        short_pct = np.where(sk.count > 0, 100.0 * sk.short / sk.count, 0.0)
        busy_pct = np.where(span > 0, 100.0 * busy / span, 100.0)
        launch_pct = np.where(span > 0, 100.0 * sk.launch_ns / span, 0.0)
        graph_pct = np.where(kernel_ns > 0, 100.0 * sk.graph_ns / kernel_ns, 0.0)
    bound = (
        (sk.count > 0)
        & (short_pct >= opts.min_short_pct)
        & (busy_pct < opts.max_busy_pct)
        & (launch_pct >= opts.min_launch_pct)
        & (graph_pct < opts.max_graph_pct)
    )
    return bound, busy_pct


def _syncs_per_step(trace: Trace, steps: pd.DataFrame) -> npt.NDArray[np.int64]:
    """Blocking calls (synchronizes, synchronous copies) per step."""
    rt = trace.runtime
    calls = rt[rt["name"].isin(BLOCKING_CALLS).to_numpy()]
    pos = step_positions(trace, steps, calls["ts_ns"].to_numpy())
    return np.bincount(pos[pos >= 0], minlength=len(steps))


@dataclass(frozen=True)
class LaunchIdle:
    """The idle gaps this rule claims, the step of each (by the launch that ended it), and per step
    their idle as recorded and less the profiler's own cost."""

    gaps: pd.DataFrame
    pos: npt.NDArray[np.intp]
    raw: F64
    recoverable: F64


def _launch_bound_idle(trace: Trace, steps: pd.DataFrame, profiler_event_us: float | None) -> LaunchIdle:
    gaps = idle_of(trace, IdleCause.launch_bound)
    pos = step_positions(trace, steps, trace.runtime["ts_ns"].to_numpy()[gaps["launch_row"].to_numpy()])
    ok = pos >= 0
    dur = gaps["dur_ns"].to_numpy()[ok].astype(np.float64)
    rec = recoverable_ns_per_gap(trace, gaps, profiler_event_us)[ok]
    return LaunchIdle(
        gaps=gaps,
        pos=pos,
        raw=np.asarray(np.bincount(pos[ok], weights=dur, minlength=len(steps)), dtype=np.float64),
        recoverable=np.asarray(np.bincount(pos[ok], weights=rec, minlength=len(steps)), dtype=np.float64),
    )


def _data(
    sk: StepKernels,
    sel: npt.NDArray[np.bool_],
    bound: npt.NDArray[np.bool_],
    capturable: npt.NDArray[np.bool_],
    busy_pct: F64,
    idle: LaunchIdle,
    saving: float,
) -> dict[str, int | float]:
    n_bound = int(bound.sum())
    kdur = sk.kernels["dur_ns"].to_numpy()
    return {
        "launch_bound_steps": n_bound,
        "capturable_steps": int(capturable.sum()),
        "kernels_per_step": float(sk.count[bound].sum() / n_bound),
        "short_pct": float(100.0 * sk.short[bound].sum() / max(sk.count[bound].sum(), 1)),
        "busy_pct": float(busy_pct[bound].mean()),
        "median_kernel_us": us(np.median(kdur[sel])),
        "launch_bound_idle_us": us(idle.raw[bound].sum()),
        "saving_us": us(saving),
    }


def _head(n_steps: int, data: dict[str, int | float], top: pd.Series) -> str:
    """What makes the steps launch-bound, and the kernels launched most."""
    return (
        f"{data['launch_bound_steps']} of {n_steps} steps are launch-bound: {data['kernels_per_step']:.0f} "
        f"kernels per step, {data['short_pct']:.0f}% shorter than their launch call (median kernel "
        f"{fmt_time(data['median_kernel_us'])}), GPU busy {data['busy_pct']:.0f}% of each profiled step; the GPU idled "
        f"{fmt_time(data['launch_bound_idle_us'])} waiting for launches. Most launched: "
        + ", ".join(f"{nm[:60]} ×{c}" for nm, c in top.items())
        + "."
    )


def _saving_text(
    capturable: npt.NDArray[np.bool_], bound: npt.NDArray[np.bool_], syncs: npt.NDArray[np.int64], saving: Saving
) -> str:
    text = (
        f" Replayed without the profiler, CUDA graphs take the step from {fmt_ns(saving.before_ns)} to "
        f"{fmt_ns(saving.before_ns - saving.saving_ns)} ({saving.share_pct:.0f}% less)."
    )
    blocked = int((bound & ~capturable).sum())
    if blocked:
        text += (
            f" {blocked} of the launch-bound steps synchronize with the GPU ({syncs[bound].sum() / bound.sum():.0f} "
            "blocking calls per step): a graph cannot capture a sync, so that saving counts only the graphs "
            "between the syncs; removing them (see sync-point) recovers more."
        )
    return text
