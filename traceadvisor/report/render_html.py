"""The HTML report: one self-contained page (``--format html``) that works from ``file://`` offline.

The template, the style sheet and the hand-written timeline script are package data
(``report/html/``), inlined here; nothing is fetched from anywhere. The timeline's data (each
trace's ``TraceSummary.timeline``, from ``analyze(..., timeline=True)``) is embedded as gzip-compressed
JSON in base64 (``<script type="application/octet-stream" id="ta-data">``), which the page decodes
with ``DecompressionStream``. Starts are delta-coded in whole ns (the model's µs carry exact ns
decimals): numbers that gzip well.

Every string that comes from a trace (names, paths, messages quoting them) is escaped here: HTML
special characters as entities (``html.escape``), and characters that are not printable (bidi
overrides, controls) as visible escapes (``safe_text.escape_controls``). The script only ever puts
data into the page through ``textContent`` and the canvas, never as markup.

A page is kept under ``MAX_SPANS_PAGE`` spans: past it (many ranks), whole ranks' timelines are
left out, the straggler's and the findings' traces kept first, and the page says which.
"""

from __future__ import annotations

import base64
import gzip
import html
import itertools
import json
import math
import re
import shlex
from collections.abc import Iterable
from importlib import resources
from pathlib import PurePath
from typing import Any

from traceadvisor import __version__
from traceadvisor.report.finding import Finding, Location
from traceadvisor.report.format import (
    ABOVE_ROOF_NOTE,
    RANK_COLUMNS,
    above_roof,
    cause_name,
    figures_by_source,
    fmt_time,
    impact_text,
    num,
    plural,
    rank_cells,
    rank_label,
    ranks_head,
    replay_line,
    skipped_by_reason,
    step_time_line,
    trace_labels,
    verdict_lines,
    window_basis_name,
)
from traceadvisor.report.model import TIMELINE_KINDS, Report, RooflineSummary, Timeline, TraceSummary
from traceadvisor.report.safe_text import NAME_LIMIT, TEXT_LIMIT, escape_controls, shorten

# Spans embedded in one page, all traces together: ~8 bytes each, so about 5 MB at most.
MAX_SPANS_PAGE = 600_000
# The timeline's span kinds in the page's words (the data keeps the identifiers).
KIND_NAMES = {"cpu_op": "CPU op", "python": "Python frame"}
# Characters of a span name in the timeline's data (a 200 MB event name must not make a 200 MB page).
TIMELINE_NAME_LIMIT = 300
# The page must stay under 8 MB always (issue 14): the spans are capped (MAX_SPANS_PAGE), and the
# distinct names, which a trace can make as many as its spans (a hostile or generated one), share
# this many characters: each name is cut to its share, at least MIN_NAME_CHARS, and past
# NAMES_BUDGET_CHARS / MIN_NAME_CHARS names the rest are dropped (the tooltip then gives the kind).
NAMES_BUDGET_CHARS = 2_000_000
MIN_NAME_CHARS = 24
# The embedded data's last guard (base64 characters): past it the timeline is left out, said so.
MAX_DATA_CHARS = 7_000_000
# As traceadvisor/open_command.py: context around a short evidence event, ns.
PAD_NS = 10_000
HOW_TO_READ = (
    "How to read this report: the verdict says what to fix first and the step it predicts after each fix; "
    "each finding gives its cost, where it is and the change to make; “Show in timeline” zooms the timeline "
    "(wheel: zoom, drag: pan, hover: details) to the finding's first event; to see the full trace in Perfetto, "
    "run the finding's traceadvisor open command (a page opened from a file cannot hand a trace to Perfetto)."
)

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def _h(value: object, limit: int = TEXT_LIMIT) -> str:
    """A string from the report (which may quote the trace) as HTML text or attribute value."""
    return html.escape(escape_controls(shorten(str(value), limit)), quote=True)


def _asset(name: str) -> str:
    return (resources.files("traceadvisor.report") / "html" / name).read_text(encoding="utf-8")


