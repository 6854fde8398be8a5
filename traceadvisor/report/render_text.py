"""The terminal rendering of a report (rich).

Every string that comes from a trace (file, kernel, op, annotation, frame and device names, and
the messages that quote them) goes through ``safe_text.terminal`` first: escapes instead of
control characters, names shortened. Long tables print their first and last rows (``rows.py``).
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

from traceadvisor.report.cpu_section import print_text as print_cpu_section
from traceadvisor.report.format import (
    ABOVE_ROOF_NOTE,
    RANK_COLUMNS,
    ROOFLINE_DTYPES,
    ROW_LIMIT,
    above_roof,
    cause_name,
    elide,
    fit,
    fmt_time,
    hidden_findings_line,
    hidden_steps_line,
    impact_text,
    measured_source_words,
    middle,
    more_warnings_line,
    num,
    peaks_source_line,
    plural,
    rank_cells,
    rank_label,
    ranks_head,
    replay_line,
    skipped_by_reason,
    split_findings,
    step_time_line,
    trace_labels,
    verdict_lines,
    window_basis_name,
)
from traceadvisor.report.model import (
    AnnotationSummary,
    ConfigInfo,
    RanksSummary,
    Report,
    RooflineSummary,
    StepSummary,
    TraceSummary,
)
from traceadvisor.report.safe_text import TEXT_LIMIT, terminal

_SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}


def _table(
    console: Console,
    headers: list[str],
    rows: list[list[str]],
    *,
    flex: tuple[int, ...] = (0,),
    left: tuple[int, ...] = (0,),
    max_flex: int = 80,
) -> None:
    """Print a table that fits the console: every column but the ``flex`` ones (the names) at its
    natural width, the names given what is left and shortened in the middle (``middle``) so that
    their start and end stay readable; numbers are never cut."""
    n = len(headers)
    natural = [max([len(headers[i]), *(len(r[i]) for r in rows)]) for i in range(n)]
    gaps = 2 * (n - 1)  # one space of padding on each side between columns (pad_edge off)
    fixed = sum(w for i, w in enumerate(natural) if i not in flex)
    room = max(8 * len(flex), console.width - fixed - gaps)
    share = room // max(1, len(flex))
    widths = [min(natural[i], max_flex, share) if i in flex else natural[i] for i in range(n)]
    tab = Table(box=None, pad_edge=False, show_edge=False)
    for i, h in enumerate(headers):
        tab.add_column(middle(h, widths[i]), justify="left" if i in left else "right", no_wrap=True, width=widths[i])
    for r in rows:
        tab.add_row(*(middle(c, widths[i]) if i in flex else c for i, c in enumerate(r)))
    console.print(tab)


def _name(value: object) -> str:
    """A name from the trace, safe and short (``NAME_LIMIT``)."""
    return terminal(value)


def _text(value: object) -> str:
    """A message, reason or path that may quote the trace, safe (``TEXT_LIMIT``)."""
    return terminal(value, TEXT_LIMIT)


def render(report: Report, width: int = 120, color: bool = False, show_all: bool = False) -> str:
    """The report as text; ``color`` adds ANSI styles (for a terminal); ``show_all`` lists the
    findings with no predicted saving too (``format.split_findings``)."""
    buf = io.StringIO()
    # markup off: messages quote config tables such as [tool.traceadvisor.gpu], which rich would eat;
    # emoji off: rich would turn a ":cat:" inside a C++ name into a cat; soft wrap: a line of the
    # report is one line of output (a terminal wraps it for the eye), so no name from the trace can
    # be padded to start a line of its own that reads like a finding ("1. [high] ..."). ``width``
    # lays out the tables; plain text is then folded to it (``format.fit``: continuation lines are
    # indented, so they cannot read as a finding either); a terminal in colour folds for itself.
    console = Console(
        file=buf,
        width=width,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
    )
    _config(console, report.config)
    if report.verdict is not None:
        lines = verdict_lines(report.verdict)
        console.print(Text("verdict: ", style="bold") + Text(lines[0]))
        for line in lines[1:]:
            console.print(f"  {_text(line)}")
        console.print()
    for t in report.traces:
        _trace(console, t)
    if report.ranks is not None:
        _ranks(console, report.ranks)
    _findings(console, report, show_all)
    return buf.getvalue() if color else fit(buf.getvalue(), width)


def _ranks(console: Console, r: RanksSummary) -> None:
    """The rank comparison table (means per step), the straggler marked."""
    console.print(Text("ranks", style="bold"))
    console.print(f"  {_text(ranks_head(r))}")
    rows = [[_text(c) for c in rank_cells(row)] for row in r.rows]
    headers = list(RANK_COLUMNS)
    natural = sum(max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)) + 2 * len(headers)
    narrow = natural > console.width
    if narrow:  # an 80-column terminal: the straggler marked "*", shorter headers
        rows = [[row[0].replace(" (straggler)", "*"), *row[1:]] for row in rows]
        headers = [h.replace("exposed ", "exp. ") for h in headers]
    _table(console, headers, rows, flex=(1,), left=(0, 1))
    if narrow and r.straggler is not None:
        console.print("  * the straggler")
    for p in r.problems:
        console.print(f"  warning: {_text(p)}")
    console.print()


def _config(console: Console, config: ConfigInfo | None) -> None:
    """One line naming the configuration file that applied (none: no line)."""
    note = config.note() if config is not None else None
    if note is not None:
        console.print(f"config: {_text(note[0])} ({_text(note[1])})")


def _trace(console: Console, t: TraceSummary) -> None:
    dev = t.device
    dev_id = dev.id if dev is not None else None
    name = (dev.name if dev is not None else None) or ("CPU only" if t.platform == "cpu" else f"GPU {dev_id}")
    rank = "" if t.rank is None else f"  rank {_name(t.rank)}"
    console.print(Text(f"{_text(t.path)}{rank}", style="bold"))
    console.print(f"  device: {_name(name)} ({_name(t.platform)})")
    console.print(
        f"  window: {fmt_time(t.window_us)} ({_name(window_basis_name(t.window_basis))}), GPU busy "
        f"{t.gpu_busy_pct:.1f}% ({fmt_time(t.gpu_busy_us)}), idle {fmt_time(t.gpu_idle_us)}, "
        f"{plural(t.kernel_count, 'kernel')}"
    )
    if t.replay_error_pct is not None:
        line = replay_line(t.replay_error_pct, t.replay_external_wait_us, _step_us(t))
        console.print(f"  replay: {line} (what-if savings rest on it)")
    if (st := t.step_time) is not None:
        console.print(f"  step: {step_time_line(st, t.measured_unprofiled_step_us)}")
    if (v := t.step_variation) is not None and v.unstable:
        console.print(Text.assemble("  ", ("warning:", "yellow"), f" {_text(v.describe(fmt_time))}"))
    for stall in t.host_stalls[:ROW_LIMIT]:
        console.print(f"  {_text(stall.describe(fmt_time))}")
    if (m := t.measured_unprofiled_step_us) is not None:
        console.print(f"  measured unprofiled step: {fmt_time(m.median_us)} ({measured_source_words(m)})")
    for w in t.warnings[:ROW_LIMIT]:
        console.print(Text.assemble("  ", ("warning:", "yellow"), f" {_text(w)}"))
    more = more_warnings_line(t.warnings)
    if more is not None:
        console.print(f"  {more}")
    if t.steps:
        _steps(console, t.steps)
    if t.idle_breakdown:
        parts = ", ".join(
            f"{_name(cause_name(b.cause))} {fmt_time(b.idle_us)} ({b.share_pct:.0f}%)" for b in t.idle_breakdown
        )
        console.print(f"  GPU idle by cause: {parts}")
    if t.top_kernels:
        rows = [[_name(k.name), str(k.count), fmt_time(k.total_us), f"{k.share_pct:.1f}%"] for k in t.top_kernels]
        _table(console, ["top kernels in the window", "calls", "time", "share"], rows)
    if t.annotations is not None:
        _annotations(console, t.annotations)
    print_cpu_section(console, t.cpu)
    _roofline(console, t.roofline)
    console.print()


def _steps(console: Console, steps: tuple[StepSummary, ...]) -> None:
    """The steps table: every step, or the first and last with the spread of those between."""
    first, hidden, last = elide(steps)
    rows = [[_name(s.name), fmt_time(s.cpu_dur_us), fmt_time(s.gpu_dur_us), f"{s.gpu_busy_pct:.1f}%"] for s in first]
    if hidden:
        rows.append([f"… {len(hidden):,} more", "", "", ""])
    rows += [[_name(s.name), fmt_time(s.cpu_dur_us), fmt_time(s.gpu_dur_us), f"{s.gpu_busy_pct:.1f}%"] for s in last]
    _table(console, ["step", "CPU time", "GPU time", "GPU busy"], rows)
    if hidden:
        console.print(f"  {hidden_steps_line(hidden)}")


def _annotations(console: Console, a: AnnotationSummary) -> None:
    """Time per top-level user annotation, the rest of the steps' time, and the bottleneck."""
    kind = "GPU" if a.basis == "gpu" else "CPU"
    first, hidden, last = elide(a.rows)
    rows = [[_name(r.name), fmt_time(r.time_us), f"{r.share_pct:.1f}%", str(r.calls)] for r in first]
    if hidden:
        rows.append(
            [
                f"… {len(hidden):,} more annotations",
                fmt_time(sum(r.time_us for r in hidden)),
                f"{sum(r.share_pct for r in hidden):.1f}%",
                str(sum(r.calls for r in hidden)),
            ]
        )
    rows += [[_name(r.name), fmt_time(r.time_us), f"{r.share_pct:.1f}%", str(r.calls)] for r in last]
    rows.append(["(outside annotations)", fmt_time(a.unannotated_us), f"{a.unannotated_pct:.1f}%", ""])
    _table(console, ["annotation", f"{kind} time", "share", "calls"], rows)
    if a.basis != "gpu":
        console.print("  (CPU time: the trace has no GPU activity)")
    if a.bottleneck is not None:
        console.print(f"  {_text(a.bottleneck.message)}")


