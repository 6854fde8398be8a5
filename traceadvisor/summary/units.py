"""Units of the report's numbers: microseconds from exact nanoseconds, percentages."""

from __future__ import annotations

from typing import Any

import numpy as np


def us(ns: int | float | np.integer[Any]) -> float:
    """Nanoseconds to microseconds (exact to the nanosecond decimal: the integer is divided once)."""
    return int(ns) / 1000.0


def pct(part: float, whole: float) -> float:
    """``part`` as a percentage of ``whole`` (0 for an empty whole)."""
    return 100.0 * part / whole if whole > 0 else 0.0
