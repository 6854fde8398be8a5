"""The HTML report's timeline: a compact, columnar copy of what one trace did over time.

Lanes per host thread (CPU ops and annotations, nested), per thread's Python frames, per GPU stream
(kernels, memcpys, memsets) and the busiest device's idle gaps, each gap with the cause that
``analyses.idle.idle_attribution`` gave it (the same table the report's idle section and the
rules read: computed once per trace, not here).

A page must stay small (under 2 MB for the fixtures): when the analysed steps hold more than
``MAX_SPANS`` spans, the timeline keeps whole steps, first the first analysed step and the steps
around each finding's window (``focus``), then the following steps while the budget lasts; one step
larger than the budget is cut at the budget-th span. ``Timeline.sampled`` says what was kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses.idle import CAUSES, idle_attribution
from traceadvisor.report.model import TIMELINE_KINDS, Timeline, TimelineLane
from traceadvisor.summary.units import us
from traceadvisor.trace.lanes import nesting
from traceadvisor.trace.model import Trace

I64 = npt.NDArray[np.int64]

# About 8 bytes a span in the page (gzip + base64 of delta-coded ns): 120k spans is ~1 MB.
MAX_SPANS = 120_000
# Deeper host nesting is dropped: rows past this would make a lane taller than the screen.
MAX_DEPTH = 24
CPU_OP, PYTHON, ANNOTATION = (TIMELINE_KINDS.index(k) for k in ("cpu_op", "python", "annotation"))

# Lane order inside one trace: a thread's ops, then its Python frames; then GPU streams, then idle.
_THREAD, _PYTHON, _STREAM, _IDLE = range(4)
_ROLES = ("thread", "python", "stream", "idle")


def timeline_of(trace: Trace, focus_ns: Sequence[tuple[int, int]] = (), max_spans: int = MAX_SPANS) -> Timeline:
    """The timeline of ``trace``; ``focus_ns``: the findings' windows (ns, the trace's clock), whose
    steps are kept first when the trace must be sampled."""
    spans = _all_spans(trace)
    steps = _step_windows(trace)
    if len(steps):
        full_lo, full_hi = int(steps[:, 0].min()), int(steps[:, 1].max())
    else:
        full_lo, full_hi = trace.analysed_span
    in_full = _overlapping(spans, [(full_lo, full_hi)])
    total = int(in_full.sum())
    ranges, note = [(full_lo, full_hi)], None
    if total > max_spans:
        ranges, note = _sample(spans, steps, focus_ns, max_spans, total, (full_lo, full_hi))
    keep = _overlapping(spans, ranges)
    chosen = spans[keep]
    if len(chosen) > max_spans:  # one step over the budget: cut it at the budget-th start
        chosen = chosen.sort_values("start", kind="stable").iloc[:max_spans]
        cut = int(chosen["start"].iloc[-1]) + 1
        ranges = [(lo, min(hi, cut)) for lo, hi in ranges if lo < cut]
    lo = min(lo for lo, _ in ranges)
    hi = max(hi for _, hi in ranges)
    lanes, names = _lanes(trace, chosen, lo)
    return Timeline(
        start_us=us(lo),
        end_us=us(hi),
        origin_ns=lo,
        names=names,
        causes=CAUSES,
        lanes=lanes,
        spans=sum(len(lane.start_us) for lane in lanes),
        total_spans=total,
        sampled=note,
    )


def _step_windows(trace: Trace) -> I64:
    """``[lo, hi]`` per analysed step (ns): the CPU window and the GPU window together."""
    t = trace.steps.table
    if not len(t):
        return np.empty((0, 2), dtype=np.int64)
    lo = t["cpu_start_ns"].to_numpy(np.int64).copy()
    hi = t["cpu_end_ns"].to_numpy(np.int64).copy()
    gs, ge = t["gpu_start_ns"].to_numpy(np.int64), t["gpu_end_ns"].to_numpy(np.int64)
    has = gs >= 0
    lo[has] = np.minimum(lo[has], gs[has])
    hi[has] = np.maximum(hi[has], ge[has])
    return np.stack([lo, hi], axis=1)


def _sample(
    spans: pd.DataFrame,
    steps: I64,
    focus_ns: Sequence[tuple[int, int]],
    max_spans: int,
    total: int,
    full: tuple[int, int],
) -> tuple[list[tuple[int, int]], str]:
    """Whole steps to keep (first step, the steps at each focus window and their neighbours, then
    the next ones) within ``max_spans``, as merged ranges, and the note that says so."""
    if not len(steps):
        return [full], f"sampled: the first {max_spans:,} of {total:,} spans (the trace has no steps)"
    starts = spans["start"].to_numpy()
    ends = spans["end"].to_numpy()
    counts = [int(((starts < hi) & (ends > lo)).sum()) for lo, hi in steps.tolist()]
    order: list[int] = [0]
    for flo, fhi in focus_ns:
        hit = [i for i, (lo, hi) in enumerate(steps.tolist()) if lo < fhi and hi > flo]
        if not hit:  # outside every step: the nearest one
            mid = (flo + fhi) // 2
            hit = [int(np.argmin(np.abs((steps[:, 0] + steps[:, 1]) // 2 - mid)))]
        order += [j for i in hit for j in (i, i - 1, i + 1) if 0 <= j < len(steps)]
    order += list(range(len(steps)))
    kept: list[int] = []
    used = 0
    for i in dict.fromkeys(order):
        if kept and used + counts[i] > max_spans:
            continue
        kept.append(i)
        used += counts[i]
    kept.sort()
    ranges: list[tuple[int, int]] = []
    for i in kept:
        lo, hi = int(steps[i, 0]), int(steps[i, 1])
        if ranges and lo <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], hi))
        else:
            ranges.append((lo, hi))
    shown = ", ".join(str(i + 1) for i in kept[:12]) + (" …" if len(kept) > 12 else "")
    note = (
        f"sampled: {len(kept)} of {len(steps)} steps drawn (steps {shown}, counted from 1), "
        f"about {min(used, max_spans):,} of {total:,} spans"
    )
    return ranges, note


def _overlapping(spans: pd.DataFrame, ranges: Sequence[tuple[int, int]]) -> npt.NDArray[np.bool_]:
    starts = spans["start"].to_numpy()
    ends = spans["end"].to_numpy()
    keep = np.zeros(len(spans), dtype=bool)
    for lo, hi in ranges:
        # a zero-length span at the range's start counts (an instant inside it)
        keep |= (starts < hi) & ((ends > lo) | ((ends == starts) & (starts >= lo)))
    return keep


def _all_spans(trace: Trace) -> pd.DataFrame:
    """Every span the timeline may draw: ``role``, ``a``/``b`` (pid/tid or device/stream),
    ``start``/``end`` (ns), ``name`` (str), ``kind`` and ``row`` (the source table's row)."""
    parts: list[pd.DataFrame] = []
    h = trace.host
    if len(h):
        parts.append(
            _frame(_THREAD, h["pid"], h["tid"], h["ts_ns"], h["end_ns"], h["name"],
                   np.where(h["is_annotation"].to_numpy(), ANNOTATION, CPU_OP))
        )  # fmt: skip
    f = trace.frames
    if len(f):
        parts.append(_frame(_PYTHON, f["pid"], f["tid"], f["ts_ns"], f["end_ns"], f["name"], np.full(len(f), PYTHON)))
    g = trace.gpu
    if len(g):
        parts.append(
            _frame(_STREAM, g["device"], g["stream"], g["ts_ns"], g["end_ns"], g["name"], g["kind"].to_numpy())
        )
    idle = idle_attribution(trace)
    if len(idle):
        device = trace.device_ids[0]
        detail = idle["detail"].astype(object).where(idle["detail"].notna(), "")
        cause = np.array([CAUSES.index(str(c)) for c in idle["cause"].tolist()], dtype=np.int64)
        n = len(idle)
        parts.append(
            _frame(_IDLE, np.full(n, device), np.zeros(n, np.int64), idle["start_ns"], idle["end_ns"], detail, cause)
        )
    if not parts:
        none = np.empty(0, np.int64)
        return _frame(_THREAD, none, none, none, none, np.empty(0, object), none)
    return pd.concat(parts, ignore_index=True)


def _frame(role: int, a: object, b: object, start: object, end: object, name: object, kind: object) -> pd.DataFrame:
    def col(x: object) -> npt.NDArray[np.generic]:
        return x.to_numpy() if isinstance(x, pd.Series) else np.asarray(x)

    n = len(col(start))
    return pd.DataFrame(
        {
            "role": np.full(n, role, dtype=np.int64),
            "a": col(a).astype(np.int64),
            "b": col(b).astype(np.int64),
            "start": col(start).astype(np.int64),
            "end": col(end).astype(np.int64),
            "name": col(name).astype(object),
            "kind": col(kind).astype(np.int64),
        }
    )


def _depths(group: pd.DataFrame) -> I64:
    """Nesting depth of a host or Python lane's spans (``lanes.nesting`` on the kept spans: a span
    that encloses a kept one overlaps its range, so it is kept too)."""
    host = pd.DataFrame(
        {
            "pid": group["a"].to_numpy(),
            "tid": group["b"].to_numpy(),
            "ts_ns": group["start"].to_numpy(),
            "dur_ns": group["end"].to_numpy() - group["start"].to_numpy(),
            "end_ns": group["end"].to_numpy(),
        }
    )
    depth: I64 = nesting(host)["depth"].to_numpy(np.int64)
    return depth


def _lanes(trace: Trace, spans: pd.DataFrame, origin: int) -> tuple[tuple[TimelineLane, ...], tuple[str, ...]]:
    codes, uniques = pd.factorize(spans["name"].map(str), sort=False)
    spans = spans.assign(code=codes)
    prefix = "" if trace.rank is None else f"rank {trace.rank} · "
    lanes: list[TimelineLane] = []
    order = sorted(
        spans.groupby(["role", "a", "b"], sort=False).groups.items(),
        key=lambda kv: _lane_sort_key(kv[0]),
    )
    for (role, a, b), idx in order:
        g = spans.loc[idx].reset_index(drop=True)
        depth = _depths(g) if role in (_THREAD, _PYTHON) else np.zeros(len(g), np.int64)
        ok = depth <= MAX_DEPTH
        g = g[ok].assign(depth=depth[ok])
        g = g.sort_values(["start", "depth"], kind="stable")
        lanes.append(
            TimelineLane(
                label=prefix + _label(trace, int(role), int(a), int(b)),
                role=_ROLES[int(role)],
                start_us=tuple(x / 1000.0 for x in (g["start"] - origin).tolist()),
                dur_us=tuple(x / 1000.0 for x in (g["end"] - g["start"]).tolist()),
                depth=tuple(g["depth"].tolist()),
                name=tuple(g["code"].tolist()),
                kind=tuple(g["kind"].tolist()),
            )
        )
    return tuple(lanes), tuple(str(u) for u in uniques)


def _lane_sort_key(key: tuple[int, int, int]) -> tuple[int, int, int, int]:
    role, a, b = key
    if role in (_THREAD, _PYTHON):
        return (0, a, b, role)
    return (1, a, 0 if role == _STREAM else 1, b)


def _label(trace: Trace, role: int, a: int, b: int) -> str:
    if role == _IDLE:
        return f"GPU {a} idle"
    if role == _STREAM:
        return f"GPU {a} stream {b}"
    name = trace.thread_names.get((a, b))
    thread = name if name and str(b) in name else f"thread {b}" + (f" ({name})" if name else "")
    return thread + (" python" if role == _PYTHON else "")
