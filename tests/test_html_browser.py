"""The HTML report in a real browser: headless Chromium (tests/browser.py) opens the page rendered
from three real traces and checks what a reader would see and do: the page decodes its data without
an error and loads nothing from outside, every finding of the report is on it, the timeline canvas is
drawn, a real mouse click on "Show in timeline" moves the view to that finding's window, the wheel
zooms, a drag pans, hovering shows a tooltip, and a multi-rank run marks its straggler.

The ids and the ``window.traceadvisor`` API are the HTML report's contract (ids stable, tests rely
on them). Without Chromium these tests skip; ``.ci/run`` installs Debian's chromium as root.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from browser import Browser, BrowserError, Page, find_chromium, pixel_stats
from fixture_paths import REPO

from traceadvisor.report.model import Report

TRACES = REPO / "fixtures" / "traces"
MULTIRANK = REPO / "fixtures" / "multirank.json"
SKIP_REASON = "chromium not installed: .ci/run installs Debian's chromium when run as root"


def _straggler_run() -> str:
    """A multi-rank run whose recorded ground truth has a straggler (fixtures/multirank.json)."""
    runs = json.loads(MULTIRANK.read_text())
    with_straggler = sorted(name for name, run in runs.items() if run.get("straggler_rank") is not None)
    assert with_straggler, f"{MULTIRANK} has no run with a straggler"
    return "input_delay_2r" if "input_delay_2r" in with_straggler else with_straggler[0]


@dataclass(frozen=True)
class Case:
    name: str
    paths: tuple[Path, ...]
    multi_rank: bool = False


# A single-GPU training step, the ranks of a CPU DDP run and of a GPU one together, a CPU-only capture.
CASES = (
    Case("single_gpu", (TRACES / "train_step.json.gz",)),
    Case("multi_rank", (TRACES / "multirank" / _straggler_run(),), multi_rank=True),
    # two ranks on one H100 (NCCL cannot share a GPU: gloo over CUDA tensors), rank 1's input 50 ms late
    Case("multi_rank_gpu", (TRACES / "multirank_gpu" / "input_delay_2r",), multi_rank=True),
    Case("cpu_only", (TRACES / "cpu_slow_getitem.json.gz",)),
)


def analyse(case: Case) -> Report:
    """The report as ``traceadvisor analyze -f html`` makes it: the timeline attached; several
    traces through the scaled path (rank summaries, one process here)."""
    from traceadvisor.pipeline import analyze, analyze_scaled

    if case.multi_rank:
        return analyze_scaled(list(case.paths), jobs=1, timeline=True)
    return analyze(list(case.paths), timeline=True)


def open_command(report: Report, n: int) -> list[str]:
    """Finding ``n``'s ``traceadvisor open`` command, split. ``open`` analyses one trace alone: with
    several traces, finding ``n`` of this report is not finding ``n`` there, so the rule's code picks
    it; a cross-rank finding (no trace of its own: no trace alone has it) opens its rank's whole trace."""
    f = report.findings[n - 1]
    if len(report.traces) <= 1:
        return ["traceadvisor", "open", f.trace or report.traces[0].path, "--at", str(n)]
    if f.trace:
        return ["traceadvisor", "open", f.trace, "--at", f.code]
    of_rank = [t.path for r in f.ranks for t in report.traces if t.rank == r] + [t.path for t in report.traces]
    return ["traceadvisor", "open", of_rank[0]]


def expected_window(report: Report, n: int) -> tuple[float, float] | None:
    """Finding ``n``'s window as ``traceadvisor open --at n`` picks it (µs), or None."""
    from traceadvisor.open_command import finding_window

    f = report.findings[n - 1]
    trace = next((t for t in report.traces if t.path == f.trace), report.traces[0] if report.traces else None)
    w = finding_window(f, trace)
    return None if w is None else (w.start_ns / 1000.0, w.end_ns / 1000.0)


@dataclass(frozen=True)
class Rendered:
    case: Case
    report: Report
    html: Path


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if find_chromium() is None:
        pytest.skip(SKIP_REASON)
    with Browser() as b:
        yield b


@pytest.fixture(scope="module", params=CASES, ids=[c.name for c in CASES])
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    from traceadvisor.report import render

    case: Case = request.param
    for p in case.paths:
        assert p.exists(), f"{p} is missing: the fixtures are part of the repository"
    report = analyse(case)
    html = tmp_path_factory.mktemp(case.name) / "report.html"
    html.write_bytes(render(report, "html"))
    return Rendered(case, report, html)


@pytest.fixture
def page(browser: Browser, rendered: Rendered) -> Iterator[Page]:
    """A fresh tab with the report loaded and its timeline drawn once."""
    p = browser.new_page(width=1400, height=900)
    try:
        p.goto(rendered.html.as_uri())
        p.wait_for("window.traceadvisor && (window.traceadvisor.ready || window.traceadvisor.error)", timeout=30)
        yield p
    finally:
        p.close()


