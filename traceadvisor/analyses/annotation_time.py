"""GPU time per top-level user annotation (``record_function`` labels): numbers only (the report's
annotations section says which is the bottleneck and what to do about it).

A *top-level* annotation is the outermost user annotation inside a profiler step: ``ProfilerStep#N``
itself is not one, nor is an annotation that encloses whole steps (a ``record_function("train")``
around the loop). Its GPU time is the summed duration of the GPU work (kernels, copies, memsets)
launched while it was open: the launching runtime call lies inside it on the same thread. Work
launched from a thread that has no annotations of its own (the autograd engine's backward
thread) counts for the one annotation open on another thread of the process at that moment, if
exactly one is, so that ``with record_function("backward"): loss.backward()`` gets its kernels.

kineto's ``gpu_user_annotation`` mirrors are not used for this: each spans from the first to the
last GPU activity correlated with the range on its launching thread (it misses the backward
thread's work), is widened by 1 ns per side, and covers idle time and other streams' kernels in
between (format doc §4.3, §1.4). The launch links measure what was launched inside, exactly.

Shares are of the GPU time of all work launched inside the steps (or of all GPU work, without
steps), so the table also says how much is left outside the annotations. On a CPU-only trace the
same table uses CPU time: each annotation's duration, as a share of the steps' CPU time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses.cache import memoised
from traceadvisor.trace import intervals
from traceadvisor.trace.model import Trace

I64 = npt.NDArray[np.int64]

_STEP_NAME = re.compile(r"^ProfilerStep#\d+$")


@dataclass(frozen=True)
class AnnotationTime:
    """Time per top-level annotation name.

    ``table``: ``name``, ``time_ns``, ``share_pct``, ``calls``, most time first. ``basis`` is
    ``gpu`` (GPU time of the work launched inside) or ``cpu`` (CPU-only trace: annotation
    durations). ``total_ns`` is the denominator of the shares; ``unannotated_ns`` the part of it
    outside every top-level annotation.
    """

    basis: str
    table: pd.DataFrame
    total_ns: int
    unannotated_ns: int


def top_level(trace: Trace) -> pd.DataFrame:
    """Top-level user annotations inside the steps (all of them, without steps); host rows kept as index."""
    ann = trace.annotations
    if not len(ann):
        return ann
    is_step = _is_step_name(ann["name"])
    user = ann[~is_step]
    steps = ann[is_step]
    if len(steps):
        user = user[~_encloses_a_step(user, steps)]
    if not len(user):
        return user
    # Each thread's annotations together, by start, longest first on ties; the roots are kept.
    pid, tid = user["pid"].to_numpy(), user["tid"].to_numpy()
    ts, end = user["ts_ns"].to_numpy(), user["end_ns"].to_numpy()
    order = np.lexsort((-user["dur_ns"].to_numpy(), ts, tid, pid))
    pid, tid, ts, end = pid[order], tid[order], ts[order], end[order]
    bounds = np.flatnonzero((pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])) + 1
    keep = np.zeros(len(user), dtype=bool)
    for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), len(order)], strict=True):
        keep[order[a:b][intervals.nest_parents(ts[a:b], end[a:b]) < 0]] = True
    top = user[keep]
    if len(trace.steps):
        top = top[trace.step_of(top["ts_ns"].to_numpy()) >= 0]
    return top


@memoised
def annotation_time(trace: Trace) -> AnnotationTime | None:
    """Time per top-level annotation name (see the module docstring); None without user annotations."""
    top = top_level(trace)
    if not len(top):
        return None
    if len(trace.gpu):
        time_ns, total, basis = _gpu_time(trace, top), _gpu_total(trace), "gpu"
    else:
        time_ns, total, basis = top["dur_ns"].to_numpy(), _cpu_total(trace), "cpu"
    names = top["name"].astype(str).to_numpy()
    table = (
        pd.DataFrame({"name": names, "time_ns": time_ns, "calls": 1})
        .groupby("name", sort=False, as_index=False)
        .agg(time_ns=("time_ns", "sum"), calls=("calls", "sum"))
        .sort_values(["time_ns", "name"], ascending=[False, True], kind="stable")
        .reset_index(drop=True)
    )
    annotated = int(table["time_ns"].sum())
    total = max(total, annotated)  # overlapping annotations on two threads can sum past the steps
    table["share_pct"] = 100.0 * table["time_ns"] / total if total > 0 else 0.0
    return AnnotationTime(basis, table[["name", "time_ns", "share_pct", "calls"]], total, total - annotated)


# -- GPU basis ------------------------------------------------------------------------------------
def _launched(trace: Trace) -> tuple[I64, I64, I64, I64]:
    """Durations of the GPU work with a launch record (inside the steps, when there are steps) and
    its launch's pid, tid, ts."""
    launch = trace.gpu["launch"].to_numpy()
    has = launch >= 0
    dur = trace.gpu["dur_ns"].to_numpy()[has]
    rt = trace.runtime
    rows = launch[has]
    pid = rt["pid"].to_numpy()[rows]
    tid = rt["tid"].to_numpy()[rows]
    ts = rt["ts_ns"].to_numpy()[rows]
    if len(trace.steps):
        inside = trace.step_of(ts) >= 0
        dur, pid, tid, ts = dur[inside], pid[inside], tid[inside], ts[inside]
    return dur, pid, tid, ts


