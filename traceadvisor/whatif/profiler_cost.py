"""The profiler's own host cost, per kind of recorded event, and the unprofiled replay it gives.

A profiled host thread runs slower than an unprofiled one: every op, Python frame, annotation,
runtime call and memory event the profiler records costs it host time (RecordFunction callbacks,
the Python tracer's frame hooks, CUPTI's runtime-API callbacks; pytorch/pytorch#100253 measures
the per-op cost). The cost differs by kind (an op with ``record_shapes`` also copies its input
shapes; a Python frame is only a frame hook), so one constant per event is wrong by kind mix: the
constant the rules used before (3 µs) made a gap holding 1,357 Python frames look entirely made of
profiler time.

The costs below are fitted by ``bench/fit_profiler_cost.py`` on the ``fit`` half of the GPU pairs of
runs 14-16 (``fixtures/pairs12_runs/``: profiled traces against the same program's step time
measured without the profiler, with CUPTI detached after each capture) and stored in
``profiler_cost.json`` beside this file; the other half of the pairs is the validation the README
reports. Each trace's costs are scaled by its host's speed while it was profiled (``host_speed``).
The unprofiled replay takes each event's cost out of its thread's timeline
(``host_time.point_costs``): host-bound steps shrink by what their recorded events cost, GPU-bound
steps keep their GPU time.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses.cache import memoised
from traceadvisor.analyses.idle import GRAPH_LAUNCHES
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.host_time import HostTimeMap, Region, point_costs, process_key, thread_key
from traceadvisor.whatif.one_off_stalls import one_off_stalls
from traceadvisor.whatif.replay import Overrides, Replay, replay
from traceadvisor.whatif.scenarios import (
    COMPILED_REGION_PREFIXES,
    GRAPH_LAUNCH_NS,
    GRAPH_NODE_PROFILER_NS,
    step_time_ns,
)

KINDS = (
    "op_shapes",
    "op",
    "autograd_node",
    "python",
    "python_builtin",
    "annotation",
    "step",
    "runtime",
    "memory",
    "inductor_launch",
    "inductor_launch_shapes",
    "compiled_region",
)
KIND_HELP = {
    "op_shapes": "an op (cpu_op) recorded with its input shapes (record_shapes=True)",
    "op": "an op recorded without shapes",
    "autograd_node": "the autograd engine's record of one backward node (autograd::engine::evaluate_function)",
    "python": "a Python function frame (with_stack=True)",
    "python_builtin": "a call of a built-in (C) function the Python tracer recorded (with_stack=True)",
    "annotation": "a record_function annotation",
    "step": "a ProfilerStep#N annotation (the profiler's own work at each prof.step())",
    "runtime": "a CUDA runtime or driver call (CUPTI callback)",
    "memory": "a memory event (profile_memory=True)",
    "inductor_launch": "a torch.compile'd (Inductor) Triton kernel's launch record, without shapes",
    "inductor_launch_shapes": "a torch.compile'd (Inductor) Triton kernel's launch record with its arguments' shapes",
    "compiled_region": "the records of one call of a torch.compile'd function (Dynamo's region, the FX graph's call)",
}
# Inductor names the host record of each Triton launch after the kernel (triton_poi_/red_/per_/tem_...).
# Under the profiler its launcher leaves the cached fast path and wraps the launch in a
# _RecordFunctionFast carrying every argument (torch/_inductor/runtime/triton_heuristics.py,
# CachingAutotuner.run): fixtures/profiler_cost_bench.py measures 10-23 µs per launch without shapes
# and 33-38 µs with them, against ~3 µs for an eager op.
INDUCTOR_LAUNCH_PREFIX = "triton_"
# The autograd engine records each backward node it runs as one of these, around the node's ops (on
# its own thread for CUDA work). It has no input shapes, so it would count as an op recorded without
# them; fitted as one on the clean pairs it cost 8-14 µs a record against ~3 for an op with shapes
# (the engine's per-node bookkeeping under the profiler: sequence numbers, the forward op's link).
AUTOGRAD_NODE_PREFIX = "autograd::engine::evaluate_function"


@dataclass(frozen=True)
class ProfilerCost:
    """Host ns per recorded event, by kind; ``fitted`` says where the numbers come from.

    ``per_recorded``: kinds whose cost is not a constant but a multiple of the event's own recorded
    duration (ns of cost per ns recorded). An Inductor launch record with shapes lasts 9-12 µs in an
    inference forward and 15-22 µs in a trainer's backward (more arguments to record, a slower
    moment of the host): against the steps timed around the captures, one constant fitted on the
    compile fit pairs' compiled traces left them at +42/+17/-23%, the multiple of each record's
    duration at +17/-1/-13%, and the validation pairs' compiled traces at -15/-7/-11% (the
    microbenchmark's constant, 35 µs: -19/-47/-75%; ``python bench/rejected_models.py launch-constant``)."""

    ns: dict[str, float]
    fitted: dict[str, Any]
    per_recorded: dict[str, float] = field(default_factory=dict)
    # the fit traces' median kernel-launch call (ns): the host speed the costs are fitted at
    # (``host_speed``); None: the costs are used as they are
    reference_launch_ns: float | None = None
    # the factors ``scaled`` (a trace's calibration) and ``at_host_speed`` applied: the measured
    # costs (``wrapper_gap_costs``) take them as the per-kind constants do
    scale: float = 1.0
    speed: float = 1.0

    @classmethod
    def bundled(cls) -> ProfilerCost:
        return _bundled()

    def scaled(self, factor: float) -> ProfilerCost:
        """Every cost times ``factor`` (the trace's calibration)."""
        return ProfilerCost(
            {k: v * factor for k, v in self.ns.items()},
            self.fitted,
            {k: v * factor for k, v in self.per_recorded.items()},
            self.reference_launch_ns,
            self.scale * factor,
            self.speed,
        )

    def at_host_speed(self, speed: float) -> ProfilerCost:
        """The per-event costs times the host's ``speed`` (``host_speed``). The per-duration costs
        stay: a record's own duration already grew or shrank with the host."""
        ns = {k: v * speed for k, v in self.ns.items()}
        return ProfilerCost(
            ns, self.fitted, self.per_recorded, self.reference_launch_ns, self.scale, self.speed * speed
        )

    def for_trace(self, trace: Trace) -> ProfilerCost:
        """These costs at the speed ``trace``'s host ran at while it was profiled."""
        return self.at_host_speed(host_speed(trace, self.reference_launch_ns))