def render(report: Report) -> bytes:
    """``report`` as one complete HTML5 document, UTF-8."""
    timelines, left_out = _page_timelines(report)
    data, name_limit = _data_blob(report, timelines)
    if len(data) > MAX_DATA_CHARS:  # only a trace built to defeat the budgets gets here
        left_out.append(f"timeline left out: its data would take {len(data) / 1e6:.1f} MB (the page keeps 8 MB)")
        timelines = []
        data, name_limit = _data_blob(report, timelines)
    elif name_limit < TIMELINE_NAME_LIMIT:
        left_out.append(
            f"span names cut to {name_limit} characters"
            + (" (the rest of the names dropped)" if name_limit == MIN_NAME_CHARS else "")
            + ": the trace holds too many distinct names for the page's size budget"
        )
    parts = {
        "title": _h(f"traceadvisor report: {', '.join(t.path for t in report.traces) or 'no trace'}", NAME_LIMIT),
        "style": _asset("style.css"),
        "body": _body(report, timelines, left_out),
        "data": data,
        "script": _asset("timeline.js"),
    }
    page = _PLACEHOLDER.sub(lambda m: parts[m.group(1)], _asset("template.html"))
    return page.encode("utf-8")


# -- the finding windows and commands (as traceadvisor/open_command.py, which the report may not import) --


def trace_of(report: Report, finding: Finding) -> TraceSummary | None:
    """The trace summary a finding is about (its ``trace``; else the first)."""
    return next((t for t in report.traces if t.path == finding.trace), report.traces[0] if report.traces else None)


def finding_window_us(finding: Finding, trace: TraceSummary | None) -> tuple[float, float] | None:
    """The finding's window, µs: ``open_command.finding_window`` (its first evidence event widened by
    its duration, at least ``PAD_NS``, on each side; else its trace's first step; else the window)."""
    if finding.evidence:
        e = finding.evidence[0]
        start, dur = round(e.ts_us * 1000), max(round(e.dur_us * 1000), 0)
        pad = max(dur, PAD_NS)
        return (start - pad) / 1000.0, (start + dur + pad) / 1000.0
    if trace is None:
        return None
    if trace.steps:
        s = trace.steps[0]
        lo, hi = round(s.cpu_start_us * 1000), round((s.cpu_start_us + s.cpu_dur_us) * 1000)
        if s.gpu_start_us is not None and s.gpu_dur_us is not None and s.gpu_dur_us > 0:
            lo = min(lo, round(s.gpu_start_us * 1000))
            hi = max(hi, round((s.gpu_start_us + s.gpu_dur_us) * 1000))
        return lo / 1000.0, hi / 1000.0
    if trace.window_us > 0:
        lo = round(trace.window_start_us * 1000)
        return lo / 1000.0, round((trace.window_start_us + trace.window_us) * 1000) / 1000.0
    return None


def open_command(report: Report, n: int, finding: Finding) -> str:
    """The ``traceadvisor open`` command that shows finding ``n`` in Perfetto. With several ranks,
    ``open`` analyses the one trace alone, where the numbers differ: the rule's code picks it; a
    cross-rank finding (no trace of its own) opens its first rank's whole trace, since no trace
    alone has it."""
    if len(report.traces) <= 1:
        trace = finding.trace or (report.traces[0].path if report.traces else "TRACE")
        return f"traceadvisor open {shlex.quote(trace)} --at {n}"
    if finding.trace:
        return f"traceadvisor open {shlex.quote(finding.trace)} --at {shlex.quote(finding.code)}"
    ranked = [t for r in finding.ranks for t in report.traces if t.rank == r] + list(report.traces)
    return f"traceadvisor open {shlex.quote(ranked[0].path)}"


def finding_windows(report: Report) -> dict[int, tuple[float, float]]:
    """Each finding's window (µs, its trace's own clock, as ``traceadvisor open`` shows it)."""
    out: dict[int, tuple[float, float]] = {}
    for n, f in enumerate(report.findings, 1):
        w = finding_window_us(f, trace_of(report, f))
        if w is not None:
            out[n] = w
    return out


