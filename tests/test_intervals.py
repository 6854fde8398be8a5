"""Interval nesting without the stack sweep: ``nest_parents``, ``innermost`` and ``last_above`` against
plain Python references (brute force and the sweep they replace), on random and real intervals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from traceadvisor import load_file
from traceadvisor.trace import intervals

I64 = npt.NDArray[np.int64]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


def sweep_parents(starts: I64, ends: I64) -> list[int]:
    """The stack sweep: pop what ended by the start; the top is the parent."""
    parents, stack = [], []
    for i, t in enumerate(starts.tolist()):
        while stack and ends[stack[-1]] <= t:
            stack.pop()
        parents.append(stack[-1] if stack else -1)
        stack.append(i)
    return parents


def walk_innermost(starts: I64, ends: I64, parents: list[int], points: I64) -> list[int]:
    """The latest interval starting at or before the point, then up its parents until one holds the point."""
    out = []
    for q in points.tolist():
        c = int(np.searchsorted(starts, q, side="right")) - 1
        while c >= 0 and ends[c] <= q:
            c = parents[c]
        out.append(c)
    return out


def sorted_intervals(rng: np.random.Generator, n: int, span: int) -> tuple[I64, I64]:
    """Random intervals (nested, partly overlapping, empty, equal starts) sorted by start, longest first."""
    starts = rng.integers(0, span, n).astype(np.int64)
    durs = rng.integers(0, span // 2 + 2, n).astype(np.int64)
    order = np.lexsort((-durs, starts))
    return starts[order], starts[order] + durs[order]


@pytest.mark.parametrize("seed", range(40))
def test_nest_parents_and_innermost_match_the_sweep(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n in (0, 1, 2, 5, 17, 64, 300):
        starts, ends = sorted_intervals(rng, n, int(rng.integers(1, 400)))
        parents = sweep_parents(starts, ends)
        assert intervals.nest_parents(starts, ends).tolist() == parents
        points = rng.integers(-5, 420, 200).astype(np.int64)
        assert intervals.innermost(starts, ends, points).tolist() == walk_innermost(starts, ends, parents, points)


def test_last_above_against_brute_force() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 8, 33, 257):
        values = rng.integers(0, 50, n).astype(np.int64)
        bound = rng.integers(0, n + 1, 500).astype(np.int64)
        threshold = rng.integers(-1, 52, 500).astype(np.int64)
        want = [max((j for j in range(b) if values[j] > t), default=-1) for b, t in zip(bound, threshold, strict=True)]
        assert intervals.last_above(values, bound, threshold).tolist() == want


def test_nest_parents_refuses_unsorted_starts() -> None:
    with pytest.raises(ValueError, match="sorted by start"):
        intervals.nest_parents(np.array([5, 1]), np.array([6, 9]))


def test_real_host_ops_nest_as_the_sweep_says() -> None:
    """The CPU ops of a real trace (deep nesting, back-to-back siblings) on their busiest thread."""
    ops = load_file(FIXTURES / "train_step.json.gz").ops
    thread = ops.groupby(["pid", "tid"]).size().idxmax()
    mine = ops[(ops["pid"] == thread[0]) & (ops["tid"] == thread[1])]
    order = np.lexsort((-mine["dur_ns"].to_numpy(), mine["ts_ns"].to_numpy()))
    starts, ends = mine["ts_ns"].to_numpy()[order], mine["end_ns"].to_numpy()[order]
    parents = sweep_parents(starts, ends)
    assert max(parents) >= 0 and parents.count(-1) < len(parents)  # it nests
    assert intervals.nest_parents(starts, ends).tolist() == parents
    # Points inside, between and at the edges of the ops.
    points = np.concatenate((starts, ends, ends - 1, (starts + ends) // 2))
    assert intervals.innermost(starts, ends, points).tolist() == walk_innermost(starts, ends, parents, points)