@functools.cache
def _bundled() -> ProfilerCost:
    doc = json.loads(resources.files("traceadvisor.whatif").joinpath("profiler_cost.json").read_text())
    per = {k: float(v) for k, v in doc.get("per_recorded_ns", {}).items() if k in KINDS}
    ref = doc.get("reference_launch_ns")
    return ProfilerCost(
        {k: float(doc["ns_per_event"][k]) for k in KINDS},
        doc.get("fitted", {}),
        per,
        float(ref) if isinstance(ref, int | float) else None,
    )


# Kernel launches whose recorded duration is the capture host's speed: every one does the same
# driver work, and a host running 1.5x faster records each of them (and every op) about that much
# shorter (storm_compile after: cudaLaunchKernel 5.2 µs in run 8 against 8.2 µs in the fixture,
# aten::empty 3.1 against 5.5; storm before, run 14 against run 12: 5.4 against 11.4 µs). HIP's
# launches are left out: the costs were fitted on CUDA hosts only.
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
# fewer launches than this say too little about the host's speed. The median of 25 launch calls
# drawn from a trace's own (their IQR 20-40% of the median) is within 3-8% of the trace's median
# (bootstrap standard error on storm, sdpa, item_gpu_short and item_gpu_short_wide: python
# bench/launch_sample_error.py), well inside
# the 20-50% the host's speed drifts between captures seconds apart. It was 100 until run 28:
# item_gpu_short_wide's before traces have 99 launches (speed taken as 1.0) where its after
# traces, 102, read 1.5; at 25 the only other traces that change are sdpa's (fit, 66 launches:
# one more fit step within 10%, run 16), and the validation half goes from 116/62/79 to 117/63/80
# (steps within 10%, savings within 20%, savings right; ``python bench/pairs_validation.py
# --all-runs``; calibrated unchanged). Graph-launched and copy-only traces (0-15 launches) still
# read no speed.
MIN_LAUNCHES = 25
# a factor outside this range is another kind of machine (or runtime), not the same host's speed
HOST_SPEED_RANGE = (0.5, 2.0)


@memoised
def median_launch_ns(trace: Trace) -> float | None:
    """The median recorded duration of the trace's kernel-launch calls (ns); None with fewer than
    ``MIN_LAUNCHES``. Once per trace: every scenario's unprofiled replay asks for its host speed."""
    rt = trace.runtime
    if not len(rt):
        return None
    launch = rt["name"].astype(str).isin(LAUNCH_CALLS).to_numpy()
    if int(launch.sum()) < MIN_LAUNCHES:
        return None
    return float(np.median((rt["end_ns"] - rt["ts_ns"]).to_numpy()[launch]))


