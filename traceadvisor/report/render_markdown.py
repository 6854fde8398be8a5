"""The Markdown rendering of a report (for pull-request comments and notebooks).

A pull-request comment renders HTML and links, so every string that comes from a trace is
escaped (``safe_text.markdown``: HTML as entities, Markdown punctuation behind a backslash, no raw
newline or carriage return in a table row) or set as a code span with a fence longer than any
backtick run inside (``safe_text.markdown_code``). Long tables print their first and last rows.
"""

from __future__ import annotations

from typing import Any

from traceadvisor.pipeline import Report
from traceadvisor.report.config_note import config_note
from traceadvisor.report.roofline_notes import ABOVE_ROOF_NOTE, above_roof
from traceadvisor.report.rows import ROW_LIMIT, elide, hidden_steps_line
from traceadvisor.report.safe_text import TEXT_LIMIT, markdown, markdown_code


def _ms(us_value: float) -> str:
    return f"{us_value / 1000:.3f} ms"


def _text(value: Any) -> str:
    """A message, reason or warning (which may quote the trace) as Markdown text."""
    return markdown(value, TEXT_LIMIT)


def render(report: Report) -> str:
    """The report as GitHub-flavoured Markdown."""
    out: list[str] = ["# traceadvisor report", ""]
    note = config_note(report.config)
    if note is not None:
        out += [f"config: {markdown_code(note[0], TEXT_LIMIT, in_table=False)} ({_text(note[1])})", ""]
    for t in report.traces:
        out += _trace(t)
    out += ["## Findings", ""]
    if not report.findings:
        out += ["No findings.", ""]
    for f in report.findings:
        out += _finding(f)
    if report.skipped:
        out += ["## Skipped rules", ""]
        out += [f"- {markdown(s['rule'])}: {_text(s['reason'])}" for s in report.skipped] + [""]
    if report.errors:
        out += ["## Rule errors", ""] + [f"- {markdown(e['rule'])}: {_text(e['error'])}" for e in report.errors] + [""]
    return "\n".join(out)


def _trace(t: dict[str, Any]) -> list[str]:
    """One trace's section: device, window, busy time, warnings, steps, kernels, annotations, roofline."""
    dev = (t.get("device") or {}).get("name") or t["platform"]
    rank = "" if t.get("rank") is None else f" (rank {markdown(t['rank'])})"
    out = [f"## {markdown_code(t['path'], TEXT_LIMIT, in_table=False)}{rank}", ""]
    out.append(f"- device: {markdown(dev)}")
    out.append(f"- window: {_ms(t['window_us'])} ({markdown(t['window_basis'])})")
    out.append(f"- GPU busy: {t['gpu_busy_pct']:.1f}% ({_ms(t['gpu_busy_us'])}); {t['kernel_count']} kernels")
    warnings = t.get("warnings", [])
    out += [f"- warning: {_text(w)}" for w in warnings[:ROW_LIMIT]]
    if len(warnings) > ROW_LIMIT:
        out.append(f"- … {len(warnings) - ROW_LIMIT:,} more warnings (the JSON report lists them all)")
    out.append("")
    if t["steps"]:
        out += _steps(t["steps"])
    if t["top_kernels"]:
        out += ["| kernel | calls | time | share |", "|---|---:|---:|---:|"]
        out += [
            f"| {markdown_code(k['name'])} | {k['count']} | {_ms(k['total_us'])} | {k['share_pct']:.1f}% |"
            for k in t["top_kernels"]
        ]
        out.append("")
    if t.get("annotations"):
        out += _annotations(t["annotations"])
    if t.get("roofline"):
        out += _roofline(t["roofline"])
    return out


def _steps(steps: list[dict[str, Any]]) -> list[str]:
    """The steps table: every step, or the first and last with the spread of those between."""
    first, hidden, last = elide(steps)
    out = ["| step | CPU time | GPU time | GPU busy |", "|---|---:|---:|---:|"]
    out += [_step_row(s) for s in first]
    if hidden:
        out.append(f"| … {len(hidden):,} more | | | |")
    out += [_step_row(s) for s in last]
    out.append("")
    if hidden:
        out += [hidden_steps_line(hidden), ""]  # numbers only
    return out


