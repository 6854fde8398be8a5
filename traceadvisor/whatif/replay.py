"""A discrete-event replay of a trace: host threads, launches, streams, event waits and blocking syncs.

The model (docs/whatif.md):

* each host thread runs its events in their measured order and with their measured durations and
  gaps; only a blocking call (``cuda_api.BLOCKING_CALLS``) can move what follows it on its thread,
  because it returns when the GPU work it waits for ends (CUDA runtime API: cudaDeviceSynchronize,
  cudaStreamSynchronize, cudaEventSynchronize and the synchronous cudaMemcpy block the host);
* a runtime call enqueues the GPU work correlated to it (``gpu.launch``); each stream runs its work
  in launch order (a CUDA stream executes in submission order); a GPU record starts at
  ``max(its stream's previous end, its launch call's end, the ends of the work it waits for through
  cudaStreamWaitEvent) + release delay`` and keeps its measured duration. The release delay is the
  one the trace shows for that record (launch latency on an idle stream, the gap between
  back-to-back kernels on a busy one), capped at a high percentile of the device's delays, so a wait
  the model does not explain is not silently kept;
* a blocking call that waited (the work it waits for ended inside it) returns ``wake`` ns after that
  work ends (``wake`` measured per call: the driver's return path), and never sooner than ``wake``
  after it started.

Replaying the unchanged trace reproduces the measured steps; ``replay(trace, overrides)`` replays
the same structure with GPU durations changed and sync or event-wait edges removed, which is what a
fix's saving will be computed from (issue 12 item 3).

One Python loop over launched GPU records and blocking calls, on plain lists (per-record numpy
indexing costs more than the arithmetic): ~1 µs per record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses.cache import memoised
from traceadvisor.trace import intervals
from traceadvisor.trace.columns import KERNEL
from traceadvisor.trace.cuda_api import BLOCKING_CALLS
from traceadvisor.trace.intervals import covered
from traceadvisor.trace.model import Trace
from traceadvisor.trace.steps import name_codes
from traceadvisor.whatif.host_time import HostTimeMap, thread_key

I64 = npt.NDArray[np.int64]

# Release delays above this percentile of a device's delays are capped to it: launch latency and
# back-to-back gaps are a few µs and steady; a much longer delay is a wait the model does not see.
DELAY_PERCENTILE = 99.0
# A record released late that starts within this of another stream's record ending waited for it:
# a cross-stream event wait resolves in a few µs on the GPU (its start follows the end it awaited).
INFERRED_WAIT_NS = 50_000
# Calls that wait for one stream when their 'stream' argument is recorded.
_STREAM_CALLS = frozenset({"cudaStreamSynchronize", "cuStreamSynchronize", "hipStreamSynchronize"})
# Calls that enqueue a copy and wait for it (synchronous memcpy: it returns when its copy is done).
_COPY_CALLS = frozenset({"cudaMemcpy", "cudaMemcpy2D", "hipMemcpy", "hipMemcpyWithStream"})


@dataclass(frozen=True)
class Overrides:
    """Changes to the graph a what-if scenario replays.

    ``gpu_dur_ns``: new durations of GPU records (gpu row -> ns); ``no_wait``: runtime rows of
    blocking calls that no longer wait (the sync is removed: the call costs its ``wake`` only);
    ``no_event_wait``: gpu rows that no longer wait for other streams; ``host_dur_ns``: new
    durations of non-blocking runtime calls (runtime row -> ns): what follows the call on its
    thread moves by the difference (a pageable cudaMemcpyAsync that returns at once when pinned);
    ``host_removed``: host time taken out per thread (the profiler's own cost, a region replayed
    from a CUDA graph): every host time moves earlier by what was removed before it;
    ``gpu_delay_ns``: new release delays of GPU records (gpu row -> ns between the moment the record
    could start and its start: the gap between nodes of a CUDA graph instead of a launch latency);
    ``kernel_scale``: every kernel's duration (after ``gpu_dur_ns``) times this factor: the SMs ran
    faster or slower than while profiled (their clock under the power limit: the calibration to the
    steps measured without the profiler, ``profiler_cost.calibration``). Copies and memsets keep
    theirs (the copy engines and PCIe do not follow the SM clock).
    ``graph_gap_cut_ns``: each gap between consecutive nodes of one graph launch shortened by this
    (never below 0): a graph's nodes run closer together without the profiler
    (``scenarios.GRAPH_NODE_PROFILER_NS``).
    """

    gpu_dur_ns: Mapping[int, int] = field(default_factory=dict)
    no_wait: frozenset[int] = frozenset()
    no_event_wait: frozenset[int] = frozenset()
    host_dur_ns: Mapping[int, int] = field(default_factory=dict)
    host_removed: HostTimeMap = field(default_factory=HostTimeMap)
    gpu_delay_ns: Mapping[int, int] = field(default_factory=dict)
    kernel_scale: float = 1.0
    graph_gap_cut_ns: int = 0


@dataclass(frozen=True)
class StepReplay:
    """One step measured and replayed: CPU window and end of the GPU work launched inside it."""

    step: int
    measured_cpu_ns: int
    replayed_cpu_ns: int
    measured_span_ns: int
    replayed_span_ns: int
    # absolute end of the step (CPU end or its GPU work's end, whichever is later), measured and
    # replayed: a GPU-bound loop's host runs steps ahead, so its spans overlap and include the
    # backlog of earlier steps; the spacing of the ends is its step time (what-if scenarios)
    measured_end_ns: int = 0
    replayed_end_ns: int = 0
    # GPU waits on work outside the trace that the replay keeps as measured (``_kept_delays``),
    # summed over the records launched in the step
    external_wait_ns: int = 0

    @property
    def error_pct(self) -> float:
        if self.measured_span_ns <= 0:
            return 0.0
        return abs(self.replayed_span_ns - self.measured_span_ns) / self.measured_span_ns * 100.0


@dataclass(frozen=True)
class Replay:
    """The replayed times: GPU records (``gpu_start_ns``/``gpu_end_ns`` by gpu row; unlaunched
    records keep their measured times), host shifts per thread and the steps."""

    gpu_start_ns: I64
    gpu_end_ns: I64
    steps: tuple[StepReplay, ...]
    # per gpu row, where the release delay kept as an external wait began (-1: none; ``_kept_delays``)
    external_from_ns: I64 | None = None
    # the loop's steady-state step time (ns): the window's steps after the first replayed once more
    # from the state the first pass left (``_Window``; None for the measured replay, a window of
    # ``STEADY_STEPS`` or more, or no steps)
    period_ns: float | None = None

    @property
    def error_pct(self) -> float | None:
        """Max over steps of |replayed - measured| / measured span, % (None without steps)."""
        if not self.steps:
            return None
        return max(s.error_pct for s in self.steps)

    @property
    def external_wait_per_step_ns(self) -> float | None:
        """Mean over steps of the GPU waits on work outside the trace kept as measured (None
        without steps): what no scenario on this trace can move."""
        if not self.steps:
            return None
        return sum(s.external_wait_ns for s in self.steps) / len(self.steps)


@dataclass
class _Shifts:
    """How far each host thread has moved: the shift after each blocking call's measured end."""

    ends: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    shifts: dict[tuple[int, int], list[int]] = field(default_factory=dict)

    def add(self, thread: tuple[int, int], measured_end: int, shift: int) -> None:
        self.ends.setdefault(thread, []).append(measured_end)
        self.shifts.setdefault(thread, []).append(shift)

    def at(self, thread: tuple[int, int], t: int) -> int:
        """Shift of a host time ``t`` on ``thread``: that of the last blocking call ended by ``t``."""
        ends = self.ends.get(thread)
        if not ends:
            return 0
        k = int(np.searchsorted(np.asarray(ends), t, side="right")) - 1
        return self.shifts[thread][k] if k >= 0 else 0


