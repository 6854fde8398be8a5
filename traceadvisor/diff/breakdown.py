"""The step broken down by category, before and after, with deltas that reconcile to the step delta.

One trace: the GPU's busy time per step (``step_time.gpu_busy_per_step_us``) and its idle time by
cause (``idle_breakdown``, the window's idle divided by the steps). Several ranks: the rank table's
categories (compute, exposed wait, exposed transfer, exposed memcpy, idle; ``ranks/combine.py``),
averaged over the ranks. The categories are measured on the profiled step, so they reconcile to the
profiled step time; what they do not cover (the idle window and the spacing of step ends differ at
the edges, host time past the last kernel) is the ``unexplained`` remainder, shown, never spread.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceadvisor.diff.run import Run
from traceadvisor.report.model import Report

RANK_CATEGORIES = (
    ("compute_us", "compute"),
    ("exposed_wait_us", "exposed communication wait"),
    ("exposed_transfer_us", "exposed communication transfer"),
    ("memcpy_exposed_us", "exposed memcpy"),
    ("idle_us", "idle"),
)


@dataclass(frozen=True, slots=True)
class Category:
    name: str
    before_ns: int
    after_ns: int

    @property
    def delta_ns(self) -> int:
        return self.after_ns - self.before_ns


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Per step (ns). ``step`` = sum of the categories + ``unexplained`` on each side exactly, so the
    category deltas plus the unexplained delta are the step delta."""

    basis: str  # what the categories are
    step_before_ns: int
    step_after_ns: int
    categories: tuple[Category, ...]

    @property
    def step_delta_ns(self) -> int:
        return self.step_after_ns - self.step_before_ns

    @property
    def unexplained_before_ns(self) -> int:
        return self.step_before_ns - sum(c.before_ns for c in self.categories)

    @property
    def unexplained_after_ns(self) -> int:
        return self.step_after_ns - sum(c.after_ns for c in self.categories)

    @property
    def unexplained_delta_ns(self) -> int:
        return self.unexplained_after_ns - self.unexplained_before_ns


def _ns(us: float) -> int:
    # report figures are exact ns / 1000, so rounding recovers the ns
    return round(us * 1000)


def _words(cause: str) -> str:
    return "GPU idle: " + cause.replace("_", " ")


def _single(report: Report) -> tuple[int, dict[str, int]] | None:
    t = report.traces[0]
    st = t.step_time
    if st is None or not t.steps:
        return None
    cats = {"GPU busy": _ns(st.gpu_busy_per_step_us)}
    n = len(t.steps)
    for c in t.idle_breakdown:
        # the idle of the whole window over its steps (integer ns: the remainder absorbs the rest)
        cats[_words(c.cause)] = cats.get(_words(c.cause), 0) + _ns(c.idle_us) // n
    return _ns(st.profiled_step_us), cats


def _ranks(report: Report) -> tuple[int, dict[str, int]] | None:
    r = report.ranks
    if r is None or not r.rows:
        return None
    n = len(r.rows)
    step = sum(_ns(row.step_us) for row in r.rows) // n
    cats = {label: sum(_ns(getattr(row, f)) for row in r.rows) // n for f, label in RANK_CATEGORIES}
    return step, cats


def _of(run: Run) -> tuple[str, tuple[int, dict[str, int]] | None]:
    if run.report.ranks is not None:
        return "rank table, mean over ranks", _ranks(run.report)
    if len(run.report.traces) == 1:
        return "GPU busy and GPU idle by cause", _single(run.report)
    return "", None


def breakdown(before: Run, after: Run) -> Breakdown | None:
    """None when a side has no steps, or the two sides are not the same kind (one trace vs ranks)."""
    basis_b, b = _of(before)
    basis_a, a = _of(after)
    if b is None or a is None or basis_a != basis_b:
        return None
    names = list(b[1]) + [k for k in a[1] if k not in b[1]]
    cats = tuple(Category(k, b[1].get(k, 0), a[1].get(k, 0)) for k in names)
    cats = tuple(sorted(cats, key=lambda c: (-abs(c.delta_ns), c.name)))
    return Breakdown(basis_b, b[0], a[0], cats)
