"""A user rule cannot hang, end, corrupt or lose the report, nor change what the next rule reads;
an analysis can be cancelled from another thread (issue 10).

Every rule here is a real rule file in a temporary ``--rules-dir``, loaded by the real registry and
run on a real trace beside the built-in rules; where the process's exit matters, through the real
command line in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from traceadvisor import errors
from traceadvisor.config import Config, parse_table
from traceadvisor.pipeline import analyze, analyze_traces
from traceadvisor.report import render_json, render_markdown, render_text
from traceadvisor.report.model import Report
from traceadvisor.trace.load import load_file

TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "train_step.json.gz"
# What the built-in rules find on TRACE (checked below, so that a report cut short shows).
BUILTIN_CODES = {"GK101", "GK102"}

GOOD_RULE = '''
class StillHere(Rule):
    """Yields one finding: the run went on after the rules before it."""

    code = "ZZ900"
    name = "still-here"

    def check(self, trace):
        yield self.finding(trace, message="still here", recommendation="none")
'''


def write_rule(folder: Path, filename: str, code: str, body: str, top: str = "") -> Path:
    """A rule file whose ``check(self, trace)`` is ``body``; ``top`` runs at import."""
    source = "\n".join(
        [
            "import os, sys, time",
            "from traceadvisor.rules_api import Evidence, Finding, Impact, Rule, Severity",
            textwrap.dedent(top),
            "",
            "class R(Rule):",
            '    """A rule of the isolation tests."""',
            f'    code = "{code}"',
            f'    name = "{filename.removesuffix(".py").replace("_", "-")}"',
            "",
            "    def check(self, trace):",
            textwrap.indent(textwrap.dedent(body).strip(), " " * 8),
            "",
        ]
    )
    path = folder / filename
    path.write_text(source)
    return path


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """A rules folder holding the good rule last (files load in name order)."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "zz_still_here.py").write_text("from traceadvisor.rules_api import Rule\n" + GOOD_RULE)
    return folder


