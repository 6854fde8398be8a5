"""The typed report (issue 11): one ``Report`` built by the pipeline, ``to_dict``/``from_dict`` at
the two edges (the JSON renderer, the advisor's worker pipe), one ``render`` for every entry point,
one ``Severity``, one console helper, and ``capture`` calling the library rather than the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from traceadvisor import console
from traceadvisor.advisor.report import AdvisorReport
from traceadvisor.pipeline import analyze
from traceadvisor.report import render
from traceadvisor.report.finding import Severity
from traceadvisor.report.format import fmt_time
from traceadvisor.report.model import Report, TraceSummary

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "fixtures" / "traces"
EXTERNAL = ROOT / "fixtures" / "external"
# Between them: user annotations with a bottleneck, roofline peaks and top kernels, a skipped rule,
# findings with evidence, locations and data, two ranks in one report, and a CPU-only trace.
CASES = {
    "naive_attention": [TRACES / "planted_naive_attention.json.gz"],
    "sdpa": [TRACES / "clean_sdpa_attention.json.gz"],
    "two_ranks": sorted((EXTERNAL / "hta").glob("sampled_rank-*.json.gz")),
}


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "traceadvisor", *args], capture_output=True, env=env, cwd=cwd, timeout=300
    )


@pytest.fixture(scope="module", params=sorted(CASES))
def report(request: pytest.FixtureRequest) -> Report:
    paths = CASES[request.param]
    assert paths and all(p.is_file() for p in paths), paths
    return analyze(paths)


def test_the_report_is_typed_data(report: Report) -> None:
    assert report.traces and all(isinstance(t, TraceSummary) for t in report.traces)
    t = report.traces[0]
    assert t.steps and t.steps[0].cpu_dur_us > 0
    assert t.roofline.reason or t.roofline.peaks is not None
    assert all(isinstance(f.severity, Severity) for f in report.findings)
    assert report.worst_severity() == max((f.severity for f in report.findings), key=lambda s: s.rank, default=None)


def test_from_dict_inverts_to_dict(report: Report) -> None:
    """The advisor's parent rebuilds the worker's report from its dict: the same report, field by field."""
    doc = report.to_dict()
    back = Report.from_dict(json.loads(json.dumps(doc)))
    assert back == report
    assert back.to_dict() == doc
    for fmt in ("json", "text", "markdown"):
        assert render(back, fmt) == render(report, fmt), fmt


def test_the_json_report_keeps_its_shape(report: Report) -> None:
    doc = json.loads(render(report, "json"))
    assert list(doc) == [
        "schema_version",
        "tool",
        "traces",
        "findings",
        "skipped",
        "errors",
        "config",
        "ranks",
        "verdict",
    ]
    assert doc["schema_version"] == 1 and doc["tool"]["name"] == "traceadvisor"
    assert list(doc["traces"][0])[:4] == ["path", "rank", "platform", "device"]
    assert all(f["severity"] in ("low", "medium", "high") for f in doc["findings"])


def test_the_command_line_prints_what_render_gives(tmp_path: Path) -> None:
    """One ``render``: the CLI's bytes for each format are ``render(analyze(...), fmt)``'s."""
    paths = CASES["naive_attention"]
    report = analyze(paths)
    for fmt in ("json", "text", "markdown"):
        out = tmp_path / f"report.{fmt}"
        p = _cli("analyze", *map(str, paths), "--format", fmt, "--output", str(out))
        assert p.returncode == 0, p.stderr
        # The path is the same string both ways; the configuration found from ROOT is the same.
        assert out.read_bytes() == render(report, fmt), fmt


def test_render_refuses_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown report format 'pdf'"):
        render(Report(), "pdf")


def test_the_advisor_report_is_the_typed_report() -> None:
    """The worker pipe carries ``to_dict``; the advisor's report renders as ``analyze`` does."""
    report = analyze(CASES["naive_attention"])
    received = AdvisorReport.from_document(report.to_dict(), cycle=1, rank=0, step=3, trace_path=None)
    assert received.report == report
    assert received.findings == report.findings
    assert [s.step for s in received.steps] == [s.step for t in report.traces for s in t.steps]
    assert received.render("markdown") == render(report, "markdown").decode()
    assert received.render("text") == render(report, "text").decode()
    # what analyze --format json prints (times written to the ns), not the unrounded model
    assert received.to_dict() == json.loads(render(report, "json"))


