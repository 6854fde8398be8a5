"""``traceadvisor capture`` as a command line (issue 14): a workload's ``--help``, and a JSON report
on stdout that the program's own prints never corrupt. Real runs on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")


def capture(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env.pop("TRACEADVISOR_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "traceadvisor", "capture", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


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
