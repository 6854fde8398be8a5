"""Interval arithmetic on int64 nanosecond arrays: merging, overlap with windows, gaps.

Everything is vectorised with numpy; intervals are half-open ``[start, end)``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def merge(starts: I64, ends: I64) -> tuple[I64, I64]:
    """Union of intervals as sorted, disjoint ``(starts, ends)``; touching intervals are joined."""
    if len(starts) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    e = np.maximum.accumulate(ends[order])
    # A new run starts where an interval begins after everything before it has ended.
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    run_start = s[new]
    last_of_run = np.append(np.flatnonzero(new)[1:] - 1, len(s) - 1)
    return run_start, e[last_of_run]


def covered(starts: I64, ends: I64, lo: I64 | int, hi: I64 | int) -> I64:
    """Length covered by merged, disjoint intervals inside each window ``[lo, hi)`` (vectorised)."""
    lo_a = np.atleast_1d(np.asarray(lo, dtype=np.int64))
    hi_a = np.atleast_1d(np.asarray(hi, dtype=np.int64))
    if len(starts) == 0:
        return np.zeros(len(lo_a), dtype=np.int64)
    lengths = ends - starts
    cum = np.concatenate(([0], np.cumsum(lengths)))

    def upto(t: I64) -> I64:
        # Covered length in (-inf, t): whole intervals ending before t, plus the part of the one
        # that contains t.
        i = np.searchsorted(starts, t, side="right")  # intervals starting before or at t
        total = cum[i]
        j = i - 1
        has = j >= 0
        partial = np.zeros_like(t)
        partial[has] = np.maximum(ends[j[has]] - t[has], 0)
        result: I64 = total - partial
        return result

    out: I64 = np.maximum(upto(hi_a) - upto(lo_a), 0)
    return out


def gaps(starts: I64, ends: I64, lo: int, hi: int) -> tuple[I64, I64]:
    """Idle intervals inside ``[lo, hi)`` between merged, disjoint busy intervals."""
    keep = (ends > lo) & (starts < hi)
    s = np.clip(starts[keep], lo, hi)
    e = np.clip(ends[keep], lo, hi)
    gap_s = np.concatenate(([lo], e))
    gap_e = np.concatenate((s, [hi]))
    pos = gap_e > gap_s
    return gap_s[pos], gap_e[pos]


def nest_parents(starts: I64, ends: I64) -> I64:
    """Parent position of each interval among intervals sorted by start (longest first on ties).

    Intervals on one thread nest; a partial overlap takes the innermost interval open at its
    start as parent. -1 at the root.

    This is the parent a stack sweep gives (pop the intervals that ended by the start, the top
    is the parent), computed without the sweep: every interval the sweep popped before ``i``
    ended at or before ``starts[i]``, and every interval left on the stack is later than those
    below it, so the top is the latest interval before ``i`` that ends after ``starts[i]``.
    """
    n = len(starts)
    parents = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return parents
    if (starts[1:] < starts[:-1]).any():
        raise ValueError("nest_parents: intervals must be sorted by start")
    # Most intervals start inside the one just before them (its first child, or a sibling's
    # deeper nesting); the others search further back.
    prev = ends[:-1] > starts[1:]
    later = np.arange(1, n, dtype=np.int64)
    parents[1:][prev] = later[prev] - 1
    far = later[~prev]
    if len(far):
        parents[far] = last_above(ends, far - 1, starts[far])
    return parents


def innermost(starts: I64, ends: I64, points: I64) -> I64:
    """Position of the innermost interval containing each point (-1 if none).

    ``starts`` are sorted (longest first on ties) as for ``nest_parents``. The latest-starting
    interval at or before a point either contains it, or ends before it; in the second case the
    answer is an enclosing interval: the latest one before it that ends after the point (the
    interval ``nest_parents``' chain of parents reaches first: the others ended earlier).
    """
    cand = np.searchsorted(starts, points, side="right") - 1
    ok = cand >= 0
    ok[ok] = ends[cand[ok]] > points[ok]
    out: I64 = np.where(ok, cand, -1)
    todo = np.flatnonzero(~ok & (cand >= 0))
    if len(todo):
        out[todo] = last_above(ends, cand[todo], points[todo])
    return out


def last_above(values: I64, bound: I64, threshold: I64) -> I64:
    """For each query, the largest ``j < bound`` with ``values[j] > threshold`` (-1 if none), vectorised.

    A sparse table of range maxima (``level[k][j] = max(values[j : j + 2**k])``) lets every query
    skip back over the longest run ending at its bound whose values are all at most its
    threshold, one power of two at a time, largest first; the answer is the value just before
    that run. O((n + queries) log n) time, n log n memory.
    """
    pos = np.asarray(bound, dtype=np.int64).copy()
    if not len(pos) or not len(values):
        return np.full(len(pos), -1, dtype=np.int64)
    levels = [values]
    while (1 << len(levels)) <= len(values):
        prev, half = levels[-1], 1 << (len(levels) - 1)
        levels.append(np.maximum(prev[:-half], prev[half:]))
    for k in range(len(levels) - 1, -1, -1):
        step = 1 << k
        start = pos - step
        can = start >= 0
        can[can] = levels[k][start[can]] <= threshold[can]
        pos[can] = start[can]
    out: I64 = pos - 1
    return out
