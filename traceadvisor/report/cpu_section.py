"""The CPU-only section of a trace (``traces[].cpu``), for the text and Markdown reports.

The lines name what the section's figures mean (profiled time per step, shares of the profiled
step) and say when the dispatcher or the optimizer is material (``MATERIAL_PCT`` of the step)
and what would cut it; below that, the figure is given as small. Strings from the trace go
through ``safe_text`` (``terminal`` / ``markdown``), as everywhere in the report.
"""

from __future__ import annotations

from rich.console import Console

from traceadvisor.report.format import fmt_time, middle
from traceadvisor.report.model import CpuLine, CpuSummary
from traceadvisor.report.safe_text import TEXT_LIMIT, markdown, markdown_code, terminal

# A part of the step worth changing code for: below it, noise between runs on a shared CPU is as large.
MATERIAL_PCT = 10.0


def summary_lines(c: CpuSummary) -> list[str]:
    """The section's sentences (plain text; names from the trace not yet made safe: callers do)."""
    step = c.step_us
    parts = [
        ("data loading", c.data_loading_us),
        ("ops outside loading and the optimizer (forward, backward, loss)", c.compute_us),
        ("optimizer", c.optimizer_us),
        ("other (Python between ops, the profiler)", c.other_us),
    ]
    shares = ", ".join(f"{name} {fmt_time(v)} ({_pct(v, step)})" for name, v in parts)
    out = [f"CPU step {fmt_time(step)} (profiled, mean of {c.steps}): {shares}"]
    if c.per_op_us is not None:
        share = 100.0 * c.dispatch_us / step if step > 0 else 0.0
        verdict = (
            "material: fewer, larger ops (vectorise Python loops over tensors, batch small tensors, torch.compile)"
            if share >= MATERIAL_PCT
            else "small next to the step"
        )
        out.append(
            f"dispatch: {c.ops_per_step:.0f} ops a step x {fmt_time(c.per_op_us)} (the median op without "
            f"arithmetic: the dispatcher's time inside an op) ~ {fmt_time(c.dispatch_us)} ({share:.1f}% of the step, "
            f"inside the parts above; the Python between ops is in other): {verdict}"
        )
    if c.optimizer_per_tensor is not None:
        share = 100.0 * c.optimizer_us / step if step > 0 else 0.0
        kind = "one tensor at a time (foreach off: the CPU default)" if c.optimizer_per_tensor else "multi-tensor"
        verdict = (
            "material: construct it with fused=True (Adam, AdamW, SGD, Adagrad have fused CPU kernels since "
            "torch 2.4) or foreach=True"
            if share >= MATERIAL_PCT and c.optimizer_per_tensor
            else "small next to the step"
            if share < MATERIAL_PCT
            else "already multi-tensor"
        )
        out.append(f"optimizer: {fmt_time(c.optimizer_us)} a step ({share:.1f}%), {kind}: {verdict}")
    if c.syncs_per_step > 0:
        where = f" in {', '.join(c.sync_sites[:3])}" if c.sync_sites else ""
        out.append(
            f"syncs: {c.syncs_per_step:g} .item()-like {'op' if c.syncs_per_step == 1 else 'ops'} a step "
            f"({', '.join(c.sync_ops)}){where}: free on a CPU; "
            "on a GPU each makes the host wait until the GPU has run everything queued before it (sync-point, "
            "SY101, measures them there)"
        )
    else:
        out.append("syncs: no .item()-like op in the steps (none would make a GPU run wait for the host)")
    return out


def text_lines(c: CpuSummary | None, width: int = 120) -> list[str]:
    """The section for the text report (indented under its trace), tables fitted to ``width``."""
    if c is None:
        return []
    out = [f"  {terminal(s, TEXT_LIMIT)}" for s in summary_lines(c)]
    ops = [[terminal(o.name), fmt_time(o.self_us), f"{o.share_pct:.1f}%", f"{o.calls:g}"] for o in c.top_ops]
    out += _table(["hot op (self time)", "per step", "share", "calls"], ops, width)
    rows = [
        [terminal(frame_name(x)), terminal(user_frame(x)), fmt_time(x.self_us), f"{x.share_pct:.1f}%"]
        for x in c.top_lines
    ]
    out += _table(["hot Python (self time)", "under your code", "per step", "share"], rows, width, flex=2)
    return out


def markdown_lines(c: CpuSummary | None) -> list[str]:
    """The section for the Markdown report: bullets and two tables."""
    if c is None:
        return []
    out = ["### CPU-only analysis", ""]
    out += [f"- {markdown(s, TEXT_LIMIT)}" for s in summary_lines(c)]
    out += ["", "| hot op (self time) | per step | share | calls |", "|---|---:|---:|---:|"]
    out += [
        f"| {markdown_code(o.name)} | {fmt_time(o.self_us)} | {o.share_pct:.1f}% | {o.calls:g} |" for o in c.top_ops
    ]
    out += ["", "| hot Python (self time) | under your code | per step | share |", "|---|---|---:|---:|"]
    out += [
        f"| {markdown_code(frame_name(x))} | {markdown_code(user_frame(x)) if user_frame(x) else ''} | "
        f"{fmt_time(x.self_us)} | {x.share_pct:.1f}% |"
        for x in c.top_lines
    ]
    out.append("")
    return out


def _pct(v: float, whole: float) -> str:
    return f"{100.0 * v / whole:.1f}%" if whole > 0 else "-"


def frame_name(x: CpuLine) -> str:
    """``function (file:line)``, or a built-in's name (it has no file)."""
    return f"{x.function} ({x.file}:{x.line})" if x.line is not None else x.file


def user_frame(x: CpuLine) -> str:
    return x.user or ("(your code)" if x.is_user else "")


def _table(headers: list[str], rows: list[list[str]], width: int, flex: int = 1) -> list[str]:
    """Plain rows: the first ``flex`` columns (names, left) share what the numbers leave, cut in
    the middle; the numbers (right) are never cut."""
    if not rows:
        return []
    n = len(headers)
    natural = [max(len(headers[i]), *(len(r[i]) for r in rows)) for i in range(n)]
    fixed = sum(natural[flex:]) + 2 * (n - 1) + 2
    room = max(8 * flex, width - fixed)
    widths = [min(natural[i], max(8, room // flex)) for i in range(flex)] + natural[flex:]

    def line(cells: list[str]) -> str:
        named = [middle(cells[i], widths[i]).ljust(widths[i]) for i in range(flex)]
        nums = [cells[i].rjust(widths[i]) for i in range(flex, n)]
        return "  " + "  ".join(named + nums).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def print_text(console: Console, c: CpuSummary | None) -> None:
    """Print the section on the text report's console (nothing for a trace with GPU kernels)."""
    for s in text_lines(c, console.width):
        console.print(s)
