"""The Markdown rendering of a report (for pull-request comments and notebooks).

A pull-request comment renders HTML and links, so every string that comes from a trace is
escaped (``safe_text.markdown``: HTML as entities, Markdown punctuation behind a backslash, no raw
newline or carriage return in a table row) or set as a code span with a fence longer than any
backtick run inside (``safe_text.markdown_code``). Long tables print their first and last rows.
"""

from __future__ import annotations

from traceadvisor.report.cpu_section import markdown_lines as cpu_markdown_lines
from traceadvisor.report.finding import Finding, Location
from traceadvisor.report.format import (
    ABOVE_ROOF_NOTE,
    RANK_COLUMNS,
    ROW_LIMIT,
    above_roof,
    cause_name,
    elide,
    fmt_time,
    hidden_findings_line,
    hidden_steps_line,
    impact_text,
    measured_source_words,
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
    AnnotationRow,
    AnnotationSummary,
    RanksSummary,
    Report,
    RooflineSummary,
    StepSummary,
    TraceSummary,
)
from traceadvisor.report.safe_text import TEXT_LIMIT, markdown, markdown_code


def _text(value: object) -> str:
    """A message, reason or warning (which may quote the trace) as Markdown text."""
    return markdown(value, TEXT_LIMIT)


def render(report: Report, show_all: bool = False) -> str:
    """The report as GitHub-flavoured Markdown; ``show_all`` lists the findings with no predicted
    saving too (``format.split_findings``)."""
    out: list[str] = ["# traceadvisor report", ""]
    note = report.config.note() if report.config is not None else None
    if note is not None:
        out += [f"config: {markdown_code(note[0], TEXT_LIMIT, in_table=False)} ({_text(note[1])})", ""]
    if report.verdict is not None:
        lines = verdict_lines(report.verdict)
        fixes = [f"- {_text(line)}" for line in lines[1:]]  # "- 1) rule ...": a bullet list (no <ol> from a report)
        out += ["## Verdict", "", _text(lines[0]), "", *fixes, ""]
    for t in report.traces:
        out += _trace(t)
    if report.ranks is not None:
        out += _ranks(report.ranks)
    out += ["## Findings", ""]
    if not report.findings:
        out += ["No findings.", ""]
    shown, hidden = split_findings(report.findings, show_all)
    for i, f in shown:
        out += _finding(i, f)
    if hidden:
        out += [_text(hidden_findings_line(hidden)), ""]
    if report.skipped:
        out += ["## Skipped rules", ""]
        groups = skipped_by_reason(report.skipped, trace_labels(report.traces))
        out += [
            f"- {', '.join(markdown(r) for r in rules)}{_text(scope)}: {_text(reason)}"
            for reason, rules, scope in groups
        ]
        out += [""]
    if report.errors:
        out += ["## Rule errors", ""] + [f"- {markdown(e.rule)}: {_text(e.error)}" for e in report.errors] + [""]
    return "\n".join(out)


def _trace(t: TraceSummary) -> list[str]:
    """One trace's section: device, window, busy time, warnings, steps, kernels, annotations, roofline."""
    dev_id = t.device.id if t.device is not None else None
    dev = (t.device.name if t.device is not None else None) or ("CPU only" if t.platform == "cpu" else f"GPU {dev_id}")
    rank = "" if t.rank is None else f" (rank {markdown(t.rank)})"
    out = [f"## {markdown_code(t.path, TEXT_LIMIT, in_table=False)}{rank}", ""]
    out.append(f"- device: {markdown(dev)} ({markdown(t.platform)})")
    out.append(f"- window: {fmt_time(t.window_us)} ({markdown(window_basis_name(t.window_basis))})")
    out.append(
        f"- GPU busy: {t.gpu_busy_pct:.1f}% ({fmt_time(t.gpu_busy_us)}), idle {fmt_time(t.gpu_idle_us)}; "
        f"{plural(t.kernel_count, 'kernel')}"
    )
    if t.replay_error_pct is not None:
        line = replay_line(t.replay_error_pct, t.replay_external_wait_us, _step_us(t))
        out.append(f"- replay: {_text(line)} (what-if savings rest on it)")
    if (st := t.step_time) is not None:
        out.append(f"- step: {step_time_line(st, t.measured_unprofiled_step_us)}")  # numbers only
    if (v := t.step_variation) is not None and v.unstable:
        out.append(f"- warning: {_text(v.describe(fmt_time))}")
    out += [f"- {_text(stall.describe(fmt_time))}" for stall in t.host_stalls[:ROW_LIMIT]]
    if (m := t.measured_unprofiled_step_us) is not None:
        out.append(f"- measured unprofiled step: {fmt_time(m.median_us)} ({measured_source_words(m)})")
    out += [f"- warning: {_text(w)}" for w in t.warnings[:ROW_LIMIT]]
    more = more_warnings_line(t.warnings)
    if more is not None:
        out.append(f"- {more}")
    out.append("")
    if t.steps:
        out += _steps(t.steps)
    if t.idle_breakdown:
        parts = ", ".join(
            f"{markdown(cause_name(b.cause))} {fmt_time(b.idle_us)} ({b.share_pct:.0f}%)" for b in t.idle_breakdown
        )
        out += [f"GPU idle by cause: {parts}", ""]
    if t.top_kernels:
        out += ["| top kernels in the window | calls | time | share |", "|---|---:|---:|---:|"]
        out += [
            f"| {markdown_code(k.name)} | {k.count} | {fmt_time(k.total_us)} | {k.share_pct:.1f}% |"
            for k in t.top_kernels
        ]
        out.append("")
    if t.annotations is not None:
        out += _annotations(t.annotations)
    out += cpu_markdown_lines(t.cpu)
    out += _roofline(t.roofline)
    return out


