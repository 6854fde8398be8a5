"""Reports of hostile traces: no terminal control, no forged lines, no HTML or links, bounded size.

The hostile trace is a real one (fixtures/traces/train_step.json.gz) with a kernel, an
annotation, an optimizer annotation, a Python frame and the device renamed to strings that set
the window title, clear the screen, plant an OSC 8 link, flip text with a bidi override, print a
forged finding line, and carry HTML, images and links for a Markdown report; its file name holds
the same. The text, Markdown and stderr outputs of the real command line are checked, and the
Markdown is parsed by a real CommonMark parser (markdown-it-py). The escaping module is imported
inside the tests that call it, so that the command-line tests also run (and fail) on a checkout
from before it existed.
"""

from __future__ import annotations

import gzip
import html
import json
import logging
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from traceadvisor.advisor.report import AdvisorReport
from traceadvisor.advisor.sinks import format_report, log_report
from traceadvisor.report import render_text
from traceadvisor.report.finding import Finding, Severity
from traceadvisor.report.model import Report
from traceadvisor.testing import write_case_trace

ROOT = Path(__file__).resolve().parents[1]
TRAIN_STEP = ROOT / "fixtures" / "traces" / "train_step.json.gz"

# Terminal attacks: window title (OSC 0), clear screen (CSI 2J), an OSC 8 link whose text differs
# from its target, a C1 CSI, a right-to-left override, and a newline and carriage return followed
# by a forged finding line.
TERM = (
    "\x1b]0;pwned\x07\x1b[2J\x1b]8;;https://evil.example/\x1b\\ok\x1b]8;;\x1b\\\x9b31m"
    "\u202egnp.exe\n1. [high] fake-finding (XX999): forged\r"
)
# Markdown attacks: a script, an image with an onerror handler, a tracking image, links (one
# javascript:), a backtick that would close a code span, a pipe that would split a table cell.
MD = (
    "<script>alert(1)</script><img src=x onerror=alert(1)>![t](https://tracker.example/p.png)"
    "[c](https://evil.example/)[j](javascript:alert(1))`|x"
)
FILE_NAME = "evil\x1b]0;T\x07\n1. [high] fake-file.json.gz"
FORGED = re.compile(r"^\s*1\. \[high\] fake", re.MULTILINE)
# What must not reach a terminal: C0 controls but newline, DEL, C1 controls, bidi controls.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def _hostile_trace(path: Path) -> Path:
    doc = json.loads(gzip.decompress(TRAIN_STEP.read_bytes()))
    doc["deviceProperties"][0]["name"] = "GPU" + TERM
    renamed = set()
    for e in doc["traceEvents"]:
        name, cat = e.get("name"), e.get("cat")
        if cat == "kernel" and name.startswith("void at::native::reduce_kernel<128"):
            e["name"] = "kern" + TERM
        elif cat in ("user_annotation", "gpu_user_annotation") and name == "qkv_projection":
            e["name"] = "ann" + MD
        elif cat in ("user_annotation", "gpu_user_annotation") and name == "Optimizer.step#AdamW.step":
            e["name"] = name + TERM[:-1]  # the idle-gap and bottleneck messages quote it
        elif cat == "python_function" and name == "capture_gpu.py(401): forward":
            # the frame format is one line (``file(line): function``): every attack but the newline
            e["name"] = "capture_gpu.py(401): fwd\x1b]0;pwned\x07\x1b[2J\u202e\x9b31m`<script>"
        else:
            continue
        renamed.add(cat)
    assert renamed == {"kernel", "user_annotation", "gpu_user_annotation", "python_function"}
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The hostile trace, and a configuration naming its GPU (so the roofline table lists the kernel)."""
    folder = tmp_path_factory.mktemp("hostile")
    config = folder / "gpu.toml"
    config.write_text('[gpu]\nname = "h100-sxm"\n')
    return _hostile_trace(folder / FILE_NAME), config


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # wide: these tests read whole lines (tests/test_text_width.py checks the folding at 80 and 200)
    return subprocess.run(
        [sys.executable, "-m", "traceadvisor", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        errors="surrogateescape",
        env={**os.environ, "COLUMNS": "10000"},
    )


@pytest.fixture(scope="module")
def json_report(hostile: tuple[Path, Path]) -> dict[str, Any]:
    trace, config = hostile
    p = _cli("analyze", str(trace), "--config", str(config), "-f", "json")
    assert p.returncode == 0, p.stderr
    doc: dict[str, Any] = json.loads(p.stdout)
    return doc


def test_json_report_keeps_the_exact_names(json_report: dict[str, Any]) -> None:
    """The renamed events reach the report (so the checks below are not vacuous), unescaped in JSON."""
    t = json_report["traces"][0]
    assert t["device"]["name"] == "GPU" + TERM
    assert t["path"].endswith(FILE_NAME)
    assert "kern" + TERM in [k["name"] for k in t["top_kernels"]]
    assert "ann" + MD in [r["name"] for r in t["annotations"]["rows"]]
    assert "kern" + TERM in [k["name"] for k in t["roofline"]["top_kernels"]]
    functions = [f["location"]["function"] for f in json_report["findings"] if f.get("location")]
    assert "fwd\x1b]0;pwned\x07\x1b[2J\u202e\x9b31m`<script>" in functions
    assert any("Optimizer.step#AdamW.step\x1b]0;pwned" in f["message"] for f in json_report["findings"])


def test_text_report_escapes_every_control_and_forges_no_line(hostile: tuple[Path, Path]) -> None:
    trace, config = hostile
    p = _cli("analyze", str(trace), "--config", str(config))
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert not UNSAFE.search(out), repr(UNSAFE.search(out))
    assert not FORGED.search(out)
    # Shown, escaped, everywhere the names go: device line, kernel tables, messages, location, file name.
    assert "device: GPU\\x1b]0;pwned\\x07\\x1b[2J\\x1b]8;;https://evil.example/" in out
    assert "\\u202egnp.exe\\n1. [high] fake-finding (XX999): forged\\r (cuda)" in out
    assert "kern\\x1b]0;pwned\\x07" in out
    assert "in: fwd\\x1b]0;pwned\\x07\\x1b[2J\\u202e\\x9b31m`<script> (defined at capture_gpu.py:401)" in out
    assert "most in Optimizer.step#AdamW.step\\x1b]0;pwned" in out
    assert "evil\\x1b]0;T\\x07\\n1. [high] fake-file.json.gz" in out
    # Every finding line is ours: "N. [severity] rule (CODE): ..." with N counting up from 1.
    numbered = [line for line in out.splitlines() if re.match(r"\d+\. \[", line)]
    assert [int(line.split(".")[0]) for line in numbered] == list(range(1, len(numbered) + 1))


def test_text_report_on_a_terminal_has_only_our_own_styles(hostile: tuple[Path, Path]) -> None:
    """With colour (a terminal), the only escape sequences are rich's SGR styles (ESC [ ... m)."""
    trace, _ = hostile
    from traceadvisor.pipeline import analyze_traces
    from traceadvisor.trace.load import load_file

    report = analyze_traces([load_file(trace)])
    out = render_text.render(report, color=True)
    assert "\x1b[" in out  # styled
    without_sgr = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert not UNSAFE.search(without_sgr)
    assert not FORGED.search(without_sgr)


