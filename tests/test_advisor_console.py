"""The in-loop advisor's console default (issue 14): the run's first report and every later one
with a medium or high finding are printed to stderr; the others go to logging."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixture_paths import FIXTURE_TRACES

from traceadvisor.advisor.report import AdvisorReport
from traceadvisor.advisor.sinks import ConsoleSink
from traceadvisor.pipeline import analyze


def advisor_report(fixture: str, cycle: int) -> AdvisorReport:
    path = FIXTURE_TRACES / fixture
    return AdvisorReport(cycle=cycle, rank=0, step=None, trace_path=path, report=analyze([path]))


def test_first_report_and_medium_or_high_ones_are_printed(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    quiet = advisor_report("workload_matmul.json.gz", 1)  # no finding
    assert quiet.worst_severity is None
    loud = advisor_report("planted_sync_in_loop.json.gz", 3)  # a high finding
    sink = ConsoleSink()
    with caplog.at_level(logging.INFO, logger="traceadvisor"):
        sink(quiet)
        sink(advisor_report("workload_matmul.json.gz", 2))
        sink(loud)
    printed = capsys.readouterr().err
    assert printed.startswith("traceadvisor: cycle 1, rank 0")  # the first report, though quiet
    assert "cycle 2," not in printed  # a later quiet one is not printed...
    assert "traceadvisor: cycle 3, rank 0" in printed and "[high]" in printed
    assert sink.printed == 2
    # ...it goes to logging, as do the printed ones while logging has a handler (pytest's here).
    logged = [r.getMessage().splitlines()[0] for r in caplog.records]
    assert [line.split(",")[0] for line in logged] == [
        "traceadvisor: cycle 1",
        "traceadvisor: cycle 2",
        "traceadvisor: cycle 3",
    ]


def test_console_off_sends_everything_to_logging(capsys: pytest.CaptureFixture[str]) -> None:
    sink = ConsoleSink(enabled=False)
    sink(advisor_report("planted_sync_in_loop.json.gz", 1))
    assert capsys.readouterr().err == ""
    assert sink.printed == 0


LOOP = """
import json, sys
import torch
from torch.profiler import ProfilerActivity, profile, schedule
from traceadvisor.advisor import Advisor

advisor = Advisor("prof", mode="thread", console=sys.argv[1] == "on")
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2, repeat=2),
             on_trace_ready=advisor) as prof:
    for i in range(8):
        opt.zero_grad()
        model(torch.randn(16, 64)).sum().backward()
        opt.step()
        prof.step()
reports = advisor.close()
worst = [None if r.worst_severity is None else r.worst_severity.value for r in advisor.reports]
print(json.dumps(worst))
"""


@pytest.mark.parametrize("console", ["on", "off"])
def test_a_real_cpu_loop_shows_its_first_report_without_any_logging_setup(tmp_path: Path, console: str) -> None:
    pytest.importorskip("torch")
    (tmp_path / "loop.py").write_text(LOOP)
    env = {k: v for k, v in os.environ.items() if k != "TRACEADVISOR_DEBUG"}
    p = subprocess.run(
        [sys.executable, "loop.py", console], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert p.returncode == 0, p.stderr
    worst = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(worst) == 2  # two cycles analysed
    if console == "off":
        # Logging alone, unconfigured: only WARNING records (a medium or high finding) show.
        assert ("traceadvisor: cycle 1," in p.stderr) == (worst[0] in ("medium", "high"))
        return
    assert p.stderr.count("traceadvisor: cycle 1, rank 0") == 1  # printed once, not again by logging
    assert ("traceadvisor: cycle 2, rank 0" in p.stderr) == (worst[1] in ("medium", "high"))


def test_the_configuration_that_applied_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from traceadvisor.pipeline import configure

    cfg = tmp_path / "traceadvisor.toml"
    cfg.write_text('ignore = ["SY"]\n')
    path = FIXTURE_TRACES / "planted_sync_in_loop.json.gz"
    report = analyze([path], configure(cfg))
    assert report.findings and not any(f.code.startswith("SY") for f in report.findings)  # it applied
    ConsoleSink()(AdvisorReport(cycle=1, rank=0, step=None, trace_path=path, report=report))
    assert capsys.readouterr().err.splitlines()[1] == f"  config: {cfg} (--config)"