def _steps(steps: tuple[StepSummary, ...]) -> list[str]:
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


def _step_row(s: StepSummary) -> str:
    return f"| {markdown(s.name)} | {fmt_time(s.cpu_dur_us)} | {fmt_time(s.gpu_dur_us)} | {s.gpu_busy_pct:.1f}% |"


def _ranks(r: RanksSummary) -> list[str]:
    """The rank comparison table (means per step), the straggler marked."""
    out = ["## Ranks", "", _text(ranks_head(r)), ""]
    out.append("| " + " | ".join(RANK_COLUMNS) + " |")
    out.append("|" + "|".join("---" if c in ("rank", "host") else "---:" for c in RANK_COLUMNS) + "|")
    out += ["| " + " | ".join(markdown(c) for c in rank_cells(row)) + " |" for row in r.rows]
    out += [f"- warning: {_text(p)}" for p in r.problems]
    return [*out, ""]


def _finding(i: int, f: Finding) -> list[str]:
    who = f" \\[{markdown(rank_label(f.ranks))}\\]" if f.ranks else ""
    out = [f"### {i}. \\[{markdown(f.severity.value)}\\] {markdown(f.rule)} \\({markdown(f.code)}\\){who}"]
    out += ["", _text(f.message), ""]
    if f.impact is not None:
        out.append(f"- impact: {_text(impact_text(f.impact))}: {_text(f.impact.basis)}")
    if f.location is not None:
        out.append(f"- location: {_location(f.location)}")
    out += [f"- fix: {_text(f.recommendation)}", ""]
    return out


def _location(loc: Location) -> str:
    """``train.py:42`` in ``step``; a line from a profiler frame says what it is (Location.where)."""
    where = markdown_code(f"{loc.file}:{loc.line}", TEXT_LIMIT, in_table=False)
    function = markdown_code(loc.function, in_table=False)
    if loc.line_kind == "function_start":
        return f"in {function} (defined at {where})"
    if loc.line_kind == "trace_start":
        return f"in {function} (at {where} when profiling began)"
    return f"{where} in {function}"


def _annotations(a: AnnotationSummary) -> list[str]:
    """Time per top-level user annotation as a table, then the bottleneck."""
    kind = "GPU" if a.basis == "gpu" else "CPU"
    out = [f"| annotation | {kind} time | share | calls |", "|---|---:|---:|---:|"]
    first, hidden, last = elide(a.rows)
    out += [_annotation_row(r) for r in first]
    if hidden:
        out.append(
            f"| … {len(hidden):,} more annotations | {fmt_time(sum(r.time_us for r in hidden))} "
            f"| {sum(r.share_pct for r in hidden):.1f}% | {sum(r.calls for r in hidden)} |"
        )
    out += [_annotation_row(r) for r in last]
    out += [f"| (outside annotations) | {fmt_time(a.unannotated_us)} | {a.unannotated_pct:.1f}% | |", ""]
    if a.basis != "gpu":
        out += ["CPU time: the trace has no GPU activity.", ""]
    if a.bottleneck is not None:
        out += [f"**{_text(a.bottleneck.message)}**", ""]
    return out


def _annotation_row(r: AnnotationRow) -> str:
    return f"| {markdown(r.name)} | {fmt_time(r.time_us)} | {r.share_pct:.1f}% | {r.calls} |"


def _roofline(r: RooflineSummary) -> list[str]:
    """Peaks used with their sources, time by bound, and the top kernels on the roofline."""
    p = r.peaks
    if p is None:
        return [f"- roofline: {_text(r.reason)}", ""]
    flops = ", ".join(f"{markdown(d)} {v:g}" for d, v in p.tflops.items() if v)
    gpu = markdown(p.model or p.device)
    out = [f"**Roofline** ({gpu}): {p.memory_bandwidth_gbs:g} GB/s; TFLOP/s {flops}", ""]
    out.append(f"- peaks from: {_text(peaks_source_line(p.sources, short=False))}")
    bounds = ", ".join(f"{markdown(b.bound)} {b.share_pct:.1f}%" for b in r.by_bound)
    out += [f"- {r.modelled_pct:.1f}% of kernel time modelled: {bounds or 'no modelled kernels'}", ""]
    if r.top_kernels:
        out += [
            "| kernel | op | dtype | time | FLOP/B | TFLOP/s | GB/s | roof | bound |",
            "|---|---|---|---:|---:|---:|---:|---:|---|",
        ]
        out += [
            f"| {markdown_code(k.name, 80)} | {markdown(k.op)} | {markdown(k.dtype)} | {fmt_time(k.time_us)} "
            f"| {num(k.intensity, '.1f')} | {num(k.achieved_tflops, '.1f')} | {num(k.achieved_gbs, '.0f')} "
            f"| {num(k.roof_pct, '.0f', '%')} | {markdown(k.bound)} |"
            for k in r.top_kernels
        ]
        out.append("")
        if above_roof(r.top_kernels):
            out += [f"_{ABOVE_ROOF_NOTE}_", ""]
    return out


def _step_us(t: TraceSummary) -> float | None:
    """The profiled step, µs (None without steps)."""
    return t.step_time.profiled_step_us if t.step_time is not None else None
