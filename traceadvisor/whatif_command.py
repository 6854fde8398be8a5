"""``traceadvisor whatif TRACE --apply no-sync,tf32,pinned``: predicted step time per scenario (docs/whatif.md)."""

from __future__ import annotations

import json
import math
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from traceadvisor.console import fail
from traceadvisor.errors import TraceError
from traceadvisor.whatif.scenarios import Outcome, Refused, parse
from traceadvisor.whatif.scenarios import whatif as run_whatif

PROFILED_NOTE = (
    "Step times are PROFILED step times (replayed, mean spacing of the step ends): the profiler's "
    "own cost is still in them (issue 12 item 2 will take it out)."
)


class Format(StrEnum):
    text = "text"
    json = "json"


def _us(ns: float) -> float | None:
    return None if math.isnan(ns) else ns / 1e3


def to_dict(trace: str, outcomes: list[Outcome]) -> dict[str, Any]:
    """The JSON report: one entry per scenario, then ``combined`` where more than one applied."""
    return {
        "trace": trace,
        "note": PROFILED_NOTE,
        "scenarios": [
            {
                "name": o.name,
                "answers": list(o.answers),
                "refused": o.refused,
                "changed": o.changed,
                "before_step_us": _us(o.before_ns),
                "after_step_us": _us(o.after_ns),
                "saving_per_step_us": _us(o.saving_ns),
            }
            for o in outcomes
        ],
    }


def render_text(trace: str, outcomes: list[Outcome]) -> str:
    """One line per scenario: before -> after, saving per step, the findings it answers."""
    lines = [f"what-if on {trace}", PROFILED_NOTE]
    for o in outcomes:
        answers = ", ".join(o.answers) or "-"
        if o.refused:
            lines.append(f"  {o.name}: refused: {o.refused}")
            continue
        pct = o.saving_ns / o.before_ns * 100 if o.before_ns else 0.0
        lines.append(
            f"  {o.name}: {o.before_ns / 1e3:.3f} µs -> {o.after_ns / 1e3:.3f} µs per step, "
            f"saves {o.saving_ns / 1e3:.3f} µs ({pct:.1f}%); {o.changed} changed; answers: {answers}"
        )
    return "\n".join(lines) + "\n"


def whatif(
    trace: Annotated[Path, typer.Argument(help="One trace file (.json, .json.gz).")],
    apply: Annotated[str, typer.Option("--apply", help="Scenarios, comma-separated: no-sync, tf32, pinned.")],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.text,
) -> None:
    """Predict the step time after fixes, by replaying the trace with its graph changed."""
    from traceadvisor.trace.load import load_file

    try:
        scenarios = parse(apply)
    except ValueError as exc:
        raise fail(str(exc)) from None
    try:
        outcomes = run_whatif(load_file(trace), scenarios)
    except (TraceError, Refused, OSError) as exc:
        raise fail(str(exc)) from None
    if fmt is Format.json:
        typer.echo(json.dumps(to_dict(str(trace), outcomes), indent=2))
    else:
        typer.echo(render_text(str(trace), outcomes), nl=False)