def host_speed(trace: Trace, reference_ns: float | None) -> float:
    """How much slower than the fit traces' host this trace's host ran while it was profiled: its
    median kernel-launch call over ``reference_ns`` (1.0 without one of the two), clipped to
    ``HOST_SPEED_RANGE``. The profiler's costs are host instructions, so they scale with it."""
    here = median_launch_ns(trace)
    if here is None or not reference_ns:
        return 1.0
    lo, hi = HOST_SPEED_RANGE
    return float(np.clip(here / reference_ns, lo, hi))


@memoised
def recorded_events(
    trace: Trace,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int8], npt.NDArray[np.int64]]:
    """Every recorded host event as (thread key, start ns, kind index into KINDS, recorded duration ns),
    once per trace (every scenario's unprofiled replay asks; its name scans cover the host table).
    Shared arrays: read them, do not write them."""
    parts = []
    host = trace.host
    if len(host):
        ann = host["is_annotation"].to_numpy(dtype=bool)
        step = ann & host["name"].astype(str).str.startswith("ProfilerStep#").to_numpy()
        shapes = host["input_dims"].notna().to_numpy()
        kind = np.where(ann, KINDS.index("annotation"), np.where(shapes, KINDS.index("op_shapes"), KINDS.index("op")))
        kind = np.where(step, KINDS.index("step"), kind)
        names = host["name"].astype(str)
        node = ~ann & names.str.startswith(AUTOGRAD_NODE_PREFIX).to_numpy()
        kind = np.where(node, KINDS.index("autograd_node"), kind)
        launch = ~ann & names.str.startswith(INDUCTOR_LAUNCH_PREFIX).to_numpy()
        region = names.str.startswith(COMPILED_REGION_PREFIXES).to_numpy()
        kind = np.where(
            launch,
            np.where(shapes, KINDS.index("inductor_launch_shapes"), KINDS.index("inductor_launch")),
            kind,
        )
        kind = np.where(region, KINDS.index("compiled_region"), kind)
        parts.append((host, kind))
    frames = trace.frames
    if len(frames):
        builtin = frames["name"].astype(str).str.startswith("<built-in").to_numpy()
        parts.append((frames, np.where(builtin, KINDS.index("python_builtin"), KINDS.index("python"))))
    for table, name in ((trace.runtime, "runtime"), (trace.memory, "memory")):
        if len(table):
            parts.append((table, np.full(len(table), KINDS.index(name))))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0, dtype=np.int8), empty
    threads = np.concatenate([thread_key(t["pid"].to_numpy(), t["tid"].to_numpy()) for t, _ in parts])
    ts = np.concatenate([t["ts_ns"].to_numpy(dtype=np.int64) for t, _ in parts])
    kinds = np.concatenate([k for _, k in parts]).astype(np.int8)
    durs = np.concatenate([_durations(t) for t, _ in parts])
    return threads, ts, kinds, durs


def _durations(table: Any) -> npt.NDArray[np.int64]:
    """A table's recorded durations (ns; 0 where it has none: a memory event is an instant)."""
    if "end_ns" not in table:
        return np.zeros(len(table), dtype=np.int64)
    durations: npt.NDArray[np.int64] = np.maximum(0, (table["end_ns"] - table["ts_ns"]).to_numpy(dtype=np.int64))
    return durations


def event_counts(trace: Trace) -> dict[str, int]:
    """How many events of each kind the trace recorded."""
    kinds = recorded_events(trace)[2]
    return {k: int((kinds == i).sum()) for i, k in enumerate(KINDS)}


def profiler_time(trace: Trace, cost: ProfilerCost, read_wrapper_gaps: bool = True) -> HostTimeMap:
    """The host time the profiler spent recording: point costs at each recorded event, and its own
    work at each ``prof.step()`` (``own_step_work``) taken out whole. ``read_wrapper_gaps=False``:
    long Inductor wrappers' frames costed as any Python frame (the model before ``wrapper_gaps``,
    which bench/compiled_steps.py compares)."""
    threads, ts, kinds, durs = recorded_events(trace)
    per_kind = np.array([cost.ns[k] for k in KINDS], dtype=np.float64)
    costs = per_kind[kinds]
    for kind, multiple in cost.per_recorded.items():
        sel = kinds == KINDS.index(kind)
        costs[sel] = multiple * durs[sel]
    gaps = wrapper_gaps(trace) if read_wrapper_gaps else None
    if gaps is not None:
        # inside a long Inductor wrapper the frames' hooks are what the gaps between its calls hold
        # (wrapper_gaps): the gaps beyond a line's own bytecode are the profiler's cost, the frames none
        frame = np.isin(kinds, (KINDS.index("python"), KINDS.index("python_builtin")))
        costs = np.where(frame & gaps.holds(threads, ts), 0.0, costs)
        extra = np.maximum(gaps.gap_ns - WRAPPER_LINE_NS * cost.speed, 0.0) * cost.scale
        threads = np.concatenate((threads, gaps.call_thread))
        ts = np.concatenate((ts, gaps.call_ts))
        costs = np.concatenate((costs, extra))
    points = point_costs(threads, ts, costs)
    return HostTimeMap(points.points, own_step_work(trace))


