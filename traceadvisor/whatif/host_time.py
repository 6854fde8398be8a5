"""Host time taken out of a replay, per host thread: ``removed(thread, t)`` ns before host time ``t``.

Two kinds of removal, both monotone in ``t`` (so the replayed host timeline keeps its order):

* point costs: an event at ``ts`` costs ``c`` ns (the profiler's own work to record it); every host
  time after ``ts`` moves ``c`` earlier;
* collapsed regions: the host time of ``[start, end)`` shrinks to ``keep`` ns (a region replayed
  from a CUDA graph: the host no longer runs the region's ops, it launches the graph); a time inside
  the region moves to the region's start, a time after it moves ``end - start - keep`` earlier.
  Point costs apply first: a region shrinks what is left of it once they are taken out, so the two
  together never remove more than the region held.

Threads are keyed as in the replay: ``pid << 32 | tid``. Point costs and regions act per process, not
per thread: PyTorch's autograd engine runs the backward pass on its own thread while the main thread
waits in ``backward()``, so the two threads take turns on one timeline; compressed separately,
the backward thread's launches (which accumulated none of the forward's removal) landed
milliseconds after the forward's and opened idle gaps the trace never had (p12_conv_cl_before:
6 and 10 ms).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def thread_key(pid: I64, tid: I64) -> I64:
    """One int64 per (pid, tid), as the replay keys host threads."""
    return (pid.astype(np.int64) << 32) + (tid.astype(np.int64) & 0xFFFFFFFF)


@dataclass(frozen=True)
class Region:
    """A host interval of one process (``thread``: any of its threads' keys) whose time shrinks to
    ``keep_ns``, on every thread of the process (they share one timeline, module docstring)."""

    thread: int
    start_ns: int
    end_ns: int
    keep_ns: int

    @property
    def removed_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns - self.keep_ns)


@dataclass(frozen=True)
class HostTimeMap:
    """Removed host time per thread: point costs (sorted times, cumulative cost through each) and regions."""

    points: Mapping[int, tuple[I64, I64]] = field(default_factory=dict)
    regions: tuple[Region, ...] = ()

    def _points(self, thread: int, t: I64) -> I64:
        out = np.zeros(len(t), dtype=np.int64)
        pts = self.points.get(process_key(thread))
        if pts is not None and len(pts[0]):
            k = np.searchsorted(pts[0], t, side="left")  # events strictly before t
            has = k > 0
            out[has] = pts[1][k[has] - 1]
        return out

    def removed(self, thread: int, t: I64) -> I64:
        """ns removed before each host time in ``t`` on ``thread`` (events at exactly ``t`` excluded)."""
        out = self._points(thread, t)
        compressed = t - out
        for r in self.regions:
            if process_key(r.thread) != process_key(thread):
                continue
            ends = np.array([r.start_ns, r.end_ns], dtype=np.int64)
            c0, c1 = (ends - self._points(thread, ends)).tolist()
            gone = max(0, c1 - c0 - r.keep_ns)
            if gone:
                out += np.clip(compressed - c0, 0, gone)
        return out

    def removed_by_thread(self, threads: I64, t: I64) -> I64:
        """``removed`` for many (thread, time) pairs at once."""
        out = np.zeros(len(t), dtype=np.int64)
        if not self:
            return out
        for th in np.unique(threads).tolist():
            sel = np.flatnonzero(threads == th)
            out[sel] = self.removed(int(th), t[sel])
        return out

    def __bool__(self) -> bool:
        return bool(self.points) or any(r.removed_ns for r in self.regions)

    def plus(self, other: HostTimeMap) -> HostTimeMap:
        """Both maps' removals together (point costs of one thread merged in time order)."""
        points = dict(self.points)
        for th, (ts, cum) in other.points.items():
            if th not in points:
                points[th] = (ts, cum)
                continue
            a_ts, a_cum = points[th]
            costs = np.concatenate((np.diff(a_cum, prepend=0), np.diff(cum, prepend=0)))
            all_ts = np.concatenate((a_ts, ts))
            order = np.argsort(all_ts, kind="stable")
            points[th] = (all_ts[order], np.cumsum(costs[order]))
        return HostTimeMap(points, self.regions + other.regions)


def process_key(thread: int) -> int:
    """The key of a thread's process (its thread bits cleared)."""
    return (thread >> 32) << 32


def point_costs(threads: I64, ts: I64, cost_ns: npt.NDArray[np.float64]) -> HostTimeMap:
    """A map of point costs: event ``i`` on ``threads[i]`` at ``ts[i]`` costs ``cost_ns[i]``; the
    costs of one process's threads add up on one timeline (module docstring)."""
    points: dict[int, tuple[I64, I64]] = {}
    keep = cost_ns > 0
    threads, ts, cost_ns = (threads[keep] >> 32) << 32, ts[keep], cost_ns[keep]
    for th in np.unique(threads).tolist():
        sel = np.flatnonzero(threads == th)
        order = sel[np.argsort(ts[sel], kind="stable")]
        points[int(th)] = (ts[order], np.rint(np.cumsum(cost_ns[order])).astype(np.int64))
    return HostTimeMap(points)
