"""``traceadvisor workloads``: list the reference workloads, or show one (no torch needed)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from traceadvisor.console import fail
from traceadvisor.errors import UsageError
from traceadvisor.workloads import registry

FORMATS = ("table", "json", "markdown")


def workloads(
    name: Annotated[str | None, typer.Argument(help="Show this workload's lesson and expected analysis.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, json or markdown.")] = "table",
) -> None:
    """List the reference workloads that 'traceadvisor capture --workload NAME' runs."""
    if fmt not in FORMATS:
        raise fail(f"unknown format {fmt!r}: use table, json or markdown")
    try:
        chosen = [registry.get(name)] if name is not None else registry.all()
    except UsageError as exc:
        raise fail(str(exc)) from None
    if fmt == "json":
        sys.stdout.write(json.dumps([_row(w) for w in chosen], indent=2) + "\n")
    elif fmt == "markdown" or name is not None:
        sys.stdout.write(_markdown(chosen, detailed=name is not None))
    else:
        sys.stdout.write(_table(chosen))


def _row(w: registry.Workload) -> dict[str, object]:
    return {
        "name": w.name,
        "summary": w.summary,
        "lesson": w.lesson,
        "analysis": w.analysis,
        "steps_by": w.steps_by,
        "uses_triton": w.uses_triton,
        "command": f"traceadvisor capture --workload {w.name}",
    }


def _table(chosen: list[registry.Workload]) -> str:
    width = max(len(w.name) for w in chosen)
    out = [f"{'name':<{width}}  {'steps by':<9}  summary"]
    out += [f"{w.name:<{width}}  {w.steps_by:<9}  {_plain(w.summary)}" for w in chosen]
    out.append("")
    out.append("Run one: traceadvisor capture --workload NAME [--steps N] [--device cpu|cuda] [sizes]")
    out.append("Details: traceadvisor workloads NAME")
    return "\n".join(out) + "\n"


def _markdown(chosen: list[registry.Workload], detailed: bool) -> str:
    if not detailed:
        lines = ["| workload | steps by | what it runs |", "|---|---|---|"]
        lines += [f"| `{w.name}` | {w.steps_by} | {_md(w.summary)} |" for w in chosen]
        return "\n".join(lines) + "\n"
    out = []
    for w in chosen:
        out += [f"# {w.name}", "", _md(w.summary), "", f"Run: `traceadvisor capture --workload {w.name}`", ""]
        out += ["## Lesson", "", _md(w.lesson), "", "## What analyze should say", "", _md(w.analysis), ""]
    return "\n".join(out)


def _plain(text: str) -> str:
    """Docstring text for a terminal: reStructuredText literals lose their quotes."""
    return text.replace("``", "")


def _md(text: str) -> str:
    """Docstring text for Markdown: ````x```` literals become ```x```."""
    return text.replace("``", "`")