# A window of fewer steps than this is replayed again, from the state it left, until it settles: the
# loop's steady state (docs/whatif.md "The loop's steady state"). A 2-3 step window's step ends rest on the
# state its first step began in (the GPU queue empty after the profiler's start, or the warm-up
# step's backlog) and on that first step, which holds the profiler's start (p12_storm_compile_after
# of run 19: 38 ms of CPU window, then 19 and 19); the steps after the first, replayed again from
# where they left every stream and thread, begin as the loop's next step does. A longer window's
# own step ends are the estimate (and a pass over it would double the replay's cost).
STEADY_STEPS = 8
# Later passes: at least this many, then more until the loop settles (``SETTLED_NS``), at most
# ``MAX_LATER_PASSES``; each costs a replay of the window. One pass is not always enough: run 31's
# first capture of p12_gpt_compile_before (its host slow, its window's first step leaving 2.0 ms of
# GPU backlog) drained 1.26 ms of that backlog in the one later pass, which read as a 14.64 ms step
# where the loop settles at 15.90 ms (its host's time a step): the fused kernels, which shorten that
# backlog, then read as a 1.26 ms loss and the compile scenario as no gain (18.7% and 17.8% on the
# other two captures; 20.4% measured).
LATER_PASSES = 1
MAX_LATER_PASSES = 8
# A pass has settled (``_Window.settled``) when it leaves its last step's GPU backlog as the pass
# before did, or moves the step end as far: within this (ns) or ``SETTLED_SHARE`` of the step, the
# larger.
SETTLED_NS = 1_000
SETTLED_SHARE = 0.001
# The first step of a window that a later pass repeats (0: every step, the first included).
STEADY_FROM_STEP = 1


@dataclass
class _Window:
    """The profiled steps' CPU span, replayed ``passes`` times (the first pass is the trace itself;
    each later one is shifted by ``span_ns`` and starts from the state the previous one left), and
    each pass's replayed step ends (``add_pass``)."""

    start_ns: int
    end_ns: int
    passes: int
    threads: list[tuple[int, int]]  # each step's thread (pid, tid)
    cpu_start_ns: list[int]  # each step's measured CPU start
    cpu_end_ns: list[int]  # each step's measured CPU end
    host_removed: HostTimeMap
    removed_end_ns: list[int] = field(default_factory=list)  # host time removed before each CPU end
    # per pass (the first, the trace's own, then each later one): each step's replayed end, and the
    # last step's replayed CPU end
    ends: list[list[int]] = field(default_factory=list)
    cpu_ends: list[int] = field(default_factory=list)
    _per_pass: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns

    @classmethod
    def of(cls, trace: Trace, removed: HostTimeMap) -> _Window | None:
        """The window of ``trace``'s steps, or None without steps or with ``STEADY_STEPS`` or more
        (``passes``: the most it may take, the first included; ``settled`` says where to stop)."""
        t = trace.steps.table
        n = len(t)
        if not n or n >= STEADY_STEPS or not trace.device_ids:
            return None
        cs, ce = t["cpu_start_ns"].tolist(), t["cpu_end_ns"].tolist()
        threads = list(step_threads(trace))
        if n > STEADY_FROM_STEP:  # the first step is not the loop's (``STEADY_STEPS``)
            cs, ce, threads = cs[STEADY_FROM_STEP:], ce[STEADY_FROM_STEP:], threads[STEADY_FROM_STEP:]
        w = cls(
            int(cs[0]), int(ce[-1]), 1 + MAX_LATER_PASSES, threads, [int(x) for x in cs], [int(x) for x in ce], removed
        )
        if w.span_ns <= 0:
            return None
        w.removed_end_ns = [
            int(w._removed(th, [c])[0]) if removed else 0 for th, c in zip(threads, w.cpu_end_ns, strict=True)
        ]
        return w

    def _removed(self, thread: tuple[int, int], t: list[int]) -> I64:
        key = (thread[0] << 32) + (thread[1] & 0xFFFFFFFF)
        return self.host_removed.removed(key, np.asarray(t, dtype=np.int64))

    def removed_of(self, thread: tuple[int, int]) -> int:
        """Host time taken out of ``thread``'s timeline inside the window: what each later pass loses."""
        if thread not in self._per_pass:
            r = self._removed(thread, [self.start_ns, self.end_ns]) if self.host_removed else np.zeros(2, np.int64)
            self._per_pass[thread] = int(r[1] - r[0])
        return self._per_pass[thread]

    def removed_per_pass(self, threads: list[tuple[int, int]]) -> list[int]:
        return [self.removed_of(th) for th in threads]

    def step_of(self, trace: Trace, rows: I64, lrow: I64) -> I64:
        """Per record (in launch order): the step whose CPU window launched it on the busiest device
        (the records ``_steps`` gives a step's GPU end from), -1 for none."""
        launch_ts = trace.runtime["ts_ns"].to_numpy()[lrow]
        on_dev = trace.gpu["device"].to_numpy()[rows] == trace.device_ids[0]
        out = np.full(len(rows), -1, dtype=np.int64)
        for s, (cs, ce) in enumerate(zip(self.cpu_start_ns, self.cpu_end_ns, strict=True)):
            out[on_dev & (launch_ts >= cs) & (launch_ts < ce)] = s
        return out

    def add_pass(self, p: int, shifts: _Shifts, gpu_end: list[int]) -> None:
        """Pass ``p``'s step ends: each step's replayed CPU end (its thread's shift then, less the host
        time removed) or its GPU work's end, whichever is later."""
        off = p * self.span_ns
        ends = []
        cpu = 0
        for th, c, gone, g in zip(self.threads, self.cpu_end_ns, self.removed_end_ns, gpu_end, strict=True):
            cpu = c + off - gone - p * self.removed_of(th) + shifts.at(th, c + off)
            ends.append(max(cpu, g))
        self.ends.append(ends)
        self.cpu_ends.append(cpu)

    def settled(self) -> bool:
        """Whether the loop has settled: the last pass left its last step's GPU backlog (its end past
        its CPU end) where the pass before left it (a host-bound loop: a next pass would start as the
        last one did, and repeat it), or moved the step end as far as the pass before did (a
        GPU-bound loop: the backlog grows by the same amount a pass, the GPU never idles), within
        ``SETTLED_NS`` or ``SETTLED_SHARE`` of the step."""
        if len(self.ends) < 2:  # no later pass yet
            return False
        ends = [e[-1] for e in self.ends]
        period = ends[-1] - ends[-2]
        tol = max(SETTLED_NS, SETTLED_SHARE * abs(period))
        backlog = [e - c for e, c in zip(ends[-2:], self.cpu_ends[-2:], strict=True)]
        if abs(backlog[1] - backlog[0]) <= tol:
            return True
        return len(ends) >= 3 and abs(period - (ends[-2] - ends[-3])) <= tol

    def period_ns(self, steps: tuple[StepReplay, ...]) -> float | None:
        """The steady-state step time: the last pass's last step end less the one before it, over
        the steps a pass holds."""
        if not steps or len(self.ends) < 2:
            return None
        return (self.ends[-1][-1] - self.ends[-2][-1]) / len(self.cpu_end_ns)