def _step_row(s: dict[str, Any]) -> str:
    return f"| {markdown(s['name'])} | {_ms(s['cpu_dur_us'])} | {_ms(s['gpu_dur_us'])} | {s['gpu_busy_pct']:.1f}% |"


def _finding(f: dict[str, Any]) -> list[str]:
    impact = f.get("impact") or {}
    out = [f"### \\[{markdown(f['severity'])}\\] {markdown(f['rule'])} \\({markdown(f['code'])}\\)"]
    out += ["", _text(f["message"]), ""]
    if impact:
        out.append(
            f"- impact: {_ms(impact.get('time_us', 0.0))} ({impact.get('share_pct', 0.0):.1f}%), "
            f"{_text(impact.get('basis', ''))}"
        )
    loc = f.get("location")
    if loc:
        where = markdown_code(f"{loc.get('file')}:{loc.get('line')}", TEXT_LIMIT, in_table=False)
        out.append(f"- location: {where} in {markdown_code(loc.get('function'), in_table=False)}")
    out += [f"- fix: {_text(f['recommendation'])}", ""]
    return out


def _annotations(a: dict[str, Any]) -> list[str]:
    """Time per top-level user annotation as a table, then the bottleneck."""
    kind = "GPU" if a["basis"] == "gpu" else "CPU"
    out = [f"| annotation | {kind} time | share | calls |", "|---|---:|---:|---:|"]
    first, hidden, last = elide(a["rows"])
    out += [_annotation_row(r) for r in first]
    if hidden:
        out.append(
            f"| … {len(hidden):,} more annotations | {_ms(sum(r['time_us'] for r in hidden))} "
            f"| {sum(r['share_pct'] for r in hidden):.1f}% | {sum(r['calls'] for r in hidden)} |"
        )
    out += [_annotation_row(r) for r in last]
    out += [f"| (outside annotations) | {_ms(a['unannotated_us'])} | {a['unannotated_pct']:.1f}% | |", ""]
    if a["basis"] != "gpu":
        out += ["CPU time: the trace has no GPU activity.", ""]
    if a.get("bottleneck"):
        out += [f"**{_text(a['bottleneck']['message'])}**", ""]
    return out


def _annotation_row(r: dict[str, Any]) -> str:
    return f"| {markdown(r['name'])} | {_ms(r['time_us'])} | {r['share_pct']:.1f}% | {r['calls']} |"


def _roofline(r: dict[str, Any]) -> list[str]:
    """Peaks used with their sources, time by bound, and the top kernels on the roofline."""
    p = r.get("peaks")
    if p is None:
        return [f"- roofline: {_text(r['reason'])}", ""]
    flops = ", ".join(f"{d} {v:g}" for d, v in p["tflops"].items() if v)
    gpu = markdown(p["model"] or p["device"])
    out = [f"**Roofline** ({gpu}): {p['memory_bandwidth_gbs']:g} GB/s; TFLOP/s {flops}", ""]
    by_source: dict[str, list[str]] = {}
    for figure, source in p["sources"].items():
        by_source.setdefault(source, []).append(figure)
    out += [f"- {', '.join(figures)}: {_text(source)}" for source, figures in by_source.items()]
    bounds = ", ".join(f"{b['bound']} {b['share_pct']:.1f}%" for b in r["by_bound"])
    out += [f"- {r['modelled_pct']:.1f}% of kernel time modelled: {bounds or 'no modelled kernels'}", ""]
    if r["top_kernels"]:
        out += [
            "| kernel | op | dtype | time | FLOP/B | TFLOP/s | GB/s | roof | bound |",
            "|---|---|---|---:|---:|---:|---:|---:|---|",
        ]
        out += [
            f"| {markdown_code(k['name'], 80)} | {markdown(k['op'])} | {markdown(k['dtype'])} | {_ms(k['time_us'])} "
            f"| {_num(k['intensity'], '.1f')} | {_num(k['achieved_tflops'], '.1f')} | {_num(k['achieved_gbs'], '.0f')} "
            f"| {_num(k['roof_pct'], '.0f', '%')} | {markdown(k['bound'])} |"
            for k in r["top_kernels"]
        ]
        out.append("")
        if above_roof(r["top_kernels"]):
            out += [f"_{ABOVE_ROOF_NOTE}_", ""]
    return out


def _num(v: float | None, spec: str, suffix: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{suffix}"