def _path_of(report: Report, n: int) -> str:
    t = trace_of(report, report.findings[n - 1])
    return t.path if t is not None else ""


def clock_shifts_ns(report: Report) -> dict[str, int]:
    """Per trace path, the ns its timeline moves by so that ranks on several hosts are drawn on
    one clock: minus its host's offset from the collective-end alignment (``report.ranks``,
    ``ranks/align.py``: a time on host h is corrected by subtracting ``offset_h``). Nothing when
    the alignment was refused or there is one host (offsets 0)."""
    r = report.ranks
    if r is None or "refused" in r.alignment or not r.offsets_us:
        return {}
    host_of = {row.rank: row.host for row in r.rows}
    out: dict[str, int] = {}
    for t in report.traces:
        offset = r.offsets_us.get(host_of.get(t.rank, ""), 0.0) if t.rank is not None else 0.0
        if offset:
            out[t.path] = -round(offset * 1000)
    return out


# -- the page's body --


def _body(report: Report, timelines: list[tuple[TraceSummary, Timeline]], left_out: list[str]) -> str:
    out = [
        "<header><h1>traceadvisor report</h1>",
        f'<p class="meta">traceadvisor {_h(__version__)} · {_h(plural(len(report.traces), "trace"))} · '
        f"{_h(plural(len(report.findings), 'finding'))}</p>",
        f'<p class="howto">{_h(HOW_TO_READ)}</p></header>',
        _verdict(report),
        _traces(report),
        _ranks(report) if report.ranks is not None else "",  # several ranks: the comparison first
        _cpu(report),
        _findings(report),
        _timeline(report, timelines, left_out),
        _steps(report),
        _roofline(report),
        _annotations(report),
    ]
    return "\n".join(out)


def _verdict(report: Report) -> str:
    out = ['<section id="verdict"><h2>Verdict</h2>']
    v = report.verdict
    if v is None:
        out.append("<p>No verdict: the trace has no steps to predict.</p>")
    else:
        lines = verdict_lines(v)
        out.append(f'<p class="step">{_h(lines[0])}</p>')
        if len(lines) > 1:
            out.append('<ul class="fixes">' + "".join(f"<li>{_h(x)}</li>" for x in lines[1:]) + "</ul>")
    return "".join(out) + "</section>"


def _traces(report: Report) -> str:
    out = ['<section id="traces"><h2>Traces</h2>']
    for t in report.traces:
        dev = (t.device.name if t.device is not None else None) or t.platform
        rank = "" if t.rank is None else f" (rank {_h(t.rank)})"
        items = [
            f"device: {_h(dev)}" if t.platform != "cpu" else "device: CPU only (no GPU activity in the trace)",
            f"window: {_h(fmt_time(t.window_us))} ({_h(window_basis_name(t.window_basis))})",
        ]
        if t.platform != "cpu":
            items.append(
                f"GPU busy: {t.gpu_busy_pct:.1f}% ({_h(fmt_time(t.gpu_busy_us))}); "
                f"{_h(plural(t.kernel_count, 'kernel'))}"
            )
        if t.replay_error_pct is not None:
            step = t.step_time.profiled_step_us if t.step_time is not None else None
            items.append(f"replay: {_h(replay_line(t.replay_error_pct, t.replay_external_wait_us, step))}")
        if t.step_time is not None:
            items.append(f"step: {_h(step_time_line(t.step_time, t.measured_unprofiled_step_us))}")
        items += [f'<span class="warning">warning: {_h(w)}</span>' for w in t.warnings[:20]]
        out.append(f'<div class="trace"><h3><code>{_h(t.path)}</code>{rank}</h3><ul>')
        out.append("".join(f"<li>{i}</li>" for i in items) + "</ul></div>")
    return "".join(out) + "</section>"