def test_fail_on_takes_the_one_severity() -> None:
    """``--fail-on`` offers exactly the findings' severities (there is no second enum to drift)."""
    p = _cli("analyze", str(CASES["sdpa"][0]), "--fail-on", "severe")
    assert p.returncode == 2
    for value in Severity:
        assert f"'{value.value}'" in p.stderr.decode()


def test_fail_writes_one_escaped_line_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    exc = console.fail("bad\nname\x1b[2J here")
    assert isinstance(exc, typer.Exit) and exc.exit_code == console.EXIT_BAD_INPUT == 2
    console.warn("careful\r")
    err = capsys.readouterr().err
    assert err == "traceadvisor: error: bad\\nname\\x1b[2J here\ntraceadvisor: warning: careful\\r\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["workloads", "--format", "yaml\x1b]0;t\x07"], "unknown format 'yaml\\x1b]0;t\\x07': use table"),
        (["workloads", "no-such-workload"], "no-such-workload"),
    ],
)
def test_every_command_fails_through_the_console(args: list[str], message: str) -> None:
    """``workloads`` (and ``calibrate``) had their own ``_fail`` that wrote the message unescaped."""
    p = _cli(*args)
    err = p.stderr.decode()
    assert p.returncode == 2 and err.startswith("traceadvisor: error: ") and err.count("\n") == 1, err
    assert message in err and "\x1b" not in err


def test_capture_analyses_through_the_library_not_the_cli(tmp_path: Path) -> None:
    """``capture``'s report comes from ``pipeline.analyze`` + ``render`` + an atomic write, with the
    command line's module never imported; a relative ``--output`` is the start folder's, and the
    bytes are what ``analyze`` writes for the same trace."""
    trace = CASES["naive_attention"][0]
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from traceadvisor.capture.command import _analyze\n"
        f"rc = _analyze([Path({str(trace)!r})], 'json', Path('out.json'), None, None, Path({str(tmp_path)!r}))\n"
        "assert 'traceadvisor.cli' not in sys.modules, 'capture imported the CLI'\n"
        "sys.exit(rc)\n"
    )
    elsewhere = tmp_path / "program-folder"
    elsewhere.mkdir()
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        cwd=elsewhere,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    written = (tmp_path / "out.json").read_bytes()
    assert not (elsewhere / "out.json").exists()
    expected = _cli("analyze", str(trace), "--format", "json", cwd=tmp_path)
    assert expected.returncode == 0 and written == expected.stdout


def test_capture_reports_bad_input_as_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "rank0.json"
    bad.write_text("{not json")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from traceadvisor.capture.command import _analyze\n"
        f"sys.exit(_analyze([Path({str(bad)!r})], 'text', None, None, None, Path({str(tmp_path)!r})))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    err = p.stderr.decode().splitlines()
    assert p.returncode == 2 and p.stdout == b""
    assert err[0] == f"traceadvisor: analysing {tmp_path.name}/rank0.json"  # the cycle folder and the file
    assert len(err) == 2 and err[1].startswith("traceadvisor: error: ") and "rank0.json" in err[1]


