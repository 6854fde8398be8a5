"""The Markdown rendering of a report (for pull-request comments and notebooks)."""

from __future__ import annotations

from typing import Any

from traceadvisor.analysis import Report


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