def _window_start_us(report: Report, f: Finding) -> float | None:
    """Where the finding's trace's analysis window starts (µs, trace clock): evidence starts are
    shown from it (a trace's absolute µs, 4e12, say nothing to a reader); None when unknown."""
    for t in report.traces:
        if t.path == f.trace:
            return t.window_start_us
    return None


def _from(origin: float | None, ts_us: float) -> str:
    """``ts_us`` from ``origin`` (``+7.496 ms``), exact ns; the absolute µs when no origin."""
    if origin is None:
        return f"{ts_us:.3f} µs"
    delta = (round(ts_us * 1000) - round(origin * 1000)) / 1000
    return ("+" if delta >= 0 else "−") + fmt_time(abs(delta))


def _findings(report: Report) -> str:
    out = ['<section id="findings"><h2>Findings</h2>']
    if not report.findings:
        out.append("<p>No findings.</p>")
    windows = finding_windows(report)
    for n, f in enumerate(report.findings, 1):
        sev = f.severity.value
        who = f" [{_h(rank_label(f.ranks))}]" if f.ranks else ""
        out.append(
            f'<article class="finding" id="finding-{n}" data-code="{_h(f.code)}" data-rule="{_h(f.rule)}" '
            f'data-severity="{_h(sev)}">'
            f'<h3><span class="num">{n}.</span> <span class="sev sev-{_h(sev)}">{_h(sev)}</span> '
            f"{_h(f.rule)} ({_h(f.code)}){who}</h3>"
            f'<p class="message">{_h(f.message)}</p><dl>'
        )
        if f.impact is not None:
            out.append(f"<dt>impact</dt><dd>{_h(impact_text(f.impact))}: {_h(f.impact.basis)}</dd>")
        if f.location is not None:
            out.append(f"<dt>location</dt><dd>{_location(f.location)}</dd>")
        out.append(f"<dt>fix</dt><dd>{_h(f.recommendation)}</dd></dl>")
        if f.evidence:
            out.append(
                '<table class="evidence"><tr><th>evidence</th><th>start (from the trace\'s window)</th>'
                "<th>duration</th><th>stream</th></tr>"
            )
            origin = _window_start_us(report, f)
            out += [
                f"<tr><td><code>{_h(e.name, NAME_LIMIT)}</code></td>"
                f"<td>{_h(_from(origin, e.ts_us))}</td>"
                f"<td>{_h(fmt_time(e.dur_us))}</td><td>{'' if e.stream is None else _h(e.stream)}</td></tr>"
                for e in f.evidence[:10]
            ]
            out.append("</table>")
        out.append(f'<p class="open">Perfetto: <code class="perfetto-command">{_h(open_command(report, n, f))}</code>')
        if n in windows:
            out.append(f' <button class="show-in-timeline" data-finding="{n}">Show in timeline</button>')
        out.append("</p></article>")
    for reason, rules, scope in skipped_by_reason(report.skipped, trace_labels(report.traces)):
        out.append(f'<p class="skipped">skipped {_h(", ".join(rules))}{_h(scope)}: {_h(reason)}</p>')
    out += [f'<p class="rule-error">rule error {_h(e.rule)}: {_h(e.error)}</p>' for e in report.errors]
    return "".join(out) + "</section>"


def _location(loc: Location) -> str:
    return f"<code>{_h(loc.where())}</code>"


