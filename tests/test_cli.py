"""The command line: formats, atomic output, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fixture_paths import HTA, TRACELENS

ROOT = Path(__file__).resolve().parents[1]
BERT = TRACELENS / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"
MI250 = HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traceadvisor", *args], capture_output=True, text=True, timeout=120)


def test_text_report_shows_device_steps_and_kernels() -> None:
    p = run("analyze", str(MI250))
    assert p.returncode == 0, p.stderr
    assert "AMD Radeon Graphics (rocm)" in p.stdout
    assert "ProfilerStep#1" in p.stdout and "ProfilerStep#2" in p.stdout
    assert "top kernels" in p.stdout
    busy = json.loads(run("analyze", str(MI250), "--format", "json").stdout)["traces"][0]["gpu_busy_pct"]
    assert f"GPU busy {busy:.1f}%" in p.stdout


def test_markdown_report_has_tables() -> None:
    p = run("analyze", str(BERT), "--format", "markdown")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("# traceadvisor report")
    assert "| step | CPU time | GPU time | GPU busy |" in p.stdout
    assert "NVIDIA H100 80GB HBM3" in p.stdout


def test_json_output_file_is_written_atomically(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    out.write_text("old")
    p = run("analyze", str(BERT), "--format", "json", "--output", str(out))
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 1
    assert doc["traces"][0]["kernel_count"] == 60
    assert [f.name for f in tmp_path.iterdir()] == ["report.json"]  # no temporary left behind


def test_failed_analysis_leaves_existing_output_untouched(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    out.write_text("old")
    p = run("analyze", str(tmp_path / "missing.json"), "--output", str(out))
    assert p.returncode == 2
    assert out.read_text() == "old"
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("traceadvisor: error:")


def test_fail_on_exits_1_only_when_a_finding_reaches_the_level() -> None:
    p = run("analyze", str(MI250), "--fail-on", "low", "--format", "json")
    findings = json.loads(p.stdout)["findings"]
    assert findings and p.returncode == 1
    # stderr names what tripped it, in one line
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"traceadvisor: --fail-on low: {len(findings)} finding(s)")
    assert all(f"({f['code']})" in p.stderr for f in findings)
    worst = max(("low", "medium", "high").index(f["severity"]) for f in findings)
    if worst < 2:
        assert run("analyze", str(MI250), "--fail-on", "high").returncode == 0
    quiet = run("analyze", str(MI250), "--fail-on", "low", "--ignore", "ALL", "--format", "json")
    assert quiet.returncode == 0
    assert json.loads(quiet.stdout)["findings"] == []


def test_usage_errors_are_one_line_exit_2() -> None:
    for args in (["analyze"], ["analyze", str(MI250), "--format", "xml"], ["nonsense"]):
        p = run(*args)
        assert p.returncode == 2, args
        assert "Traceback" not in p.stderr
        assert p.stderr.count("\n") == 1 and p.stderr.startswith("traceadvisor: error:"), p.stderr


def test_output_to_a_device_writes_through_it() -> None:
    """``--output /dev/null`` must not replace the device with a regular file."""
    p = run("analyze", str(MI250), "--format", "json", "--output", "/dev/null")
    assert p.returncode == 0, p.stderr
    assert Path("/dev/null").is_char_device()


def test_process_ends_without_teardown_but_with_complete_output(tmp_path: Path) -> None:
    """``run`` ends the process with ``os._exit`` after ``analyze`` (no interpreter teardown): the
    report on stdout (a pipe) and in --output must still be complete, and the status kept."""
    trace = str(ROOT / "fixtures" / "traces" / "planted_sync_in_loop.json.gz")
    piped = run("analyze", trace, "--format", "json")
    assert piped.returncode == 0
    assert json.loads(piped.stdout)["findings"]
    out = tmp_path / "report.json"
    failing = run("analyze", trace, "--format", "json", "--output", str(out), "--fail-on", "low")
    assert failing.returncode == 1
    assert json.loads(out.read_text())["findings"] == json.loads(piped.stdout)["findings"]


def test_version() -> None:
    from traceadvisor import __version__

    p = run("--version")
    assert p.returncode == 0 and p.stdout == f"traceadvisor {__version__}\n"
