"""``analyze --format html``: the page of a trace or of a run's ranks, written with ``-o``; refused
to a terminal (a web page is not for reading there). The page itself is tested in
tests/test_render_html.py and, in Chromium, tests/test_html_browser.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fixture_paths import FIXTURE_TRACES
from typer.testing import CliRunner

from traceadvisor.cli import app

MULTIRANK = FIXTURE_TRACES / "multirank" / "input_delay_2r"


def _codes(page: str) -> list[str]:
    return re.findall(r'<article class="finding" id="finding-\d+" data-code="([A-Z0-9]+)"', page)


def test_analyze_html_single_trace_has_the_json_reports_findings(tmp_path: Path) -> None:
    trace = FIXTURE_TRACES / "train_step.json.gz"
    out = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["analyze", str(trace), "-f", "html", "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    j = CliRunner().invoke(app, ["analyze", str(trace), "-f", "json"])
    assert _codes(page) == [f["code"] for f in json.loads(j.stdout)["findings"]]
    assert 'id="timeline-canvas"' in page


def test_analyze_html_of_a_run_of_ranks(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    before = {p: p.stat().st_mtime_ns for p in MULTIRANK.glob("*.tasummary")}  # a developer's earlier runs
    r = CliRunner().invoke(app, ["analyze", str(MULTIRANK), "-f", "html", "-o", str(out), "--no-cache", "-j", "1"])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert 'id="ranks"' in page and 'class="straggler"' in page
    assert "DS101" in _codes(page)
    # --no-cache, and html never caches: no summary written or rewritten
    assert {p: p.stat().st_mtime_ns for p in MULTIRANK.glob("*.tasummary")} == before


def test_analyze_html_to_stdout_when_piped() -> None:
    # CliRunner's stdout is not a terminal: the page goes to stdout, as with a redirect
    r = CliRunner().invoke(app, ["analyze", str(FIXTURE_TRACES / "train_step.json.gz"), "-f", "html"])
    assert r.exit_code == 0
    assert r.stdout.startswith("<!DOCTYPE html>")


def test_analyze_html_to_a_terminal_is_refused() -> None:
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    try:
        p = subprocess.run(
            [sys.executable, "-m", "traceadvisor", "analyze", str(FIXTURE_TRACES / "train_step.json.gz"), "-f", "html"],
            stdout=follower,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "traceadvisor: error: --format html writes a web page: give it a file with -o report.html (or redirect stdout)"
    ]