def _timeline(report: Report, timelines: list[tuple[TraceSummary, Timeline]], left_out: list[str]) -> str:
    out = ['<section id="timeline"><h2>Timeline</h2>']
    if not timelines:
        out.append('<p class="note">No timeline in this report (the analysis was run without one).</p>')
    notes = [f"{t.path}: {tl.sampled}" for t, tl in timelines if tl.sampled]
    notes += left_out
    out += [f'<p class="note sampled">{_h(n)}</p>' for n in notes]
    legend = [(k, KIND_NAMES.get(k, k.replace("_", " "))) for k in TIMELINE_KINDS]
    causes = timelines[0][1].causes if timelines else ()
    out.append('<div id="timeline-legend">')
    out += [f'<span class="key"><i data-kind="{_h(k)}"></i>{_h(label)}</span>' for k, label in legend]
    out += [f'<span class="key"><i data-cause="{_h(c)}"></i>idle: {_h(cause_name(c))}</span>' for c in causes]
    out.append("</div>")
    out.append(
        '<p class="hint">wheel: zoom · drag: pan · hover: details · double-click: whole range · '
        '<button id="timeline-reset">Reset view</button> <span id="timeline-range"></span></p>'
        '<div id="timeline-wrap"><canvas id="timeline-canvas" width="1200" height="200"></canvas>'
        '<div id="timeline-tooltip" hidden></div></div>'
    )
    return "".join(out) + "</section>"


def _steps(report: Report) -> str:
    out = ['<section id="steps"><h2>Steps</h2>']
    for t in report.traces:
        if not t.steps:
            out.append(f"<p><code>{_h(t.path)}</code>: no profiler steps.</p>")
            continue
        out.append(f'<h3><code>{_h(t.path)}</code></h3><table class="steps"><tr><th>step</th><th>CPU time</th>'
                   "<th>GPU time</th><th>GPU busy</th></tr>")  # fmt: skip
        out += [
            f"<tr><td>{_h(s.name, NAME_LIMIT)}</td><td>{_h(fmt_time(s.cpu_dur_us))}</td>"
            f"<td>{_h(fmt_time(s.gpu_dur_us))}</td><td>{s.gpu_busy_pct:.1f}%</td></tr>"
            for s in t.steps[:500]
        ]
        out.append("</table>")
        if len(t.steps) > 500:
            out.append(f'<p class="note">{len(t.steps) - 500:,} more steps (the JSON report lists them all).</p>')
    return "".join(out) + "</section>"


def _cpu(report: Report) -> str:
    """The CPU-only section of each trace that has one (``traces[].cpu``): the text report's
    sentences (``cpu_section.summary_lines``) and its two tables."""
    from traceadvisor.report.cpu_section import frame_name, summary_lines, user_frame

    parts = [t for t in report.traces if t.cpu is not None]
    if not parts:
        return ""
    out = ['<section id="cpu"><h2>CPU-only analysis</h2>']
    for t in parts:
        c = t.cpu
        assert c is not None
        if len(report.traces) > 1:
            out.append(f"<h3><code>{_h(t.path)}</code></h3>")
        out.append("<ul>" + "".join(f"<li>{_h(line, TEXT_LIMIT)}</li>" for line in summary_lines(c)) + "</ul>")
        out.append("<table><tr><th>hot op (self time)</th><th>per step</th><th>share</th><th>calls</th></tr>")
        out += [
            f"<tr><td><code>{_h(o.name, NAME_LIMIT)}</code></td><td>{_h(fmt_time(o.self_us))}</td>"
            f"<td>{o.share_pct:.1f}%</td><td>{o.calls:g}</td></tr>"
            for o in c.top_ops
        ]
        out.append("</table>")
        out.append(
            "<table><tr><th>hot Python (self time)</th><th>under your code</th><th>per step</th><th>share</th></tr>"
        )
        out += [
            f"<tr><td><code>{_h(frame_name(x), NAME_LIMIT)}</code></td><td><code>{_h(user_frame(x), NAME_LIMIT)}</code>"
            f"</td><td>{_h(fmt_time(x.self_us))}</td><td>{x.share_pct:.1f}%</td></tr>"
            for x in c.top_lines
        ]
        out.append("</table>")
    return "".join(out) + "</section>"


