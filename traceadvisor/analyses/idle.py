"""Why the GPU was idle: each idle gap attributed to exactly one primary cause.

A gap is an interval inside the analysis window where no kernel, memcpy or memset ran on the
device (all streams merged). The *next work* is the GPU record that ends the gap; its launch
call tells which host thread had to issue it and when. Causes, in priority order (the first that
applies wins, so no gap is counted twice; docs/idle-attribution.md has the reasoning):

1. ``launch_latency``: the gap is at most ``LAUNCH_LATENCY_NS``: the GPU's own cost of starting
   the next piece of work;
2. ``unknown``: the next work was already queued when the gap began (its launch call had
   returned), so the host was not late: the GPU waited on something else (a cross-stream event,
   another device), or the next work has no launch record. The remaining causes all need a
   *host-late* gap, whose next work was launched after the gap began; the *host interval* is
   from the gap's start to that launch, on the launching thread;
3. ``data_loading``: a DataLoader ``__next__`` span holds the middle of the host interval;
   3b. ``communication``: a collective's host span (``gloo:<op>`` on gloo's worker threads, which
   lasts the collective, the wait for the other ranks included; ``nccl:<op>``) on any thread of the
   process holds it: the host waited for a collective (DDP waits for its gradient buckets), which is
   neither model compute nor a CPU stall of this rank (in a multi-rank report: the straggler's or
   the exposed communication's time);
4. ``sync``: a blocking call (synchronize, synchronous copy) on the launching thread overlaps
   the host interval (the GPU drained its queue, then waited while the host waited and came
   back), or the host was still inside the top-level op that synchronized (``aten::nonzero``
   sizing its output, a boolean-mask ``aten::index`` launching its gather, ``.item()``);
5. ``optimizer``: a per-tensor ``Optimizer.step#`` span (no ``_foreach_``/``_fused_`` op inside)
   holds the middle of the host interval: the Python loop over the parameters;
6. ``cpu_op``: the host interval is longer than ``HOST_STALL_NS``: the host did something other
   than issuing the next op (named: the top-level CPU op covering most of it, else the user
   annotation around it, else Python outside any op);
7. ``launch_bound``: a short host interval: the host issues ops slower than the GPU runs them
   (dispatch and launch overhead per op); named by the op that launched the late work.

``host_events`` counts the events the profiler recorded on the launching thread inside the gap
(CPU ops, annotations, Python frames): each costs the host ``PROFILER_EVENT_COST_NS`` that an
unprofiled run does not pay, so rules can tell the time a fix recovers from the profiler's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses.cache import memoised
from traceadvisor.trace import intervals
from traceadvisor.trace.cuda_api import BLOCKING_CALLS
from traceadvisor.trace.model import Trace

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

# Back-to-back kernels on an idle stream start ~1-2 µs apart on recent GPUs (launch latency);
# HTA calls gaps under its 30 ns cut-off "kernel-kernel"; the rule catalog proposes up to ~2 µs.
LAUNCH_LATENCY_NS = 2_000
# One eager op costs the host ~5-20 µs without the profiler (PyTorch dispatch + cudaLaunchKernel)
# and 20-60 µs with record_shapes and with_stack (the fixtures' host-late gaps: median 14-44 µs,
# 90th percentile 50-130 µs). A host interval above 200 µs is ten or more ops' worth of host time
# without a single launch: a CPU stall, not dispatch overhead.
HOST_STALL_NS = 200_000
# The profiler's host cost per recorded event (op, annotation or Python frame) with record_shapes
# and with_stack: (profiled step - unprofiled step) / events per step on the host-bound pairs of
# fixtures/pairs.json: 3.08 µs (CUDA graph, eager side), 3.35 and 2.83 µs (per-tensor and fused
# Adam). Rules subtract it from host-late idle to estimate what an unprofiled run loses.
PROFILER_EVENT_COST_NS = 3_000
DATA_LOADER_MARK = "DataLoader"
# Host spans that last a collective's execution: gloo's worker threads record ``gloo:<op>`` around
# it (waiting for the peers included); ``nccl:<op>`` record_functions name NCCL's.
COMM_SPAN_PREFIXES = ("gloo:", "nccl:")
OPTIMIZER_MARK = "Optimizer.step#"
MULTI_TENSOR_MARKS = ("_foreach_", "_fused_")
STEP_MARK = "ProfilerStep#"
GRAPH_LAUNCHES = ("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch")
OUTSIDE_OPS = "host (outside any op)"


class IdleCause(StrEnum):
    """The primary cause of an idle gap (the module docstring gives each one's test, in order)."""

    sync = "sync"
    data_loading = "data_loading"
    optimizer = "optimizer"
    launch_bound = "launch_bound"
    cpu_op = "cpu_op"
    launch_latency = "launch_latency"
    unknown = "unknown"
    communication = "communication"


CAUSES = tuple(c.value for c in IdleCause)
COLUMNS = (
    "start_ns",
    "end_ns",
    "dur_ns",
    "cause",
    "detail",
    "host_row",
    "launch_row",
    "blocking_row",
    "host_events",
)
(SYNC, DATA, OPTIMIZER, LAUNCH_BOUND, CPU_OP, LATENCY, UNKNOWN, COMMUNICATION) = range(len(CAUSES))


def empty() -> pd.DataFrame:
    """An attribution table without rows (a trace without GPU activity)."""
    data: dict[str, object] = {c: np.empty(0, np.int64) for c in COLUMNS}
    data["cause"] = np.empty(0, object)
    data["detail"] = np.empty(0, object)
    return pd.DataFrame(data)


@memoised
def idle_attribution(trace: Trace) -> pd.DataFrame:
    """Idle gaps of the busiest device in the analysis window, each with one primary cause.

    Columns ``COLUMNS``: ``start_ns``, ``end_ns``, ``dur_ns``, ``cause`` (an ``IdleCause`` value),
    ``detail``, ``host_row``, ``launch_row``, ``blocking_row`` and ``host_events``. Each cause has
    at most one claiming rule (the engine's ``claimed_by``), so no idle nanosecond is claimed twice.
    """
    if not trace.device_ids:
        return empty()
    lo, hi, _ = trace.analysis_window
    return attribute(trace, trace.device_ids[0], lo, hi)


def recoverable_ns(gaps: pd.DataFrame, event_cost_ns: float = PROFILER_EVENT_COST_NS) -> float:
    """Idle time of ``gaps`` less the profiler's own host cost of the events recorded inside them."""
    if not len(gaps):
        return 0.0
    dur = gaps["dur_ns"].to_numpy().astype(np.float64)
    cost = gaps["host_events"].to_numpy() * float(event_cost_ns)
    return float(np.maximum(dur - cost, 0.0).sum())


@dataclass(frozen=True)
class CauseIdle:
    """The idle of one cause: total, gap count, owning rule, and the detail with the most idle."""

    cause: str
    idle_ns: int
    gaps: int
    claimed_by: str | None
    top_detail: str
    top_detail_ns: int


def breakdown(gaps: pd.DataFrame, claimed_by: Mapping[str, str | None]) -> list[CauseIdle]:
    """Idle per cause of an attribution table, largest first; ``claimed_by`` (cause → the rule that
    claims it, the engine's ``claimed_by`` of the loaded rules) names each cause's owner."""
    if not len(gaps):
        return []
    cause_codes, causes = pd.factorize(gaps["cause"], sort=False)
    detail_codes, details = pd.factorize(gaps["detail"], sort=False)
    n_c, n_d = len(causes), len(details)
    dur = gaps["dur_ns"].to_numpy().astype(np.float64)
    per_cause = np.bincount(cause_codes, weights=dur, minlength=n_c)
    count = np.bincount(cause_codes, minlength=n_c)
    pair = np.bincount(cause_codes * n_d + detail_codes, weights=dur, minlength=n_c * n_d).reshape(n_c, n_d)
    top = pair.argmax(axis=1)
    return [
        CauseIdle(
            cause=str(causes[c]),
            idle_ns=int(per_cause[c]),
            gaps=int(count[c]),
            claimed_by=claimed_by.get(str(causes[c])),
            top_detail=str(details[top[c]]),
            top_detail_ns=int(pair[c, top[c]]),
        )
        for c in np.argsort(-per_cause, kind="stable").tolist()
    ]


@dataclass(frozen=True)
class _Spans:
    """Intervals of one thread sorted by start (outermost first on ties), with their row labels."""

    start: I64
    end: I64
    rows: I64
    disjoint: bool = False

    def __len__(self) -> int:
        return len(self.start)

    def roots(self) -> _Spans:
        """The outermost spans (not inside an earlier one): disjoint and sorted."""
        if not len(self):
            return _Spans(self.start, self.end, self.rows, disjoint=True)
        top = np.ones(len(self), dtype=bool)
        top[1:] = self.start[1:] >= np.maximum.accumulate(self.end)[:-1]
        return _Spans(self.start[top], self.end[top], self.rows[top], disjoint=True)

    def holding(self, t: I64) -> I64:
        """Position of the innermost span that contains each time (-1 if none).

        The latest span starting at or before a time contains it or has closed; in the second case
        only its ancestors can contain it, so the search walks up one nesting level at a time for
        all times at once (as many rounds as the spans nest deep; none for disjoint spans).
        """
        j = np.searchsorted(self.start, t, side="right") - 1
        if not len(self):
            return j
        parent = None
        while True:
            closed = j >= 0
            closed[closed] = self.end[j[closed]] <= t[closed]
            if not closed.any():
                return j
            if self.disjoint:
                j[closed] = -1
                return j
            if parent is None:
                parent = _parents(self.start, self.end)
            j[closed] = parent[j[closed]]


def _parents(start: I64, end: I64) -> I64:
    """Parent position of each span (sorted by start, outermost first on ties); -1 at the top.

    A span's depth is the number of spans open at its start (earlier starts minus ends at or before
    it); its parent is the latest earlier span one level up. One vectorised round per depth level.
    """
    n = len(start)
    depth = np.arange(n) - np.searchsorted(np.sort(end), start, side="right")
    parent = np.full(n, -1, dtype=np.int64)
    for d in range(1, int(depth.max(initial=0)) + 1):
        upper = np.flatnonzero(depth == d - 1)
        here = np.flatnonzero(depth == d)
        k = np.searchsorted(upper, here) - 1
        parent[here] = np.where(k >= 0, upper[np.maximum(k, 0)], -1)
    return parent


class _Lanes:
    """A table's time columns as arrays, with each host thread's rows in start order (built on demand)."""

    def __init__(self, df: pd.DataFrame) -> None:
        self.ts, self.end = df["ts_ns"].to_numpy(), df["end_ns"].to_numpy()
        self.pid, self.tid = df["pid"].to_numpy(), df["tid"].to_numpy()
        self.rows = df.index.to_numpy()

    def lane(self, pid: int, tid: int) -> I64:
        """Positions of one thread's rows, sorted by start (longest first on ties)."""
        pos = np.flatnonzero((self.pid == pid) & (self.tid == tid))
        ts, dur = self.ts[pos], self.end[pos] - self.ts[pos]
        step, shorter = np.diff(ts), np.diff(dur)
        if np.all((step > 0) | ((step == 0) & (shorter <= 0))):  # the loader's order usually is this one
            return pos
        # Nearly in order (a few runtime calls recorded late): a stable sort by start is fast on
        # that and is the lexicographic order too where no tie needs the longest moved first.
        order = np.argsort(ts, kind="stable")
        ts_o, dur_o = ts[order], dur[order]
        if np.all((ts_o[1:] != ts_o[:-1]) | (dur_o[1:] <= dur_o[:-1])):
            return pos[order]
        return pos[np.lexsort((-dur, ts))]

    def spans(self, lane: I64, mask: BOOL) -> _Spans:
        pos = lane[mask[lane]]
        return _Spans(self.ts[pos], self.end[pos], self.rows[pos])


def _names(table: pd.DataFrame, rows: I64) -> npt.NDArray[np.object_]:
    """``name`` of table rows (labels) as strings, without a per-row pandas lookup."""
    col = table["name"]
    pos = table.index.get_indexer(rows)
    out: npt.NDArray[np.object_]
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()[pos]
        cats = col.cat.categories.to_numpy(dtype=object)
        out = np.where(codes >= 0, cats[np.maximum(codes, 0)], "")
    else:
        out = col.astype(str).to_numpy(dtype=object)[pos]
    return out


def _name_matches(table: pd.DataFrame, marks: tuple[str, ...], exact: bool = False) -> BOOL:
    """Which rows' ``name`` contains (or, ``exact``, equals) one of ``marks``; tested once per distinct name."""
    col = table["name"]
    if isinstance(col.dtype, pd.CategoricalDtype):
        names = pd.Series(col.cat.categories.astype(str))
        codes = col.cat.codes.to_numpy()
    else:
        names = col.astype(str).reset_index(drop=True)
        codes = np.arange(len(names))
    if exact:
        hit = names.isin(marks).to_numpy()
    else:
        hit = np.zeros(len(names), dtype=bool)
        for m in marks:
            hit |= names.str.contains(m, regex=False).to_numpy()
    return (codes >= 0) & hit[np.maximum(codes, 0)] if len(hit) else np.zeros(len(codes), dtype=bool)


def attribute(trace: Trace, device: int, lo: int, hi: int) -> pd.DataFrame:
    """Idle gaps of ``device`` inside ``[lo, hi)``, one primary cause each (columns: ``COLUMNS``).

    ``detail`` names the cause (blocking call or synchronizing op, loader or optimizer span, CPU
    op, launching op); ``host_row`` is the host row it refers to, ``launch_row`` the runtime row
    of the next work's launch, ``blocking_row`` the blocking call of a ``sync`` gap (-1 where none).
    """
    gaps = trace.idle_gaps(device, lo, hi)
    n = len(gaps)
    if not n:
        return empty()
    gs, ge = gaps["start_ns"].to_numpy(), gaps["end_ns"].to_numpy()
    dur = ge - gs
    cause = np.full(n, UNKNOWN, dtype=np.int64)
    detail = np.full(n, "", dtype=object)
    host_row = np.full(n, -1, dtype=np.int64)
    blocking_row = np.full(n, -1, dtype=np.int64)
    host_events = np.zeros(n, dtype=np.int64)

    # The next work: the first GPU record of the device starting at the gap's end.
    gpu, rt = trace.gpu, trace.runtime
    on = gpu["device"].to_numpy() == device
    g_ts = gpu["ts_ns"].to_numpy()[on]
    order = np.argsort(g_ts, kind="stable")
    g_ts, g_launch = g_ts[order], gpu["launch"].to_numpy()[on][order]
    k = np.searchsorted(g_ts, ge, side="left")
    launch = np.full(n, -1, dtype=np.int64)
    launch[k < len(g_ts)] = g_launch[k[k < len(g_ts)]]
    has = launch >= 0
    li = np.maximum(launch, 0)
    late = np.zeros(n, dtype=bool)
    if len(rt):
        graph = _name_matches(rt, GRAPH_LAUNCHES, exact=True)[li]
        call_ts, call_end = rt["ts_ns"].to_numpy()[li], rt["end_ns"].to_numpy()[li]
        # Host-late: the launch call began after the gap did, or the host was still inside it (a
        # slow launch call; not a graph launch, whose call spans nodes already submitted).
        late = has & ((call_ts > gs) | ((call_end > gs) & ~graph))

    short = dur <= LAUNCH_LATENCY_NS
    cause[short] = LATENCY
    queued = ~short & ~late
    detail[queued & has] = "next work already queued (GPU-side wait)"
    detail[queued & ~has] = "next work has no launch record"
    todo = np.flatnonzero(~short & late)
    if len(todo):
        out = (cause, detail, host_row, blocking_row, host_events)
        _host_late(trace, todo, gs, ge, launch, out)
    return pd.DataFrame(
        {
            "start_ns": gs,
            "end_ns": ge,
            "dur_ns": dur,
            "cause": np.asarray(CAUSES, dtype=object)[cause],
            "detail": detail,
            "host_row": host_row,
            "launch_row": launch,
            "blocking_row": blocking_row,
            "host_events": host_events,
        }
    )


_Out = tuple[I64, npt.NDArray[np.object_], I64, I64, I64]


def _host_late(trace: Trace, todo: I64, gs: I64, ge: I64, launch: I64, out: _Out) -> None:
    """Causes 3-7 for the host-late gaps ``todo``, thread by thread (vectorised within a thread)."""
    cause, detail, host_row, blocking_row, host_events = out
    host, rt = trace.host, trace.runtime
    is_ann = host["is_annotation"].to_numpy()
    is_op = ~is_ann
    loader = is_ann & _name_matches(host, (DATA_LOADER_MARK,))
    optimizer = is_ann & _name_matches(host, (OPTIMIZER_MARK,))
    region = is_ann & ~_name_matches(host, (STEP_MARK,))
    multi_tensor = is_op & _name_matches(host, MULTI_TENSOR_MARKS)
    blocking = _name_matches(rt, BLOCKING_CALLS, exact=True)
    rt_op, rt_ts = rt["op"].to_numpy(), rt["ts_ns"].to_numpy()
    rt_pid, rt_tid = rt["pid"].to_numpy(), rt["tid"].to_numpy()

    h_all, r_all = _Lanes(host), _Lanes(rt)
    f_all = _Lanes(trace.frames) if len(trace.frames) else None
    comm = _name_matches(host, COMM_SPAN_PREFIXES)
    comm_by_pid: dict[int, tuple[I64, I64]] = {}
    if comm.any():
        hp = host["pid"].to_numpy()
        for pp in np.unique(hp[comm]).tolist():
            m = comm & (hp == pp)
            comm_by_pid[int(pp)] = intervals.merge(host["ts_ns"].to_numpy()[m], host["end_ns"].to_numpy()[m])

    pid, tid = rt_pid[launch[todo]], rt_tid[launch[todo]]
    done = np.zeros(len(todo), dtype=bool)
    while not done.all():  # thread by thread, in the order they first launch late work
        first = int(np.argmin(done))
        p, t = int(pid[first]), int(tid[first])
        mine = (pid == p) & (tid == t)
        done |= mine
        sel = todo[mine]
        h, r = h_all.lane(p, t), r_all.lane(p, t)
        a = gs[sel]
        b = np.maximum(rt_ts[launch[sel]], a)  # the host interval [a, b): from the gap's start to the launch
        mid = a + (b - a) // 2
        c = np.full(len(sel), -1, dtype=np.int64)  # -1: not decided yet
        d = np.full(len(sel), "", dtype=object)
        hr = np.full(len(sel), -1, dtype=np.int64)
        br = np.full(len(sel), -1, dtype=np.int64)

        # Events the profiler recorded on this thread inside each gap (host rows and Python frames).
        h_ts = h_all.ts[h]
        host_events[sel] = np.searchsorted(h_ts, ge[sel]) - np.searchsorted(h_ts, gs[sel])
        if f_all is not None:
            f_ts = np.sort(f_all.ts[(f_all.pid == p) & (f_all.tid == t)])
            host_events[sel] += np.searchsorted(f_ts, ge[sel]) - np.searchsorted(f_ts, gs[sel])

        # 3. data loading: a DataLoader span holds the middle of the host interval.
        spans = h_all.spans(h, loader)
        j = spans.holding(mid)
        hit = j >= 0
        c[hit], hr[hit] = DATA, spans.rows[j[hit]]
        d[hit] = _names(host, hr[hit])

        # 3b. communication: a collective's host span (any thread of the process) holds the middle.
        cs_, ce_ = comm_by_pid.get(p, (np.empty(0, np.int64), np.empty(0, np.int64)))
        if len(cs_):
            k = np.searchsorted(cs_, mid, side="right") - 1
            hit = (k >= 0) & (c < 0)
            hit[hit] = ce_[k[hit]] > mid[hit]
            c[hit] = COMMUNICATION
            d[hit] = "waiting for a collective (the other ranks, or its transfer)"

        # 4a. sync: a blocking call on this thread overlaps the host interval.
        roots = h_all.spans(h, is_op).roots()
        calls = r_all.spans(r, blocking)
        if len(calls):
            # Calls on one thread do not overlap: sorted by start, they are sorted by end too.
            q = np.searchsorted(calls.end, a, side="right")  # the first call ending after the gap began
            ok = (q < len(calls)) & (c < 0)
            ok[ok] = calls.start[q[ok]] < np.maximum(b[ok], a[ok] + 1)
            c[ok], br[ok] = SYNC, calls.rows[q[ok]]
            d[ok] = _names(rt, br[ok])
            # 4b. ... or the host was still inside the top-level op that synchronized.
            #     The latest call started before the gap is the one, if it lies in the same root.
            root_of_call = roots.holding(calls.start)
            j = roots.holding(a)
            q = np.searchsorted(calls.start, a, side="left") - 1
            ok = (j >= 0) & (q >= 0) & (c < 0)
            ok[ok] = root_of_call[q[ok]] == j[ok]
            c[ok], br[ok], hr[ok] = SYNC, calls.rows[q[ok]], roots.rows[j[ok]]
            d[ok] = _names(host, hr[ok])

        # 5. optimizer: a per-tensor Optimizer.step span holds the middle of the host interval.
        spans = h_all.spans(h, optimizer)
        if len(spans):
            mt = np.sort(h_all.ts[h[multi_tensor[h]]])
            per_tensor = np.searchsorted(mt, spans.end) == np.searchsorted(mt, spans.start)
            j = spans.holding(mid)
            hit = (j >= 0) & (c < 0)
            hit[hit] = per_tensor[j[hit]]
            c[hit], hr[hit] = OPTIMIZER, spans.rows[j[hit]]
            d[hit] = _names(host, hr[hit])

        # 6. a CPU stall: named by the top-level op covering most of it, else the region around it.
        s = np.flatnonzero((c < 0) & (b - a > HOST_STALL_NS))
        if len(s):
            c[s] = CPU_OP
            j = roots.holding(mid[s])
            named = j >= 0
            cover = np.minimum(roots.end[j[named]], b[s[named]]) - np.maximum(roots.start[j[named]], a[s[named]])
            named[named] = 2 * cover >= (b - a)[s[named]]
            hr[s[named]] = roots.rows[j[named]]
            spans = h_all.spans(h, region)
            rj = spans.holding(mid[s])
            in_region = ~named & (rj >= 0)
            hr[s[in_region]] = spans.rows[rj[in_region]]
            d[s[named | in_region]] = _names(host, hr[s[named | in_region]])
            rest = ~named & ~in_region
            d[s[rest]] = np.where(j[rest] >= 0, "several short CPU ops", OUTSIDE_OPS)

        # 7. launch-bound: named by the op that launched the late work.
        lb = np.flatnonzero(c < 0)
        c[lb] = LAUNCH_BOUND
        hr[lb] = rt_op[launch[sel[lb]]]
        d[lb] = np.where(hr[lb] >= 0, _names(host, np.maximum(hr[lb], 0)), OUTSIDE_OPS)

        cause[sel], detail[sel], host_row[sel], blocking_row[sel] = c, d, hr, br
