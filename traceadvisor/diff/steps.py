"""Per-step times of a run, profiled and predicted unprofiled, and their comparison.

A step's time is the spacing of step ends, as the report's ``step_time`` (``whatif/scenarios.
step_time_ns``: a GPU-bound loop's host runs ahead, so a step's own span holds the backlog of the
steps before it; the spacing of ends is the loop's rate). Step k's sample is ``end[k] - end[k-1]``;
the first step, which has no predecessor in the trace, gives its own span (its start to its end:
nothing queued before the first profiled step but the warm-up, which the schedule let drain).
The predicted unprofiled samples come from the same replay the report's
``unprofiled_step_us`` comes from (``whatif/profiler_cost.unprofiled_replay``).
Several ranks: per step index the slowest rank's sample (the ranks of a data-parallel run wait for
each other at the collectives, so the slowest sets the run's pace).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from traceadvisor.diff import stats
from traceadvisor.diff.run import Run
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.replay import Replay


@dataclass(frozen=True, slots=True)
class Side:
    """One run's step times (ns): the per-step samples, their median and p90, and the report's
    step time (mean spacing of step ends, the figure ``analyze`` shows)."""

    samples_ns: tuple[int, ...]
    median_ns: float
    p90_ns: float
    report_ns: float  # nan: no steps


@dataclass(frozen=True, slots=True)
class StepComparison:
    """One step-time measure (profiled or predicted unprofiled) before and after."""

    measure: str  # "profiled" | "predicted unprofiled"
    before: Side
    after: Side
    test: stats.Test | None  # None: too few steps

    @property
    def delta_ns(self) -> float:
        return self.after.report_ns - self.before.report_ns

    @property
    def delta_pct(self) -> float:
        b = self.before.report_ns
        return self.delta_ns / b * 100.0 if b > 0 else math.nan


def _samples(r: Replay, measured: bool) -> list[int]:
    out: list[int] = []
    prev: int | None = None
    for s in r.steps:
        end = s.measured_end_ns if measured else s.replayed_end_ns
        span = s.measured_span_ns if measured else s.replayed_span_ns
        out.append(span if prev is None else end - prev)
        prev = end
    return out


def _cpu_samples(trace: Trace) -> list[int]:
    """A trace without GPU work (a CPU or gloo run): the steps' CPU windows (there is no replay)."""
    t = trace.steps.table
    starts, ends = t["cpu_start_ns"].tolist(), t["cpu_end_ns"].tolist()
    return [int(ends[0] - starts[0]), *(int(b - a) for a, b in itertools.pairwise(ends))]


def _trace_samples(trace: Trace, measured: bool) -> list[int]:
    if measured:
        from traceadvisor.whatif.replay import measured_replay

        got = _samples(measured_replay(trace), True)
        return got if got else _cpu_samples(trace)
    from traceadvisor.whatif.profiler_cost import unprofiled_replay

    return _samples(unprofiled_replay(trace), False)


def _report_ns(run: Run, measured: bool, samples: tuple[int, ...]) -> float:
    """The report's step time: the slowest rank's. Without one (no GPU: the report gives none), the
    profiled step is the mean spacing of the CPU step ends, as ``step_time_ns`` with one step per
    sample; nan for the unprofiled one (the replay that predicts it needs GPU work)."""
    values = [
        (st.profiled_step_us if measured else st.unprofiled_step_us)
        for t in run.report.traces
        if (st := t.step_time) is not None
    ]
    got = [round(v * 1000) for v in values if v is not None]
    if got:
        return float(max(got))
    if measured and len(samples) > 1:
        return sum(samples[1:]) / (len(samples) - 1)
    if measured and samples:
        return float(samples[0])
    return math.nan


def side(run: Run, measured: bool) -> Side:
    per_rank = [_trace_samples(t, measured) for t in run.traces if len(t.steps.table)]
    n = min((len(s) for s in per_rank), default=0)
    samples = tuple(max(s[i] for s in per_rank) for i in range(n))
    return Side(samples, stats.median_ns(samples), stats.p90_ns(samples), _report_ns(run, measured, samples))


def compare_steps(before: Run, after: Run) -> tuple[StepComparison, StepComparison]:
    """Profiled, then predicted unprofiled."""
    out = []
    for measured, label in ((True, "profiled"), (False, "predicted unprofiled")):
        b, a = side(before, measured), side(after, measured)
        out.append(StepComparison(label, b, a, stats.permutation_test(b.samples_ns, a.samples_ns)))
    return out[0], out[1]
