"""Step-time statistics for a diff: median, p90, a permutation test and Cliff's delta.

scipy is not a dependency, so the significance test is an exact permutation test in numpy (every
split of the pooled steps when there are few, a fixed-seed sample otherwise): it assumes nothing
about the distribution of step times, which are skewed (a slow step from a GC pause or a
data-loader stall is common). Cliff's delta is its rank-based effect size.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_STEPS = 3  # per side, for a test (with fewer, every split is about as extreme as the data)
EXACT_LIMIT = 50_000  # splits enumerated exactly up to this many; sampled beyond
SAMPLED = 20_000
ALPHA = 0.05


@dataclass(frozen=True, slots=True)
class Test:
    """A two-sided permutation test of the difference of mean step times, and Cliff's delta
    (P(after > before) - P(after < before): +1, every AFTER step slower than every BEFORE step)."""

    p_value: float
    cliffs_delta: float
    permutations: int
    exact: bool

    @property
    def significant(self) -> bool:
        return self.p_value < ALPHA


def median_ns(values: Sequence[int]) -> float:
    return float(np.median(np.asarray(values, dtype=np.int64))) if len(values) else math.nan


def p90_ns(values: Sequence[int]) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.int64), 90)) if len(values) else math.nan


def cliffs_delta(before: Sequence[int], after: Sequence[int]) -> float:
    a = np.asarray(after, dtype=np.int64)[:, None]
    b = np.asarray(before, dtype=np.int64)[None, :]
    return float(((a > b).sum() - (a < b).sum()) / (a.size * b.size))


def permutation_test(before: Sequence[int], after: Sequence[int]) -> Test | None:
    """None with fewer than ``MIN_STEPS`` steps on a side ("too few steps")."""
    if len(before) < MIN_STEPS or len(after) < MIN_STEPS:
        return None
    pooled = np.asarray([*before, *after], dtype=np.float64)
    n, total = len(after), len(pooled)
    observed = abs(pooled[len(before) :].mean() - pooled[: len(before)].mean())
    whole = pooled.sum()
    # a split's statistic from the sum of its AFTER group alone: |s/n - (whole - s)/(total - n)|
    count = math.comb(total, n)
    if count <= EXACT_LIMIT:
        sums = np.fromiter(
            (pooled[list(c)].sum() for c in itertools.combinations(range(total), n)), dtype=np.float64, count=count
        )
        exact = True
    else:
        rng = np.random.default_rng(0)  # fixed: the same traces give the same p-value
        sums = np.array([pooled[rng.permutation(total)[:n]].sum() for _ in range(SAMPLED)])
        count, exact = SAMPLED, False
    stats = np.abs(sums / n - (whole - sums) / (total - n))
    # ties with the observed split count as extreme (a tolerance for float sums of integers)
    hits = int((stats >= observed - 1e-9 * max(1.0, observed)).sum())
    p = hits / count if exact else (hits + 1) / (count + 1)
    return Test(p_value=min(1.0, p), cliffs_delta=cliffs_delta(before, after), permutations=count, exact=exact)
