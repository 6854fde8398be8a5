"""A fix's saving as a replay difference: the predicted unprofiled step before and after the fix.

Every saving a finding reports comes from here (issue 12 item 3). The baseline is the trace
replayed without the profiler's host cost (``profiler_cost.unprofiled_replay``); the fix is a
scenario (``scenarios.SCENARIOS``: a change of the dependency graph, ``replay.Overrides``) applied
on top of that baseline, and the saving is the difference of the two replays' step times (the
spacing of step ends: ``scenarios.step_time_ns``). A fix off the critical path moves no step end
and saves nothing; a saving can never exceed the step.

A fix that only removes idle (no GPU record's duration changes) and leaves the step GPU-bound, on a
GPU that ran at its power limit without the profiler (the trace's ``gpu_power.unprofiled``
reading, capture/gpu_power.py), may save less than the idle: there the kernels slow down once the
GPU idles less (whatif/power_limit.py). The saving carries the power-limit model's give-back
(``power_give_back_ns``) beside it, not taken off it: on the validation pairs it was tried on
(runs 27-31), taking it off made more savings miss than it mended (``power_limited``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from traceadvisor.analyses.cache import memoised
from traceadvisor.trace import intervals
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.power_limit import GiveBack, give_back
from traceadvisor.whatif.profiler_cost import (
    gpu_power_state,
    host_cost_interval,
    measured_unprofiled_ns,
    step_at,
    unprofiled_overrides,
    unprofiled_overrides_at,
    unprofiled_replay,
)
from traceadvisor.whatif.refused import Refused
from traceadvisor.whatif.replay import Overrides, replay
from traceadvisor.whatif.saving_range import band, likely_share_range
from traceadvisor.whatif.scenarios import SCENARIOS, combine, step_time_ns


@dataclass(frozen=True)
class Saving:
    """One scenario's predicted unprofiled step time before and after (ns), or why it was refused."""

    scenario: str
    before_ns: float
    after_ns: float
    changed: int = 0
    refused: str | None = None
    # the part of the (idle) saving the power-limit model expects a GPU at its limit to give back as
    # slower kernels, NOT in ``after_ns`` (0 where it does not apply: ``power_limited``), and the
    # model's reading
    power_give_back_ns: float = 0.0
    give_back: GiveBack | None = None
    # what replays the fix at the ends of the host's plausible speed (``host_alternatives``), run
    # only when a range is asked for: most scenarios an analysis replays stay under their rule's
    # threshold and are never shown
    alternatives_of: Callable[[], tuple[tuple[float, float], ...]] | None = field(
        default=None, compare=False, repr=False
    )
    # whether the trace carries measured unprofiled steps (the range's band: ``saving_range.band``)
    calibrated: bool = False

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

    @property
    def likely_share_pct(self) -> tuple[float, float]:
        """The likely range of the saving, % of the predicted unprofiled step (``saving_range``);
        (0, 0) for a scenario that found nothing to change."""
        if self.changed == 0 and self.saving_ns == 0:
            return 0.0, 0.0
        return likely_share_range(self.share_pct, self.host_shares_pct, *band(self.calibrated))

    @functools.cached_property
    def host_alternatives(self) -> tuple[tuple[float, float], ...]:
        """(before, after) ns replayed at the ends of the host's plausible speed where the trace's
        measured step did not fix it (``profiler_cost.host_cost_interval``); () where it did, or
        without one."""
        return self.alternatives_of() if self.alternatives_of is not None else ()

    @property
    def host_shares_pct(self) -> tuple[float, ...]:
        """The saving's share of the step at each end of the host's plausible speed (``host_alternatives``)."""
        return tuple(100.0 * max(0.0, b - a) / b for b, a in self.host_alternatives if b > 0)

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
    """The saving of an arbitrary graph change ``ov`` (named ``name``) on the unprofiled baseline,
    with what a GPU at its power limit may give back of it beside it (``power_limited``)."""
    before = predicted_step_ns(trace)
    after = step_time_ns(replay(trace, with_profiler_removed(trace, ov)))
    changed = len(ov.gpu_dur_ns) + len(ov.no_wait) + len(ov.no_event_wait) + len(ov.host_dur_ns)
    changed += len(ov.host_removed.regions) + len(ov.gpu_delay_ns)
    calibrated = measured_unprofiled_ns(trace) is not None
    later = functools.cache(functools.partial(host_alternatives, trace, ov)) if changed and calibrated else None
    saving = Saving(name, before, after, changed, calibrated=calibrated, alternatives_of=later)
    return power_limited(trace, ov, saving)


