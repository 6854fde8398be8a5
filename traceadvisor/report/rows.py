"""How many table rows the text and Markdown reports print (the JSON report keeps every row).

A trace of 200,000 steps made a 10 MB text report that took 53 s to print; nobody reads that
table. Long tables keep their first and last rows (the warm-up and the steady state) and say
what the rows in between hold in one line.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

ROW_LIMIT = 20  # a table of up to this many rows prints whole
HEAD_ROWS = 10
TAIL_ROWS = 5


def elide(rows: Sequence[T], limit: int = ROW_LIMIT) -> tuple[list[T], list[T], list[T]]:
    """``(first, hidden, last)``: all of ``rows`` as ``first`` when there are at most ``limit``."""
    if len(rows) <= limit:
        return list(rows), [], []
    return list(rows[:HEAD_ROWS]), list(rows[HEAD_ROWS:-TAIL_ROWS]), list(rows[-TAIL_ROWS:])


def spread(rows: Sequence[dict[str, Any]], key: str, fmt: Callable[[float], str]) -> str:
    """``min a / median b / max c`` of one column of ``rows`` (not empty)."""
    values = [float(r[key]) for r in rows]
    return f"min {fmt(min(values))} / median {fmt(statistics.median(values))} / max {fmt(max(values))}"


def hidden_steps_line(hidden: Sequence[dict[str, Any]]) -> str:
    """One line on the steps a table leaves out: how many, and the spread of each column."""
    return (
        f"{len(hidden):,} steps not shown: CPU time {spread(hidden, 'cpu_dur_us', _ms)}; "
        f"GPU time {spread(hidden, 'gpu_dur_us', _ms)}; GPU busy {spread(hidden, 'gpu_busy_pct', _pct)}"
    )


def _ms(us_value: float) -> str:
    return f"{us_value / 1000:.3f} ms"


def _pct(value: float) -> str:
    return f"{value:.1f}%"