@memoised
def step_threads(trace: Trace) -> tuple[tuple[int, int], ...]:
    """Each step's host thread (pid, tid): the one whose ProfilerStep annotation opened it
    ((-1, -1) where none matches)."""
    t = trace.steps.table
    ann = trace.annotations
    names, ts = ann["name"].astype(str).to_numpy(), ann["ts_ns"].to_numpy()
    pid, tid = ann["pid"].to_numpy(), ann["tid"].to_numpy()
    out = []
    for name, cs in zip(t["name"].tolist(), t["cpu_start_ns"].tolist(), strict=True):
        hit = np.flatnonzero((names == name) & (ts == cs))
        out.append((int(pid[hit[0]]), int(tid[hit[0]])) if len(hit) else (-1, -1))
    return tuple(out)


@memoised
def measured_replay(trace: Trace) -> Replay:
    """The unchanged trace replayed (memoised): its step errors say how far the model can be trusted
    (against the measured steps: no steady-state pass)."""
    return replay(trace, steady=False)


def replay(trace: Trace, overrides: Overrides | None = None, steady: bool = True) -> Replay:
    """Replay ``trace`` (with ``overrides`` applied) and return the replayed GPU times and steps,
    and (``steady``) the loop's steady-state step time that ``scenarios.step_time_ns`` gives
    (``Replay.period_ns``, ``_Window``): every predicted step is one."""
    ov = overrides or Overrides()
    gpu = trace.gpu
    start = gpu["ts_ns"].to_numpy().copy()
    end = gpu["end_ns"].to_numpy().copy()
    launch = gpu["launch"].to_numpy()
    launched = np.flatnonzero(launch >= 0)
    shifts = _Shifts()
    external = np.full(len(gpu), -1, dtype=np.int64)
    window = _Window.of(trace, ov.host_removed) if steady else None
    if len(launched):
        _simulate(trace, launched, ov, start, end, shifts, external, window)
    steps = _steps(trace, start, end, shifts, ov.host_removed, external)
    period = window.period_ns(steps) if window is not None else None
    return Replay(start, end, steps, external, period)


