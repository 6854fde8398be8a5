"""The terminal rendering of a report (rich)."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from traceadvisor.analysis import Report
from traceadvisor.report.roofline_notes import ABOVE_ROOF_NOTE, above_roof

_SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}


def _ms(us_value: float) -> str:
    return f"{us_value / 1000:.3f} ms"


def render(report: Report, width: int = 120, color: bool = False) -> str:
    """The report as text; ``color`` adds ANSI styles (for a terminal)."""
    buf = io.StringIO()
    # markup off: messages quote config tables such as [tool.traceadvisor.gpu], which rich would eat
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color, highlight=False, markup=False)
    for t in report.traces:
        _trace(console, t)
    _findings(console, report)
    return buf.getvalue()


def _trace(console: Console, t: dict[str, Any]) -> None:
    dev = t.get("device") or {}
    name = dev.get("name") or ("CPU only" if t["platform"] == "cpu" else f"GPU {dev.get('id')}")
    rank = "" if t.get("rank") is None else f"  rank {t['rank']}"
    console.print(Text(f"{t['path']}{rank}", style="bold"))
    console.print(f"  device: {name} ({t['platform']})")
    console.print(
        f"  window: {_ms(t['window_us'])} ({t['window_basis']}), GPU busy {t['gpu_busy_pct']:.1f}% "
        f"({_ms(t['gpu_busy_us'])}), idle {_ms(t['gpu_idle_us'])}, {t['kernel_count']} kernels"
    )
    for w in t.get("warnings", []):
        console.print(Text.assemble("  ", ("warning:", "yellow"), f" {w}"))
    if t["steps"]:
        tab = Table(title=None, box=None, pad_edge=False, show_edge=False)
        for col in ("step", "CPU time", "GPU time", "GPU busy"):
            tab.add_column(col, justify="right" if col != "step" else "left")
        for s in t["steps"]:
            tab.add_row(s["name"], _ms(s["cpu_dur_us"]), _ms(s["gpu_dur_us"]), f"{s['gpu_busy_pct']:.1f}%")
        console.print(tab)
    if t.get("idle_breakdown"):
        parts = ", ".join(f"{b['cause']} {_ms(b['idle_us'])} ({b['share_pct']:.0f}%)" for b in t["idle_breakdown"])
        console.print(f"  GPU idle by cause: {parts}")
    if t["top_kernels"]:
        tab = Table(box=None, pad_edge=False, show_edge=False)
        tab.add_column("top kernels", overflow="ellipsis", no_wrap=True, max_width=80)
        tab.add_column("calls", justify="right")
        tab.add_column("time", justify="right")
        tab.add_column("share", justify="right")
        for k in t["top_kernels"]:
            tab.add_row(k["name"], str(k["count"]), _ms(k["total_us"]), f"{k['share_pct']:.1f}%")
        console.print(tab)
    if t.get("annotations"):
        _annotations(console, t["annotations"])
    if t.get("roofline"):
        _roofline(console, t["roofline"])
    console.print()


def _annotations(console: Console, a: dict[str, Any]) -> None:
    """Time per top-level user annotation, the rest of the steps' time, and the bottleneck."""
    kind = "GPU" if a["basis"] == "gpu" else "CPU"
    tab = Table(box=None, pad_edge=False, show_edge=False)
    tab.add_column("annotation", overflow="ellipsis", no_wrap=True, max_width=80)
    tab.add_column(f"{kind} time", justify="right")
    tab.add_column("share", justify="right")
    tab.add_column("calls", justify="right")
    for r in a["rows"]:
        tab.add_row(r["name"], _ms(r["time_us"]), f"{r['share_pct']:.1f}%", str(r["calls"]))
    tab.add_row("(outside annotations)", _ms(a["unannotated_us"]), f"{a['unannotated_pct']:.1f}%", "")
    console.print(tab)
    if a["basis"] != "gpu":
        console.print("  (CPU time: the trace has no GPU activity)")
    if a.get("bottleneck"):
        console.print(f"  {a['bottleneck']['message']}")


def _findings(console: Console, report: Report) -> None:
    if not report.findings:
        console.print("No findings.")
    for i, f in enumerate(report.findings, 1):
        sev = f.get("severity", "low")
        impact = f.get("impact") or {}
        console.print(
            Text(f"{i}. [{sev}] {f['rule']} ({f['code']}): ", style=_SEVERITY_STYLE.get(sev, "")) + Text(f["message"])
        )
        if impact:
            console.print(
                f"   impact: {_ms(impact.get('time_us', 0.0))} ({impact.get('share_pct', 0.0):.1f}% of the step): "
                f"{impact.get('basis', '')}"
            )
        loc = f.get("location")
        if loc:
            console.print(f"   at: {loc.get('file')}:{loc.get('line')} in {loc.get('function')}")
        console.print(f"   fix: {f['recommendation']}")
    for s in report.skipped:
        console.print(f"skipped {s['rule']}: {s['reason']}")
    for e in report.errors:
        console.print(Text.assemble(("rule error", "red"), f" {e['rule']}: {e['error']}"))


_ROOFLINE_DTYPES = ("fp8", "bf16", "fp16", "tf32", "fp32", "fp64")


def _roofline(console: Console, r: dict[str, Any]) -> None:
    """Peaks used (and their sources), time by bound, and the top kernels on the roofline."""
    p = r.get("peaks")
    if p is None:
        console.print(f"  roofline: {r['reason']}")
        return
    flops = ", ".join(f"{d} {p['tflops'][d]:g}" for d in _ROOFLINE_DTYPES if p["tflops"].get(d))
    console.print(
        f"  roofline peaks ({p['model'] or p['device']}): {p['memory_bandwidth_gbs']:g} GB/s; TFLOP/s {flops}"
    )
    by_source: dict[str, list[str]] = {}
    for figure, source in p["sources"].items():
        by_source.setdefault(source, []).append(figure)
    for source, figures in by_source.items():
        console.print(f"    {', '.join(figures)}: {source}")
    bounds = ", ".join(f"{b['bound']} {b['share_pct']:.1f}%" for b in r["by_bound"])
    console.print(f"  roofline covers {r['modelled_pct']:.1f}% of kernel time: {bounds or 'no modelled kernels'}")
    if not r["top_kernels"]:
        return
    tab = Table(box=None, pad_edge=False, show_edge=False)
    tab.add_column("roofline kernel", overflow="ellipsis", no_wrap=True, max_width=34)
    tab.add_column("op", overflow="ellipsis", no_wrap=True, max_width=22)
    for col in ("dtype", "time", "FLOP/B", "TFLOP/s", "GB/s", "roof", "bound"):
        tab.add_column(col, justify="left" if col in ("dtype", "bound") else "right", no_wrap=True)
    for k in r["top_kernels"]:
        tab.add_row(
            k["name"],
            k["op"],
            k["dtype"],
            _ms(k["time_us"]),
            _fmt(k["intensity"], ".1f"),
            _fmt(k["achieved_tflops"], ".1f"),
            _fmt(k["achieved_gbs"], ".0f"),
            _fmt(k["roof_pct"], ".0f", "%"),
            k["bound"],
        )
    console.print(tab)
    if above_roof(r["top_kernels"]):
        console.print(f"  {ABOVE_ROOF_NOTE}")


def _fmt(v: float | None, spec: str, suffix: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{suffix}"
