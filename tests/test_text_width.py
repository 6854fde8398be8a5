"""The text report fits the terminal (issue 14): rendered at 80 and 200 columns, no line of any
fixture's or external trace's report is longer, and folded lines never start at column 0."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fixture_paths import REPO

from traceadvisor.pipeline import analyze
from traceadvisor.report import render
from traceadvisor.report.format import fit, middle

TRACES = sorted((REPO / "fixtures").rglob("*.json.gz"))


@pytest.mark.parametrize("path", TRACES, ids=[str(p.relative_to(REPO / "fixtures")) for p in TRACES])
def test_no_line_is_longer_than_the_width(path: Path) -> None:
    report = analyze([path])
    for width in (80, 200):
        for show_all in (False, True):
            lines = render(report, "text", width=width, show_all=show_all).decode().splitlines()
            assert max(map(len, lines)) <= width, [line for line in lines if len(line) > width][:2]
        # every finding line is ours: numbered 1, 2, ... (a folded line cannot look like one);
        # with --all every finding is listed
        numbered = [int(m.group(1)) for line in lines if (m := re.match(r"(\d+)\. \[", line))]
        assert numbered == list(range(1, len(report.findings) + 1))


def test_fit_folds_at_spaces_indents_continuations_and_keeps_short_lines() -> None:
    text = "short\n1. [high] " + "word " * 30 + "\n  indented " + "x" * 100
    out = fit(text, 40).splitlines()
    assert out[0] == "short"
    assert all(len(line) <= 40 for line in out)
    assert out[1].startswith("1. [high] word") and out[2].startswith("   word")
    assert sum(line.startswith("  indented") for line in out) == 1
    start = next(i for i, line in enumerate(out) if line.startswith("  indented"))
    assert all(line.startswith("     ") for line in out[start + 1 :])


def test_middle_keeps_both_ends() -> None:
    assert middle("sm80_xmma_gemm_f32f32_tn_n", 12) == "sm80_x…_tn_n"
    assert middle("short", 12) == "short"
    assert len(middle("a" * 100, 17)) == 17
