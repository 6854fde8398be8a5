"""The HTML report at the Python level: one self-contained page, the timeline's data decoded as the
page decodes it (base64, gzip, JSON), one article per finding, the finding windows of
``traceadvisor open``, the page size on real traces, hostile names escaped, and the timeline kept
out of the other outputs and of the rank-summary cache. (The page in a real browser:
tests/test_html_browser.py.)"""

from __future__ import annotations

import base64
import gzip
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from traceadvisor.open_command import finding_window
from traceadvisor.pipeline import analyze, analyze_scaled
from traceadvisor.report import FORMATS, render
from traceadvisor.report.model import TIMELINE_KINDS, Report, TraceSummary
from traceadvisor.summary.timeline import timeline_of
from traceadvisor.trace.load import load

ROOT = Path(__file__).resolve().parents[1]
TRAIN_STEP = ROOT / "fixtures" / "traces" / "train_step.json.gz"
MULTIRANK = ROOT / "fixtures" / "traces" / "multirank" / "input_delay_4r"
MAX_PAGE_BYTES = 2 * 1024 * 1024


class _Page(HTMLParser):
    """The tags of a page (name, attributes), its scripts' text by id, and the text of each
    element with an id."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._in_script: dict[str, str | None] | None = None
        self._text: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._in_script is not None:
            self.scripts.append((self._in_script, "".join(self._text)))
            self._in_script = None

    def handle_data(self, data: str) -> None:
        if self._in_script is not None:
            self._text.append(data)
        else:
            self.text.append(data)


def _parse(page: bytes) -> _Page:
    p = _Page()
    p.feed(page.decode("utf-8"))
    p.close()
    return p


def _blob(page: bytes) -> dict[str, Any]:
    scripts = [text for attrs, text in _parse(page).scripts if attrs.get("id") == "ta-data"]
    assert len(scripts) == 1
    data: dict[str, Any] = json.loads(gzip.decompress(base64.b64decode(scripts[0].strip())))
    return data


def _starts_ns(lane: dict[str, Any]) -> list[int]:
    out, cum = [], lane["t0"]
    for d in lane["ds"]:
        cum += d
        out.append(cum)
    return out


def _starts_us(lane: dict[str, Any]) -> list[float]:
    """A lane's starts as the page's script rebuilds them: t0 plus the running sum of the ns deltas."""
    out, cum = [], 0
    for d in lane["ds"]:
        cum += d
        out.append((lane["t0"] + cum) / 1000.0)
    return out


@pytest.fixture(scope="module")
def single() -> tuple[Report, bytes]:
    report = analyze([TRAIN_STEP], timeline=True)
    return report, render(report, "html")


@pytest.fixture(scope="module")
def multi() -> tuple[Report, bytes]:
    report = analyze([MULTIRANK], timeline=True)
    return report, render(report, "html")


def test_html_is_a_format() -> None:
    assert "html" in FORMATS


def test_page_is_self_contained(single: tuple[Report, bytes]) -> None:
    _, page = single
    text = page.decode("utf-8")
    assert text.startswith("<!DOCTYPE html>")
    parsed = _parse(page)
    for tag, attrs in parsed.tags:
        assert "src" not in attrs, (tag, attrs)
        assert tag not in ("link", "img", "iframe", "object", "embed"), tag
        if "href" in attrs:
            assert tag == "a" and (attrs["href"] or "").startswith("https://"), (tag, attrs)
    assert "@import" not in text and "url(" not in text
    kinds = sorted(attrs.get("type") or "" for attrs, _ in parsed.scripts)
    assert kinds == ["", "application/octet-stream"]  # the timeline script and the data
    ids = {attrs.get("id") for _, attrs in parsed.tags}
    for needed in ("verdict", "findings", "timeline", "timeline-canvas", "timeline-tooltip", "steps", "roofline"):
        assert needed in ids
    assert "annotations" in ids
    assert "ranks" not in ids  # one trace: no rank section


def test_timeline_data_decodes_to_the_trace(single: tuple[Report, bytes]) -> None:
    report, page = single
    data = _blob(page)
    assert data["kinds"] == list(TIMELINE_KINDS)
    (tr,) = data["traces"]
    tl = report.traces[0].timeline
    assert tl is not None and tl.sampled is None  # a small trace is drawn whole
    trace = load([TRAIN_STEP])[0]
    tables = (trace.host, trace.frames, trace.gpu)
    first = min(int(t["ts_ns"].min()) for t in tables)
    last = max(int(t["end_ns"].max()) for t in tables)
    lo, hi = round(tr["start_us"] * 1000), round(tr["end_us"] * 1000)
    assert first <= lo < hi <= last
    roles = {lane["role"] for lane in tr["lanes"]}
    assert roles == {"thread", "python", "stream", "idle"}
    spans = 0
    for lane, model in zip(tr["lanes"], tl.lanes, strict=True):
        starts = _starts_us(lane)
        # whole ns survive the coding: the model's offsets from origin_ns, exactly
        assert [(x - tl.origin_ns) / 1000.0 for x in _starts_ns(lane)] == list(model.start_us)
        assert [d / 1000.0 for d in lane["d"]] == list(model.dur_us)
        assert starts == sorted(starts)
        start_ns = lane["t0"]
        for delta, d in zip(lane["ds"], lane["d"], strict=True):
            start_ns += delta
            assert start_ns <= hi and start_ns + d >= lo  # overlaps the timeline's window
            assert first <= start_ns and start_ns + d <= last  # inside the trace
        assert all(0 <= n < len(tr["names"]) for n in lane["n"])
        limit = len(tr["causes"]) if lane["role"] == "idle" else len(TIMELINE_KINDS)
        assert all(0 <= k < limit for k in lane["k"])
        spans += len(starts)
    assert spans == tl.spans > 1000
    # the idle lane is the report's idle attribution: same gaps, same total per cause
    idle = next(lane for lane in tr["lanes"] if lane["role"] == "idle")
    by_cause: dict[str, float] = {}
    for k, d in zip(idle["k"], idle["d"], strict=True):
        by_cause[tr["causes"][k]] = by_cause.get(tr["causes"][k], 0.0) + d / 1000.0
    for row in report.traces[0].idle_breakdown:
        assert by_cause.get(row.cause, 0.0) == pytest.approx(row.idle_us, abs=0.01)
    kernels = next(lane for lane in tr["lanes"] if lane["role"] == "stream")
    assert TIMELINE_KINDS[kernels["k"][0]] in ("kernel", "memcpy", "memset")


def test_one_article_per_finding(single: tuple[Report, bytes]) -> None:
    report, page = single
    assert report.findings
    articles = [a for t, a in _parse(page).tags if t == "article"]
    assert [a.get("id") for a in articles] == [f"finding-{n}" for n in range(1, len(report.findings) + 1)]
    for a, f in zip(articles, report.findings, strict=True):
        assert (a.get("data-code"), a.get("data-rule"), a.get("data-severity")) == (f.code, f.rule, f.severity.value)
    text = page.decode()
    for n, _ in enumerate(report.findings, 1):
        assert f'<code class="perfetto-command">traceadvisor open {TRAIN_STEP} --at {n}</code>' in text


def test_finding_windows_are_open_commands(single: tuple[Report, bytes]) -> None:
    report, page = single
    windows = _blob(page)["findingWindows"]
    buttons = {a.get("data-finding") for t, a in _parse(page).tags if t == "button" and "data-finding" in a}
    expected = {}
    for n, f in enumerate(report.findings, 1):
        w = finding_window(f, next(t for t in report.traces if t.path == f.trace))
        if w is not None:
            expected[str(n)] = {"start_us": w.start_ns / 1000.0, "end_us": w.end_ns / 1000.0}
    assert windows == expected and len(expected) == len(report.findings)
    assert buttons == set(expected)


def test_page_sizes(single: tuple[Report, bytes], multi: tuple[Report, bytes]) -> None:
    assert len(single[1]) < MAX_PAGE_BYTES
    page = multi[1]
    assert len(page) < MAX_PAGE_BYTES
    data = _blob(page)
    assert sorted(t["rank"] for t in data["traces"]) == [0, 1, 2, 3]
    labels = [lane["label"] for t in data["traces"] for lane in t["lanes"]]
    assert any(x.startswith("rank 3 · ") for x in labels)


def test_multirank_page_has_ranks_and_each_rank(multi: tuple[Report, bytes]) -> None:
    report, page = multi
    assert report.ranks is not None and report.ranks.straggler is not None
    parsed = _parse(page)
    assert "ranks" in {a.get("id") for _, a in parsed.tags}
    stragglers = [a for t, a in parsed.tags if t == "tr" and a.get("class") == "straggler"]
    assert len(stragglers) == 1
    # open analyses one trace alone, where numbers differ: the rule's code names the finding; a
    # cross-rank finding (no trace of its own) opens its rank's whole trace
    text = page.decode()
    for f in report.findings:
        if f.trace:
            assert f"traceadvisor open {f.trace} --at {f.code}</code>" in text
        else:
            (path,) = [t.path for t in report.traces if t.rank == f.ranks[0]]
            assert f"traceadvisor open {path}</code>" in text


def test_scaled_path_carries_each_ranks_timeline_and_skips_the_cache(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for p in sorted(MULTIRANK.glob("*.json.gz")):
        shutil.copy(p, folder / p.name)
    plain = analyze_scaled([folder], jobs=1)  # writes the cache: summaries without timelines
    assert all(t.timeline is None for t in plain.traces)
    cached = sorted(folder.glob("*.tasummary"))
    assert len(cached) == 4
    stamps = [p.stat().st_mtime_ns for p in cached]
    report = analyze_scaled([folder], jobs=1, timeline=True)
    assert [t.timeline is not None for t in report.traces] == [True] * 4
    assert [p.stat().st_mtime_ns for p in cached] == stamps  # neither read for it nor rewritten
    assert "timeline" not in json.loads(render(analyze_scaled([folder], jobs=1), "json"))["traces"][0]


def test_timeline_only_when_asked(single: tuple[Report, bytes]) -> None:
    report, _ = single
    plain = analyze([TRAIN_STEP])
    assert all(t.timeline is None for t in plain.traces)
    assert "timeline" not in json.loads(render(plain, "json"))["traces"][0]
    d = report.traces[0].to_dict()
    assert "timeline" in d
    assert TraceSummary.from_dict(d) == report.traces[0]
    assert Report.from_dict(report.to_dict()) == report


def test_a_large_trace_is_sampled_by_steps_around_the_findings() -> None:
    trace = load([TRAIN_STEP])[0]
    whole = timeline_of(trace)
    steps = trace.steps.table
    assert len(steps) >= 3
    # focus on the last step: the timeline keeps the first step and the last, within the budget
    assert len(steps) == 3
    last_lo, last_hi = int(steps["cpu_start_ns"].iloc[-1]), int(steps["cpu_end_ns"].iloc[-1])
    budget = whole.total_spans * 3 // 4  # two of the three steps
    tl = timeline_of(trace, focus_ns=[(last_lo + 1000, last_lo + 2000)], max_spans=budget)
    assert tl.sampled is not None and "steps" in tl.sampled
    assert tl.spans <= budget
    starts = [tl.origin_ns + round(s * 1000) for lane in tl.lanes for s in lane.start_us]
    first_lo, first_hi = int(steps["cpu_start_ns"].iloc[0]), int(steps["cpu_end_ns"].iloc[0])
    assert any(first_lo <= s < first_hi for s in starts)
    assert any(last_lo <= s < last_hi for s in starts)
    middle_lo, middle_hi = int(steps["cpu_start_ns"].iloc[1]), int(steps["cpu_end_ns"].iloc[1])
    # the step between is left out: only spans that reach into a kept step start inside it
    whole_starts = [whole.origin_ns + round(s * 1000) for lane in whole.lanes for s in lane.start_us]
    inside = sum(middle_lo < s < middle_hi for s in starts)
    assert inside < 0.1 * sum(middle_lo < s < middle_hi for s in whole_starts)
    # a budget smaller than one step: cut at the budget
    tiny = timeline_of(trace, max_spans=500)
    assert tiny.spans <= 500 and tiny.sampled is not None


def test_hostile_names_are_escaped(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(TRAIN_STEP.read_bytes()))
    evil = '</script><script>alert(1)</script><img src=x onerror=alert(1)>"\u202e&amp;'
    renamed = 0
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "user_annotation", "python_function", "cpu_op") and renamed < 400:
            e["name"] = e["name"] + evil
            renamed += 1
    doc["deviceProperties"][0]["name"] = "GPU" + evil
    path = tmp_path / "evil<b>&'.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    report = analyze([path], timeline=True)
    page = render(report, "html")
    parsed = _parse(page)
    assert [t for t, _ in parsed.tags if t in ("img", "b")] == []
    assert len(parsed.scripts) == 2
    text = page.decode()
    assert "alert(1)</script>" not in text and "\u202e" not in text
    assert "&lt;script&gt;alert(1)" in text and "\\u202e" in text
    # the names reach the timeline's data intact (the script shows them as text, never as markup)
    names = _blob(page)["traces"][0]["names"]
    assert any(n.endswith('<img src=x onerror=alert(1)>"\\u202e&amp;') for n in names)


def test_cpu_only_page_has_the_cpu_section_and_no_gpu_lines() -> None:
    import html

    report = analyze([ROOT / "fixtures" / "traces" / "cpu_slow_getitem.json.gz"], timeline=True)
    cpu = report.traces[0].cpu
    assert cpu is not None
    page = render(report, "html").decode()
    section = page.split('<section id="cpu">')[1].split("</section>")[0]
    # the hottest Python frame's user line, as the text report's table gives it
    top = cpu.top_lines[0]
    assert top.user is not None and html.escape(top.user) in section
    assert "GPU busy" not in page.split('<section id="traces">')[1].split("</section>")[0]
    assert "device: CPU only" in page


def _unique_names_trace(path: Path, n: int) -> Path:
    """A CPU trace of one step holding ``n`` ops, each with its own 180-character name (what a
    generated or hostile trace can do to a page that embeds every distinct name)."""
    import random
    import string

    rnd = random.Random(7)
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10 * n + 10}
    ]
    for i in range(n):
        name = "".join(rnd.choices(string.ascii_letters, k=180))
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 1 + 10 * i, "dur": 8})
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_too_many_distinct_names_are_cut_to_the_budget_and_said(tmp_path: Path, monkeypatch: Any) -> None:
    import traceadvisor.report.render_html as page_module

    trace = _unique_names_trace(tmp_path / "names.json", 3000)
    report = analyze([trace], timeline=True)
    whole = render(report, "html").decode()  # 540k characters of names: under the real budget
    assert "span names cut" not in whole
    monkeypatch.setattr(page_module, "NAMES_BUDGET_CHARS", 30_000)
    cut = render(report, "html").decode()
    assert f"span names cut to {page_module.MIN_NAME_CHARS} characters (the rest of the names dropped)" in cut
    names = [n for t in _blob(cut.encode())["traces"] for n in t["names"]]
    assert sum(len(n) for n in names) <= 30_000 + len(names)  # each cut name may end in an ellipsis
    assert sum(1 for n in names if n) == 30_000 // page_module.MIN_NAME_CHARS
    assert len(cut) < len(whole) / 3
    monkeypatch.setattr(page_module, "MAX_DATA_CHARS", 1_000)
    dropped = render(report, "html").decode()
    assert "timeline left out: its data would take" in dropped
    assert _blob(dropped.encode())["traces"] == []


def test_ranks_on_several_hosts_are_drawn_on_one_clock() -> None:
    """With clock offsets between hosts (``report.ranks.offsets_us``, collective-end alignment),
    each rank's lanes, window and finding windows move by minus its host's offset, so the ranks'
    collectives line up on the page; a refused alignment moves nothing."""
    from dataclasses import replace

    report = analyze_scaled(sorted(MULTIRANK.glob("rank*.json.gz")), jobs=1, cache=False, timeline=True)
    assert report.ranks is not None
    base = _blob(render(report, "html"))
    hosts = {row.rank: f"host{row.rank % 2}" for row in report.ranks.rows}
    offset_us = 5000.25  # host1's clock runs 5 ms ahead of host0's
    ranks = replace(
        report.ranks,
        alignment="collective-end (residual 1.0 µs)",
        offsets_us={"host0": 0.0, "host1": offset_us},
        rows=tuple(replace(row, host=hosts[row.rank]) for row in report.ranks.rows),
    )
    moved = _blob(render(replace(report, ranks=ranks), "html"))
    for before, after in zip(base["traces"], moved["traces"], strict=True):
        shift = -offset_us if hosts[before["rank"]] == "host1" else 0.0
        assert after["start_us"] == pytest.approx(before["start_us"] + shift, abs=1e-3)
        for lb, la in zip(before["lanes"], after["lanes"], strict=True):
            assert la["t0"] - lb["t0"] == round(shift * 1000)
            assert la["ds"] == lb["ds"]
    rank_of = {t.path: t.rank for t in report.traces}
    for n, f in enumerate(report.findings, 1):
        if str(n) not in base["findingWindows"]:
            continue
        (rank,) = {rank_of.get(f.trace, report.traces[0].rank)}
        shift = -offset_us if hosts[rank] == "host1" else 0.0
        got, was = moved["findingWindows"][str(n)], base["findingWindows"][str(n)]
        assert got["start_us"] == pytest.approx(was["start_us"] + shift, abs=1e-3)
    refused = replace(ranks, alignment="collective-end (residual 900 µs) [refused: residual too large]")
    assert _blob(render(replace(report, ranks=refused), "html"))["traces"] == base["traces"]
