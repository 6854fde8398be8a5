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
    """
    parents = [-1] * len(starts)
    stack: list[int] = []
    s_list, e_list = starts.tolist(), ends.tolist()
    for i, t in enumerate(s_list):
        while stack and e_list[stack[-1]] <= t:
            stack.pop()
        if stack:
            parents[i] = stack[-1]
        stack.append(i)
    return np.array(parents, dtype=np.int64)


def innermost(starts: I64, ends: I64, parents: I64, points: I64) -> I64:
    """Position of the innermost interval containing each point (-1 if none).

    The latest-starting interval at or before a point either contains it or ends before it; in
    the second case only its ancestors can contain the point, so walking up the parent chain
    finds the answer in at most depth steps.
    """
    cand = np.searchsorted(starts, points, side="right") - 1
    ok = cand >= 0
    ok[ok] = ends[cand[ok]] > points[ok]
    out = np.where(ok, cand, -1)
    todo = np.flatnonzero(~ok & (cand >= 0))
    e_list, p_list = ends.tolist(), parents.tolist()
    for k in todo.tolist():
        q = int(points[k])
        c = p_list[int(cand[k])]
        while c >= 0 and e_list[c] <= q:
            c = p_list[c]
        out[k] = c
    return out
