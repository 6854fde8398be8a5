"""Kernels and ops of two runs joined on normalised names (an outer join: HTA's trace_diff buckets
plus added and removed, as TraceLens' compare keeps ops that vanished).

Each name's calls and total time per step: the time inside the analysed steps (``Trace.analysed_span``:
warm-up outside the profiler's active steps is not the workload) divided by the steps, so runs that
recorded a different number of steps compare. Ops are the CPU operators (inclusive time, as the
profiler's "CPU total": a nested op is counted in its parent too, so op times do not add up to the
step). Several ranks: summed over the ranks, then divided by the ranks too (per rank per step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceadvisor.diff.names import normalise
from traceadvisor.diff.run import Run
from traceadvisor.trace.model import Trace

# A name is faster or slower when its time per step moved by more than both: 5 % (run-to-run noise
# of a kernel's duration on a GPU is a few %) and 1 µs (below that, launch jitter).
REL_THRESHOLD = 0.05
ABS_THRESHOLD_NS = 1_000

BUCKETS = ("added", "removed", "slower", "faster", "unchanged")


@dataclass(frozen=True, slots=True)
class Row:
    name: str  # normalised
    bucket: str  # one of BUCKETS
    before_calls: float  # per step
    after_calls: float
    before_ns: float  # per step
    after_ns: float

    @property
    def delta_ns(self) -> float:
        return self.after_ns - self.before_ns


@dataclass(frozen=True, slots=True)
class Bucket:
    name: str
    count: int
    before_ns: float
    after_ns: float


@dataclass(frozen=True, slots=True)
class Table:
    """One joined table (kernels or ops): every row, ranked by |delta|, and the totals per bucket."""

    kind: str
    rows: tuple[Row, ...]
    buckets: tuple[Bucket, ...]


def _totals(run: Run, pick: Callable[[Trace], pd.DataFrame]) -> dict[str, tuple[float, float]]:
    """normalised name -> (calls, ns) per rank per step."""
    calls: dict[str, float] = {}
    total: dict[str, float] = {}
    ranks = max(len(run.traces), 1)
    for t in run.traces:
        steps = max(len(t.steps.table), 1)
        lo, hi = t.analysed_span
        df = pick(t)
        ts = df["ts_ns"].to_numpy()
        inside = df[(ts >= lo) & (ts < hi)] if len(t.steps.table) else df
        if not len(inside):
            continue
        g = inside.groupby(inside["name"].astype(str).map(normalise), observed=True)["dur_ns"].agg(["count", "sum"])
        scale = steps * ranks
        for name, c, s in zip(g.index.tolist(), g["count"].to_numpy(), g["sum"].to_numpy(np.int64), strict=True):
            calls[name] = calls.get(name, 0.0) + float(c) / scale
            total[name] = total.get(name, 0.0) + float(s) / scale
    return {k: (calls[k], total[k]) for k in calls}


def _bucket(b: tuple[float, float] | None, a: tuple[float, float] | None) -> str:
    if b is None:
        return "added"
    if a is None:
        return "removed"
    delta = a[1] - b[1]
    if abs(delta) > ABS_THRESHOLD_NS and abs(delta) > REL_THRESHOLD * b[1]:
        return "slower" if delta > 0 else "faster"
    return "unchanged"


def join(kind: str, before: Run, after: Run, pick: Callable[[Trace], pd.DataFrame]) -> Table:
    b, a = _totals(before, pick), _totals(after, pick)
    rows = []
    for name in sorted(set(b) | set(a)):
        x, y = b.get(name), a.get(name)
        rows.append(
            Row(name, _bucket(x, y), x[0] if x else 0.0, y[0] if y else 0.0, x[1] if x else 0.0, y[1] if y else 0.0)
        )
    rows.sort(key=lambda r: (-abs(r.delta_ns), r.name))
    buckets = tuple(
        Bucket(
            k,
            sum(1 for r in rows if r.bucket == k),
            sum(r.before_ns for r in rows if r.bucket == k),
            sum(r.after_ns for r in rows if r.bucket == k),
        )
        for k in BUCKETS
    )
    return Table(kind, tuple(rows), buckets)


def kernels(before: Run, after: Run) -> Table:
    return join("kernels", before, after, lambda t: t.kernels)


def ops(before: Run, after: Run) -> Table:
    return join("ops", before, after, lambda t: t.ops)
