"""What ``diff`` computes, as plain data (``compare.diff_runs`` builds it, ``render`` shows it)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from traceadvisor.diff.breakdown import Breakdown
from traceadvisor.diff.findings import FindingChange
from traceadvisor.diff.steps import StepComparison
from traceadvisor.diff.tables import Table


@dataclass(frozen=True, slots=True)
class RankDelta:
    """One rank's mean step (ns) before and after (several ranks on both sides)."""

    rank: int
    before_ns: int | None
    after_ns: int | None


@dataclass(frozen=True, slots=True)
class Diff:
    before: str
    after: str
    before_traces: int
    after_traces: int
    before_steps: int
    after_steps: int
    profiled: StepComparison
    unprofiled: StepComparison
    breakdown: Breakdown | None
    kernels: Table
    ops: Table
    findings: tuple[FindingChange, ...]
    ranks: tuple[RankDelta, ...] = ()

    @property
    def gate(self) -> StepComparison:
        """What ``--fail-on-regression`` compares: the predicted unprofiled step (the step without
        the profiler, which is what the user's job runs at), else the profiled one."""
        u = self.unprofiled
        if not (math.isnan(u.before.report_ns) or math.isnan(u.after.report_ns)):
            return u
        return self.profiled

    def regressed(self, pct: float) -> bool:
        """Whether AFTER's step is slower than BEFORE's by more than ``pct`` %."""
        g = self.gate
        return not math.isnan(g.delta_pct) and g.delta_pct > pct