# Inductor's generated wrapper (``call()`` in ``<cache>/torchinductor_<user>/xx/<hash>.py``) is one
# long function: a line per buffer, launch or extern call. Under the Python tracer the profiler's
# cost per call grows with the call's position in such a function (fixtures/wrapper_length/: the
# gaps between its calls grow by 20-42 ns per earlier call, the frame's self time is 11-24 ns x
# calls^2), which no per-event constant holds. Against the steps timed around the captures of the
# compile pairs' compiled sides (runs 14, 16-21, uncalibrated; ``python bench/compiled_steps.py``),
# per-frame costs left the fit pairs' traces at -73% to +47% (2 of 15 within 10%, median |error|
# 47%) and the validation pairs' at -71% to +283% (1 of 21, median 56%); with each gap between a
# long wrapper's calls taken out beyond a line's own bytecode and its frames at no cost, -38% to
# +56% (6 of 15, median 17%) and -35% to +73% (10 of 21, median 18.5%). A short wrapper is left to
# the per-frame costs: its position cost is small (under ~40 µs at 50 calls) and its gaps hold real
# work: elementwise's 9-call wrapper (a fit pair) stays at +0 to +27% with them, +16% to +130% by
# its gaps (the rejected model that took every wrapper's gaps: ``bench/rejected_models.py
# compiled-stack``, docs/whatif.md).
WRAPPER_MIN_CALLS = 50
# a wrapper line's own bytecode between two calls, unprofiled (at the fit traces' host speed)
WRAPPER_LINE_NS = 150.0
INDUCTOR_WRAPPER = ("torchinductor", "): call")


