"""``diff`` rendered as text, Markdown or JSON.

Names come from the traces (untrusted): the text report escapes them as the analyze report does
(``report/safe_text.terminal``), Markdown as code spans or escaped text (``markdown_code``,
``markdown``); JSON keeps the exact strings. JSON times are µs from exact ns (``ns / 1000``,
rounded to the ns where a figure is a per-step mean).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from traceadvisor.diff.model import Diff
from traceadvisor.diff.stats import ALPHA
from traceadvisor.diff.steps import Side, StepComparison
from traceadvisor.diff.tables import Table
from traceadvisor.report.safe_text import markdown, markdown_code, terminal

ROWS = 10  # kernels and ops shown per table in text and Markdown (JSON: all)


def _us(ns: float | None) -> float | None:
    return None if ns is None or math.isnan(ns) else round(ns) / 1000


def _t(ns: float | None) -> str:
    """A time chosen by magnitude (µs below 1 ms, ms below 1 s, else s), 3 significant decimals."""
    if ns is None or math.isnan(ns):
        return "n/a"
    a = abs(ns)
    if a < 1e6:
        return f"{ns / 1e3:.1f} µs"
    if a < 1e9:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e9:.3f} s"


def _signed(ns: float) -> str:
    return ("+" if ns > 0 else "") + _t(ns) if not math.isnan(ns) else "n/a"


def _pct(p: float) -> str:
    return "n/a" if math.isnan(p) else f"{p:+.1f}%"


def significance(c: StepComparison) -> str:
    if not c.before.samples_ns or not c.after.samples_ns:
        return "no step times on a side (the prediction replays GPU work; a trace without steps has none)"
    if c.test is None:
        return "too few steps for a test (3 per side needed)"
    t = c.test
    verdict = "significant" if t.significant else "not significant"
    how = "exact" if t.exact else "sampled"
    return (
        f"{verdict} (permutation test p={t.p_value:.3g} over {t.permutations} {how} splits, alpha {ALPHA}; "
        f"Cliff's delta {t.cliffs_delta:+.2f})"
    )


# -- JSON ----------------------------------------------------------------------------------------


def _side(s: Side) -> dict[str, Any]:
    return {
        "step_us": _us(s.report_ns),
        "median_us": _us(s.median_ns),
        "p90_us": _us(s.p90_ns),
        "samples_us": [x / 1000 for x in s.samples_ns],
    }


def _steps(c: StepComparison) -> dict[str, Any]:
    return {
        "measure": c.measure,
        "before": _side(c.before),
        "after": _side(c.after),
        "delta_us": _us(c.delta_ns),
        "delta_pct": None if math.isnan(c.delta_pct) else c.delta_pct,
        "median_delta_us": _us(c.after.median_ns - c.before.median_ns),
        "p90_delta_us": _us(c.after.p90_ns - c.before.p90_ns),
        "test": None
        if c.test is None
        else {
            "kind": "permutation (difference of means, two-sided)",
            "p_value": c.test.p_value,
            "significant": c.test.significant,
            "alpha": ALPHA,
            "cliffs_delta": c.test.cliffs_delta,
            "permutations": c.test.permutations,
            "exact": c.test.exact,
        },
        "note": None if c.test is not None else "too few steps",
    }


def _table(t: Table) -> dict[str, Any]:
    return {
        "buckets": [
            {"bucket": b.name, "count": b.count, "before_us": _us(b.before_ns), "after_us": _us(b.after_ns)}
            for b in t.buckets
        ],
        "rows": [
            {
                "name": r.name,
                "bucket": r.bucket,
                "before_calls_per_step": r.before_calls,
                "after_calls_per_step": r.after_calls,
                "before_us": _us(r.before_ns),
                "after_us": _us(r.after_ns),
                "delta_us": _us(r.delta_ns),
            }
            for r in t.rows
        ],
    }


def to_dict(d: Diff) -> dict[str, Any]:
    b = d.breakdown
    return {
        "before": {"path": d.before, "traces": d.before_traces, "steps": d.before_steps},
        "after": {"path": d.after, "traces": d.after_traces, "steps": d.after_steps},
        "step_time": {"profiled": _steps(d.profiled), "predicted_unprofiled": _steps(d.unprofiled)},
        "breakdown": None
        if b is None
        else {
            "basis": b.basis,
            "per": "step",
            "step_before_us": _us(b.step_before_ns),
            "step_after_us": _us(b.step_after_ns),
            "step_delta_us": _us(b.step_delta_ns),
            "categories": [
                {
                    "name": c.name,
                    "before_us": _us(c.before_ns),
                    "after_us": _us(c.after_ns),
                    "delta_us": _us(c.delta_ns),
                }
                for c in b.categories
            ],
            "unexplained": {
                "before_us": _us(b.unexplained_before_ns),
                "after_us": _us(b.unexplained_after_ns),
                "delta_us": _us(b.unexplained_delta_ns),
            },
        },
        "kernels": _table(d.kernels),
        "ops": _table(d.ops),
        "findings": [
            {
                "status": f.status,
                "code": f.code,
                "rule": f.rule,
                "where": f.where,
                "severity_before": f.severity_before,
                "severity_after": f.severity_after,
                "cost_per_step_before_us": _us(f.cost_before_ns),
                "cost_per_step_after_us": _us(f.cost_after_ns),
                "message": f.message,
            }
            for f in d.findings
        ],
        "ranks": [
            {"rank": r.rank, "before_step_us": _us(r.before_ns), "after_step_us": _us(r.after_ns)} for r in d.ranks
        ],
    }


def render_json(d: Diff) -> str:
    return json.dumps(to_dict(d), indent=2) + "\n"


# -- text and Markdown: one layout, two escapings -------------------------------------------------


def _lines(d: Diff, md: bool) -> list[str]:
    name: Callable[[object], str] = markdown_code if md else terminal
    text: Callable[[object], str] = markdown if md else terminal
    h1, h2 = ("# ", "## ") if md else ("", "")
    out = [f"{h1}diff: {text(d.before)} -> {text(d.after)}"]
    out.append(
        f"{d.before_traces} trace(s), {d.before_steps} step(s) before; {d.after_traces} trace(s), "
        f"{d.after_steps} step(s) after. Negative deltas: AFTER is faster."
    )
    out += ["", f"{h2}Step time"]
    for c in (d.unprofiled, d.profiled):
        out.append(
            f"- {c.measure}: {_t(c.before.report_ns)} -> {_t(c.after.report_ns)} ({_signed(c.delta_ns)}, "
            f"{_pct(c.delta_pct)}); median {_t(c.before.median_ns)} -> {_t(c.after.median_ns)}, "
            f"p90 {_t(c.before.p90_ns)} -> {_t(c.after.p90_ns)}; {significance(c)}"
        )
    b = d.breakdown
    out += ["", f"{h2}Where the step time went (per profiled step)"]
    if b is None:
        out.append("- no breakdown: a side has no steps, or one side is one trace and the other several ranks")
    else:
        out.append(f"- {b.basis}: step {_t(b.step_before_ns)} -> {_t(b.step_after_ns)} ({_signed(b.step_delta_ns)})")
        for cat in b.categories:
            out.append(f"- {text(cat.name)}: {_t(cat.before_ns)} -> {_t(cat.after_ns)} ({_signed(cat.delta_ns)})")
        out.append(
            f"- unexplained (the step less the categories): {_t(b.unexplained_before_ns)} -> "
            f"{_t(b.unexplained_after_ns)} ({_signed(b.unexplained_delta_ns)}); the deltas above sum to "
            f"{_signed(b.step_delta_ns)}"
        )
    for t in (d.kernels, d.ops):
        out += ["", f"{h2}{t.kind.capitalize()} (per step, joined on normalised names)"]
        counts = "; ".join(f"{k.name} {k.count} ({_t(k.before_ns)} -> {_t(k.after_ns)})" for k in t.buckets if k.count)
        out.append(f"- {counts or f'no {t.kind} on either side'}")
        changed = [r for r in t.rows if r.bucket != "unchanged"][:ROWS]
        for r in changed:
            out.append(f"  - {r.bucket}: {name(r.name)} {_t(r.before_ns)} -> {_t(r.after_ns)} ({_signed(r.delta_ns)})")
        more = sum(1 for r in t.rows if r.bucket != "unchanged") - len(changed)
        if more > 0:
            out.append(f"  - … {more} more changed (see --format json)")
    out += ["", f"{h2}Findings"]
    if not d.findings:
        out.append("- no findings on either side")
    for f in d.findings:
        cost = f"{_t(f.cost_before_ns)} -> {_t(f.cost_after_ns)} per step"
        place = f" at {text(f.where)}" if f.where else ""
        out.append(f"- {f.status}: {f.code} {f.rule}{place} ({cost})")
    if d.ranks:
        out += ["", f"{h2}Ranks (mean step)"]
        for rk in d.ranks:
            out.append(f"- rank {rk.rank}: {_t(rk.before_ns)} -> {_t(rk.after_ns)}")
    return out


def render_text(d: Diff) -> str:
    return "\n".join(_lines(d, md=False)) + "\n"


def render_markdown(d: Diff) -> str:
    return "\n".join(_lines(d, md=True)) + "\n"
