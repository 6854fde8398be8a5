"""The Markdown report: names render as written (no emphasis, links or split cells from a name),
and it has the text report's sections (issue 14)."""

from __future__ import annotations

import html
import re

from fixture_paths import REPO
from markdown_it import MarkdownIt

from traceadvisor.pipeline import analyze
from traceadvisor.report import render
from traceadvisor.report.finding import Finding, Impact, Severity
from traceadvisor.report.format import impact_text
from traceadvisor.report.model import Report

TRACE = REPO / "fixtures" / "traces" / "train_step.json.gz"


def _html(md: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)


def _plain(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_op_names_with_underscores_are_not_emphasis() -> None:
    md = render(analyze([TRACE]), "markdown", show_all=True).decode()
    page = _html(md)
    assert "aten::_fused_adamw_" in _plain(page)  # the name as written
    assert "<em>" not in page  # nothing in this report is emphasis (the above-roof note is absent here)


def test_names_and_messages_with_markdown_punctuation_render_literally() -> None:
    name = "op_*x*_|[l](http://e.x)|<b>`t`"
    f = Finding(
        code="ZZ101",
        rule="r_x_",
        severity=Severity.high,
        message=f"kernel {name} waits _here_",
        recommendation=f"fix {name}",
        impact=Impact(time_us=12.0, share_pct=1.0, basis=f"basis {name}"),
    )
    page = _html(render(Report(findings=(f,)), "markdown").decode())
    for tag in ("<em>", "<strong>", "<a ", "<b>", "<code>t</code>"):
        assert tag not in page, tag
    plain = _plain(page)
    assert f"kernel {name} waits _here_" in plain and f"fix {name}" in plain and f"basis {name}" in plain
    assert "r_x_ (ZZ101)" in plain


def test_markdown_has_the_text_reports_sections() -> None:
    report = analyze([TRACE])
    text = render(report, "text", width=200).decode()
    md = render(report, "markdown").decode()
    plain = _plain(_html(md))
    # the top finding's replayed saving, as both renderers must word it (its figures follow the
    # bundled profiler costs: derived here, not copied)
    launch = next(f for f in report.findings if f.rule == "launch-overhead")
    assert launch.impact is not None and launch.impact.saving_per_step_us is not None
    assert launch.impact.saving_per_step_us > 0
    impact = "impact: " + impact_text(launch.impact).split(";")[0]
    for marker_text, marker_md in [
        ("verdict: step", "Verdict"),
        ("  device: ", "device: "),
        ("  window: ", "window: "),
        ("  replay: ", "replay: "),
        ("  step: ", "step: "),
        ("ProfilerStep#3", "ProfilerStep#3"),
        ("GPU idle by cause: ", "GPU idle by cause: "),
        ("top kernels in the window", "top kernels in the window"),
        ("Optimizer.step#AdamW.step", "Optimizer.step#AdamW.step"),
        ("roofline peaks", "Roofline"),
        ("peaks from: ", "peaks from: "),
        ("1. [high] launch-overhead (GK102)", "1. [high] launch-overhead (GK102)"),
        (impact, impact.split(" predicted")[0].rsplit(" ", 1)[0]),
        ("with no predicted saving", "with no predicted saving"),
    ]:
        assert marker_text in text, marker_text
        assert marker_md in plain, marker_md