def ta(page: Page, what: str) -> Any:
    return page.evaluate(f"window.traceadvisor.{what}")


def view(page: Page) -> tuple[float, float]:
    v = ta(page, "view")
    return float(v["start_us"]), float(v["end_us"])


def test_page_loads_without_errors_or_outside_resources(page: Page, rendered: Rendered) -> None:
    assert ta(page, "error") is None
    assert ta(page, "ready") is True
    assert ta(page, "draws") >= 1
    # A self-contained page fetches nothing: the browser's own record of what it loaded.
    fetched = page.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert fetched == [], f"the report loaded outside resources: {fetched}"
    assert page.console_errors == []
    start, end = view(page)
    assert end > start


def test_every_finding_is_on_the_page(page: Page, rendered: Rendered) -> None:
    findings = rendered.report.findings
    assert findings, f"{rendered.case.name}: the fixture is expected to give findings"
    on_page = page.evaluate(
        """[...document.querySelectorAll('#findings article.finding')].map(a => ({
             id: a.id, code: a.dataset.code, rule: a.dataset.rule, severity: a.dataset.severity,
             command: (a.querySelector('code.perfetto-command') || {}).textContent || null,
             button: (a.querySelector('button.show-in-timeline') || {dataset: {}}).dataset.finding || null,
             text: a.textContent}))"""
    )
    assert len(on_page) == len(findings)
    for n, (f, a) in enumerate(zip(findings, on_page, strict=True), start=1):
        assert (a["id"], a["code"], a["rule"], a["severity"]) == (f"finding-{n}", f.code, f.rule, f.severity.value)
        assert a["command"] is not None and a["command"].split() == open_command(rendered.report, n), a["command"]
        # Its message is what the reader sees (the page may wrap it: compare words).
        assert " ".join(f.message.split()[:6]) in " ".join(a["text"].split())
        has_window = expected_window(rendered.report, n) is not None
        assert a["button"] == (str(n) if has_window else None), f"finding {n} ({f.code}): window {has_window}"
    assert page.evaluate("document.querySelector('#verdict') !== null")


def test_open_commands_name_a_finding_of_their_trace(page: Page, rendered: Rendered) -> None:
    """Each finding's ``traceadvisor open TRACE --at X``, as a reader copies it from the page, picks
    a finding of the same rule when ``open`` analyses TRACE alone (as it does); a command without
    ``--at`` (a cross-rank finding) opens one of the report's traces."""
    from traceadvisor.open_command import pick_finding
    from traceadvisor.pipeline import analyze

    commands = page.evaluate(
        "[...document.querySelectorAll('#findings article.finding')]"
        ".map(a => (a.querySelector('code.perfetto-command') || {}).textContent || null)"
    )
    alone: dict[str, Report] = {}
    wrong: list[str] = []
    for n, (f, command) in enumerate(zip(rendered.report.findings, commands, strict=True), start=1):
        argv = shlex.split(command)
        assert argv[:2] == ["traceadvisor", "open"] and len(argv) in (3, 5), command
        trace = argv[2]
        if len(argv) == 3:
            assert not f.trace and trace in {t.path for t in rendered.report.traces}, (f.code, command)
            continue
        assert argv[3] == "--at", command
        if trace not in alone:
            alone[trace] = analyze([trace])
        try:
            _, picked = pick_finding(alone[trace], argv[4])
        except ValueError as e:
            wrong.append(f"finding {n} ({f.code}): {command}: {e}")
            continue
        if picked.code != f.code:
            wrong.append(f"finding {n} ({f.code}): {command} picks {picked.code}")
    assert not wrong, "\n".join(wrong)


def test_steps_roofline_annotations_sections(page: Page, rendered: Rendered) -> None:
    """The other sections: a row per step, a circle per modelled kernel drawn inside its plot, the
    annotation section; and the page stays small."""
    traces = rendered.report.traces
    assert rendered.html.stat().st_size < 2_000_000
    step_rows = page.evaluate("document.querySelectorAll('#steps table.steps tr').length")
    with_steps = [t for t in traces if t.steps]
    assert step_rows == sum(min(len(t.steps), 500) + 1 for t in with_steps)  # + a header each
    expected_points = sum(
        sum(1 for k in t.roofline.top_kernels if (k.intensity or 0) > 0 and (k.achieved_tflops or 0) > 0)
        for t in traces
        if t.roofline.peaks is not None
    )
    circles = page.evaluate(
        """[...document.querySelectorAll('#roofline svg circle')].map(c => {
             const r = c.getBoundingClientRect(), s = c.ownerSVGElement.getBoundingClientRect();
             return r.width > 0 && r.left >= s.left - 1 && r.right <= s.right + 1
                 && r.top >= s.top - 1 && r.bottom <= s.bottom + 1; })"""
    )
    assert len(circles) == expected_points
    assert all(circles), "a roofline point is drawn outside its plot"
    roofs = page.evaluate("document.querySelectorAll('#roofline svg polyline.roof').length")
    assert (roofs > 0) == any(t.roofline.peaks is not None for t in traces)
    assert page.evaluate("document.querySelector('#annotations') !== null")
    assert page.evaluate("document.querySelector('#timeline #timeline-tooltip') !== null")


