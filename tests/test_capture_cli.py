"""``traceadvisor capture`` as a command line (issue 14): a workload's ``--help``, and a JSON report
on stdout that the program's own prints never corrupt. Real runs on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from capture_run import run_capture

pytest.importorskip("torch")


def capture(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_capture(cwd, *args)


def test_workload_help_is_the_workloads_and_exits_0(tmp_path: Path) -> None:
    p = capture(tmp_path, "--workload", "mlp-train", "--help")
    assert p.returncode == 0, p.stderr
    assert "usage: traceadvisor capture --workload mlp-train" in p.stdout
    assert "--steps" in p.stdout  # the workload's own options
    assert "error" not in p.stderr
    assert list(tmp_path.iterdir()) == []  # nothing profiled, no run folder


def test_unknown_workload_help_is_still_an_error(tmp_path: Path) -> None:
    p = capture(tmp_path, "--workload", "no-such-workload", "--help")
    assert p.returncode == 2
    assert p.stderr.startswith("traceadvisor: error: no workload 'no-such-workload'")


SMALL = ["--skip-first", "1", "--warmup", "1", "--active", "2"]
NOISY = """
import atexit, subprocess, sys
import torch
import traceadvisor

print("starting {not json")
atexit.register(lambda: print("atexit says bye"))
model = torch.nn.Linear(8, 4)
for i in range(6):
    print(f"step {i} loss", float(model(torch.randn(2, 8)).sum()))
    traceadvisor.step()
subprocess.run([sys.executable, "-c", "print('child process output')"], check=True)
sys.stdout.write("no newline at the end")
"""


def test_json_report_on_stdout_holds_no_program_output(tmp_path: Path) -> None:
    (tmp_path / "noisy.py").write_text(NOISY)
    p = capture(tmp_path, "--out", "run", *SMALL, "-f", "json", "noisy.py")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)  # the whole of stdout is the report
    assert report["traces"] and report["schema_version"] == 1
    # What the program, its child and its atexit handler printed went to stderr, in order.
    said = [line for line in p.stderr.splitlines() if not line.startswith("traceadvisor:")]
    assert said[0] == "starting {not json"
    assert "child process output" in said
    assert said[-1] == "atexit says bye"
    assert "no newline at the end" in p.stderr


def test_text_report_leaves_the_program_output_on_stdout(tmp_path: Path) -> None:
    (tmp_path / "noisy.py").write_text(NOISY)
    p = capture(tmp_path, "--out", "run", *SMALL, "noisy.py")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("starting {not json")
    assert "step 5 loss" in p.stdout and "atexit says bye" in p.stdout


def test_capture_and_the_advisor_name_a_cycles_trace_alike(tmp_path: Path) -> None:
    """The same cycle and rank get the same file name from capture and the advisor: both through
    ``runinfo.trace_path``, observed here in what each really writes (cycle 1 and 2, rank 3)."""
    from traceadvisor.capture.runinfo import trace_path

    program = """
import torch, traceadvisor
model = torch.nn.Linear(8, 4)
for i in range(int(__import__("sys").argv[1])):
    model(torch.randn(2, 8)).sum().backward()
    traceadvisor.step()
"""
    (tmp_path / "loop.py").write_text(program)
    env_rank = {"RANK": "3", "WORLD_SIZE": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "traceadvisor", "capture", "--out", "cap", "--no-analyze", *SMALL, "--repeat", "2",
         "loop.py", "9"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, **env_rank},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    captured = sorted(f.relative_to(tmp_path / "cap").as_posix() for f in (tmp_path / "cap").rglob("*.json.gz"))

    advised = """
import sys, torch
from torch.profiler import ProfilerActivity, profile, schedule
from traceadvisor.advisor import Advisor
advisor = Advisor("adv", rank=3, analyze=False)
model = torch.nn.Linear(8, 4)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2, repeat=2),
             on_trace_ready=advisor) as prof:
    for i in range(8):
        model(torch.randn(2, 8)).sum().backward()
        prof.step()
advisor.close()
"""
    p = subprocess.run([sys.executable, "-c", advised], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    written = sorted(f.relative_to(tmp_path / "adv").as_posix() for f in (tmp_path / "adv").rglob("*.json.gz"))

    expected = [trace_path(3, "cycle", 1).as_posix(), trace_path(3, "cycle", 2).as_posix()]
    assert expected == ["cycle1/rank3.json.gz", "cycle2/rank3.json.gz"]
    assert captured == written == expected


def test_all_lists_every_finding_of_the_capture(tmp_path: Path) -> None:
    (tmp_path / "noisy.py").write_text(NOISY)
    findings = json.loads(capture(tmp_path, "--out", "a", *SMALL, "-f", "json", "noisy.py").stdout)["findings"]
    assert findings  # on the CPU at least missing-capture-flags (TQ101), which predicts no saving
    default = capture(tmp_path, "--out", "b", *SMALL, "-f", "markdown", "noisy.py")
    everything = capture(tmp_path, "--out", "c", *SMALL, "-f", "markdown", "--all", "noisy.py")
    assert default.returncode == everything.returncode == 0, default.stderr + everything.stderr
    assert "(--all shows them)" in default.stdout and "(--all shows them)" not in everything.stdout
    for i, f in enumerate(findings, 1):
        assert f"### {i}. " in everything.stdout and f"\\({f['code']}\\)" in everything.stdout


def test_the_configuration_found_from_the_start_folder_is_named(tmp_path: Path) -> None:
    (tmp_path / "noisy.py").write_text(NOISY)
    (tmp_path / "traceadvisor.toml").write_text('ignore = ["TQ101"]\n')
    p = capture(tmp_path, "--out", "run", *SMALL, "-f", "markdown", "--all", "noisy.py")
    assert p.returncode == 0, p.stderr
    assert f"config: `{tmp_path / 'traceadvisor.toml'}` (discovered)" in p.stdout
    assert "TQ101" not in p.stdout  # and it applied


def test_html_report_of_the_capture(tmp_path: Path) -> None:
    """``capture -f html -o FILE``: the page of the captured trace, with its findings and timeline;
    the program's prints stay off it."""
    import re

    (tmp_path / "noisy.py").write_text(NOISY)
    p = capture(tmp_path, "--out", "run", *SMALL, "-f", "html", "-o", "report.html", "noisy.py")
    assert p.returncode == 0, p.stderr
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "atexit says bye" not in page and "starting {not json" not in page
    codes = re.findall(r'<article class="finding" id="finding-\d+" data-code="([A-Z0-9]+)"', page)
    j = capture(tmp_path, "--out", "run2", *SMALL, "-f", "json", "noisy.py")
    assert j.returncode == 0, j.stderr
    # the same program's findings: the rules that fire on a CPU loop this small are the same each run
    assert sorted(set(codes)) == sorted({f["code"] for f in json.loads(j.stdout)["findings"]})
    assert 'id="ta-data"' in page
