"""``traceadvisor whatif TRACE --apply cuda-graphs,no-sync,...``: predicted unprofiled step time per scenario
(docs/whatif.md)."""

from __future__ import annotations

import json
import math
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from traceadvisor.console import StepTimeOption, fail
from traceadvisor.errors import TraceError
from traceadvisor.report.format import fmt_time, measured_source_words
from traceadvisor.report.model import MeasuredSteps
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.refused import Refused
from traceadvisor.whatif.saving_range import band, likely_share_range
from traceadvisor.whatif.savings import Outcome
from traceadvisor.whatif.savings import whatif as run_whatif
from traceadvisor.whatif.scenarios import SCENARIOS, parse

NOTE = (
    "Step times are PREDICTED UNPROFILED step times: the trace's dependency graph replayed without the "
    "profiler's own host cost (whatif/profiler_cost.py), then with each scenario's change; the step time is "
    "the spacing of step ends. The profiled step is given for reference only. 'likely' is the range the "
    "measured saving of real fixes landed in around the replay's prediction (whatif/saving_range.py)."
)


class Format(StrEnum):
    text = "text"
    json = "json"


def _us(ns: float) -> float | None:
    return None if math.isnan(ns) else ns / 1e3


def _findings(trace: Trace) -> list[tuple[str, str, str | None]]:
    """The findings the built-in rules report on the trace: (code and rule, rule, the scenario its
    saving came from)."""
    from traceadvisor.pipeline import analyze_traces

    return [
        (f"{f.code} {f.rule}", f.rule, f.impact.scenario if f.impact is not None else None)
        for f in analyze_traces([trace]).findings
    ]


def answered(o: Outcome, findings: list[tuple[str, str, str | None]]) -> list[str]:
    """The findings a scenario answers: those whose saving it gave, and those of the rules it answers
    (``compile`` and the combination answer the findings of several scenarios; batch-size's finding
    gives a gain per sample, not a saving)."""
    return [label for label, rule, scenario in findings if scenario == o.saving.scenario or rule in o.answers]


# Scenarios whose replayed step holds more samples than the original: their figure is per sample.
SAMPLES_FACTOR = {"batch-size": 2.0}


def per_sample_pct(o: Outcome) -> float | None:
    """The time-per-sample gain of a scenario that changes the samples per step, % (None otherwise)."""
    factor = SAMPLES_FACTOR.get(o.saving.scenario)
    if factor is None or o.saving.refused or not o.saving.before_ns > 0:
        return None
    # the replayed step itself (longer than before for a larger batch, where saving_ns is 0)
    return (o.saving.before_ns - o.saving.after_ns / factor) / o.saving.before_ns * 100.0


def likely_pct(o: Outcome) -> list[float] | None:
    """The likely range of a scenario's gain (``saving_range.likely_share_range``): of the step, or
    of the time per sample for a scenario that changes the samples per step. None where refused."""
    if o.saving.refused:
        return None
    per_sample = per_sample_pct(o)
    if per_sample is None:
        return list(o.saving.likely_share_pct)
    factor = SAMPLES_FACTOR[o.saving.scenario]
    host = tuple((b - a / factor) / b * 100.0 for b, a in o.saving.host_alternatives if b > 0)
    lo, hi = likely_share_range(per_sample, host, *band(o.saving.calibrated))
    return [lo, hi]


def to_dict(
    trace: str,
    profiled_us: float | None,
    outcomes: list[Outcome],
    findings: list[tuple[str, str, str | None]],
    measured: MeasuredSteps | None = None,
) -> dict[str, Any]:
    """The JSON report: one entry per scenario, then ``combined`` where more than one applied.
    ``calibrated_to``: the unprofiled step time the prediction was calibrated to (the trace's own,
    timed by capture or the advisor, or ``--step-time``'s), None where it rests on the bundled costs."""
    return {
        "trace": trace,
        "note": NOTE,
        "profiled_step_us": profiled_us,
        "calibrated_to": measured.to_dict() if measured is not None else None,
        "scenarios": [
            {
                "name": o.saving.scenario,
                "answers": list(o.answers),
                "findings": answered(o, findings),
                "refused": o.saving.refused,
                "changed": o.saving.changed,
                "before_step_us": _us(o.saving.before_ns),
                "after_step_us": _us(o.saving.after_ns),
                "saving_per_step_us": _us(o.saving.saving_ns),
                "saving_pct": o.saving.share_pct,
                # what a GPU at its power limit may give back of the removed idle (not off the saving)
                "power_give_back_us": _us(o.saving.power_give_back_ns) if o.saving.power_give_back_ns > 0 else None,
                "per_sample_saving_pct": per_sample_pct(o),
                # the range the saving is likely to land in (whatif/saving_range.py), % of the step
                # (of the time per sample where per_sample_saving_pct is given)
                "likely_saving_pct": likely_pct(o),
            }
            for o in outcomes
        ],
    }