def _html(markdown_text: str) -> str:
    # CommonMark with raw HTML on (the preset's default), plus GFM tables and strikethrough.
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown_text)


def test_markdown_report_renders_no_html_links_or_forged_structure(hostile: tuple[Path, Path]) -> None:
    trace, config = hostile
    p = _cli("analyze", str(trace), "--config", str(config), "-f", "markdown")
    assert p.returncode == 0, p.stderr
    md = p.stdout
    assert "\r" not in md and not UNSAFE.search(md)
    page = _html(md)
    for markup in ("<script", "<img", "<a ", "href=", 'javascript:alert(1)">', "<ol", "<h1>1"):
        assert markup not in page, markup
    # The names are shown as text: the parser's output holds them HTML-escaped.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;![t](https://tracker" in page
    assert "[j](javascript:alert(1))`|x" in html.unescape(page)
    # One heading per finding, and every table row has its header's cell count (no cell split by
    # a pipe, no row split by a newline or carriage return).
    findings = len(json.loads(_cli("analyze", str(trace), "--config", str(config), "-f", "json").stdout)["findings"])
    # (findings with no predicted saving are one line: "N more findings with no predicted saving")
    hidden = re.search(r"(\d+) more findings? with no predicted saving", page)
    assert page.count("<h3>") + (int(hidden.group(1)) if hidden else 0) == findings
    for table in re.findall(r"<table>.*?</table>", page, re.S):
        rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
        counts = {len(re.findall(r"<t[hd][ >]", row)) for row in rows}
        assert len(counts) == 1, table
    assert not FORGED.search(html.unescape(re.sub(r"<[^>]+>", "\n", page)))