def cli(cwd: Path, *args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``traceadvisor analyze TRACE -f json ARGS`` in a fresh interpreter, run from ``cwd`` (a
    temporary folder outside any repository: no configuration file is discovered but the test's)."""
    return subprocess.run(
        [sys.executable, "-m", "traceadvisor", "analyze", str(TRACE), "-f", "json", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_complete(report: dict[str, Any]) -> None:
    """The report has the built-in rules' findings and the good rule's, which ran after the bad one."""
    codes = {f["code"] for f in report["findings"]}
    assert BUILTIN_CODES <= codes, codes
    assert "ZZ900" in codes, codes
    assert report["traces"] and report["traces"][0]["path"].endswith("train_step.json.gz")


def the_error(report: dict[str, Any], code: str) -> str:
    errors = [e for e in report["errors"] if e["code"] == code]
    assert len(errors) == 1, report["errors"]
    assert not [f for f in report["findings"] if f["code"] == code], "a failed rule contributes no findings"
    return str(errors[0]["error"])


# -- time limit ------------------------------------------------------------------------------------


def test_looping_rule_times_out_and_the_report_is_complete(rules_dir: Path, tmp_path: Path) -> None:
    write_rule(rules_dir, "aa_loop.py", "ZZ101", "while True:\n    pass\nyield")
    started = time.monotonic()
    proc = cli(tmp_path, "--rules-dir", rules_dir, "--rule-timeout", "1")
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert_complete(report)
    error = the_error(report, "ZZ101")
    # Where it was stopped: the loop's line in the rule file (line 9 of the file written above).
    assert error.startswith("timed out after 1 s (aa_loop.py:"), error
    assert elapsed < 30, f"took {elapsed:.1f} s"


def test_sleeping_rule_on_the_main_thread_times_out_with_the_configured_limit(rules_dir: Path, tmp_path: Path) -> None:
    """time.sleep blocks in one system call; on the main thread SIGALRM cuts it short."""
    write_rule(rules_dir, "aa_sleep.py", "ZZ102", "time.sleep(3600)\nyield")
    (tmp_path / "traceadvisor.toml").write_text("rule-timeout = 1\n")
    started = time.monotonic()
    proc = cli(tmp_path, "--rules-dir", rules_dir)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert_complete(report)
    assert the_error(report, "ZZ102").startswith("timed out after 1 s (aa_sleep.py:")
    assert elapsed < 30, f"took {elapsed:.1f} s"


def test_looping_rule_times_out_on_a_worker_thread(rules_dir: Path) -> None:
    """The in-loop advisor's thread mode: no signal reaches a worker thread; the watch raises in it."""
    write_rule(rules_dir, "aa_loop.py", "ZZ103", "while True:\n    pass\nyield")
    out: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: out.update(report=analyze([TRACE], Config(rules_dirs=[rules_dir], rule_timeout=1.0)))
    )
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the looping rule was not stopped"
    report = out["report"].to_dict()
    assert_complete(report)
    assert the_error(report, "ZZ103").startswith("timed out after 1 s (aa_loop.py:")


@pytest.mark.parametrize("value", [0, -1, "60", True, float("inf")])
def test_rule_timeout_in_config_must_be_a_positive_number(value: object) -> None:
    with pytest.raises(errors.UsageError, match="rule-timeout must be a positive number of seconds"):
        parse_table({"rule-timeout": value}, Path("traceadvisor.toml"))
    assert parse_table({"rule-timeout": 2}, Path("traceadvisor.toml")).rule_timeout == 2.0


# -- what a rule yields -------------------------------------------------------------------------

BAD_YIELDS = {
    "a-string": ('yield "oops"', "invalid finding: check() yielded str, not a Finding"),
    "string-severity": (
        'yield Finding(code="ZZ201", rule="bad", severity="high", message="m", recommendation="r")',
        "invalid finding: finding severity must be a Severity (e.g. Severity.high), not str 'high'",
    ),
    "unencodable-data": (
        'yield self.finding(trace, message="m", recommendation="r", data={"x": object()})',
        "invalid finding: finding data is not JSON-encodable (cannot encode object)",
    ),
    "impact-as-text": (
        'yield Finding(code="ZZ201", rule="bad", severity=Severity.low, message="m", recommendation="r",'
        ' impact=Impact(time_us="5", share_pct=1.0, basis="b"))',
        "invalid finding: impact time_us must be a number, not str '5'",
    ),
    "evidence-as-a-list": (
        'yield Finding(code="ZZ201", rule="bad", severity=Severity.low, message="m", recommendation="r",'
        ' evidence=[Evidence(name="k", ts_us=1.0, dur_us=2.0)])',
        "invalid finding: finding evidence must be a tuple of Evidence, not list",
    ),
    "generator-exit": ("raise GeneratorExit\nyield", "GeneratorExit (aa_bad.py:"),
    "base-exception": ('raise BaseException("boom")\nyield', "BaseException: boom (aa_bad.py:"),
}


@pytest.mark.parametrize("case", sorted(BAD_YIELDS))
def test_a_bad_yield_is_that_rules_error_and_the_report_renders(case: str, rules_dir: Path) -> None:
    body, expected = BAD_YIELDS[case]
    write_rule(rules_dir, "aa_bad.py", "ZZ201", body)
    report = analyze([TRACE], Config(rules_dirs=[rules_dir]))
    data = report.to_dict()
    assert_complete(data)
    assert the_error(data, "ZZ201").startswith(expected), the_error(data, "ZZ201")
    # Every renderer takes the report: nothing of the bad rule reached it.
    assert json.loads(render_json.render(report))["errors"] == data["errors"]
    assert "ZZ900" in render_text.render(report, color=False)
    assert "ZZ900" in render_markdown.render(report)


def test_a_rules_own_keyboard_interrupt_still_stops_the_run(rules_dir: Path) -> None:
    """Ctrl-C must stop an analysis, whichever rule is running."""
    write_rule(rules_dir, "aa_ctrl_c.py", "ZZ202", "raise KeyboardInterrupt\nyield")
    with pytest.raises(KeyboardInterrupt):
        analyze([TRACE], Config(rules_dirs=[rules_dir]))


def test_sys_exit_in_a_rule_is_its_error_and_the_exit_status_follows_the_findings(
    rules_dir: Path, tmp_path: Path
) -> None:
    write_rule(rules_dir, "aa_exit.py", "ZZ301", "sys.exit(0)\nyield")
    proc = cli(tmp_path, "--rules-dir", rules_dir, "--fail-on", "high")
    report = json.loads(proc.stdout)  # on the base commit: no output at all, exit 0
    assert_complete(report)
    assert the_error(report, "ZZ301").startswith("SystemExit: 0 (aa_exit.py:")
    assert any(f["severity"] == "high" for f in report["findings"])
    assert proc.returncode == 1, proc.stderr  # --fail-on high with a high finding


def test_sys_exit_at_import_of_a_rule_file_is_a_usage_error(rules_dir: Path, tmp_path: Path) -> None:
    write_rule(rules_dir, "aa_exit_import.py", "ZZ302", "yield", top="sys.exit(0)")
    proc = cli(tmp_path, "--rules-dir", rules_dir)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("traceadvisor: error: ") and "aa_exit_import.py" in proc.stderr
    assert "SystemExit" in proc.stderr and "Traceback" not in proc.stderr


# -- stdout ----------------------------------------------------------------------------------------


def test_print_in_a_rule_goes_to_stderr_and_the_json_report_parses(rules_dir: Path, tmp_path: Path) -> None:
    write_rule(
        rules_dir,
        "aa_print.py",
        "ZZ401",
        'print("x-in-check")\nsys.stdout.write("x-written\\n")\nyield from ()',
        top='print("x-at-import")',
    )
    proc = cli(tmp_path, "--rules-dir", rules_dir)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # the whole of stdout is the report
    assert_complete(report)
    assert report["errors"] == []
    for text in ("x-at-import", "x-in-check", "x-written"):
        assert text in proc.stderr
        assert text not in proc.stdout


def test_only_the_rules_thread_is_redirected(rules_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Thread mode: while a rule runs on the analysis thread, the training thread's print still
    goes to stdout (contextlib.redirect_stdout would swap stdout for every thread)."""
    write_rule(rules_dir, "aa_print.py", "ZZ402", 'print("from-rule")\ntime.sleep(1.0)\nyield from ()')
    worker = threading.Thread(target=analyze, args=([TRACE], Config(rules_dirs=[rules_dir])))
    outs, errs = [], []
    worker.start()
    while worker.is_alive():  # print from this thread all along, the rule's second of sleep included
        print("from-main")
        time.sleep(0.05)
        out, err = capsys.readouterr()
        outs.append(out)
        errs.append(err)
    stdout, stderr = "".join(outs), "".join(errs)
    assert "from-rule" in stderr and "from-rule" not in stdout
    assert stdout.count("from-main") >= 10 and "from-main" not in stderr


# -- read-only data --------------------------------------------------------------------------------

MUTATE = """
k = trace.kernels
k.loc[k.index[0], "dur_ns"] = 123_456_789
k["added_by_rule"] = 1
trace.host.sort_values("ts_ns", ascending=False, inplace=True)
trace.gpu.drop(columns=["stream"], inplace=True)
trace.steps.table.loc[trace.steps.table.index[0], "cpu_start_ns"] = -5
trace.meta.flags["record_shapes"] = "changed"
trace.runtime = trace.runtime.iloc[:0]
yield from ()
"""

WRITE_ARRAY = """
starts, ends = trace.busy_intervals(trace.device_ids[0])
starts[0] = -1
yield from ()
"""

OBSERVE = """
yield self.finding(trace, message="seen", recommendation="none", data=observe(trace))
"""

OBSERVE_TOP = """
def observe(trace):
    k = trace.kernels
    return {
        "first_kernel_dur_ns": int(k["dur_ns"].iloc[0]),
        "kernel_columns": [str(c) for c in k.columns],
        "host_first_ts_ns": int(trace.host["ts_ns"].iloc[0]),
        "gpu_columns": [str(c) for c in trace.gpu.columns],
        "runtime_rows": len(trace.runtime),
        "first_step_start_ns": int(trace.steps.table["cpu_start_ns"].iloc[0]),
        "record_shapes": trace.meta.flags.get("record_shapes"),
        "first_busy_start_ns": int(trace.busy_intervals(trace.device_ids[0])[0][0]),
    }
"""


@pytest.mark.filterwarnings("ignore:The inplace keyword")  # pandas 3.1 deprecates inplace=; rules still use it
def test_a_rule_cannot_change_what_the_next_rule_reads(rules_dir: Path) -> None:
    write_rule(rules_dir, "aa_mutate.py", "ZZ501", MUTATE)
    write_rule(rules_dir, "ab_write_array.py", "ZZ502", WRITE_ARRAY)
    write_rule(rules_dir, "ac_observe.py", "ZZ503", OBSERVE, top=OBSERVE_TOP)
    trace = load_file(TRACE)
    report = analyze_traces([trace], Config(rules_dirs=[rules_dir])).to_dict()
    assert_complete(report)
    # The mutations were allowed, on the rule's own copies; a numpy write raises.
    assert [e["code"] for e in report["errors"]] == ["ZZ502"], report["errors"]
    assert "assignment destination is read-only (ab_write_array.py:" in report["errors"][0]["error"]
    seen = next(f["data"] for f in report["findings"] if f["code"] == "ZZ503")
    namespace: dict[str, Any] = {}
    exec(textwrap.dedent(OBSERVE_TOP), namespace)
    fresh = namespace["observe"](load_file(TRACE))
    assert seen == fresh
    assert fresh["first_kernel_dur_ns"] != 123_456_789 and "added_by_rule" not in fresh["kernel_columns"]
    # The trace itself is as loaded, for whatever reads it after the rules (the advisor, a caller).
    assert namespace["observe"](trace) == fresh
    assert np.array_equal(trace.kernels["dur_ns"].to_numpy(), load_file(TRACE).kernels["dur_ns"].to_numpy())


# -- cancellation ----------------------------------------------------------------------------------

LOOP_AFTER_MARK = """
open(os.environ["TRACEADVISOR_TEST_MARK"], "w").close()
while True:
    pass
yield
"""


def _cancel_when_marked(mark: Path, cancel: threading.Event, at: list[float]) -> threading.Thread:
    def wait_then_cancel() -> None:
        deadline = time.monotonic() + 60
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # well inside the loop
        at.append(time.monotonic())
        cancel.set()

    thread = threading.Thread(target=wait_then_cancel, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("where", ["main-thread", "worker-thread"])
def test_cancel_stops_a_running_rule_promptly(
    where: str, rules_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default time limit (60 s) is far off: only cancel can end this run in time."""
    mark = tmp_path / "mark"
    monkeypatch.setenv("TRACEADVISOR_TEST_MARK", str(mark))
    write_rule(rules_dir, "aa_loop.py", "ZZ601", LOOP_AFTER_MARK)
    cancel = threading.Event()
    set_at: list[float] = []
    outcome: list[BaseException | Report] = []

    def run() -> None:
        try:
            outcome.append(analyze([TRACE], Config(rules_dirs=[rules_dir]), cancel=cancel))
        except BaseException as exc:
            outcome.append(exc)
        outcome.append(time.monotonic())  # type: ignore[arg-type]

    _cancel_when_marked(mark, cancel, set_at)
    if where == "main-thread":
        run()
    else:
        worker = threading.Thread(target=run)
        worker.start()
        worker.join(90)
    assert len(outcome) == 2 and isinstance(outcome[0], errors.Cancelled), outcome
    ended = float(outcome[1])  # type: ignore[arg-type]
    assert ended - set_at[0] < 1.0, f"Cancelled {ended - set_at[0]:.2f} s after cancel was set"


def test_cancel_before_the_rules_runs_none(rules_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mark = tmp_path / "mark"
    monkeypatch.setenv("TRACEADVISOR_TEST_MARK", str(mark))
    write_rule(rules_dir, "aa_loop.py", "ZZ602", LOOP_AFTER_MARK)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(errors.Cancelled):
        analyze([TRACE], Config(rules_dirs=[rules_dir]), cancel=cancel)
    assert not mark.exists()