def test_timeline_canvas_is_drawn(page: Page, rendered: Rendered) -> None:
    png = page.screenshot(selector="#timeline-canvas")
    pixels, drawn, colours = pixel_stats(png)
    assert pixels > 10_000, f"the canvas is only {pixels} px"
    assert drawn > 0.02, f"only {drawn:.1%} of the canvas differs from its background"
    assert colours > 3, f"{colours} colours: lanes, spans and idle causes should show several"


def _first_button(page: Page) -> int:
    n = page.evaluate("(document.querySelector('button.show-in-timeline') || {dataset: {}}).dataset.finding || null")
    if n is None:
        pytest.fail("no finding has a Show in timeline button")
    return int(n)


def test_show_in_timeline_click_moves_the_view(page: Page, rendered: Rendered) -> None:
    n = _first_button(page)
    window = ta(page, f"findingWindows[{n}]")
    assert window is not None, f"findingWindows has no entry for finding {n}"
    start, end = float(window["start_us"]), float(window["end_us"])
    # The window ``traceadvisor open --at`` shows in Perfetto (µs, the trace's clock).
    assert (start, end) == pytest.approx(expected_window(rendered.report, n), rel=0, abs=1e-6)
    page.evaluate("window.scrollTo(0, 0)")
    draws = ta(page, "draws")
    page.click(f'#finding-{n} button.show-in-timeline[data-finding="{n}"]')
    page.wait_for(f"window.traceadvisor.draws > {draws}", timeout=10)
    got = view(page)
    assert got == pytest.approx((start, end), rel=0, abs=max(1e-3, (end - start) * 1e-9)), (got, window)
    # The timeline is scrolled into view.
    top, bottom = page.evaluate(
        "(() => { const r = document.getElementById('timeline-canvas').getBoundingClientRect();"
        " return [r.top, r.bottom]; })()"
    )
    assert bottom > 0 and top < 900, (top, bottom)
    assert page.console_errors == []


def test_wheel_zooms_in_around_the_pointer(page: Page) -> None:
    before = view(page)
    draws = ta(page, "draws")
    page.wheel("#timeline-canvas", -400, fx=0.5, fy=0.5)
    page.wait_for(f"window.traceadvisor.draws > {draws}", timeout=10)
    after = view(page)
    assert after[1] - after[0] < 0.9 * (before[1] - before[0]), (before, after)
    assert before[0] <= after[0] < after[1] <= before[1], (before, after)
    # Zooming out again widens it.
    draws = ta(page, "draws")
    page.wheel("#timeline-canvas", 400, fx=0.5, fy=0.5)
    page.wait_for(f"window.traceadvisor.draws > {draws}", timeout=10)
    again = view(page)
    assert again[1] - again[0] > after[1] - after[0], (after, again)
    assert page.console_errors == []


def test_drag_pans_the_view(page: Page) -> None:
    page.wheel("#timeline-canvas", -400)  # zoomed in first: the whole range may not pan further
    page.wait_for("window.traceadvisor.draws > 1", timeout=10)
    before = view(page)
    page.drag("#timeline-canvas", dx=200)
    page.wait_for(f"window.traceadvisor.view.start_us !== {before[0]!r}", timeout=10)
    after = view(page)
    width = before[1] - before[0]
    assert after[1] - after[0] == pytest.approx(width, rel=1e-6), (before, after)
    assert after[0] < before[0], "dragging right shows earlier time"
    assert page.console_errors == []


def test_hover_shows_a_tooltip(page: Page, rendered: Rendered) -> None:
    """Somewhere on the drawn lanes the tooltip names a span of the timeline with its start and
    duration."""
    names = {n for t in rendered.report.traces if t.timeline is not None for n in t.timeline.names}
    box = page.box("#timeline-canvas")
    for fy in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
        for fx in (0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9):
            x, y = box["x"] + box["width"] * fx, box["y"] + box["height"] * fy
            page.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
            shown = page.evaluate(
                "(() => { const t = document.getElementById('timeline-tooltip');"
                " if (!t) return null; const s = getComputedStyle(t);"
                " return s.display !== 'none' && s.visibility !== 'hidden' && t.textContent.trim()"
                " ? t.textContent : null; })()"
            )
            if shown:
                lines = [line.strip() for line in shown.splitlines() if line.strip()]
                # The name comes first: a name of the trace's spans (or an idle gap's cause).
                assert lines[0] in names or lines[0].lower().startswith("idle"), shown
                assert any(line.startswith("start ") for line in lines), shown
                assert any(line.startswith("duration ") for line in lines), shown
                return
    pytest.fail("no point of the timeline showed #timeline-tooltip")