def _annotations(report: Report) -> str:
    out = ['<section id="annotations"><h2>Annotations</h2>']
    for t in report.traces:
        a = t.annotations
        if a is None:
            out.append(f"<p><code>{_h(t.path)}</code>: no user annotations.</p>")
            continue
        kind = "GPU" if a.basis == "gpu" else "CPU"
        out.append(f'<h3><code>{_h(t.path)}</code></h3><table class="annotations"><tr><th>annotation</th>'
                   f"<th>{kind} time</th><th>share</th><th>calls</th></tr>")  # fmt: skip
        out += [
            f"<tr><td>{_h(r.name, NAME_LIMIT)}</td><td>{_h(fmt_time(r.time_us))}</td><td>{r.share_pct:.1f}%</td>"
            f"<td>{r.calls}</td></tr>"
            for r in a.rows[:200]
        ]
        out.append(
            f"<tr><td>(outside annotations)</td><td>{_h(fmt_time(a.unannotated_us))}</td>"
            f"<td>{a.unannotated_pct:.1f}%</td><td></td></tr></table>"
        )
        if a.bottleneck is not None:
            out.append(f'<p class="bottleneck">{_h(a.bottleneck.message)}</p>')
    return "".join(out) + "</section>"


def _ranks(report: Report) -> str:
    r = report.ranks
    assert r is not None
    out = [f'<section id="ranks"><h2>Ranks</h2><p>{_h(ranks_head(r))}</p><table class="ranks"><tr>']
    out += [f"<th>{_h(c)}</th>" for c in RANK_COLUMNS]
    out.append("</tr>")
    for row in r.rows:
        cls = ' class="straggler"' if row.straggler else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{_h(c)}</td>" for c in rank_cells(row)) + "</tr>")
    out.append("</table>")
    out += [f'<p class="warning">warning: {_h(p)}</p>' for p in r.problems]
    return "".join(out) + "</section>"


# -- the roofline: an inline SVG scatter on log axes --

_W, _H, _ML, _MB, _MT, _MR = 640, 380, 60, 40, 12, 12


def _roofline(report: Report) -> str:
    out = ['<section id="roofline"><h2>Roofline</h2>']
    for t in report.traces:
        out.append(f"<h3><code>{_h(t.path)}</code></h3>{_roofline_one(t.roofline)}")
    return "".join(out) + "</section>"


def _roofline_one(r: RooflineSummary) -> str:
    p = r.peaks
    if p is None:
        return f'<p class="note">roofline: {_h(r.reason)}</p>'
    flops = {d: v for d, v in p.tflops.items() if v}
    bounds = ", ".join(f"{b.bound} {b.share_pct:.1f}%" for b in r.by_bound) or "no modelled kernels"
    head = (
        f"<p>{_h(p.model or p.device)}: {p.memory_bandwidth_gbs:g} GB/s; TFLOP/s "
        f"{_h(', '.join(f'{d} {v:g}' for d, v in flops.items()))}; {r.modelled_pct:.1f}% of kernel time "
        f"modelled: {_h(bounds)}</p>"
    )
    head += "".join(f'<p class="note">{_h(", ".join(f))}: {_h(s)}</p>' for s, f in figures_by_source(p.sources).items())
    note = f'<p class="note">{_h(ABOVE_ROOF_NOTE)}</p>' if above_roof(r.top_kernels) else ""
    return head + _roofline_svg(r, p.memory_bandwidth_gbs, flops) + note


class _LogAxes:
    """Decades of intensity (FLOP/B) and throughput (TFLOP/s) mapped onto the SVG's plot area."""

    def __init__(self, xs: list[float], ys: list[float]) -> None:
        self.x0, self.x1 = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
        self.y0, self.y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
        self.x1 = max(self.x1, self.x0 + 1)
        self.y1 = max(self.y1, self.y0 + 1)

    def px(self, x: float) -> float:
        return _ML + (math.log10(x) - self.x0) / (self.x1 - self.x0) * (_W - _ML - _MR)

    def py(self, y: float) -> float:
        return _H - _MB - (math.log10(max(y, 10.0**self.y0)) - self.y0) / (self.y1 - self.y0) * (_H - _MB - _MT)