def _stream_keys(gpu: pd.DataFrame, rows: I64) -> I64:
    """One small int per (device, stream): stream ids are per device."""
    dev = gpu["device"].to_numpy()[rows]
    stream = gpu["stream"].to_numpy()[rows]
    # one int64 per pair (stream ids are small handles or -1; the device in the high bits)
    _, inverse = np.unique((dev << 40) + (stream & ((1 << 40) - 1)), return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def _release_caps(gpu: pd.DataFrame, rows: I64, release: I64) -> dict[int, int]:
    """Per device, the cap on a record's release delay (``DELAY_PERCENTILE`` of the device's delays)."""
    delay = gpu["ts_ns"].to_numpy()[rows] - release
    dev = gpu["device"].to_numpy()[rows]
    caps: dict[int, int] = {}
    for d in np.unique(dev).tolist():
        mine = delay[dev == d]
        caps[int(d)] = int(np.percentile(mine, DELAY_PERCENTILE)) if len(mine) else 0
    return caps


def _measured_release(gpu: pd.DataFrame, rows: I64, keys: I64, launch_ref: I64) -> I64:
    """When each record (in launch order) could start by its stream and launch alone, measured."""
    end = gpu["end_ns"].to_numpy()[rows]
    prev_end = np.full(len(rows), np.iinfo(np.int64).min, dtype=np.int64)
    order = np.argsort(keys, kind="stable")  # launch order within each stream
    same = keys[order][1:] == keys[order][:-1]
    prev_end[order[1:][same]] = end[order[:-1][same]]
    return np.maximum(prev_end, launch_ref)


def _event_waits(trace: Trace, order_rows: I64) -> dict[int, list[int]]:
    """gpu row -> gpu rows it waits for through cudaStreamWaitEvent (syncs table, format doc §4.8):
    the first record launched on the waiting stream after the wait call waits for the last record
    launched on the recording stream before the cudaEventRecord call."""
    sy = trace.syncs
    waits = sy[(sy["wait_on_event_corr"] >= 0) & (sy["stream"] >= 0) & (sy["wait_on_stream"] >= 0)]
    if not len(order_rows):
        return {}
    if not len(waits):
        return _unresolved_event_waits(trace, order_rows)
    rt, gpu = trace.runtime, trace.gpu
    corr = pd.Index(rt["correlation"].to_numpy())
    rt_ts = rt["ts_ns"].to_numpy()
    launch_ts = rt_ts[gpu["launch"].to_numpy()[order_rows]]
    streams = gpu["stream"].to_numpy()[order_rows]
    devices = gpu["device"].to_numpy()[order_rows]
    by_stream: dict[tuple[int, int], I64] = {}
    for key in set(zip(devices.tolist(), streams.tolist(), strict=True)):
        by_stream[key] = np.flatnonzero((devices == key[0]) & (streams == key[1]))
    rec_pos = corr.get_indexer(waits["wait_on_event_corr"].to_numpy())
    call_pos = corr.get_indexer(waits["correlation"].to_numpy())
    out: dict[int, list[int]] = {}
    for dev, s, ws, rp, cp in zip(
        waits["device"].tolist(),
        waits["stream"].tolist(),
        waits["wait_on_stream"].tolist(),
        rec_pos.tolist(),
        call_pos.tolist(),
        strict=True,
    ):
        src, dst = by_stream.get((dev, ws)), by_stream.get((dev, s))
        if rp < 0 or cp < 0 or src is None or dst is None:
            continue
        a = int(np.searchsorted(launch_ts[src], rt_ts[rp], side="left")) - 1
        b = int(np.searchsorted(launch_ts[dst], rt_ts[cp], side="left"))
        if a >= 0 and b < len(dst):
            out.setdefault(int(order_rows[dst[b]]), []).append(int(order_rows[src[a]]))
    return out


def _unresolved_event_waits(trace: Trace, order_rows: I64) -> dict[int, list[int]]:
    """Event waits of a trace without ``cuda_sync`` events (kineto before 2023, ROCm): the runtime
    calls cudaStreamWaitEvent / hipStreamWaitEvent name neither stream. PyTorch records the event on
    the producer stream right before the wait (``Stream.wait_stream``, the caching allocator's
    ``record_stream``) and then launches on the waiting stream, so: the first record the calling
    thread launches after the wait waits for the last record launched before it on another stream."""
    rt, gpu = trace.runtime, trace.gpu
    calls = np.flatnonzero(_names_where(rt, lambda n: n.endswith("StreamWaitEvent")))
    if not len(calls):
        return {}
    launch = gpu["launch"].to_numpy()[order_rows]
    launch_ts = rt["ts_ns"].to_numpy()[launch]  # ascending: order_rows is in launch order
    keys = _stream_keys(gpu, order_rows)
    threads = rt["pid"].to_numpy()[launch] * (1 << 32) + rt["tid"].to_numpy()[launch]
    call_thread = rt["pid"].to_numpy()[calls] * (1 << 32) + rt["tid"].to_numpy()[calls]
    out: dict[int, list[int]] = {}
    for ts, th in zip(rt["ts_ns"].to_numpy()[calls].tolist(), call_thread.tolist(), strict=True):
        b = int(np.searchsorted(launch_ts, ts, side="left"))
        after = np.flatnonzero(threads[b : b + 64] == th)
        if not len(after) or b == 0:
            continue
        dst = b + int(after[0])
        lo = max(0, b - 256)
        other = np.flatnonzero(keys[lo:b] != keys[dst])
        if len(other):
            out.setdefault(int(order_rows[dst]), []).append(int(order_rows[lo + int(other[-1])]))
    return out


def _names_where(table: pd.DataFrame, test: Callable[[str], bool]) -> npt.NDArray[np.bool_]:
    """Which rows' names pass ``test``, tested once per distinct name (names repeat by thousands)."""
    codes, categories = name_codes(table["name"])
    hit = np.array([test(str(n)) for n in categories] + [False], dtype=bool)
    return hit[codes]  # code -1 (no name) reads the trailing False


def _simulate(
    trace: Trace,
    launched: I64,
    ov: Overrides,
    start: I64,
    end: I64,
    shifts: _Shifts,
    external: I64,
    window: _Window | None = None,
) -> None:
    """Run the replay loop over launched GPU records and blocking calls, in measured launch order."""
    gpu, rt = trace.gpu, trace.runtime
    is_blocking = _names_where(rt, lambda n: n in BLOCKING_CALLS)
    launch = gpu["launch"].to_numpy()
    rt_ts, rt_end = rt["ts_ns"].to_numpy(), rt["end_ns"].to_numpy()
    # GPU records in launch order (ties: in the order they ran), so each stream's are in order.
    order = np.lexsort((gpu["ts_ns"].to_numpy()[launched], rt_ts[launch[launched]]))
    rows = launched[order]
    lrow = launch[rows]
    # A synchronous copy's call waits for its own copy: measure that copy's release from the call's
    # start, since the call's end depends on the copy. So does a cudaMemcpyAsync from pageable memory
    # (the driver stages it through a pinned buffer and returns once it has: its copy starts inside
    # the call); measured from the call's end, its release delay came out negative (-3.9 ms for a
    # 32 MiB copy), and a scenario that shortens the call (pinned) started it before the copy ahead
    # of it on its stream had ended.
    is_copy = gpu["kind"].to_numpy()[rows] != KERNEL
    inside = is_copy & (gpu["ts_ns"].to_numpy()[rows] < rt_end[lrow])
    launch_ref = np.where(is_blocking[lrow] | inside, rt_ts[lrow], rt_end[lrow])
    keys = _stream_keys(gpu, rows)
    floor = _unlaunched_floor(gpu, rows)
    waits, held = _consistent_waits(gpu, _event_waits(trace, rows))
    if held:
        at = pd.Index(rows).get_indexer(np.fromiter(held, dtype=np.int64))
        floor[at] = np.maximum(floor[at], np.fromiter(held.values(), dtype=np.int64))
    release = np.maximum(_measured_release(gpu, rows, keys, launch_ref), floor)
    meas_start, meas_end = gpu["ts_ns"].to_numpy(), gpu["end_ns"].to_numpy()
    if waits:
        pos = {r: i for i, r in enumerate(rows.tolist())}
        for r, srcs in waits.items():
            i = pos[r]
            release[i] = max(int(release[i]), max(int(meas_end[s]) for s in srcs))
    inferred = _inferred_waits(trace, rows, release)
    if inferred:
        pos = {r: i for i, r in enumerate(rows.tolist())}
        for r, src in inferred.items():
            waits.setdefault(r, []).append(src)
            release[pos[r]] = max(int(release[pos[r]]), int(meas_end[src]))
    delay, kept_idle = _kept_delays(trace, rows, release)
    # where each external wait began (its record's release); -1: none
    external[rows] = np.where(kept_idle > 0, release, -1)
    dur = (meas_end - meas_start)[rows].copy()
    if ov.gpu_delay_ns:
        pos = pd.Index(rows).get_indexer(np.fromiter(ov.gpu_delay_ns, dtype=np.int64))
        new = np.fromiter(ov.gpu_delay_ns.values(), dtype=np.int64)
        delay[pos[pos >= 0]] = new[pos >= 0]
    if ov.gpu_dur_ns:
        pos = pd.Index(rows).get_indexer(np.fromiter(ov.gpu_dur_ns, dtype=np.int64))
        new = np.fromiter(ov.gpu_dur_ns.values(), dtype=np.int64)
        dur[pos[pos >= 0]] = new[pos >= 0]
    if ov.kernel_scale != 1.0:
        kernel = gpu["kind"].to_numpy()[rows] == KERNEL
        dur[kernel] = np.rint(dur[kernel] * ov.kernel_scale).astype(dur.dtype)
    calls = np.flatnonzero(is_blocking)
    # a blocking call's duration is the replay's to compute: only non-blocking calls take an override
    host = np.array(sorted(r for r in ov.host_dur_ns if not is_blocking[r]), dtype=np.int64)
    ov = replace(ov, host_dur_ns={int(r): ov.host_dur_ns[int(r)] for r in host.tolist()})
    calls = np.union1d(calls, host).astype(np.int64)
    _loop(trace, rows, lrow, keys, delay, dur, launch_ref, floor, waits, calls, ov, start, end, shifts, window)


def _inferred_waits(trace: Trace, rows: I64, release: I64) -> dict[int, int]:
    """gpu row -> the launched record on another stream it evidently waited for, for each record
    whose delay exceeds the device's cap and that started within ``INFERRED_WAIT_NS`` of such a
    record's end (Lumos-style dependency inference: an event wait the trace does not record,
    e.g. an NCCL stream waiting on the compute stream through cudaStreamWaitEvent in a kineto
    without ``cuda_sync`` events). The wait then moves with its source in every scenario."""
    gpu = trace.gpu
    meas_start, meas_end = gpu["ts_ns"].to_numpy(), gpu["end_ns"].to_numpy()
    launched = gpu["launch"].to_numpy() >= 0
    caps = _release_caps(gpu, rows, release)
    dev_all, stream_all = gpu["device"].to_numpy(), gpu["stream"].to_numpy()
    dev = dev_all[rows]
    cap = np.array([caps[d] for d in dev.tolist()], dtype=np.int64)
    over = np.flatnonzero(meas_start[rows] - release > cap)
    out: dict[int, int] = {}
    by_dev: dict[int, tuple[I64, I64]] = {}
    for i in over.tolist():
        r, d = int(rows[i]), int(dev[i])
        if d not in by_dev:
            mine = np.flatnonzero(dev_all == d)
            mine = mine[np.argsort(meas_end[mine], kind="stable")]
            by_dev[d] = (mine, meas_end[mine])
        mine, ends = by_dev[d]
        k = int(np.searchsorted(ends, meas_start[r], side="right")) - 1
        # the latest work on another stream that ended by the start, looking past same-stream ones
        while k >= 0 and stream_all[mine[k]] == stream_all[r]:
            k -= 1
        if k < 0 or meas_start[r] - ends[k] > INFERRED_WAIT_NS or ends[k] <= release[i]:
            continue
        if launched[mine[k]]:
            out[r] = int(mine[k])
    return out


def _kept_delays(trace: Trace, rows: I64, release: I64) -> tuple[I64, I64]:
    """The release delay each record keeps: its measured one, capped at the device's
    ``DELAY_PERCENTILE`` plus the time the whole device sat idle inside it.

    A delay far above the device's usual launch latency is a wait. Where other work ran during it,
    the model should have seen what the record waited for, so only the cap is kept (a wait the model
    does not explain is not silently kept). Where the device ran nothing at all, the record waited
    for something the trace does not hold: another rank (an NCCL kernel waits inside its peers'
    progress), another process's work, a host node or an external event wait inside a CUDA graph.
    That idle part is kept as an *external wait* (measured, moved with its release, reported by
    ``external_wait_ns``): no change to this trace's own work can explain it away. Returns the
    delays and their external parts.
    """
    gpu = trace.gpu
    meas_start = gpu["ts_ns"].to_numpy()[rows]
    caps = _release_caps(gpu, rows, release)
    dev = gpu["device"].to_numpy()[rows]
    cap = np.array([caps[d] for d in dev.tolist()], dtype=np.int64)
    measured = meas_start - release
    delay = np.minimum(measured, cap)
    over = np.flatnonzero(measured > cap)
    for d in np.unique(dev[over]).tolist():
        mine = over[dev[over] == d]
        s, e = trace.busy_intervals(int(d))
        lo, hi = release[mine], meas_start[mine]
        idle = (hi - lo) - covered(s, e, lo, hi)
        delay[mine] = np.minimum(measured[mine], cap[mine] + idle)
    return delay, delay - np.minimum(measured, cap)


def _consistent_waits(gpu: pd.DataFrame, raw: dict[int, list[int]]) -> tuple[dict[int, list[int]], dict[int, int]]:
    """The event waits with each impossible source replaced, and the floors that replace some.

    A record cannot have waited for work that ended after it started: such a source is the wrong
    record on the right stream (the event was recorded on that stream before the source was queued:
    an inferred wait pairs the call with the last launch before it, and a trace without cuda_sync
    events does not say when the event was recorded). The record waited for the latest work on
    that stream that had ended by its start: a launched record becomes the source; work queued
    before the profiler's window (no launch, measured times kept) becomes a floor on the record's
    release (returned as gpu row -> ns). HTA's rank0: a side stream waits for ~150 ms of default
    stream work queued before the window; dropping the wait replayed its steps 31% short.
    """
    meas_start, meas_end = gpu["ts_ns"].to_numpy(), gpu["end_ns"].to_numpy()
    dev, stream, launched = gpu["device"].to_numpy(), gpu["stream"].to_numpy(), gpu["launch"].to_numpy() >= 0
    waits: dict[int, list[int]] = {}
    held: dict[int, int] = {}
    by_stream: dict[tuple[int, int], tuple[I64, I64]] = {}  # rows of a stream sorted by end, and the ends
    for r, srcs in raw.items():
        kept = [a for a in srcs if meas_end[a] <= meas_start[r]]
        for a in (a for a in srcs if meas_end[a] > meas_start[r]):
            key = (int(dev[a]), int(stream[a]))
            if key not in by_stream:
                mine = np.flatnonzero((dev == key[0]) & (stream == key[1]))
                mine = mine[np.argsort(meas_end[mine], kind="stable")]
                by_stream[key] = (mine, meas_end[mine])
            mine, ends = by_stream[key]
            k = int(np.searchsorted(ends, meas_start[r], side="right")) - 1
            if k < 0:
                continue
            b = int(mine[k])
            if launched[b]:
                kept.append(b)
            else:
                held[r] = max(held.get(r, 0), int(meas_end[b]))
        if kept:
            waits[r] = sorted(set(kept))
    return waits, held


def _unlaunched_floor(gpu: pd.DataFrame, rows: I64) -> I64:
    """For each launched record, the measured end of the work queued before it on its stream whose
    launch the trace lacks (launched before the profiler's window opened, so it keeps its measured
    times): a stream runs in order, so that work still holds the records behind it."""
    floor = np.full(len(rows), np.iinfo(np.int64).min, dtype=np.int64)
    fixed = np.flatnonzero(gpu["launch"].to_numpy() < 0)
    if not len(fixed):
        return floor
    dev, stream = gpu["device"].to_numpy(), gpu["stream"].to_numpy()
    ts, end = gpu["ts_ns"].to_numpy(), gpu["end_ns"].to_numpy()
    for d, s in set(zip(dev[fixed].tolist(), stream[fixed].tolist(), strict=True)):
        mine = fixed[(dev[fixed] == d) & (stream[fixed] == s)]
        mine = mine[np.argsort(ts[mine], kind="stable")]
        ends_so_far = np.maximum.accumulate(end[mine])
        sel = np.flatnonzero((dev[rows] == d) & (stream[rows] == s))
        k = np.searchsorted(ts[mine], ts[rows[sel]], side="left") - 1
        ok = k >= 0
        floor[sel[ok]] = ends_so_far[k[ok]]
    return floor


def _loop(
    trace: Trace,
    rows: I64,
    lrow: I64,
    keys: I64,
    delay: I64,
    dur: I64,
    launch_ref: I64,
    floor: I64,
    waits: dict[int, list[int]],
    calls: I64,
    ov: Overrides,
    start: I64,
    end: I64,
    shifts: _Shifts,
    window: _Window | None = None,
) -> None:
    """The event loop. GPU record i is processed at its launch call's start, a blocking call at its
    own start (after the copy it launches, if any): everything either waits for was launched before.
    With a ``window``, the events inside it are then replayed ``window.passes - 1`` more times, each
    pass shifted by the window's span and starting from the state the previous one left."""
    rt = trace.runtime
    rt_ts, rt_end = rt["ts_ns"].to_numpy(), rt["end_ns"].to_numpy()
    pid, tid = rt["pid"].to_numpy(), rt["tid"].to_numpy()
    codes, categories = name_codes(rt["name"])
    names = {int(c): str(categories[c]) for c in np.unique(codes[calls]).tolist() if c >= 0}
    stream_arg = rt["stream_arg"].to_numpy()
    gpu_stream = trace.gpu["stream"].to_numpy()[rows].tolist()
    meas_end = trace.gpu["end_ns"].to_numpy()[rows].tolist()
    host_dur = dict(ov.host_dur_ns)
    # launched by a blocking call (a synchronous copy); calls with a host override are not blocking
    own = (np.isin(lrow, calls) & ~np.isin(lrow, np.fromiter(host_dur, dtype=np.int64))).tolist()
    # merged schedule: (time, 0, i) for GPU record i, (time, 1, call row) for blocking calls
    ev_t = np.concatenate((rt_ts[lrow], rt_ts[calls]))
    ev_kind = np.concatenate((np.zeros(len(rows), np.int8), np.ones(len(calls), np.int8)))
    ev_idx = np.concatenate((np.arange(len(rows)), calls))
    sched = np.lexsort((ev_kind, ev_t))
    lrow_l, key_l = lrow.tolist(), keys.tolist()
    delay_l, dur_l, ref_l, floor_l = delay.tolist(), dur.tolist(), launch_ref.tolist(), floor.tolist()
    # threads as small ints (a list lookup in the loop, not a tuple hash)
    _, thread_ix = np.unique(rt["pid"].to_numpy() * (1 << 32) + rt["tid"].to_numpy(), return_inverse=True)
    thread_ix = thread_ix.reshape(-1)
    thread_of = thread_ix[lrow].tolist()
    thread_ix_l = thread_ix.tolist()
    wait_pos = _wait_positions(rows, waits, ov.no_event_wait)
    first, offset = _graph_nodes(trace, rows, lrow, ov.graph_gap_cut_ns)
    rt_thread = thread_key(pid, tid)
    # host time taken out before each launch reference and each call's start and end
    removed_ref = ov.host_removed.removed_by_thread(rt_thread[lrow], launch_ref).tolist()
    removed_c0 = dict(
        zip(calls.tolist(), ov.host_removed.removed_by_thread(rt_thread[calls], rt_ts[calls]).tolist(), strict=True)
    )
    removed_c1 = dict(
        zip(calls.tolist(), ov.host_removed.removed_by_thread(rt_thread[calls], rt_end[calls]).tolist(), strict=True)
    )
    first_l, offset_l = first.tolist(), offset.tolist()
    # the blocking calls' own times (a few hundred: no list of every runtime row)
    call_ts = dict(zip(calls.tolist(), rt_ts[calls].tolist(), strict=True))
    call_end = dict(zip(calls.tolist(), rt_end[calls].tolist(), strict=True))
    new_start, new_end = [0] * len(rows), [0] * len(rows)
    shift = [0] * (int(thread_ix.max()) + 1 if len(thread_ix) else 1)
    last = [-1] * (max(key_l) + 1)  # position of the last record launched on each stream key
    # the measured-time offset of the pass that launched each stream's last record (0 but in a window's
    # later passes): a blocking call compares measured ends within one pass's frame
    last_off = [0] * len(last)
    _, first_row = np.unique(thread_ix, return_index=True)
    thread_pid_tid = list(zip(pid[first_row].tolist(), tid[first_row].tolist(), strict=True))
    # per thread (small int), the host time taken out per window pass; per record, its step (-1: none)
    per_pass_removed = [0] * len(shift)
    step_of: list[int] = []
    if window is not None:
        per_pass_removed = window.removed_per_pass(thread_pid_tid)
        step_of = window.step_of(trace, rows, lrow).tolist()

    def run(items: Iterable[tuple[int, int]], p: int, off: int, rec: _Shifts, step_gpu_end: list[int] | None) -> None:
        own_end: dict[int, int] = {}  # a blocking call's own copies' replayed end
        own_meas: dict[int, int] = {}
        for kind, i in items:
            if kind == 0:
                k = key_l[i]
                f = first_l[i]
                q = last[k]
                if f != i:  # a later node of a graph launch: where the graph put it, after its first node
                    s0 = new_start[f] + offset_l[i]
                else:
                    th = thread_of[i]
                    ready = ref_l[i] + off - removed_ref[i] - p * per_pass_removed[th] + shift[th]
                    # work queued before the trace holds only the first pass (a later pass is a later step)
                    if p == 0 and floor_l[i] > ready:
                        ready = floor_l[i]
                    if q >= 0 and new_end[q] > ready:
                        ready = new_end[q]
                    if i in wait_pos:
                        for j in wait_pos[i]:
                            if new_end[j] > ready:
                                ready = new_end[j]
                    s0 = ready + delay_l[i]
                # A stream runs its work in order, whatever the release delay says: a launch call that
                # returned after its kernel had started (the launch queue full: the call waits for room)
                # measures a negative delay from its end, which would start the record before the one
                # ahead of it had ended (5.3 ms early in p12_gpt_pad_vocab_before's unprofiled replay).
                if q >= 0 and new_end[q] > s0:
                    s0 = new_end[q]
                e0 = s0 + dur_l[i]
                new_start[i], new_end[i] = s0, e0
                last[k], last_off[k] = i, off
                if step_gpu_end is not None and step_of[i] >= 0 and e0 > step_gpu_end[step_of[i]]:
                    step_gpu_end[step_of[i]] = e0
                if f == i and own[i]:  # (a graph's nodes are launched by no blocking call)
                    lr = lrow_l[i]
                    own_end[lr] = max(own_end.get(lr, e0), e0)
                    own_meas[lr] = max(own_meas.get(lr, 0), meas_end[i] + off)
                continue
            c = i
            th = thread_ix_l[c]
            sh = shift[th]
            m0, m1 = call_ts[c] + off, call_end[c] + off  # measured (in this pass's frame)
            gone = p * per_pass_removed[th]
            c0, c1 = m0 - removed_c0[c] - gone, m1 - removed_c1[c] - gone  # with the removed host time out
            if c in host_dur:  # a shortened (or lengthened) host call: what follows it on its thread moves
                shift[th] = sh + host_dur[c] - (c1 - c0)
                rec.add(thread_pid_tid[th], m1, shift[th])
                continue
            awaited, awaited_meas = _awaited(
                names.get(int(codes[c]), ""),
                int(stream_arg[c]),
                c,
                m1,
                own_end,
                own_meas,
                [(new_end[q], meas_end[q] + last_off[k], gpu_stream[q]) for k, q in enumerate(last) if q >= 0],
            )
            if awaited_meas is None or awaited_meas < m0:
                continue  # it did not wait: a host call like any other, nothing moves
            wake = m1 - awaited_meas
            # A removed sync costs only its return path; a kept one returns ``wake`` after its work ends.
            replayed_end = c0 + sh + wake if c in ov.no_wait else max(c0 + sh + wake, awaited + wake)
            shift[th] = replayed_end - c1
            rec.add(thread_pid_tid[th], m1, replayed_end - c1)

    if window is None:  # one pass: the schedule streamed, not held as a list (a 1 GB trace: 400k events)
        run(zip(ev_kind[sched].tolist(), ev_idx[sched].tolist(), strict=True), 0, 0, shifts, None)
    else:
        order = list(zip(ev_kind[sched].tolist(), ev_idx[sched].tolist(), strict=True))
        t_sorted = ev_t[sched]
        w0 = int(np.searchsorted(t_sorted, window.start_ns, side="left"))
        w1 = int(np.searchsorted(t_sorted, window.end_ns, side="left"))
        gpu_end = [np.iinfo(np.int64).min] * len(window.cpu_end_ns)
        run(order[:w1], 0, 0, shifts, gpu_end)
        # the state the window's end leaves, for the later passes; the first pass then runs on to the end
        state = (new_start[:], new_end[:], shift[:], last[:], last_off[:])
        rec = _Shifts({k: v[:] for k, v in shifts.ends.items()}, {k: v[:] for k, v in shifts.shifts.items()})
        window.add_pass(0, rec, gpu_end)  # the first pass's step ends, as ``_steps`` gives them
        run(order[w1:], 0, 0, shifts, None)
        start[rows] = new_start
        end[rows] = new_end
        new_start[:], new_end[:], shift[:], last[:], last_off[:] = state
        inside = order[w0:w1]
        for p in range(1, window.passes):
            gpu_end = [np.iinfo(np.int64).min] * len(window.cpu_end_ns)
            off = p * window.span_ns
            run(inside, p, off, rec, gpu_end)
            window.add_pass(p, rec, gpu_end)
            if p >= LATER_PASSES and window.settled():
                break
        return
    start[rows] = new_start
    end[rows] = new_end


def _graph_nodes(trace: Trace, rows: I64, lrow: I64, cut_ns: int = 0) -> tuple[I64, I64]:
    """For each record (in launch order), the position of the first record of its launch and its
    measured start offset from it. One cudaGraphLaunch runs many nodes whose dependencies (graph
    edges, possibly across streams) the trace does not record; the graph keeps its measured schedule
    relative to its first node, which the replay moves. ``cut_ns``: each idle gap before a node (from
    the latest end of the launch's earlier nodes) shortened by up to that much, and every later node
    of the launch moved earlier by what its predecessors lost."""
    _, first_of, inverse = np.unique(lrow, return_index=True, return_inverse=True)
    first = first_of[inverse.reshape(-1)].astype(np.int64)
    ts = trace.gpu["ts_ns"].to_numpy()[rows]
    offset = (ts - ts[first]).astype(np.int64)
    if cut_ns <= 0 or not len(rows):
        return first, offset
    pos = np.arange(len(rows))
    starts = first == pos
    # a launch's records share its call's start, so in launch order they are contiguous; anything
    # else (two launches at one ns) keeps the measured schedule
    if starts.all() or np.any(np.diff(first) < 0) or int(starts.sum()) >= 1 << 22:  # (4M launches: no overflow)
        return first, offset
    end = trace.gpu["end_ns"].to_numpy()[rows]
    # the latest end among each node's earlier nodes of its launch: one running max over the rows,
    # each launch lifted above the ones before it (its ends relative to its first node's, which a
    # node ends within 2**39 ns ~ 9 min of) so the max restarts at every launch
    group = np.cumsum(starts) - 1
    lift = np.int64(1) << 40
    rel = end - end[first]
    running = np.maximum.accumulate(group * lift + rel + (lift >> 1))
    prev_end = np.empty(len(rows), dtype=np.int64)
    prev_end[1:] = running[:-1] - group[1:] * lift - (lift >> 1) + end[first[1:]]
    gap = np.where(starts, 0, ts - prev_end)
    cut = np.minimum(np.maximum(gap, 0), cut_ns)
    # the cut accumulates within a launch: a running sum, less the sum through the launch's first node
    total = np.cumsum(cut)
    return first, offset - (total - total[first])


def _wait_positions(rows: I64, waits: dict[int, list[int]], dropped: frozenset[int]) -> dict[int, list[int]]:
    """The event waits by position in ``rows`` (launch order), less those a scenario removed."""
    if not waits:
        return {}
    pos = {r: i for i, r in enumerate(rows.tolist())}
    return {pos[r]: [pos[s] for s in srcs] for r, srcs in waits.items() if r not in dropped}


def _awaited(
    name: str,
    stream: int,
    call: int,
    call_end: int,
    own_end: dict[int, int],
    own_meas: dict[int, int],
    tails: list[tuple[int, int, int]],
) -> tuple[int, int | None]:
    """(replayed, measured) end of the GPU work a blocking call waited for (measured None: none),
    given each stream's last launched record as (replayed end, measured end, stream).

    A synchronous copy waits for its own copy; a stream sync with its stream recorded for that
    stream's last work; any other (device sync, event sync, a stream sync without its argument) for
    the latest work launched before it that ended before it returned: what it evidently waited for.
    """
    if name in _COPY_CALLS and call in own_end:
        return own_end[call], own_meas[call]
    best_r, best_m = 0, None
    for r, m, s in tails:
        if m > call_end:
            continue
        if name in _STREAM_CALLS and stream >= 0 and s != stream:
            continue
        if best_m is None or m > best_m:
            best_r, best_m = r, m
        elif m == best_m:
            best_r = max(best_r, r)
    return best_r, best_m


def _steps(
    trace: Trace, start: I64, end: I64, shifts: _Shifts, removed: HostTimeMap, external: I64
) -> tuple[StepReplay, ...]:
    """Each step measured and replayed: its CPU window (on the thread that recorded it) and the end of
    the GPU work launched inside it (the window ``steps.py`` gives, on the busiest device)."""
    t = trace.steps.table
    if not len(t) or not trace.device_ids:
        return ()
    threads = step_threads(trace)
    gpu, rt = trace.gpu, trace.runtime
    dev = trace.device_ids[0]
    launch = gpu["launch"].to_numpy()
    g = np.flatnonzero((gpu["device"].to_numpy() == dev) & (launch >= 0))
    launch_ts = rt["ts_ns"].to_numpy()[launch[g]]
    out: list[StepReplay] = []
    for step, th, cs, ce, ge in zip(
        t["step"].tolist(),
        threads,
        t["cpu_start_ns"].tolist(),
        t["cpu_end_ns"].tolist(),
        t["gpu_end_ns"].tolist(),
        strict=True,
    ):
        key = (th[0] << 32) + (th[1] & 0xFFFFFFFF)
        gone = removed.removed(key, np.array([cs, ce], dtype=np.int64)).tolist() if removed else [0, 0]
        rs, re_ = cs - gone[0] + shifts.at(th, cs), ce - gone[1] + shifts.at(th, ce)
        mine = g[(launch_ts >= cs) & (launch_ts < ce)]
        m_end = max(ce, ge)
        r_end = max(re_, int(end[mine].max())) if len(mine) else re_
        ext = _external_wait(trace, dev, external, mine)
        out.append(StepReplay(int(step), ce - cs, re_ - rs, m_end - cs, r_end - rs, m_end, r_end, ext))
    return tuple(out)


def _external_wait(trace: Trace, device: int, external_from: I64, rows: I64) -> int:
    """Wall time the device sat idle while some of ``rows`` waited on work outside the trace: the
    idle inside the union of their kept waits (records often wait together: two NCCL streams)."""
    rows = rows[external_from[rows] >= 0]
    if not len(rows):
        return 0
    lo, hi = intervals.merge(external_from[rows], trace.gpu["ts_ns"].to_numpy()[rows])
    s, e = trace.busy_intervals(device)
    return int(((hi - lo) - intervals.covered(s, e, lo, hi)).sum())


def replay_error_pct(trace: Trace) -> float | None:
    """``traces[].replay_error_pct``: the unchanged trace's worst step error, % (None without steps)."""
    return measured_replay(trace).error_pct


def external_wait_per_step_ns(trace: Trace) -> float | None:
    """``traces[].replay_external_wait_us`` (in ns): GPU waits per step on work outside the trace."""
    return measured_replay(trace).external_wait_per_step_ns