@dataclass(frozen=True)
class WrapperGaps:
    """The long Inductor wrappers of a trace (``WRAPPER_MIN_CALLS`` direct calls or more): each
    wrapper call's span per thread, and each direct call's thread, start and the gap before it (from
    the previous call's end, or the wrapper's start)."""

    thread: npt.NDArray[np.int64]
    start_ns: npt.NDArray[np.int64]
    end_ns: npt.NDArray[np.int64]
    call_thread: npt.NDArray[np.int64]
    call_ts: npt.NDArray[np.int64]
    gap_ns: npt.NDArray[np.float64]

    def holds(self, threads: npt.NDArray[np.int64], ts: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which events (thread key, start) fall inside one of the wrappers on their own thread."""
        return inside_spans(self.thread, self.start_ns, self.end_ns, threads, ts)


def inside_spans(
    span_thread: npt.NDArray[np.int64],
    span_start: npt.NDArray[np.int64],
    span_end: npt.NDArray[np.int64],
    threads: npt.NDArray[np.int64],
    ts: npt.NDArray[np.int64],
) -> npt.NDArray[np.bool_]:
    """Which events (thread key, start) fall inside one of the spans on their own thread; the spans of
    one thread do not overlap (calls of one function, one after another)."""
    out = np.zeros(len(ts), dtype=bool)
    for k in np.unique(span_thread).tolist():
        mine = np.flatnonzero(span_thread == k)
        order = mine[np.argsort(span_start[mine], kind="stable")]
        s, e = span_start[order], span_end[order]
        sel = np.flatnonzero(threads == k)
        i = np.searchsorted(s, ts[sel], side="right") - 1
        ok = i >= 0
        ok[ok] = ts[sel][ok] < e[i[ok]]
        out[sel] = ok
    return out


def _is_wrapper(names: Any) -> npt.NDArray[np.bool_]:
    """Which frame names are an Inductor wrapper's ``call``: tested once per distinct name where the
    column is categorical (a big trace holds millions of frames and a few thousand names)."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        cats = pd.Series(names.cat.categories.astype(str))
        hit = (cats.str.contains(INDUCTOR_WRAPPER[0], regex=False) & cats.str.endswith(INDUCTOR_WRAPPER[1])).to_numpy()
        codes = names.cat.codes.to_numpy()
        return np.asarray((codes >= 0) & hit[np.maximum(codes, 0)], dtype=bool)
    text = names.astype(str)
    return np.asarray(text.str.contains(INDUCTOR_WRAPPER[0], regex=False) & text.str.endswith(INDUCTOR_WRAPPER[1]))


@memoised
def wrapper_gaps(trace: Trace) -> WrapperGaps | None:
    """The trace's long Inductor wrappers and the gaps between their calls (None without any)."""
    f = trace.frames
    if not len(f):
        return None
    wrappers = f[_is_wrapper(f["name"])]
    if not len(wrappers):
        return None
    calls = f[f["py_parent"].isin(wrappers["py_id"])].sort_values(["py_parent", "ts_ns"], kind="stable")
    per_wrapper = calls.groupby("py_parent").size()
    long_ids = per_wrapper.index[per_wrapper.to_numpy() >= WRAPPER_MIN_CALLS]
    if not len(long_ids):
        return None
    wrappers = wrappers[wrappers["py_id"].isin(long_ids)]
    calls = calls[calls["py_parent"].isin(long_ids)]
    start = wrappers.set_index("py_id")["ts_ns"]
    prev = calls.groupby("py_parent")["end_ns"].shift(1).fillna(calls["py_parent"].map(start))
    gap = (calls["ts_ns"] - prev).to_numpy(dtype=np.float64)
    return WrapperGaps(
        thread_key(wrappers["pid"].to_numpy(), wrappers["tid"].to_numpy()),
        wrappers["ts_ns"].to_numpy(dtype=np.int64),
        wrappers["end_ns"].to_numpy(dtype=np.int64),
        thread_key(calls["pid"].to_numpy(), calls["tid"].to_numpy()),
        calls["ts_ns"].to_numpy(dtype=np.int64),
        np.maximum(gap, 0.0),
    )


# The profiler's own Python at each prof.step() (torch/profiler/profiler.py, ``profile.step``: the
# schedule's transition, closing one ProfilerStep#N record and opening the next), as the Python
# tracer names its frame.
PROFILER_STEP_FRAME = ("torch/profiler/profiler.py(", "): step")


@memoised
def own_step_work(trace: Trace) -> tuple[Region, ...]:
    """The host time of each ``prof.step()`` call, which a loop without the profiler never spends:
    with stacks, its frame (p12_item_gpu_before: 145 µs a step, right after the ``.item()`` returns,
    so the GPU waited for it too: with the bundled costs the no-sync saving comes out 6.6% with it
    kept, 5.4% without it, against 3.1% measured); without stacks, the gap between one
    ProfilerStep#N record's end and the next one's start on the same thread (the part of the call
    between the two records)."""
    f = trace.frames
    if len(f):
        names = f["name"].astype(str)
        calls = f[names.str.startswith(PROFILER_STEP_FRAME[0]) & names.str.endswith(PROFILER_STEP_FRAME[1])]
        if len(calls):
            keys = thread_key(calls["pid"].to_numpy(), calls["tid"].to_numpy()).tolist()
            spans = zip(keys, calls["ts_ns"].tolist(), calls["end_ns"].tolist(), strict=True)
            return tuple(Region(int(k), int(a), int(b), 0) for k, a, b in spans if b > a)
    host = trace.host
    if not len(host):
        return ()
    named = host["name"].astype(str).str.startswith("ProfilerStep#").to_numpy()
    marks = host["is_annotation"].to_numpy(dtype=bool) & named
    steps = host[marks].sort_values("ts_ns", kind="stable")
    keys = thread_key(steps["pid"].to_numpy(), steps["tid"].to_numpy())
    starts, ends = steps["ts_ns"].to_numpy(), steps["end_ns"].to_numpy()
    between = np.flatnonzero((keys[1:] == keys[:-1]) & (starts[1:] > ends[:-1]))
    return tuple(Region(int(keys[i + 1]), int(ends[i]), int(starts[i + 1]), 0) for i in between.tolist())


@memoised
def stall_regions(trace: Trace) -> tuple[Region, ...]:
    """The window's one-off host stalls (``one_off_stalls``), each shrunk by its excess: what the
    unprofiled baseline leaves out besides the profiler. A stall inside the profiler's own step
    work, or inside a long Inductor wrapper whose gaps ``wrapper_gaps`` already costs, is left to
    them (taken out twice, it would remove more than the stretch held)."""
    stalls = one_off_stalls(trace)
    if not stalls:
        return ()
    own = own_step_work(trace)
    gaps = wrapper_gaps(trace)
    out = []
    for s in stalls:
        if any(
            process_key(r.thread) == process_key(s.thread) and r.start_ns < s.end_ns and s.start_ns < r.end_ns
            for r in own
        ):
            continue
        if gaps is not None and gaps.holds(np.array([s.thread]), np.array([s.start_ns]))[0]:
            continue
        out.append(s.region())
    return tuple(out)


def graph_launch_durations(trace: Trace) -> dict[int, int]:
    """Graph launch calls at their unprofiled cost. Under CUPTI a cudaGraphLaunch writes an activity
    record per node and returns only after that: 5.6-5.9 ms for the 3,420 nodes of p12_decode_after
    (1.7 µs per node), where the same launch without the profiler is a few µs
    (``scenarios.GRAPH_LAUNCH_NS``). The calls are asynchronous, so what follows them moves."""
    rt = trace.runtime
    rows = np.flatnonzero(rt["name"].astype(str).isin(GRAPH_LAUNCHES).to_numpy())
    dur = (rt["end_ns"] - rt["ts_ns"]).to_numpy()[rows]
    return {int(r): int(min(d, GRAPH_LAUNCH_NS)) for r, d in zip(rows.tolist(), dur.tolist(), strict=True)}


def unprofiled_overrides(trace: Trace, cost: ProfilerCost | None = None, read_wrapper_gaps: bool = True) -> Overrides:
    """The replay's change that takes the profiler out: the host cost of what it recorded, and the
    per-node cost it adds to graph launches. Without ``cost``: the bundled costs, scaled by the
    trace's ``calibration`` (computed once per trace: every scenario's replay and the rules that
    read the profiler's time in a gap share it)."""
    if cost is None:
        return _calibrated_overrides(trace, read_wrapper_gaps)
    return Overrides(
        host_removed=profiler_time(trace, cost, read_wrapper_gaps).plus(HostTimeMap(regions=stall_regions(trace))),
        host_dur_ns=graph_launch_durations(trace),
        graph_gap_cut_ns=GRAPH_NODE_PROFILER_NS,
    )


@memoised
def _calibrated_overrides(trace: Trace, read_wrapper_gaps: bool) -> Overrides:
    return unprofiled_overrides_at(trace, 1.0, read_wrapper_gaps)


def unprofiled_overrides_at(trace: Trace, factor: float, read_wrapper_gaps: bool = True) -> Overrides:
    """The calibrated unprofiled baseline's change with the profiler's host cost times ``factor``
    on top of the calibration's (``host_cost_interval``: the host's other plausible speeds)."""
    fit = fitted_calibration(trace)
    cost = ProfilerCost.bundled().for_trace(trace).scaled(fit.host_cost * factor)
    return replace(unprofiled_overrides(trace, cost, read_wrapper_gaps), kernel_scale=fit.kernel_scale)


@memoised
def step_at(trace: Trace, factor: float) -> float:
    """The predicted unprofiled step (ns) with the profiler's host cost at ``factor`` of the
    calibration's: the ends of ``host_cost_interval`` and their search, and each saving's baseline
    there (``savings.host_alternatives``), share it."""
    return step_time_ns(replay(trace, unprofiled_overrides_at(trace, factor)))


# The factor on the bundled profiler costs where a trace's measured unprofiled step fixed it (the
# host-bound traces of the fit half of the clean GPU pairs, runs 14-37, both sides, each capture
# calibrated alone to the steps timed around it: 133 traces): its 10th and 90th percentiles.
# ``python bench/pairs_validation.py --fit-host-spread``. Where the measured step does not fix the
# factor (a GPU-bound step, or a trace without measured steps) the host's own time is known only this
# well, and a fix whose saving depends on the host/GPU balance (torch.compile's host time, a GPU fix
# that leaves the step host-bound) is given the savings at both ends (``host_cost_interval``).
HOST_COST_PLAUSIBLE = (0.806, 1.266)
# the balance search's steps: the lowest (highest) factor at which the replay still meets the
# measured step to within its tolerance, found to (1 - lo) / 2**BALANCE_STEPS (hi - 1 likewise)
BALANCE_STEPS = 6


@memoised
def host_cost_interval(trace: Trace) -> tuple[float, float] | None:
    """The plausible factors on the calibrated profiler cost where the trace's measured unprofiled
    step did not fix it (``Calibration.host_pinned`` false): ``HOST_COST_PLAUSIBLE``, its low end
    raised to where the replay reaches the measured step (a host slower than that would have measured
    a longer step) and its high end lowered to where the replay still reaches it, both to within
    ``CALIBRATION_TOLERANCE`` (a step met within it by the bundled costs leaves the factor free only
    that far). None without a measured step (the saving's range is then the fitted band alone:
    two more replays per scenario on every trace cost what the analysis of a large trace cannot pay,
    bench/RESULTS.md section 7) or where the step fixed the factor. Relative to the calibration's own
    factor (1.0 is the baseline every saving is replayed on)."""
    target = measured_unprofiled_ns(trace)
    fit = fitted_calibration(trace)
    if target is None or fit.host_pinned or not len(trace.steps.table):
        return None
    lo, hi = (f / fit.host_cost for f in HOST_COST_PLAUSIBLE) if fit.host_cost > 0 else (1.0, 1.0)
    lo = min(lo, 1.0)
    ceiling = (1.0 + CALIBRATION_TOLERANCE) * target

    def step(f: float) -> float:
        return step_at(trace, f)

    if step(lo) > ceiling:
        a, b = lo, 1.0
        for _ in range(BALANCE_STEPS):
            mid = (a + b) / 2
            a, b = (mid, b) if step(mid) > ceiling else (a, mid)
        lo = b
    hi = max(hi, 1.0)
    floor = (1.0 - CALIBRATION_TOLERANCE) * target
    if step(hi) < floor:  # a host-bound step met within the tolerance: a faster host would measure less
        a, b = 1.0, hi
        for _ in range(BALANCE_STEPS):
            mid = (a + b) / 2
            a, b = (mid, b) if step(mid) >= floor else (a, mid)
        hi = a
    return lo, hi


def measured_unprofiled_ns(trace: Trace) -> float | None:
    """The median step time capture or the advisor measured with the profiler off (the trace's
    top-level ``"traceadvisor"`` key, docs/capture.md), ns; None when the trace does not carry it."""
    key = trace.meta.traceadvisor
    times = key.get("unprofiled_step_us") if isinstance(key, Mapping) else None
    if not isinstance(times, list):
        return None
    values = [float(t) for t in times if isinstance(t, int | float) and not isinstance(t, bool) and t > 0]
    # the report's traces[].measured_unprofiled_step_us takes the same median (MeasuredSteps)
    return statistics.median(values) * 1e3 if values else None


def gpu_power_state(trace: Trace) -> dict[str, Any] | None:
    """The GPU's power state capture or the advisor read from NVML as the trace's window ended (the
    ``"traceadvisor"`` key's ``gpu_power``: capture/gpu_power.py), or None when the trace does not
    carry one (a malformed record counts as none)."""
    key = trace.meta.traceadvisor
    state = key.get("gpu_power") if isinstance(key, Mapping) else None
    if not isinstance(state, Mapping) or not isinstance(state.get("power_capped"), bool):
        return None
    return dict(state)


# The source a step time given on the command line is stored under (``traces[].measured_unprofiled_
# step_us.source``), where capture writes "capture" and the advisor "advisor".
GIVEN_STEP_SOURCE = "--step-time"


def give_step_time(trace: Trace, step_us: float) -> bool:
    """Calibrate ``trace`` to a step time its user measured without the profiler (``--step-time``:
    a training log's seconds per iteration), as if capture had stored it; a trace that carries its
    own unprofiled steps keeps them (they were timed in the same process, around the same window).
    Call it before anything reads the trace's profiler cost (it is memoised). Returns whether the
    step time was taken. On the GPU pairs, calibrating each trace to the steps timed around its
    capture put 16 of 20 validation steps within 10% where the bundled costs alone put 14 (run 14;
    ``python bench/pairs_validation.py --calibrated``)."""
    if measured_unprofiled_ns(trace) is not None:
        return False
    key = trace.meta.traceadvisor
    base = dict(key) if isinstance(key, Mapping) else {}
    trace.meta.traceadvisor = {**base, "unprofiled_step_us": [float(step_us)], "source": GIVEN_STEP_SOURCE}
    return True


# Within this share of the measured step the bundled costs are kept: a smaller difference is the
# measurement's own noise (the interleaved rounds of the GPU pairs spread 5-60% on the capture host).
CALIBRATION_TOLERANCE = 0.05

# How far each of the calibration's two factors moves on the fit half of the GPU pairs (runs
# 14-21, each side's capture fitted alone to the steps timed around it; ln of the factor, standard
# deviation): the factor on the profiler's host cost on host-bound sides (GPU busy under 80% of the
# step: 121 traces, 0.17), and the kernels' speed on GPU-bound ones (busy over 95%: 33 traces, 0.02;
# the SM clock under the power limit moves it: fixtures/item_gpu_phases/). A difference between the
# replayed and the measured step is put on the factor for which it is the smaller surprise.
HOST_COST_SIGMA = 0.17
KERNEL_SCALE_SIGMA = 0.02
HOST_COST_RANGE = (0.0, 4.0)
# the SM clock's range on the GPUs measured (H200: 1,650-1,980 MHz under load; H100 alike), as a
# factor on kernel time either way, with room
KERNEL_SCALE_RANGE = (0.8, 1.25)


@dataclass(frozen=True)
class Calibration:
    """What fits the unprofiled replay to the steps measured without the profiler: a factor on the
    bundled profiler costs (``host_cost``: how much of the recorded events' host time to take out)
    and on every kernel's duration (``kernel_scale``: the SMs ran faster or slower than while
    profiled)."""

    host_cost: float = 1.0
    kernel_scale: float = 1.0
    # whether the measured step fixed ``host_cost`` (the bisection of a host-bound step met it);
    # otherwise the factor is the bundled costs' and the host's time is not known beyond them
    # (``host_cost_interval``)
    host_pinned: bool = False


def _bisect(step: Callable[[float], float], target: float, lo: float, hi: float, rising: bool) -> float:
    """The factor in [lo, hi] at which the monotonic ``step`` meets ``target``."""
    for _ in range(20):
        mid = (lo + hi) / 2
        above = step(mid) > target
        lo, hi = (lo, mid) if above == rising else (mid, hi)
    return (lo + hi) / 2


@memoised
def fitted_calibration(trace: Trace) -> Calibration:
    """The calibration of ``trace`` to the step time measured outside the profiler's window, when it
    carries one (none otherwise, or within ``CALIBRATION_TOLERANCE``). Two explanations fit a
    difference: the host (the profiler cost more or less than the bundled costs say: a bisection of
    the cost factor over ``HOST_COST_RANGE``; the step falls as more host time is taken out) or the
    GPU (the kernels ran at another clock: a bisection of the kernel scale over
    ``KERNEL_SCALE_RANGE``; the step rises with it). A host-bound step responds only to the first, a
    GPU-bound one only to the second; where both reach the target, the one whose factor is the
    smaller surprise for its spread (``HOST_COST_SIGMA``, ``KERNEL_SCALE_SIGMA``) is taken. Fitting a
    GPU-bound step through the host instead made it host-bound: p12_gpt_pad_vocab (replayed 2.6%
    under its measured step) then saved 5.7% by its padded GEMMs instead of the measured 34%; and a
    GPU-bound step whose window ran its kernels slower than the steps around it (item_gpu's first
    capture of runs 20 and 21) pushed the host factor to its bound and its sync's saving to zero."""
    target = measured_unprofiled_ns(trace)
    if target is None or not len(trace.steps.table):
        return Calibration()
    base = ProfilerCost.bundled().for_trace(trace)

    @functools.cache
    def host_step(factor: float) -> float:
        return step_time_ns(replay(trace, unprofiled_overrides(trace, base.scaled(factor))))

    nominal = unprofiled_overrides(trace, base)

    def kernel_step(scale: float) -> float:
        return step_time_ns(replay(trace, replace(nominal, kernel_scale=scale)))

    if abs(host_step(1.0) - target) <= CALIBRATION_TOLERANCE * target:
        return Calibration()
    candidates: list[tuple[float, Calibration]] = []
    lo, hi = HOST_COST_RANGE
    # host_step(lo) <= target: the step measured without the profiler is no shorter than the profiled
    # one. The profiler only adds host work, so the host cannot explain it (taking none of the
    # profiler's time out would keep its whole cost in the replay).
    if host_step(lo) > target and host_step(hi) < target:
        f = _bisect(host_step, target, lo, hi, rising=False)
        candidates.append(((math.log(max(f, 1e-6)) / HOST_COST_SIGMA) ** 2, Calibration(host_cost=f, host_pinned=True)))
    glo, ghi = KERNEL_SCALE_RANGE
    if kernel_step(glo) < target < kernel_step(ghi):
        g = _bisect(kernel_step, target, glo, ghi, rising=True)
        candidates.append(((math.log(g) / KERNEL_SCALE_SIGMA) ** 2, Calibration(kernel_scale=g)))
    if candidates:
        return min(candidates, key=lambda c: c[0])[1]
    # Neither reaches it: the most host time taken out where the replay stays above the target (the
    # measured steps ran less work, or faster in ways the replay does not model), none otherwise.
    return Calibration(host_cost=hi) if host_step(hi) >= target and host_step(lo) > target else Calibration()


def calibration(trace: Trace) -> float:
    """The factor on the bundled costs at the trace's host speed (``ProfilerCost.for_trace``) that
    fits the unprofiled replay to the step time measured outside the profiler's window
    (``fitted_calibration``; 1.0 without one, or where the kernels' speed explains the difference)."""
    return fitted_calibration(trace).host_cost


@memoised
def unprofiled_replay(trace: Trace) -> Replay:
    """The trace replayed without the profiler's host cost (memoised): the predicted unprofiled run,
    calibrated to the measured unprofiled steps when the trace carries them."""
    return replay(trace, unprofiled_overrides(trace))