def _roofline_svg(r: RooflineSummary, bandwidth_gbs: float, flops: dict[str, float]) -> str:
    """The scatter: one circle per modelled kernel (size by its share of kernel time), one roof per
    dtype (``min(peak, intensity × bandwidth)``), log axes."""
    points = [k for k in r.top_kernels if (k.intensity or 0) > 0 and (k.achieved_tflops or 0) > 0]
    peak = max(flops.values(), default=1.0)
    ax = _LogAxes(
        [k.intensity or 1.0 for k in points] + [0.1, 1000.0],
        [k.achieved_tflops or 1.0 for k in points] + [peak, peak / 1e4],
    )
    svg = [
        f'<svg class="roofline" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" '
        'aria-label="roofline: achieved TFLOP/s against arithmetic intensity">'
    ]
    for e in range(ax.x0, ax.x1 + 1):
        x = ax.px(10.0**e)
        svg.append(f'<line class="grid" x1="{x:.1f}" y1="{_MT}" x2="{x:.1f}" y2="{_H - _MB}"/>')
        svg.append(f'<text class="tick" x="{x:.1f}" y="{_H - _MB + 14}">1e{e}</text>')
    for e in range(ax.y0, ax.y1 + 1):
        y = ax.py(10.0**e)
        svg.append(f'<line class="grid" x1="{_ML}" y1="{y:.1f}" x2="{_W - _MR}" y2="{y:.1f}"/>')
        svg.append(f'<text class="tick y" x="{_ML - 4}" y="{y + 4:.1f}">1e{e}</text>')
    bw = bandwidth_gbs / 1000.0  # TFLOP/s per FLOP/B
    lo, hi = 10.0**ax.x0, 10.0**ax.x1
    roofs: dict[float, list[str]] = {}  # dtypes of one peak (fp16 and bf16) share their roof
    for d, v in flops.items():
        roofs.setdefault(v, []).append(d)
    for v, dtypes in roofs.items():
        dtype = ", ".join(dtypes)
        knee = min(max(v / bw, lo), hi) if bw > 0 else hi
        path = " ".join(f"{ax.px(x):.1f},{ax.py(min(v, x * bw)):.1f}" for x in (lo, knee, hi))
        svg.append(
            f'<polyline class="roof" points="{path}"><title>{_h(dtype)} roof: {v:g} TFLOP/s, '
            f"{bandwidth_gbs:g} GB/s</title></polyline>"
        )
        svg.append(f'<text class="roof-label" x="{_W - _MR - 4}" y="{ax.py(v) - 4:.1f}">{_h(dtype)}</text>')
    for k in points:
        title = (
            f"{k.name} ({k.op}, {k.dtype}): {fmt_time(k.time_us)}, {num(k.intensity, '.1f')} FLOP/B, "
            f"{num(k.achieved_tflops, '.1f')} TFLOP/s, roof {num(k.roof_pct, '.0f', '%')}, {k.bound}"
        )
        radius = 3 + min(6.0, math.sqrt(max(k.share_pct, 0.0)))
        svg.append(
            f'<circle class="pt bound-{_h(k.bound)}" cx="{ax.px(k.intensity or 1.0):.1f}" '
            f'cy="{ax.py(k.achieved_tflops or 1.0):.1f}" r="{radius:.1f}"><title>{_h(title, NAME_LIMIT * 2)}</title>'
            "</circle>"
        )
    svg.append(f'<text class="axis" x="{(_W + _ML) / 2}" y="{_H - 6}">FLOP/byte</text>')
    svg.append(f'<text class="axis" x="14" y="{_H / 2}" transform="rotate(-90 14 {_H / 2})">TFLOP/s</text></svg>')
    return "".join(svg)


# -- the timeline's data --


