"""Events grouped by host thread, for "what was open on this thread at time t" lookups.

Used by the links (the CPU op around a launch call) and by source lookup (the user's Python frame
around an event); both need the innermost enclosing event of a thread, which
``intervals.innermost`` finds when each thread's events are in start order, longest first on ties.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.trace import intervals

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ThreadLanes:
    """Some rows of an event table, grouped by thread ``(pid, tid)`` in ascending order, each
    thread's in start order, longest first on ties (the order ``intervals.innermost`` needs)."""

    pid: I64
    tid: I64
    starts: I64
    ends: I64
    rows: I64  # row labels

    @classmethod
    def of(cls, events: pd.DataFrame, keep: npt.NDArray[np.bool_]) -> ThreadLanes:
        at = np.flatnonzero(keep)
        pid, tid = events["pid"].to_numpy()[at], events["tid"].to_numpy()[at]
        ts = events["ts_ns"].to_numpy()[at]
        at = at[thread_start_order(pid, tid, ts, events["dur_ns"].to_numpy()[at])]
        pid, tid, start, end = (events[c].to_numpy()[at] for c in ("pid", "tid", "ts_ns", "end_ns"))
        return cls(pid, tid, start, end, events.index.to_numpy()[at])

    def innermost(self, pid: I64, tid: I64, ts: I64) -> I64:
        """Row label of the innermost event on the same thread containing each ``ts`` (-1 if none)."""
        out = np.full(len(ts), -1, dtype=np.int64)
        if not len(self.rows) or not len(ts):
            return out
        bounds = np.flatnonzero((self.pid[1:] != self.pid[:-1]) | (self.tid[1:] != self.tid[:-1])) + 1
        for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), len(self.rows)], strict=True):
            sel = np.flatnonzero((pid == self.pid[a]) & (tid == self.tid[a]))
            if not len(sel):
                continue
            pos = intervals.innermost(self.starts[a:b], self.ends[a:b], ts[sel])
            out[sel] = np.where(pos >= 0, self.rows[a:b][np.maximum(pos, 0)], -1)
        return out


def thread_start_order(pid: I64, tid: I64, ts: I64, dur: I64) -> npt.NDArray[np.intp]:
    """``np.lexsort((-dur, ts, tid, pid))``, faster on the order tables usually come in.

    The loader keeps each thread's events in file order, which kineto writes by start (longest
    first on ties): then stable sorts by thread alone (a few runs of equal keys: fast) give the
    lexicographic order, checked in one pass; otherwise the full sort runs.
    """
    order = np.argsort(tid, kind="stable")
    if len(pid) and not (pid == pid[0]).all():
        order = order[np.argsort(pid[order], kind="stable")]
    p, t, s, d = pid[order], tid[order], ts[order], dur[order]
    step = np.diff(s)
    ordered = (p[1:] != p[:-1]) | (t[1:] != t[:-1]) | (step > 0) | ((step == 0) & (d[1:] <= d[:-1]))
    if ordered.all():
        return order
    return np.lexsort((-dur, ts, tid, pid))


def nesting(host: pd.DataFrame) -> pd.DataFrame:
    """``parent`` (host row, -1 at the root) and ``depth`` of every host event, per thread.

    Ops nest strictly on a thread except at schedule boundaries, where ``ProfilerStep#N`` can
    end inside an optimizer annotation (format doc §10.4); such partial overlaps take the
    innermost event open at their start as parent.
    """
    parent = np.full(len(host), -1, dtype=np.int64)
    depth = np.zeros(len(host), dtype=np.int64)
    if len(host):
        order = np.lexsort(
            (-host["dur_ns"].to_numpy(), host["ts_ns"].to_numpy(), host["tid"].to_numpy(), host["pid"].to_numpy())
        )
        ts = host["ts_ns"].to_numpy()[order].tolist()
        end = host["end_ns"].to_numpy()[order].tolist()
        pid = host["pid"].to_numpy()[order].tolist()
        tid = host["tid"].to_numpy()[order].tolist()
        rows = host.index.to_numpy()[order].tolist()
        stack: list[int] = []  # positions in the sorted order
        cur = None
        par_out = [-1] * len(rows)
        dep_out = [0] * len(rows)
        for i in range(len(rows)):
            key = (pid[i], tid[i])
            if key != cur:
                stack.clear()
                cur = key
            t = ts[i]
            while stack and end[stack[-1]] <= t:
                stack.pop()
            if stack:
                par_out[i] = rows[stack[-1]]
                dep_out[i] = len(stack)
            stack.append(i)
        parent[order] = par_out
        depth[order] = dep_out
    return pd.DataFrame({"parent": parent, "depth": depth}, index=host.index)
