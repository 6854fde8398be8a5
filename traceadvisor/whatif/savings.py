"""A fix's saving as a replay difference: the predicted unprofiled step before and after the fix.

Every saving a finding reports comes from here (issue 12 item 3). The baseline is the trace
replayed without the profiler's host cost (``profiler_cost.unprofiled_replay``); the fix is a
scenario (``scenarios.SCENARIOS``: a change of the dependency graph, ``replay.Overrides``) applied
on top of that baseline, and the saving is the difference of the two replays' step times (the
spacing of step ends: ``scenarios.step_time_ns``). A fix off the critical path moves no step end
and saves nothing; a saving can never exceed the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from traceadvisor.analyses.cache import memoised
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.profiler_cost import unprofiled_overrides, unprofiled_replay
from traceadvisor.whatif.refused import Refused
from traceadvisor.whatif.replay import Overrides, replay
from traceadvisor.whatif.scenarios import SCENARIOS, combine, step_time_ns


@dataclass(frozen=True)
class Saving:
    """One scenario's predicted unprofiled step time before and after (ns), or why it was refused."""

    scenario: str
    before_ns: float
    after_ns: float
    changed: int = 0
    refused: str | None = None

    @property
    def saving_ns(self) -> float:
        """Never negative: a fix predicted to slow the step saves nothing (the rule does not report it)."""
        if self.refused or math.isnan(self.before_ns) or math.isnan(self.after_ns):
            return 0.0
        return max(0.0, self.before_ns - self.after_ns)

    @property
    def share_pct(self) -> float:
        """The saving over the predicted unprofiled step, %."""
        return self.saving_ns / self.before_ns * 100.0 if self.before_ns > 0 else 0.0

    def reaches(self, min_pct: float) -> bool:
        """Whether the scenario applied and saves at least ``min_pct`` of the predicted unprofiled
        step: the gate every replay-backed rule reports behind."""
        return self.refused is None and self.share_pct >= min_pct


@memoised
def predicted_step_ns(trace: Trace) -> float:
    """The predicted unprofiled step time (ns; NaN without steps): ``traces[].unprofiled_step_us``."""
    return step_time_ns(unprofiled_replay(trace))


def with_profiler_removed(trace: Trace, ov: Overrides) -> Overrides:
    """``ov`` applied to the unprofiled baseline (the profiler's host cost also taken out)."""
    return combine([unprofiled_overrides(trace), ov])


def saving_of(trace: Trace, name: str, ov: Overrides) -> Saving:
    """The saving of an arbitrary graph change ``ov`` (named ``name``) on the unprofiled baseline."""
    before = predicted_step_ns(trace)
    after = step_time_ns(replay(trace, with_profiler_removed(trace, ov)))
    changed = len(ov.gpu_dur_ns) + len(ov.no_wait) + len(ov.no_event_wait) + len(ov.host_dur_ns)
    changed += len(ov.host_removed.regions) + len(ov.gpu_delay_ns)
    return Saving(name, before, after, changed)


@memoised
def scenario_saving(trace: Trace, name: str) -> Saving:
    """The saving of the named scenario (memoised per trace: rules and the what-if command share it)."""
    before = predicted_step_ns(trace)
    if not trace.steps.table.shape[0]:
        return Saving(name, before, before, refused="the trace has no steps (ProfilerStep#N)")
    try:
        ov = SCENARIOS[name].build(trace)
    except Refused as exc:
        return Saving(name, before, before, refused=str(exc))
    return saving_of(trace, name, ov)


@dataclass(frozen=True)
class Outcome:
    """One scenario (or the combination) in ``traceadvisor whatif``: its saving and what it answers."""

    saving: Saving
    answers: tuple[str, ...]


def whatif(trace: Trace, names: list[str]) -> list[Outcome]:
    """Each named scenario's saving on the predicted unprofiled step, then (for more than one
    applied) the combination's: all their graph changes replayed together."""
    if not trace.steps.table.shape[0]:
        raise Refused("the trace has no steps (ProfilerStep#N): a what-if predicts step time")
    out = [Outcome(scenario_saving(trace, n), SCENARIOS[n].answers) for n in names]
    applied = [n for n, o in zip(names, out, strict=True) if o.saving.refused is None]
    if len(applied) > 1:
        ov = combine([SCENARIOS[n].build(trace) for n in applied])
        answers = tuple(dict.fromkeys(a for n in applied for a in SCENARIOS[n].answers))
        out.append(Outcome(saving_of(trace, "combined", ov), answers))
    return out