def _findings(console: Console, report: Report, show_all: bool) -> None:
    if not report.findings:
        console.print("No findings.")
    shown, hidden = split_findings(report.findings, show_all)
    for i, f in shown:
        sev = f.severity.value
        who = f" [{rank_label(f.ranks)}]" if f.ranks else ""
        head = f"{i}. [{_name(sev)}] {_name(f.rule)} ({_name(f.code)}){who}: "
        console.print(Text(head, style=_SEVERITY_STYLE.get(sev, "")) + Text(_text(f.message)))
        if f.impact is not None:
            console.print(f"   impact: {impact_text(f.impact)}: {_text(f.impact.basis)}")
        loc = f.location
        if loc is not None:
            label = "at" if loc.line_kind == "exact" else "in"  # "in step (defined at train.py:30)"
            console.print(f"   {label}: {_text(loc.where())}")
        console.print(f"   fix: {_text(f.recommendation)}")
    if hidden:
        console.print(hidden_findings_line(hidden))
    for reason, rules, scope in skipped_by_reason(report.skipped, trace_labels(report.traces)):
        console.print(f"skipped {', '.join(_name(r) for r in rules)}{_text(scope)}: {_text(reason)}")
    for e in report.errors:
        console.print(Text.assemble(("rule error", "red"), f" {_name(e.rule)}: {_text(e.error)}"))