def _page_timelines(report: Report) -> tuple[list[tuple[TraceSummary, Timeline]], list[str]]:
    """The traces whose timelines the page embeds (within ``MAX_SPANS_PAGE``), and a note per trace
    left out."""
    have = [(t, t.timeline) for t in report.traces if t.timeline is not None]
    straggler = report.ranks.straggler if report.ranks is not None else None
    in_findings = {f.trace for f in report.findings}
    order = sorted(
        range(len(have)),
        key=lambda i: (have[i][0].rank != straggler or straggler is None, have[i][0].path not in in_findings, i),
    )
    kept: set[int] = set()
    used = 0
    left: list[str] = []
    for i in order:
        t, tl = have[i]
        if kept and used + tl.spans > MAX_SPANS_PAGE:
            left.append(f"{t.path}: timeline left out (the page holds at most {MAX_SPANS_PAGE:,} spans)")
            continue
        kept.add(i)
        used += tl.spans
    return [(t, tl) for i, (t, tl) in enumerate(have) if i in kept], left


def _deltas_ns(origin_ns: int, starts_us: Iterable[float]) -> tuple[int, list[int]]:
    """The first start in whole ns (the trace's clock) and each start's difference from the one
    before: the page computes a start as ``(t0 + running sum) / 1000``, as the model does µs."""
    ns = [origin_ns + round(s * 1000) for s in starts_us]
    if not ns:
        return origin_ns, []
    return ns[0], [0] + [b - a for a, b in itertools.pairwise(ns)]


def _name_limit(timelines: list[tuple[TraceSummary, Timeline]]) -> tuple[int, int]:
    """(characters a name keeps, how many names keep one) within ``NAMES_BUDGET_CHARS``."""
    names = [n for _, tl in timelines for n in tl.names]
    total = sum(min(len(n), TIMELINE_NAME_LIMIT) for n in names)
    if total <= NAMES_BUDGET_CHARS:
        return TIMELINE_NAME_LIMIT, len(names)
    limit = max(MIN_NAME_CHARS, NAMES_BUDGET_CHARS // max(1, len(names)))
    return limit, (len(names) if limit > MIN_NAME_CHARS else NAMES_BUDGET_CHARS // MIN_NAME_CHARS)


def _data_blob(report: Report, timelines: list[tuple[TraceSummary, Timeline]]) -> tuple[str, int]:
    """The page's embedded data (gzip + base64) and the characters each span name kept."""
    limit, keep = _name_limit(timelines)
    kept = 0
    shifts = clock_shifts_ns(report)
    traces: list[dict[str, Any]] = []
    for t, tl in timelines:
        shift_ns = shifts.get(t.path, 0)
        # several traces that are not ranks of one run: each lane says its file
        prefix = f"{PurePath(t.path).name} · " if len(timelines) > 1 and t.rank is None else ""
        lanes = []
        for lane in tl.lanes:
            t0, ds = _deltas_ns(tl.origin_ns + shift_ns, lane.start_us)
            lanes.append(
                {
                    "label": escape_controls(shorten(prefix + lane.label, NAME_LIMIT)),
                    "role": lane.role,
                    "t0": t0,
                    "ds": ds,
                    "d": [round(d * 1000) for d in lane.dur_us],
                    "z": list(lane.depth),
                    "n": list(lane.name),
                    "k": list(lane.kind),
                }
            )
        traces.append(
            {
                "path": t.path,
                "rank": t.rank,
                "start_us": tl.start_us + shift_ns / 1000,
                "end_us": tl.end_us + shift_ns / 1000,
                "names": [
                    escape_controls(shorten(n, limit)) if kept + i < keep else "" for i, n in enumerate(tl.names)
                ],
                "causes": list(tl.causes),
                "causeNames": [cause_name(c) for c in tl.causes],  # the text report's words
                "lanes": lanes,
            }
        )
        kept += len(tl.names)
    data = {
        "kinds": list(TIMELINE_KINDS),
        "kindNames": [KIND_NAMES.get(k, k.replace("_", " ")) for k in TIMELINE_KINDS],
        "traces": traces,
        "findingWindows": {
            str(n): {"start_us": a + d, "end_us": b + d}
            for n, (a, b) in finding_windows(report).items()
            for d in [shifts.get(_path_of(report, n), 0) / 1000]
        },
    }
    raw = json.dumps(data, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii"), limit
