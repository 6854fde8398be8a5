"""The Markdown rendering of a report (for pull-request comments and notebooks)."""

from __future__ import annotations

from typing import Any

from traceadvisor.analysis import Report
from traceadvisor.report.roofline_notes import ABOVE_ROOF_NOTE, above_roof


def _ms(us_value: float) -> str:
    return f"{us_value / 1000:.3f} ms"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(report: Report) -> str:
    """The report as GitHub-flavoured Markdown."""
    out: list[str] = ["# traceadvisor report", ""]
    for t in report.traces:
        dev = (t.get("device") or {}).get("name") or t["platform"]
        out += [f"## `{t['path']}`" + ("" if t.get("rank") is None else f" (rank {t['rank']})"), ""]
        out.append(f"- device: {_cell(dev)}")
        out.append(f"- window: {_ms(t['window_us'])} ({t['window_basis']})")
        out.append(f"- GPU busy: {t['gpu_busy_pct']:.1f}% ({_ms(t['gpu_busy_us'])}); {t['kernel_count']} kernels")
        out += [f"- warning: {_cell(w)}" for w in t.get("warnings", [])]
        out.append("")
        if t["steps"]:
            out += ["| step | CPU time | GPU time | GPU busy |", "|---|---:|---:|---:|"]
            out += [
                f"| {s['name']} | {_ms(s['cpu_dur_us'])} | {_ms(s['gpu_dur_us'])} | {s['gpu_busy_pct']:.1f}% |"
                for s in t["steps"]
            ]
            out.append("")
        if t["top_kernels"]:
            out += ["| kernel | calls | time | share |", "|---|---:|---:|---:|"]
            out += [
                f"| `{_cell(k['name'][:120])}` | {k['count']} | {_ms(k['total_us'])} | {k['share_pct']:.1f}% |"
                for k in t["top_kernels"]
            ]
            out.append("")
        if t.get("annotations"):
            out += _annotations(t["annotations"])
        if t.get("roofline"):
            out += _roofline(t["roofline"])
    out += ["## Findings", ""]
    if not report.findings:
        out += ["No findings.", ""]
    for f in report.findings:
        impact = f.get("impact") or {}
        out.append(f"### [{f['severity']}] {f['rule']} ({f['code']})")
        out += ["", _cell(f["message"]), ""]
        if impact:
            out.append(
                f"- impact: {_ms(impact.get('time_us', 0.0))} ({impact.get('share_pct', 0.0):.1f}%), "
                f"{impact.get('basis', '')}"
            )
        loc = f.get("location")
        if loc:
            out.append(f"- location: `{loc.get('file')}:{loc.get('line')}` in `{loc.get('function')}`")
        out += [f"- fix: {_cell(f['recommendation'])}", ""]
    if report.skipped:
        out += ["## Skipped rules", ""] + [f"- {s['rule']}: {_cell(s['reason'])}" for s in report.skipped] + [""]
    if report.errors:
        out += ["## Rule errors", ""] + [f"- {e['rule']}: {_cell(e['error'])}" for e in report.errors] + [""]
    return "\n".join(out)


def _annotations(a: dict[str, Any]) -> list[str]:
    """Time per top-level user annotation as a table, then the bottleneck."""
    kind = "GPU" if a["basis"] == "gpu" else "CPU"
    out = [f"| annotation | {kind} time | share | calls |", "|---|---:|---:|---:|"]
    out += [f"| {_cell(r['name'])} | {_ms(r['time_us'])} | {r['share_pct']:.1f}% | {r['calls']} |" for r in a["rows"]]
    out += [f"| (outside annotations) | {_ms(a['unannotated_us'])} | {a['unannotated_pct']:.1f}% | |", ""]
    if a["basis"] != "gpu":
        out += ["CPU time: the trace has no GPU activity.", ""]
    if a.get("bottleneck"):
        out += [f"**{_cell(a['bottleneck']['message'])}**", ""]
    return out


def _roofline(r: dict[str, Any]) -> list[str]:
    """Peaks used with their sources, time by bound, and the top kernels on the roofline."""
    p = r.get("peaks")
    if p is None:
        return [f"- roofline: {_cell(r['reason'])}", ""]
    flops = ", ".join(f"{d} {v:g}" for d, v in p["tflops"].items() if v)
    gpu = _cell(p["model"] or p["device"])
    out = [f"**Roofline** ({gpu}): {p['memory_bandwidth_gbs']:g} GB/s; TFLOP/s {flops}", ""]
    by_source: dict[str, list[str]] = {}
    for figure, source in p["sources"].items():
        by_source.setdefault(source, []).append(figure)
    out += [f"- {', '.join(figures)}: {_cell(source)}" for source, figures in by_source.items()]
    bounds = ", ".join(f"{b['bound']} {b['share_pct']:.1f}%" for b in r["by_bound"])
    out += [f"- {r['modelled_pct']:.1f}% of kernel time modelled: {bounds or 'no modelled kernels'}", ""]
    if r["top_kernels"]:
        out += [
            "| kernel | op | dtype | time | FLOP/B | TFLOP/s | GB/s | roof | bound |",
            "|---|---|---|---:|---:|---:|---:|---:|---|",
        ]
        out += [
            f"| `{_cell(k['name'][:80])}` | {_cell(k['op'])} | {k['dtype']} | {_ms(k['time_us'])} "
            f"| {_num(k['intensity'], '.1f')} | {_num(k['achieved_tflops'], '.1f')} | {_num(k['achieved_gbs'], '.0f')} "
            f"| {_num(k['roof_pct'], '.0f', '%')} | {k['bound']} |"
            for k in r["top_kernels"]
        ]
        out.append("")
        if above_roof(r["top_kernels"]):
            out += [f"_{ABOVE_ROOF_NOTE}_", ""]
    return out


def _num(v: float | None, spec: str, suffix: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{suffix}"