def _roofline(console: Console, r: RooflineSummary) -> None:
    """Peaks used (and their sources), time by bound, and the top kernels on the roofline."""
    p = r.peaks
    if p is None:
        console.print(f"  roofline: {_text(r.reason)}")
        return
    flops = ", ".join(f"{d} {p.tflops[d]:g}" for d in ROOFLINE_DTYPES if p.tflops.get(d))
    console.print(f"  roofline peaks ({_name(p.model or p.device)}): {p.memory_bandwidth_gbs:g} GB/s; TFLOP/s {flops}")
    console.print(f"    peaks from: {_text(peaks_source_line(p.sources))}")
    bounds = ", ".join(f"{b.bound} {b.share_pct:.1f}%" for b in r.by_bound)
    console.print(f"  roofline covers {r.modelled_pct:.1f}% of kernel time: {bounds or 'no modelled kernels'}")
    if not r.top_kernels:
        return
    rows = [
        [
            _name(k.name),
            _name(k.op),
            _name(k.dtype),
            fmt_time(k.time_us),
            num(k.intensity, ".1f"),
            num(k.achieved_tflops, ".1f"),
            num(k.achieved_gbs, ".0f"),
            num(k.roof_pct, ".0f", "%"),
            _name(k.bound),
        ]
        for k in r.top_kernels
    ]
    headers = ["roofline kernel", "op", "dtype", "time", "FLOP/B", "TFLOP/s", "GB/s", "roof", "bound"]
    _table(console, headers, rows, flex=(0, 1), left=(0, 1, 2, 8), max_flex=34)
    if above_roof(r.top_kernels):
        console.print(f"  {ABOVE_ROOF_NOTE}")


def _step_us(t: TraceSummary) -> float | None:
    """The profiled step, µs (None without steps)."""
    return t.step_time.profiled_step_us if t.step_time is not None else None