def render_text(report: dict[str, Any]) -> str:
    """One line per scenario: before -> after, saving per step, the findings it answers."""
    lines = [f"what-if on {report['trace']}", NOTE]
    if report["profiled_step_us"] is not None:
        lines.append(f"  profiled step: {fmt_time(report['profiled_step_us'])}")
    if (cal := report.get("calibrated_to")) is not None:
        measured = MeasuredSteps.from_dict(cal)
        words = measured_source_words(measured) if measured is not None else ""
        lines.append(f"  calibrated to: {fmt_time(cal['median_us'])} a step without the profiler ({words})")
    if report.get("caveat"):
        lines.append(f"  caveat: {report['caveat']}")
    for s in report["scenarios"]:
        if s["refused"]:
            lines.append(f"  {s['name']}: refused: {s['refused']}")
            continue
        findings = "; ".join(s["findings"]) or "no finding"
        likely = s.get("likely_saving_pct")
        within = f", likely {likely[0]:.1f}-{likely[1]:.1f}%" if likely is not None else ""
        gain = (
            f"{s['per_sample_saving_pct']:.1f}% less time per sample{within}"
            if s["per_sample_saving_pct"] is not None
            else f"saves {fmt_time(s['saving_per_step_us'])} ({s['saving_pct']:.1f}%{within})"
        )
        given = s.get("power_give_back_us")
        if given is not None:
            gain += f", of which up to {fmt_time(given)} may come back as slower kernels at the GPU's power limit"
        lines.append(
            f"  {s['name']}: {fmt_time(s['before_step_us'])} -> {fmt_time(s['after_step_us'])} per step, "
            f"{gain}; {s['changed']} changed; answers: {', '.join(s['answers']) or '-'} ({findings})"
        )
    return "\n".join(lines) + "\n"


def whatif(
    trace: Annotated[Path, typer.Argument(help="One trace file (.json, .json.gz).")],
    apply: Annotated[str, typer.Option("--apply", help=f"Scenarios, comma-separated: {', '.join(SCENARIOS)}.")],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.text,
    step_time: Annotated[str | None, StepTimeOption] = None,
) -> None:
    """Predict the step time after fixes, by replaying the trace with its graph changed."""
    from traceadvisor.config import parse_step_time
    from traceadvisor.errors import UsageError
    from traceadvisor.summary.step_time import unprofiled_basis
    from traceadvisor.trace.load import load_file
    from traceadvisor.whatif.profiler_cost import give_step_time
    from traceadvisor.whatif.replay import measured_replay
    from traceadvisor.whatif.savings import predicted_step_ns
    from traceadvisor.whatif.scenarios import step_time_ns

    try:
        names = [s.name for s in parse(apply)]
        given_us = parse_step_time(step_time) if step_time is not None else None
    except (ValueError, UsageError) as exc:
        raise fail(str(exc)) from None
    try:
        loaded = load_file(trace)
        if given_us is not None:
            give_step_time(loaded, given_us)
        outcomes = run_whatif(loaded, names)
        profiled = step_time_ns(measured_replay(loaded), measured=True)
        found = _findings(loaded)
    except (TraceError, Refused, OSError) as exc:
        raise fail(str(exc)) from None
    report = to_dict(str(trace), _us(profiled), outcomes, found, MeasuredSteps.of_key(loaded.meta.traceadvisor))
    report["caveat"] = unprofiled_basis(loaded, predicted_step_ns(loaded))[1]
    if fmt is Format.json:
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(render_text(report), nl=False)
