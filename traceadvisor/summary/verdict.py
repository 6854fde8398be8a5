"""The report's verdict: the step and the top fixes by saving per step (plain data from the report).

The step is the predicted unprofiled one where a trace can be replayed (``traces[].step_time``),
else the one measured without the profiler where capture or the advisor timed it (a CPU-only trace
is not replayed), else the profiled step; with several traces (the ranks of one run) the slowest, since every rank
waits for it at the collectives. A fix's step after it is the step less that finding's saving per
step (a replay difference, ``impact.saving_per_step_us``): each fix alone, not combined (``whatif
--apply`` combines them), with the finding's likely range where its saving is a replay's
(``whatif.saving_range``).
"""

from __future__ import annotations

from collections.abc import Sequence

from traceadvisor.report.finding import Finding
from traceadvisor.report.model import TraceSummary, Verdict, VerdictFix

TOP_FIXES = 3


def verdict_of(traces: Sequence[TraceSummary], findings: Sequence[Finding]) -> Verdict | None:
    """The verdict of a report's traces and findings (None when no trace has steps)."""
    predicted = [t.step_time.unprofiled_step_us for t in traces if t.step_time is not None]
    profiled = [t.step_time.profiled_step_us for t in traces if t.step_time is not None]
    measured = [t.measured_unprofiled_step_us.median_us for t in traces if t.measured_unprofiled_step_us is not None]
    if any(p is not None for p in predicted):
        step, basis = max(p for p in predicted if p is not None), "predicted without the profiler"
    elif measured:
        step, basis = max(measured), "measured without the profiler"
    elif profiled:
        step, basis = max(profiled), "profiled"
    else:
        steps = [s.cpu_dur_us for t in traces for s in t.steps]
        if not steps:
            return None
        step, basis = sorted(steps)[len(steps) // 2], "profiled"
    with_saving = [f for f in findings if f.impact is not None and (f.impact.saving_per_step_us or 0) > 0]
    with_saving.sort(key=lambda f: -(f.impact.saving_per_step_us or 0.0) if f.impact else 0.0)
    fixes = tuple(
        VerdictFix(
            rule=f.rule,
            code=f.code,
            ranks=f.ranks,
            saving_per_step_us=saving,
            step_after_us=max(0.0, step - saving),
            likely_low_per_step_us=_clip(f.impact.likely_low_per_step_us, step),
            likely_high_per_step_us=_clip(f.impact.likely_high_per_step_us, step),
        )
        for f in with_saving[:TOP_FIXES]
        if f.impact is not None and (saving := min(float(f.impact.saving_per_step_us or 0.0), step)) > 0
    )
    return Verdict(step_us=step, basis=basis, fixes=fixes)


def _clip(us: float | None, step: float) -> float | None:
    """A likely end never beyond the verdict's step (a rank's range against the slowest rank's step)."""
    return None if us is None else min(us, step)
