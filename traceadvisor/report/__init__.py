"""Reports: the analysis as typed data (``model``, ``finding``) and its renderings (JSON, text, Markdown).

``render(report, fmt)`` is the one way the command line, ``capture`` and the advisor turn a
``Report`` into bytes. Each renderer is imported when its format is asked for: ``rich`` (text)
costs tens of milliseconds that a JSON report does not need, and this package is imported by
every rule (``report.finding``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traceadvisor.report.model import Report

FORMATS = ("text", "json", "markdown", "html")


def render(report: Report, fmt: str, *, color: bool = False, width: int = 120, show_all: bool = False) -> bytes:
    """``report`` as ``fmt`` (``text``, ``json``, ``markdown`` or ``html``, one self-contained page),
    UTF-8; ``color`` adds ANSI styles to the text report (for a terminal), ``width`` its columns
    (plain text: no line is longer). The text and Markdown reports list the findings with a
    predicted saving (and high-severity ones) and name the others in one line; ``show_all`` lists
    every one. JSON always holds every finding.
    Raises ``ValueError`` for another format."""
    if fmt == "json":
        from traceadvisor.report import render_json

        return render_json.render(report)
    if fmt == "markdown":
        from traceadvisor.report import render_markdown

        return render_markdown.render(report, show_all=show_all).encode()
    if fmt == "text":
        from traceadvisor.report import render_text

        return render_text.render(report, width=width, color=color, show_all=show_all).encode()
    if fmt == "html":
        from traceadvisor.report import render_html

        return render_html.render(report)
    raise ValueError(f"unknown report format {fmt!r}: use {', '.join(FORMATS)}")