def test_ranks_section_marks_the_straggler(page: Page, rendered: Rendered) -> None:
    has_section = page.evaluate("document.getElementById('ranks') !== null")
    ranks = rendered.report.ranks
    if not rendered.case.multi_rank:
        assert not has_section, "a single-trace report has no rank table"
        return
    assert has_section and ranks is not None
    rows = page.evaluate("document.querySelectorAll('#ranks tr').length")
    assert rows >= len(ranks.rows) + 1  # a header and a row per rank
    straggler_rows = page.evaluate(
        "[...document.querySelectorAll('#ranks tr.straggler')].map(r => r.querySelector('td').textContent)"
    )
    assert ranks.straggler is not None, "the fixture run has a straggler (fixtures/multirank.json)"
    assert len(straggler_rows) == 1, straggler_rows
    assert straggler_rows[0].split()[0] == str(ranks.straggler), straggler_rows  # its first cell: the rank


def test_sampled_timeline_is_drawn_and_said(browser: Browser, tmp_path: Path) -> None:
    """A trace over the span budget is drawn from whole steps only, and the page says so: the
    single-GPU step rendered with a budget of 1,500 spans (it holds several times that)."""
    from dataclasses import replace

    from traceadvisor.pipeline import analyze_traces
    from traceadvisor.report import render
    from traceadvisor.summary.timeline import timeline_of
    from traceadvisor.trace.load import load_file

    trace = load_file(CASES[0].paths[0])
    report = analyze_traces([trace])
    timeline = timeline_of(trace, max_spans=1_500)
    assert timeline.sampled and timeline.spans <= 1_500 < timeline.total_spans
    report = replace(report, traces=(replace(report.traces[0], timeline=timeline),))
    html = tmp_path / "sampled.html"
    html.write_bytes(render(report, "html"))
    p = browser.new_page()
    try:
        p.goto(html.as_uri())
        p.wait_for("window.traceadvisor && (window.traceadvisor.ready || window.traceadvisor.error)")
        assert p.evaluate("window.traceadvisor.error") is None
        notes = p.evaluate("[...document.querySelectorAll('.sampled')].map(e => e.textContent)")
        assert any(timeline.sampled in " ".join(n.split()) for n in notes), (timeline.sampled, notes)
        _, drawn, colours = pixel_stats(p.screenshot(selector="#timeline-canvas"))
        assert drawn > 0.02 and colours > 3
        assert p.console_errors == []
    finally:
        p.close()


def test_browser_reports_a_broken_page(browser: Browser, tmp_path: Path) -> None:
    """The checks above can fail: a page whose script throws is caught by the console-error record."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><script>window.traceadvisor = {ready: false}; undefinedCall();</script>")
    p = browser.new_page()
    try:
        p.goto(bad.as_uri())
        with pytest.raises(BrowserError, match="still"):
            p.wait_for("window.traceadvisor.ready", timeout=0.5)
        assert any("undefinedCall" in e for e in p.console_errors), p.console_errors
    finally:
        p.close()


def test_client_fails_fast_when_chromium_dies(browser: Browser) -> None:
    """A browser that dies mid-session ends the wait at once with the reason, not at the timeout
    (``browser``: only for its skip without Chromium; this test kills a second one)."""
    with Browser() as doomed:
        p = doomed.new_page()
        assert doomed.pid is not None
        os.killpg(doomed.pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(BrowserError, match=r"closed the pipe|cannot write"):
            p.evaluate("1 + 1", timeout=20)
        assert time.monotonic() - started < 5


def test_the_page_writes_times_as_the_text_report(page: Page) -> None:
    """One time format: the timeline's script (axis, tooltip, range) and ``report/format.fmt_time``
    agree on every magnitude, rounding edge and sign."""
    from traceadvisor.report.format import fmt_time

    values = [0.0, 0.0005, 0.001, 0.5, 5.1, 9.9996, 12.345678, 812.44, 999.96, 999.4, 1000.0, 3050.4, 16755.0]
    values += [99999.9, 12854018.0, 999999.0, 4.4e9, -399.184, -2249.0]
    got = page.evaluate(f"JSON.stringify({values}.map(v => window.traceadvisor.fmtTime(v)))")
    assert json.loads(got) == [fmt_time(v) for v in values]
