"""``traceadvisor diff BEFORE AFTER``: two runs compared, for a person or for CI (docs/diff.md)."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from traceadvisor.console import EXIT_FINDINGS, fail, library_warnings_printed, report_destination, write_report
from traceadvisor.report.safe_text import one_line


class Format(StrEnum):
    text = "text"
    markdown = "markdown"
    json = "json"
    html = "html"


def diff(
    before: Annotated[Path, typer.Argument(help="The baseline run: a trace file or a folder of rank traces.")],
    after: Annotated[Path, typer.Argument(help="The changed run: a trace file or a folder of rank traces.")],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.text,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the comparison here instead of stdout.")
    ] = None,
    fail_on_regression: Annotated[
        float | None,
        typer.Option(
            "--fail-on-regression",
            metavar="PCT",
            min=0.0,
            help="Exit 1 when AFTER's predicted unprofiled step is slower than BEFORE's by more than PCT %.",
        ),
    ] = None,
) -> None:
    """Compare two runs: step time, where it went, kernels and ops, findings resolved and new."""
    from traceadvisor.diff import diff_runs, load_run
    from traceadvisor.diff.render import render_json, render_markdown, render_text
    from traceadvisor.diff.render_html import render_html
    from traceadvisor.errors import TraceError, UsageError

    destination = report_destination(output, [before, after])
    try:
        with library_warnings_printed():
            result = diff_runs(load_run(before), load_run(after))
    except (TraceError, UsageError, OSError) as exc:
        raise fail(str(exc)) from None
    except MemoryError:
        raise fail("out of memory while reading the traces; try smaller traces or more memory") from None
    render = {
        Format.text: render_text,
        Format.markdown: render_markdown,
        Format.json: render_json,
        Format.html: render_html,
    }[fmt]
    write_report(render(result).encode(), destination)
    if fail_on_regression is not None and result.regressed(fail_on_regression):
        g = result.gate
        sys.stderr.write(
            "traceadvisor: regression: "
            + one_line(
                f"{g.measure} step {g.before.report_ns / 1e6:.3f} ms -> {g.after.report_ns / 1e6:.3f} ms "
                f"({g.delta_pct:+.1f}%), more than --fail-on-regression {fail_on_regression:g}%"
            )
            + "\n"
        )
        raise typer.Exit(EXIT_FINDINGS)
