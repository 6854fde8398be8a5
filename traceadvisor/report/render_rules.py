"""Renderings of the rule catalog (``traceadvisor rules``) and of one rule (``explain``)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only read: code, name, severity, requires, Options and the docstring (report/ renders data)
    from traceadvisor.engine.rule import Rule


def summary_line(cls: type[Rule[Any]]) -> str:
    """The first line of a rule's docstring."""
    return inspect.cleandoc(cls.__doc__ or "").splitlines()[0].strip()


def rows(classes: list[type[Rule[Any]]]) -> list[dict[str, object]]:
    """One plain row per rule, sorted by code."""
    return [
        {
            "code": c.code,
            "name": c.name,
            "severity": c.severity.value,
            "requires": sorted(r.value for r in c.requires),
            "summary": summary_line(c),
            "options": {f.name: f.default for f in dataclasses.fields(c.Options)},
        }
        for c in sorted(classes, key=lambda c: c.code)
    ]


def render(classes: list[type[Rule[Any]]], fmt: str) -> str:
    """``table`` (plain text), ``json`` or ``markdown`` (the README's rule table)."""
    data = rows(classes)
    if fmt == "json":
        return json.dumps(data, indent=2, default=str) + "\n"
    if fmt == "markdown":
        lines = ["| code | name | default severity | needs | what it finds |", "|---|---|---|---|---|"]
        for r in data:
            needs = ", ".join(r["requires"]) or "-"  # type: ignore[arg-type]
            lines.append(f"| {r['code']} | `{r['name']}` | {r['severity']} | {needs} | {r['summary']} |")
        return "\n".join(lines) + "\n"
    width = max((len(str(r["name"])) for r in data), default=4)
    out = [f"{'code':<6} {'name':<{width}}  summary"]
    out += [f"{r['code']:<6} {r['name']!s:<{width}}  {r['summary']}" for r in data]
    return "\n".join(out) + "\n"


def explain(cls: type[Rule[Any]]) -> str:
    """A rule's page: metadata header plus its docstring (Markdown)."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    title, _, body = doc.partition("\n")
    needs = ", ".join(sorted(r.value for r in cls.requires)) or "nothing special"
    opts = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(cls.Options)) or "none"
    header = [
        f"# {cls.code} {cls.name}",
        "",
        title,
        "",
        f"- default severity: {cls.severity.value} (findings scale with impact)",
        f"- needs: {needs}",
        f"- options: {opts}",
        "",
    ]
    return "\n".join(header) + body.strip() + "\n"