def _gpu_total(trace: Trace) -> int:
    if len(trace.steps):
        return int(_launched(trace)[0].sum())
    return int(trace.gpu["dur_ns"].sum())


def _gpu_time(trace: Trace, top: pd.DataFrame) -> I64:
    """GPU time of the work launched inside each top-level annotation (aligned with ``top``'s rows)."""
    dur, pid, tid, ts = _launched(trace)
    owner = np.full(len(dur), -1, dtype=np.int64)  # position in ``top``
    top_pid, top_tid = top["pid"].to_numpy(), top["tid"].to_numpy()
    starts, ends = top["ts_ns"].to_numpy(), top["end_ns"].to_numpy()
    threads = set(zip(top_pid.tolist(), top_tid.tolist(), strict=True))
    for p, t in threads:
        mine = np.flatnonzero((top_pid == p) & (top_tid == t))
        sel = np.flatnonzero((pid == p) & (tid == t))
        owner[sel] = _containing(starts[mine], ends[mine], ts[sel], mine)
    # Launches from threads without annotations (the autograd engine's): the one annotation open
    # on another thread of the same process at that time, if exactly one is.
    orphan = np.flatnonzero((owner < 0) & ~_on_threads(pid, tid, threads))
    if len(orphan):
        found = np.full(len(orphan), -1, dtype=np.int64)
        hits = np.zeros(len(orphan), dtype=np.int64)
        for p, t in threads:
            mine = np.flatnonzero((top_pid == p) & (top_tid == t))
            same_pid = pid[orphan] == p
            cand = np.where(same_pid, _containing(starts[mine], ends[mine], ts[orphan], mine), -1)
            hits += cand >= 0
            found = np.where(cand >= 0, cand, found)
        owner[orphan] = np.where(hits == 1, found, -1)
    out = np.zeros(len(top), dtype=np.int64)
    owned = owner >= 0
    np.add.at(out, owner[owned], dur[owned])
    return out


def _containing(starts: I64, ends: I64, points: I64, labels: I64) -> I64:
    """``labels`` of the interval (disjoint, one thread's top level) containing each point, -1 if none."""
    if not len(starts) or not len(points):
        return np.full(len(points), -1, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    s, e, lab = starts[order], ends[order], labels[order]
    k = np.searchsorted(s, points, side="right") - 1
    ok = (k >= 0) & (points < e[np.maximum(k, 0)])
    return np.where(ok, lab[np.maximum(k, 0)], -1).astype(np.int64)


def _on_threads(pid: I64, tid: I64, threads: set[tuple[int, int]]) -> npt.NDArray[np.bool_]:
    out = np.zeros(len(pid), dtype=bool)
    for p, t in threads:
        out |= (pid == p) & (tid == t)
    return out


# -- CPU basis ------------------------------------------------------------------------------------
def _cpu_total(trace: Trace) -> int:
    t = trace.steps.table
    if len(t):
        return int((t["cpu_end_ns"] - t["cpu_start_ns"]).sum())
    lo, hi, _ = trace.analysis_window
    return hi - lo


# -- helpers --------------------------------------------------------------------------------------
def _is_step_name(names: pd.Series) -> npt.NDArray[np.bool_]:
    """``ProfilerStep#N`` rows."""
    out: npt.NDArray[np.bool_] = names.astype(str).str.fullmatch(_STEP_NAME.pattern).to_numpy(dtype=bool)
    return out


def _encloses_a_step(outer: pd.DataFrame, steps: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """Rows of ``outer`` that hold a whole ``ProfilerStep`` of their thread (a label around the loop).

    Only whole steps count: a step boundary may fall inside an optimizer annotation when the
    profiler is stepped from an optimizer hook (format doc §10.4), which does not make the
    optimizer step enclose the training loop.
    """
    out = np.zeros(len(outer), dtype=bool)
    o_pid, o_tid = outer["pid"].to_numpy(), outer["tid"].to_numpy()
    o_ts, o_end = outer["ts_ns"].to_numpy(), outer["end_ns"].to_numpy()
    for (p, t), grp in steps.groupby(["pid", "tid"], sort=False):
        order = np.argsort(grp["ts_ns"].to_numpy(), kind="stable")
        starts, ends = grp["ts_ns"].to_numpy()[order], grp["end_ns"].to_numpy()[order]
        sel = np.flatnonzero((o_pid == p) & (o_tid == t))
        # Steps of a thread follow one another, so the first step starting inside ends first.
        first = np.searchsorted(starts, o_ts[sel], side="left")
        inside = first < len(starts)
        inside[inside] &= starts[first[inside]] < o_end[sel][inside]
        inside[inside] &= ends[first[inside]] <= o_end[sel][inside]
        out[sel] = inside
    return out
