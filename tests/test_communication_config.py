"""``[tool.traceadvisor] communication-kernels``: kernel names that are communication beside NCCL's
(issue 13 item 2), kept out of occupancy advice like NCCL's, on a real trace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fixture_paths import FIXTURE_TRACES

from traceadvisor.analyses.communication import communication_kernels
from traceadvisor.pipeline import analyze, configure
from traceadvisor.trace.load import load_file

TRACE = FIXTURE_TRACES / "planted_low_occupancy.json.gz"
SCAN = "tensor_kernel_scan_innermost_dim"  # the kernel low-occupancy reports on this trace


def _config(tmp_path: Path, patterns: str) -> Path:
    path = tmp_path / "traceadvisor.toml"
    path.write_text(f"communication-kernels = {patterns}\n")
    return path


def test_a_configured_pattern_makes_kernels_communication_and_takes_them_out_of_occupancy_advice(
    tmp_path: Path,
) -> None:
    plain = analyze([TRACE])
    assert any(f.code == "GK301" and SCAN in f.message for f in plain.findings)
    cfg = configure(_config(tmp_path, f'["{SCAN}"]'))
    assert cfg.communication_kernels == [SCAN]
    report = analyze([TRACE], cfg)
    assert not any(f.code == "GK301" and SCAN in f.message for f in report.findings)

    trace = load_file(TRACE)
    names = trace.gpu["name"].astype(str)
    assert not names[trace.gpu.index.isin(communication_kernels(trace))].str.contains(SCAN).any()
    trace = load_file(TRACE)
    trace.communication_patterns = (SCAN,)
    marked = names[trace.gpu.index.isin(communication_kernels(trace))]
    assert len(marked) == int(names.str.contains(SCAN).sum()) > 0


def test_a_bad_pattern_is_a_one_line_error(tmp_path: Path) -> None:
    _config(tmp_path, '["cross_device_reduce(["]')
    proc = subprocess.run(
        [sys.executable, "-m", "traceadvisor", "analyze", str(TRACE)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "communication-kernels" in proc.stderr and "is not a regex" in proc.stderr
