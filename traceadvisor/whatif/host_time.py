"""Host time taken out of a replay, per host thread: ``removed(thread, t)`` ns before host time ``t``.

Two kinds of removal, both monotone in ``t`` (so the replayed host timeline keeps its order):

* point costs: an event at ``ts`` costs ``c`` ns (the profiler's own work to record it); every host
  time after ``ts`` moves ``c`` earlier;
* collapsed regions: the host time of ``[start, end)`` shrinks to ``keep`` ns, or to a share of
  itself (a region replayed
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
    # instead of ``keep_ns``: the share of the region's host time to keep, once point costs are out
    # (a compiled graph keeps a share of what the eager ops took, whatever the profiler cost them)
    keep_share: float | None = None

    @property
    def removed_ns(self) -> int:
        if self.keep_share is not None:
            return int(max(0.0, (self.end_ns - self.start_ns) * (1.0 - self.keep_share)))
        return max(0, self.end_ns - self.start_ns - self.keep_ns)


@dataclass(frozen=True)
class HostTimeMap:
    """Removed host time per thread: point costs (sorted times, cumulative cost through each) and regions."""

    points: Mapping[int, tuple[I64, I64]] = field(default_factory=dict)
    regions: tuple[Region, ...] = ()
    # per process: its regions' compressed starts, removed ns and their running sum (``_region_table``)
    _tables: dict[int, tuple[I64, I64, I64, bool] | None] = field(default_factory=dict, compare=False, repr=False)

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
        table = self._region_table(process_key(thread))
        if table is None:
            return out
        c0, gone, cum, disjoint = table
        compressed = t - out
        if not disjoint:  # overlapping regions (scenarios combined): each one's share, summed
            for a, g in zip(c0.tolist(), gone.tolist(), strict=True):
                out += np.clip(compressed - a, 0, g)
            return out
        # Disjoint regions in order: a time has passed every region before the last one starting at or
        # before it (whole), and that one in part: two lookups, whatever the number of regions (the
        # loop over regions took 1.99 s of a 2.19 s analyze's replays at 100 MB: 6,330 regions).
        k = np.searchsorted(c0, compressed, side="right") - 1
        last = np.maximum(k, 0)
        out += np.where(k >= 0, cum[last] + np.clip(compressed - c0[last], 0, gone[last]), 0)
        return out

    def _region_table(self, proc: int) -> tuple[I64, I64, I64, bool] | None:
        """A process's regions by compressed start: starts, removed ns, the running sum of removed ns
        through each region before it (0 for the first), and whether they are disjoint (each ends,
        compressed, before the next starts: the regions of one scenario are). Computed once."""
        if proc in self._tables:
            return self._tables[proc]
        mine = [r for r in self.regions if process_key(r.thread) == proc]
        table = None
        if mine:
            ends = np.array([(r.start_ns, r.end_ns) for r in mine], dtype=np.int64).reshape(-1)
            c = (ends - self._points(proc, ends)).reshape(-1, 2)
            share = np.array([np.nan if r.keep_share is None else r.keep_share for r in mine], dtype=np.float64)
            keep = np.array([r.keep_ns for r in mine], dtype=np.int64)
            keep = np.where(np.isnan(share), keep, np.rint(np.nan_to_num(share) * (c[:, 1] - c[:, 0]))).astype(np.int64)
            gone = np.maximum(0, c[:, 1] - c[:, 0] - keep)
            order = np.argsort(c[:, 0], kind="stable")
            c0, gone = c[order, 0], gone[order]
            cum = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(gone)[:-1]))
            table = (c0, gone, cum, bool(np.all(c0[1:] >= c0[:-1] + gone[:-1])))
        self._tables[proc] = table
        return table

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