def test_the_report_package_needs_no_analysis() -> None:
    """``report/`` is plain data: rebuilding and rendering a report imports no pipeline, trace,
    analysis or pandas (the layer contract, checked by running it)."""
    doc = json.dumps(analyze(CASES["naive_attention"]).to_dict())
    code = (
        "import json, sys\n"
        "from traceadvisor.report import render\n"
        "from traceadvisor.report.model import Report\n"
        "r = Report.from_dict(json.loads(sys.stdin.read()))\n"
        "for fmt in ('json', 'text', 'markdown'):\n"
        "    render(r, fmt)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[:2] in (['traceadvisor', 'pipeline'],\n"
        "    ['traceadvisor', 'trace'], ['traceadvisor', 'analyses'], ['traceadvisor', 'engine']) or m == 'pandas')\n"
        "print(bad)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        input=doc.encode(),
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().strip() == "[]"


LATENCY_RULE = '''
"""ZZ901: claims the GPU's launch latency (no built-in rule does)."""

from __future__ import annotations

from collections.abc import Iterator

from traceadvisor.rules_api import Finding, IdleCause, Rule, Severity, Trace


class LatencyClaim(Rule):
    """Claims the launch-latency idle cause.

    ## Why it matters
    A test rule.
    """

    code = "ZZ901"
    name = "my-latency"
    severity = Severity.low
    claims = frozenset({IdleCause.launch_latency})

    def check(self, trace: Trace) -> Iterator[Finding]:
        yield from ()
'''


def test_the_idle_section_names_the_loaded_rules_claims(tmp_path: Path) -> None:
    """``claimed_by`` comes from the engine over the loaded rules: a user rule's claim shows, and
    ``--select``/``--ignore`` (which rules run) do not change who claims what."""
    rules_dir = tmp_path / "my_rules"
    rules_dir.mkdir()
    (rules_dir / "zz901_latency.py").write_text(LATENCY_RULE)
    trace = TRACES / "planted_sync_in_loop.json.gz"
    owners = []
    for extra in ([], ["--select", "GK101"], ["--ignore", "SY101,ZZ901"]):
        p = _cli("analyze", str(trace), "-f", "json", "--isolated", "--rules-dir", str(rules_dir), *extra)
        assert p.returncode == 0, p.stderr
        owners.append({b["cause"]: b["claimed_by"] for b in json.loads(p.stdout)["traces"][0]["idle_breakdown"]})
    assert owners[0]["launch_latency"] == "my-latency" and owners[0]["sync"] == "sync-point"
    assert owners[1] == owners[0] and owners[2] == owners[0]
    without = _cli("analyze", str(trace), "-f", "json", "--isolated")
    plain = {b["cause"]: b["claimed_by"] for b in json.loads(without.stdout)["traces"][0]["idle_breakdown"]}
    assert plain["launch_latency"] is None and {k: v for k, v in plain.items() if k != "launch_latency"} == {
        k: v for k, v in owners[0].items() if k != "launch_latency"
    }


def test_skipped_rules_are_one_line_per_reason() -> None:
    """A CPU-only trace skips a dozen GPU rules for two reasons: two lines, each rule named once."""
    from fixture_paths import MULTIRANK_INPUT_DELAY_RANK1

    report = analyze([MULTIRANK_INPUT_DELAY_RANK1])
    reasons = {s.reason for s in report.skipped}
    assert len(report.skipped) > len(reasons) >= 1
    for fmt, prefix in (("text", "skipped "), ("markdown", "- ")):
        text = render(report, fmt, width=10_000).decode()
        if fmt == "markdown":
            text = text.split("## Skipped rules", 1)[1].split("\n## ", 1)[0]
        lines = [line for line in text.splitlines() if line.startswith(prefix)]
        assert len(lines) == len(reasons), lines
        for s in report.skipped:
            assert sum(s.rule in line for line in lines) >= 1


@pytest.mark.parametrize("name", ["planted_sync_in_loop.json.gz", "p12_storm_before_stack.json.gz"])
def test_the_verdict_is_the_step_and_the_top_fixes_by_saving(name: str) -> None:
    from fixture_paths import FIXTURE_TRACES

    report = analyze([FIXTURE_TRACES / name])
    v = report.verdict
    assert v is not None and report.traces[0].step_time is not None
    assert v.step_us == report.traces[0].step_time.unprofiled_step_us and v.basis == "predicted without the profiler"
    savings = sorted(
        (
            (f.impact.saving_per_step_us, f.code)
            for f in report.findings
            if f.impact and (f.impact.saving_per_step_us or 0) > 0
        ),
        reverse=True,
    )[:3]
    assert [(f.saving_per_step_us, f.code) for f in v.fixes] == savings
    assert all(f.step_after_us == pytest.approx(v.step_us - f.saving_per_step_us) for f in v.fixes)
    text = render(report, "text", width=10_000).decode().splitlines()
    assert text[0].startswith(f"verdict: step {fmt_time(v.step_us)}")