def host_alternatives(trace: Trace, ov: Overrides) -> tuple[tuple[float, float], ...]:
    """(before, after) ns of the change ``ov`` replayed at each end of the host's plausible speed
    where the trace's measured step did not fix it (``profiler_cost.host_cost_interval``): on run 36
    (a fresh H100 whose host ran fast) the GPT trainer's eager step was GPU-bound, so its host time
    was known only to be under the step, and the compile scenario's saving moved from 49% at the
    bundled profiler costs to 31.5% at the interval's low end, against 26% measured."""
    interval = host_cost_interval(trace)
    if interval is None:
        return ()
    out = []
    for f in sorted(set(interval) - {1.0}):
        after = step_time_ns(replay(trace, combine([unprofiled_overrides_at(trace, f), ov])))
        out.append((step_at(trace, f), after))
    return tuple(out)


# A replayed step after the fix within this factor of the GPU's own busy time per step is GPU-bound:
# the idle the fix removed was all the slack there was, so the GPU now runs through the step.
GPU_BOUND_AFTER = 1.05


@memoised
def busy_per_step_ns(trace: Trace) -> float:
    """The GPU's busy time per profiled step with a GPU window (kernels, copies and memsets merged
    over the streams of the device most kernels ran on), ns; 0 without such steps."""
    steps = trace.steps.table
    steps = steps[steps["gpu_start_ns"] >= 0]
    if not len(steps) or not len(trace.kernels):
        return 0.0
    device = int(trace.kernels["device"].mode().iat[0])
    bs, be = trace.busy_intervals(device)
    busy = intervals.covered(bs, be, steps["gpu_start_ns"].to_numpy(), steps["gpu_end_ns"].to_numpy())
    return float(busy.mean())


def leaves_gpu_bound(trace: Trace, saving: Saving) -> bool:
    """Whether the step after the fix is GPU-bound: its replayed time within ``GPU_BOUND_AFTER`` of
    the GPU's busy time per step."""
    busy = busy_per_step_ns(trace) * unprofiled_overrides(trace).kernel_scale
    return busy > 0 and saving.after_ns <= GPU_BOUND_AFTER * busy


def power_limited(trace: Trace, ov: Overrides, saving: Saving) -> Saving:
    """``saving`` with what the power-limit model expects the GPU to give back of it: where the fix
    changes no GPU record's duration (its saving is removed idle), leaves the step GPU-bound, and the
    trace says the GPU ran capped without the profiler at a clock the model places
    (``power_limit.give_back``). The GPU then draws more energy per step and, held at the limit, runs
    every kernel slower. The give-back is real (fixtures/gpu_segment_probe/: 0.01-0.96 of the idle on
    six H200 loops), but the clock does not predict its size across machines (item_gpu gave back
    0.56 on one machine and 0.96 on another at the same clock): taken off the saving (2026-12-03), it
    made 3 more validation savings of runs 27-31 miss 20% than it mended (17 of 26 within 20% without
    it, 14 with; ``python bench/pairs_validation.py --all-runs --calibrated [--give-back-off]``).
    So the saving stays the replayed idle, and the finding gives the model's range beside it. A fix
    that changes kernels also changes the energy per step, which the model does not cover."""
    if saving.refused or saving.saving_ns <= 0 or ov.gpu_dur_ns or ov.kernel_scale != 1.0:
        return saving
    given = give_back(gpu_power_state(trace))
    if given is None or given.share <= 0 or not leaves_gpu_bound(trace, saving):
        return saving
    return replace(saving, power_give_back_ns=given.share * saving.saving_ns, give_back=given)


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
        combined = saving_of(trace, "combined", ov)
        out.append(Outcome(with_parts_give_back(trace, combined, [o.saving for o in out]), answers))
    return out


def with_parts_give_back(trace: Trace, combined: Saving, parts: list[Saving]) -> Saving:
    """A combination that also changes kernels is not power-limited as a whole (``power_limited``),
    but the idle its idle-only parts remove is the same idle: it carries their give-back (at most its
    own saving), where the combined step is still GPU-bound."""
    back = sum(p.power_give_back_ns for p in parts if p.power_give_back_ns > 0)
    if combined.power_give_back_ns > 0 or back <= 0 or combined.refused or not leaves_gpu_bound(trace, combined):
        return combined
    given = next(p.give_back for p in parts if p.give_back is not None)
    return replace(combined, power_give_back_ns=min(back, combined.saving_ns), give_back=given)
