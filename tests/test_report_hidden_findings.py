"""The text and Markdown reports list findings with a predicted saving; the others are one line
(``--all`` lists them). JSON keeps every finding; numbers count over all findings."""

from __future__ import annotations

import json

from traceadvisor.report import render
from traceadvisor.report.finding import Finding, Impact, Severity
from traceadvisor.report.model import Report


def _finding(code: str, severity: Severity, time_us: float | None) -> Finding:
    impact = None if time_us is None else Impact(time_us=time_us, share_pct=5.0, basis="test basis")
    return Finding(
        code=code,
        rule=f"rule-{code.lower()}",
        severity=severity,
        message=f"message {code}",
        recommendation="fix it",
        impact=impact,
    )


REPORT = Report(
    findings=(
        _finding("AA101", Severity.medium, 1200.0),  # saving: shown
        _finding("BB101", Severity.low, None),  # no impact: hidden
        _finding("CC101", Severity.high, None),  # no saving but high: shown
        _finding("DD101", Severity.medium, 0.0),  # a zero saving: hidden
        _finding("EE101", Severity.low, 30.0),  # saving: shown
    )
)


def test_text_lists_findings_with_a_saving_and_names_the_rest_with_their_numbers() -> None:
    text = render(REPORT, "text", width=200).decode()
    lines = text.splitlines()
    heads = [line for line in lines if line[:1].isdigit() and ". [" in line]
    assert [h.split(" ")[0] for h in heads] == ["1.", "3.", "5."]  # numbers over all findings
    assert "AA101" in heads[0] and "CC101" in heads[1] and "EE101" in heads[2]
    assert "message BB101" not in text and "message DD101" not in text
    assert "2 more findings with no predicted saving: BB101 (#2), DD101 (#4) (--all shows them)" in lines


def test_all_lists_every_finding_and_no_summary_line() -> None:
    text = render(REPORT, "text", width=200, show_all=True).decode()
    heads = [line.split(" ")[0] for line in text.splitlines() if line[:1].isdigit() and ". [" in line]
    assert heads == ["1.", "2.", "3.", "4.", "5."]
    assert "no predicted saving" not in text
    md = render(REPORT, "markdown", show_all=True).decode()
    assert all(f"message {c}" in md for c in ("AA101", "BB101", "CC101", "DD101", "EE101"))


def test_markdown_hides_the_same_findings_and_keeps_the_numbers() -> None:
    md = render(REPORT, "markdown").decode()
    heads = [line for line in md.splitlines() if line.startswith("### ")]
    assert [h.split(" ")[1] for h in heads] == ["1.", "3.", "5."]
    assert "message BB101" not in md and "message DD101" not in md
    assert "2 more findings with no predicted saving: BB101 (#2), DD101 (#4) (--all shows them)" in md.splitlines()


def test_json_keeps_every_finding() -> None:
    doc = json.loads(render(REPORT, "json"))
    assert [f["code"] for f in doc["findings"]] == ["AA101", "BB101", "CC101", "DD101", "EE101"]


def test_one_hidden_finding_is_singular() -> None:
    report = Report(findings=(_finding("AA101", Severity.medium, 1.0), _finding("BB101", Severity.low, None)))
    assert (
        "1 more finding with no predicted saving: BB101 (#2) (--all shows them)"
        in render(report, "text", width=200).decode().splitlines()
    )