def test_click_usage_errors_are_escaped() -> None:
    """typer/click echo the bad value in their usage errors: the stderr line escapes it too."""
    p = _cli("analyze", str(TRAIN_STEP), "--format", "x\x1b]0;pwned\x07\n1. [high] fake")
    assert p.returncode == 2
    assert not UNSAFE.search(p.stderr) and p.stderr.count("\n") == 1
    assert "x\\x1b]0;pwned\\x07" in p.stderr


def test_stderr_lines_escape_the_file_name(tmp_path: Path) -> None:
    p = _cli("analyze", str(tmp_path / FILE_NAME))
    assert p.returncode == 2
    assert p.stderr.startswith("traceadvisor: error: ") and p.stderr.count("\n") == 1
    assert not UNSAFE.search(p.stderr)
    assert "evil\\x1b]0;T\\x07\\n1. [high] fake-file.json.gz" in p.stderr


def test_advisor_log_records_are_escaped(json_report: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    report = AdvisorReport.from_document(json_report, cycle=1, rank=0, step=4, trace_path=Path(FILE_NAME))
    text = format_report(report)
    assert not UNSAFE.search(text) and not FORGED.search(text)
    assert "fwd\\x1b]0;pwned\\x07" in text
    with caplog.at_level(logging.INFO, logger="traceadvisor"):
        log_report(report)
    message = caplog.records[-1].getMessage()
    assert message == text
    # A log line is one finding: the lines are ours (summary, config, findings, fix, at, warnings).
    assert all(
        re.match(r"(traceadvisor: |  config: |  \[|      fix: |      at: |  warning: |  rule error: )", x)
        for x in text.splitlines()
    )
    assert not UNSAFE.search(report.render("text")) and "<script" not in _html(report.render("markdown"))


# -- the escaping functions --------------------------------------------------------------------


def test_every_unprintable_code_point_is_escaped() -> None:
    """All of Unicode: what is left is printable (one visible glyph or an escape), and escapes are
    the documented ones for the bidi controls and C0/C1."""
    from traceadvisor.report.safe_text import escape_controls

    everything = "".join(map(chr, range(0x110000)))
    out = escape_controls(everything)
    assert out.isprintable()
    for c in "\x00\x1b\x7f\x85\x9b\u061c\u200e\u200f\u202a\u202e\u2066\u2069\u2028\ufeff\ud800\U000e0001":
        assert c not in out and escape_controls(c).startswith("\\"), hex(ord(c))
        assert unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl")
    assert escape_controls("\x1b\u202e\n\t\U000e0001") == "\\x1b\\u202e\\n\\t\\U000e0001"
    assert escape_controls("aten::mm Ω 測試 C:\\x") == "aten::mm Ω 測試 C:\\x"  # printable text is kept as is


def test_names_are_capped_in_the_middle() -> None:
    from traceadvisor.report.safe_text import NAME_LIMIT, terminal

    huge = "head" + "x" * 50_000_000 + "tail"
    shown = terminal(huge)
    assert len(shown) == NAME_LIMIT and shown.startswith("headx") and shown.endswith("xtail") and "…" in shown
    assert terminal("short") == "short"
    # the cut is made before escaping: an escape is never split
    assert terminal("\x1b" * 1000).count("\\x1b") == NAME_LIMIT - 1


@pytest.mark.parametrize(
    "text",
    [
        "1. [high] fake",
        "  12) x",
        "# heading",
        "- item",
        "+ item",
        "===",
        "---",
        "***",
        "> quote",
        "<div>x</div><!-- c -->",
        "[ref]: https://evil.example",
        "a *b* _c_ ~~d~~ `e` \\ f",
        "![i](http://x/y.png) [l](javascript:alert(1)) <https://x.example>",
        "a\nb\r\n# c",
        "x | y",
        "&amp; &#60; &lt;",
        "aten::mm 12.3% (9%) C:\\path",
    ],
)
def test_markdown_text_renders_exactly_the_characters(text: str) -> None:
    from traceadvisor.report.safe_text import escape_controls, markdown

    page = _html("para\n\n" + markdown(text))
    assert page.startswith("<p>para</p>\n<p>") and page.endswith("</p>\n")
    inner = page[len("<p>para</p>\n<p>") : -len("</p>\n")]
    assert "<" not in inner  # no element at all: text only
    assert html.unescape(inner) == escape_controls(text).lstrip(" ")  # a paragraph drops leading spaces


@pytest.mark.parametrize("text", ["a`b", "``x``", "`", "`a`", " x ", "x`", "a|b", "plain"])
def test_markdown_code_spans_hold_any_text(text: str) -> None:
    from traceadvisor.report.safe_text import markdown_code

    page = _html(f"| h |\n|---|\n| {markdown_code(text)} |\n")
    code = re.findall(r"<td><code>(.*?)</code></td>", page)
    assert [html.unescape(c) for c in code] == [text]
    inline = _html(markdown_code(text, in_table=False))
    assert html.unescape(re.findall(r"<code>(.*?)</code>", inline)[0]) == text


def test_rich_emoji_codes_stay_text() -> None:
    report = Report(
        findings=(
            Finding(
                code="XX101",
                rule="r",
                severity=Severity.low,
                message="kernel at::native::cat::foo :cat: :smiley:",
                recommendation="fuse cat::foo :cat: :smiley:",
            ),
        ),
    )
    out = render_text.render(report, show_all=True)  # no saving: listed only with --all
    assert "foo :cat: :smiley:" in out and "fix: fuse cat::foo :cat: :smiley:" in out


# -- report size ---------------------------------------------------------------------------------

STEPS = 3000


@pytest.fixture(scope="module")
def many_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace of 3,000 profiler steps, one kernel each (the compact case format of traceadvisor.testing)."""
    case = {
        "steps": [[0, 1000]],
        "gpu_steps": True,
        "device": {"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "numSms": 132},
        "repeat": {"count": STEPS, "period_us": 1000},
        "events": [
            {"cat": "op", "name": "aten::mm", "ts": 10, "dur": 50, "ext": 1},
            {"cat": "launch", "name": "cudaLaunchKernel", "ts": 20, "dur": 5, "corr": 1, "ext": 1},
            {"cat": "kernel", "name": "sgemm", "ts": 30, "dur": 400, "corr": 1, "ext": 1},
        ],
    }
    return write_case_trace(case, tmp_path_factory.mktemp("steps"), "many_steps")


def test_long_step_tables_print_first_and_last_rows(many_steps: Path) -> None:
    doc = json.loads(_cli("analyze", str(many_steps), "-f", "json").stdout)
    assert len(doc["traces"][0]["steps"]) == STEPS  # JSON keeps every step
    text = _cli("analyze", str(many_steps)).stdout
    step_lines = [line for line in text.splitlines() if line.startswith("ProfilerStep#")]
    assert [line.split()[0] for line in step_lines] == [f"ProfilerStep#{i}" for i in (*range(10), *range(2995, 3000))]
    assert "… 2,985 more" in text
    assert "2,985 steps not shown: CPU time min 1.000 ms / median 1.000 ms / max 1.000 ms" in text
    assert len(text.splitlines()) < 60
    md = _cli("analyze", str(many_steps), "-f", "markdown").stdout
    assert len([line for line in md.splitlines() if line.startswith("| ProfilerStep#")]) == 15
    assert "| … 2,985 more | | | |" in md and len(md.splitlines()) < 80


def test_a_huge_name_is_shown_shortened(tmp_path: Path) -> None:
    """A 5 MB kernel name (Kineto writes whatever the kernel is called) costs a few hundred
    characters of the text and Markdown reports, not 5 MB per place it is quoted."""
    name = "void huge_kernel<" + "T, " * 1_700_000 + "U>(float*)"
    case = {
        "steps": [[0, 1000], [1000, 1000]],
        "gpu_steps": True,
        "events": [
            {"cat": "op", "name": "aten::mm", "ts": 10, "dur": 50, "ext": 1},
            {"cat": "launch", "name": "cudaLaunchKernel", "ts": 20, "dur": 5, "corr": 1, "ext": 1},
            {"cat": "kernel", "name": name, "ts": 30, "dur": 400, "corr": 1, "ext": 1},
        ],
    }
    trace = write_case_trace(case, tmp_path, "huge_name")
    for fmt in ("text", "markdown"):
        p = _cli("analyze", str(trace), "-f", fmt)
        assert p.returncode == 0, p.stderr
        assert len(p.stdout) < 20_000, (fmt, len(p.stdout))
        assert "void huge_kernel<T, T, " in p.stdout and "…" in p.stdout
        if fmt == "markdown":  # the text table cuts the column at 80 characters itself
            assert "T, U>(float*)`" in p.stdout
