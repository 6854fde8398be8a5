"""Helpers for the steps that rules repeat: keeping events inside profiler steps, the worth-reporting
test, idle claimed by a rule less the profiler's own cost, evidence and source locations of events,
time formatting. Rules reach them through ``traceadvisor.rules_api``.

Each helper does what the built-in rules did inline, with the same arithmetic (same operations in
the same order), so moving a rule onto them changes no number in a report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses.idle import PROFILER_EVENT_COST_NS, IdleCause, idle_attribution
from traceadvisor.analyses.sync_sites import sync_site_matches
from traceadvisor.engine.rule import location_of
from traceadvisor.report.finding import Evidence, Location

# re-exported to rules (rules_api): the report's time format, plural and cause names, so that a
# message reads like the report around it
from traceadvisor.report.format import cause_name as cause_name
from traceadvisor.report.format import fmt_time as fmt_time
from traceadvisor.report.format import plural as plural
from traceadvisor.trace import intervals
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.host_time import thread_key
from traceadvisor.whatif.profiler_cost import unprofiled_overrides
from traceadvisor.whatif.savings import Saving, predicted_step_ns

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Number = float | np.integer[Any] | np.floating[Any]

# The default of a rule's ``profiler_event_us`` option: the profiler's host cost per recorded event
# (op, annotation or Python frame), measured on the fixtures' before/after pairs (analyses/idle.py).
PROFILER_EVENT_US = PROFILER_EVENT_COST_NS / 1000


# -- time and shares ---------------------------------------------------------------------------
def us(ns: Number) -> float:
    """Nanoseconds as microseconds, unrounded (the report's time unit)."""
    return float(ns / 1e3)


def fmt_ns(ns: Number) -> str:
    """A time given in nanoseconds, for a message: the report's one time format (``fmt_time``:
    ``812.4 µs``, ``12.85 ms``, ``12.85 s``), so a message reads like the tables beside it.
    ``data`` and evidence keep the unrounded value."""
    return fmt_time(float(ns) / 1e3)


def fmt_us(ns: Number, digits: int = 1) -> str:
    """``12.3 µs``: nanoseconds in microseconds with ``digits`` decimals. Kept for rules written
    against it; a message should use ``fmt_ns`` (the unit by magnitude, as the report shows times)."""
    return f"{ns / 1e3:.{digits}f} µs"


def fmt_ms(ns: Number, digits: int = 2) -> str:
    """``1.23 ms``: nanoseconds in milliseconds with ``digits`` decimals (kept for rules written
    against it; see ``fmt_ns``)."""
    return f"{ns / 1e6:.{digits}f} ms"


def pct(part: Number, whole: Number) -> float:
    """``part`` as a percentage of ``whole``; 0 when ``whole`` is 0 (e.g. no kernel time at all)."""
    return float(100.0 * part / whole) if whole else 0.0


def share_of_steps(trace: Trace, ns: Number) -> float:
    """``ns`` as a percentage of the analysed steps (``trace.analysed_ns``, the denominator of every
    finding's ``share_pct``); 0 for a trace with no analysed time."""
    window = trace.analysed_ns
    return float(100.0 * ns / window) if window > 0 else 0.0


def share_of_steps_text(trace: Trace, ns: Number) -> str:
    """``ns`` as a share that names its denominator, for a message: ``88.3% of the 25.47 ms of 3
    analysed steps`` (``share_of_steps``; without steps, of the analysis window)."""
    n = len(trace.steps.table)
    what = plural(n, "analysed step") if n else "the analysis window"
    return f"{share_of_steps(trace, ns):.1f}% of the {fmt_ns(trace.analysed_ns)} of {what}"


def worth_reporting(trace: Trace, impact_ns: Number, min_pct: float) -> bool:
    """Whether an impact reaches ``min_pct`` percent of the analysed steps. A trace with no analysed
    time reports nothing: a share of nothing says nothing about the workload."""
    window = trace.analysed_ns
    return bool(window > 0 and 100.0 * impact_ns / window >= min_pct)


# -- steps -------------------------------------------------------------------------------------
def in_steps(trace: Trace, events: pd.DataFrame, at: str = "ts_ns") -> pd.DataFrame:
    """The rows of a host table (ops, runtime calls, annotations) whose ``at`` time lies inside a
    profiler step's CPU window, so a rule judges the steady state, not warm-up or the profiler's own
    start and stop. A trace without steps has no steady state to single out: every row is kept."""
    if not len(trace.steps.table):
        return events
    return events[trace.step_of(events[at].to_numpy()) >= 0]


def steps_on_gpu(trace: Trace) -> pd.DataFrame:
    """The profiler steps that have a GPU window (``gpu_start_ns >= 0``), numbered from 0: steps whose
    launches are not in the trace have no GPU time to judge."""
    steps = trace.steps.table
    return steps[steps["gpu_start_ns"] >= 0].reset_index(drop=True)


def step_positions(trace: Trace, steps: pd.DataFrame, ts: I64) -> npt.NDArray[np.intp]:
    """For each host time: the position in ``steps`` (a subset of ``trace.steps.table``) of the step
    whose CPU window holds it, -1 outside those steps. A launch belongs to the step its runtime call
    starts in, from any thread (the autograd thread launches the backward)."""
    number = trace.step_of(ts)
    index = pd.Index(steps["step"].to_numpy())
    return np.asarray(np.where(number >= 0, index.get_indexer(number), -1), dtype=np.intp)


def busy_in_windows(trace: Trace, device: int, starts: I64, ends: I64) -> I64:
    """GPU busy time of ``device`` (kernels, copies, memsets merged over all streams) inside each
    window ``[starts[i], ends[i])``."""
    bs, be = trace.busy_intervals(device)
    return intervals.covered(bs, be, starts, ends)


# -- idle claimed by a rule --------------------------------------------------------------------
def idle_of(trace: Trace, *causes: IdleCause) -> pd.DataFrame:
    """The trace's idle gaps (``idle_attribution``: one primary cause per gap) of these causes, in
    time order: the idle a rule claims (``claims``) or looks at."""
    gaps = idle_attribution(trace)
    return gaps[gaps["cause"].isin([str(c) for c in causes]).to_numpy()]


def recoverable_per_gap(gaps: pd.DataFrame, profiler_event_us: float) -> F64:
    """Each idle gap (rows of the idle attribution) less the profiler's own host cost of the events
    recorded inside it (``host_events`` × ``profiler_event_us``), at least 0: an unprofiled run does
    not pay that cost, so it does not lose that idle."""
    dur = gaps["dur_ns"].to_numpy().astype(np.float64)
    cost = gaps["host_events"].to_numpy() * float(profiler_event_us * 1000)
    return np.asarray(np.maximum(dur - cost, 0.0), dtype=np.float64)


def profiler_ns_per_gap(trace: Trace, gaps: pd.DataFrame) -> F64:
    """The profiler's own host time inside each idle gap (rows of the idle attribution), on the
    process of the thread that launched the work the gap waited for: what the unprofiled replay
    takes out there (``profiler_cost``: each recorded event at its kind's fitted cost, scaled to the
    trace's host speed and calibration, and the profiler's work at each ``prof.step()``). 0 for a
    gap with no launch behind it (a GPU-side wait)."""
    out = np.zeros(len(gaps), dtype=np.float64)
    if not len(gaps):
        return out
    rt = trace.runtime
    launch = gaps["launch_row"].to_numpy().astype(np.int64)
    ok = (launch >= 0) & (launch < len(rt))
    if not ok.any():
        return out
    rows = launch[ok]
    out[ok] = profiler_ns_in_spans(
        trace,
        rt["pid"].to_numpy()[rows],
        rt["tid"].to_numpy()[rows],
        gaps["start_ns"].to_numpy().astype(np.int64)[ok],
        gaps["end_ns"].to_numpy().astype(np.int64)[ok],
    )
    return out


def profiler_ns_in_spans(trace: Trace, pids: npt.ArrayLike, tids: npt.ArrayLike, starts: I64, ends: I64) -> F64:
    """The profiler's own host time on thread (``pids``, ``tids``) between each ``starts`` and
    ``ends``: what the unprofiled replay takes out of that thread there (the recorded events at
    their kinds' fitted costs, the profiler's work at each ``prof.step()``), at least 0."""
    if not len(starts):
        return np.zeros(0, dtype=np.float64)
    removed = unprofiled_overrides(trace).host_removed
    threads = thread_key(np.asarray(pids), np.asarray(tids))
    inside = removed.removed_by_thread(threads, np.asarray(ends, dtype=np.int64)) - removed.removed_by_thread(
        threads, np.asarray(starts, dtype=np.int64)
    )
    return np.asarray(np.maximum(inside, 0), dtype=np.float64)


def recoverable_ns_per_gap(trace: Trace | None, gaps: pd.DataFrame, profiler_event_us: float | None) -> F64:
    """Each idle gap less the profiler's own host cost inside it, at least 0: the fitted per-kind
    costs (``profiler_ns_per_gap``) when ``profiler_event_us`` is None, else that flat cost per
    recorded event (``recoverable_per_gap``). An unprofiled run does not pay that cost, so it does
    not lose that idle."""
    if profiler_event_us is not None:
        return recoverable_per_gap(gaps, profiler_event_us)
    if trace is None:
        raise ValueError("the per-kind profiler costs need the trace")
    dur = gaps["dur_ns"].to_numpy().astype(np.float64)
    return np.asarray(np.maximum(dur - profiler_ns_per_gap(trace, gaps), 0.0), dtype=np.float64)


@dataclass(frozen=True, eq=False)
class ClaimedIdle:
    """Idle gaps a rule reports, with their total as recorded and as an unprofiled run would lose it."""

    gaps: pd.DataFrame = field(repr=False)
    raw_ns: int  # the gaps' total idle as recorded
    recoverable_ns: float  # less the profiler's own cost of the events recorded in them

    @classmethod
    def of(cls, gaps: pd.DataFrame, profiler_event_us: float | None, trace: Trace | None = None) -> ClaimedIdle:
        """``profiler_event_us``: a flat cost per recorded event; None: the fitted per-kind costs
        (``profiler_ns_per_gap``, which needs ``trace``)."""
        if not len(gaps):
            recoverable = 0.0
        else:
            recoverable = float(recoverable_ns_per_gap(trace, gaps, profiler_event_us).sum())
        return cls(gaps=gaps, raw_ns=int(gaps["dur_ns"].sum()), recoverable_ns=recoverable)


# -- evidence and source locations -------------------------------------------------------------
def evidence_of(
    rows: pd.DataFrame, labels: Iterable[str], *, start: str = "ts_ns", stream: bool = False
) -> list[Evidence]:
    """One piece of evidence per row, in the rows' order (pick them first, e.g. ``nlargest(5,
    "dur_ns")``), named by ``labels``; start from the ``start`` column and duration from ``dur_ns``,
    in µs; with ``stream`` the row's ``stream`` as recorded.

    The times are divided as Python integers, which rounds once: a trace on an epoch clock has
    timestamps beyond 2**53 ns, where converting to a float first would round twice."""
    starts, durs = rows[start].tolist(), rows["dur_ns"].tolist()
    streams: list[Any] = rows["stream"].tolist() if stream else [None] * len(rows)
    return [
        Evidence(name=label, ts_us=s / 1000, dur_us=d / 1000, stream=None if st is None else int(st))
        for label, s, d, st in zip(labels, starts, durs, streams, strict=True)
    ]


def event_location(trace: Trace, event: Mapping[str, Any] | pd.Series, at_ns: int | None = None) -> Location | None:
    """The user source line (``with_stack``) active on an event's thread at its start, or at
    ``at_ns``; ``event`` is a row with ``pid``, ``tid`` and ``ts_ns`` (an op, a runtime call, an
    annotation)."""
    ts = int(event["ts_ns"]) if at_ns is None else at_ns
    return location_of(trace, int(event["pid"]), int(event["tid"]), ts)


def op_location(trace: Trace, host_row: int) -> Location | None:
    """The source line of a host op (a row of ``trace.host``, e.g. a kernel's ``op``); ``None`` for
    -1 (a kernel whose launching op is not in the trace)."""
    return event_location(trace, trace.host.loc[host_row]) if host_row >= 0 else None


def launch_location(trace: Trace, runtime_row: int) -> Location | None:
    """The source line of a runtime call (a row of ``trace.runtime``, e.g. a GPU op's ``launch``);
    ``None`` for -1."""
    return event_location(trace, trace.runtime.loc[runtime_row]) if runtime_row >= 0 else None


def sync_location(trace: Trace, runtime_row: int) -> Location | None:
    """The source line of a blocking sync call (a row of ``trace.runtime``): the exact line when
    capture recorded the sync's call site (``line_kind="exact"``, analyses/sync_sites.py), else the
    line of its frame, as ``launch_location`` gives it."""
    matches = sync_site_matches(trace)
    if runtime_row in matches.index:
        m = matches.loc[runtime_row]
        return Location(file=str(m["file"]), line=int(m["line"]), function=str(m["function"]), line_kind="exact")
    return launch_location(trace, runtime_row)


def at_source(location: Location | None) -> str:
    """Where, for a message: `` at train.py:42`` for an exact line; for a line from a profiler
    frame, what that line is (`` in step (defined at train.py:30)``: the profiler names a frame by
    its function's first line); nothing without a location."""
    if location is None:
        return ""
    if location.line_kind == "exact":
        return f" at {location.file}:{location.line}"
    return f" in {location.where()}"


# -- names and signatures of host rows ---------------------------------------------------------
def category_mask(names: pd.Series, hit: Callable[[pd.Series], pd.Series]) -> npt.NDArray[np.bool_]:
    """``hit`` (a test on a string Series) applied to a name column. On a categorical column it is
    evaluated once per distinct name, then spread to the rows (kernel names are long templates: a
    regex per row costs seconds on a large trace); rows without a name are ``False``. Any other
    column is tested row by row, as strings."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return np.asarray(hit(names.astype(str)), dtype=bool)
    cats = pd.Series(names.cat.categories.astype(str))
    per_cat = np.append(np.asarray(hit(cats), dtype=bool), False)  # code -1 (no name) → the last slot
    return np.asarray(per_cat[names.cat.codes.to_numpy()], dtype=bool)


def names_at(table: pd.DataFrame, pos: npt.NDArray[np.intp]) -> list[str]:
    """Names of the rows at positions ``pos`` of a table with a categorical ``name`` column (``""``
    where a row has none)."""
    codes = table["name"].cat.codes.to_numpy()[pos]
    cats = np.asarray(table["name"].cat.categories.astype(str), dtype=object)
    return [str(cats[c]) if c >= 0 else "" for c in codes]


def signature_codes(host: pd.DataFrame, pos: npt.NDArray[np.intp], cols: Sequence[str]) -> npt.NDArray[np.intp]:
    """For host rows at positions ``pos``: the index of each row's distinct (name, *cols) signature,
    numbered in order of first appearance."""
    parts = [host["name"].cat.codes.to_numpy()[pos].astype(np.int64)]
    for col in cols:
        parts.append(pd.factorize(host[col].to_numpy()[pos], use_na_sentinel=False)[0].astype(np.int64))
    key = pd.MultiIndex.from_arrays(parts)
    return np.asarray(pd.factorize(key)[0], dtype=np.intp)


def distinct_signatures(
    host: pd.DataFrame, pos: npt.NDArray[np.intp], cols: Sequence[str]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """``(sig, first)``: each row's signature (``signature_codes``) and, per signature, the position
    of its first row. A model repeats its layers' shapes every step, so a rule parses the shapes of
    ``first`` only and spreads the result back with ``[sig]``."""
    sig = signature_codes(host, pos, cols)
    first = pos[np.unique(sig, return_index=True)[1]]
    return sig, np.asarray(first, dtype=np.intp)


def per_step(saving: Saving) -> tuple[str, float, float, tuple[float, ...], bool]:
    """A replayed saving as ``Rule.finding(per_step=...)`` takes it: (scenario, saving per step ns,
    predicted unprofiled step ns, its shares of the step at the ends of the host's plausible speed
    where the trace did not fix it (``Saving.host_shares_pct``), and whether the trace carries
    measured unprofiled steps (the range's band: ``whatif.saving_range.band``))."""
    return (saving.scenario, saving.saving_ns, saving.before_ns, saving.host_shares_pct, saving.calibrated)


def replay_basis(saving: Saving, what: str) -> str:
    """The impact basis of a replayed saving: what the scenario changed, and on which baseline (and
    what the GPU may give back of it at its power limit, where the model places that)."""
    given = (
        f"; a GPU at its power limit may give back {fmt_ns(saving.power_give_back_ns)} of it as slower kernels"
        if saving.power_give_back_ns > 0
        else ""
    )
    return (
        f"what-if replay: {what}; predicted unprofiled step {fmt_ns(saving.before_ns)} -> "
        f"{fmt_ns(saving.before_ns - saving.saving_ns)} (the trace's dependency graph replayed "
        f"without the profiler's host cost, then with the fix{given})"
    )


def unprofiled_idle_cap_ns(trace: Trace) -> float:
    """The most GPU idle the analysed steps can hold without the profiler: steps x (predicted
    unprofiled step - GPU busy per step). The kernels keep their durations without the profiler
    (it costs host time, not GPU time), so a step of S with B of GPU work idles at most S - B; the
    profiled gaps are longer, stretched by the profiler's host cost, and subtracting a per-event
    cost from them (``profiler_event_us``) is not enough where the cost model does not cover every
    event (p12_decode_after_stack: 9.9 ms claimed over 2 steps of 6.3 ms with 5.4 ms of GPU work).
    Infinite where the replay predicts no step (no steps, no GPU). A rule that estimates a saving
    from idle gaps itself (idle-gap, data-loader-bound) caps it with this."""
    steps = steps_on_gpu(trace)
    step = predicted_step_ns(trace)
    if not len(steps) or not trace.device_ids or not step > 0:
        return float("inf")
    starts, ends = steps["gpu_start_ns"].to_numpy(), steps["gpu_end_ns"].to_numpy()
    busy = float(busy_in_windows(trace, trace.device_ids[0], starts, ends).sum()) / len(steps)
    return len(steps) * max(0.0, step - busy)
