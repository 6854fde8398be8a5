"""The in-loop advisor on real CPU training loops: reports, callbacks that raise, fail_on, dead and
hung workers, the ``profile`` context manager, TensorBoard.

The planted problem is a CPU-bound input stage (a ``num_workers=0`` DataLoader whose
``__getitem__`` computes for ~2 ms). The built-in ``data-loader-bound`` rule (DL101) cannot see it
on a CPU-only trace: it measures GPU idle time attributed to the loader and requires the ``gpu``
capability, so the engine lists it under ``skipped``. The tests therefore load a user rule
(``CPU_INPUT_RULE``, through ``rules_dir`` exactly as ``--rules-dir`` does) that measures the share
of the steps spent inside ``DataLoader.__next__``; and they plant a capture problem that a
built-in rule does see on the CPU (a one-step window: ``too-few-steps``).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import traceadvisor
from traceadvisor.advisor import Advisor, AdvisorFindingsError, AdvisorReport
from traceadvisor.errors import UsageError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"

# A user rule (the public rule API, loaded from a folder like any --rules-dir rule).
CPU_INPUT_RULE = '''
"""USR101: the steps wait for a single-process DataLoader (seen on the CPU)."""

from collections.abc import Iterator
from dataclasses import dataclass

from traceadvisor import Finding, Rule, Severity, Trace
from traceadvisor.rules_api import Capability, Evidence, location_of


@dataclass(frozen=True)
class Options:
    min_pct: float = 20.0  # share of the analysed steps spent fetching batches


class CpuInputBound(Rule):
    """The training steps spend much of their time inside DataLoader __next__.

    ## Why it matters
    Batches built on the training thread stall every step.
    ## How it shows up in a trace
    DataLoader __next__ annotations inside the ProfilerStep windows.
    ## How to fix
    DataLoader(num_workers=N).
    ## Options
    - `min_pct`: the smallest share reported.
    ## References
    - https://pytorch.org/docs/stable/data.html
    """

    code = "USR101"
    name = "cpu-input-bound"
    severity = Severity.medium
    requires = frozenset({Capability.steps})
    Options = Options

    def check(self, trace: Trace) -> Iterator[Finding]:
        ann = trace.annotations
        loader = ann[ann["name"].astype(str).str.contains("DataLoader", regex=False).to_numpy()]
        loader = loader[trace.step_of(loader["ts_ns"].to_numpy()) >= 0]
        wait = int(loader["dur_ns"].sum())
        window = trace.analysed_ns
        if not len(loader) or window <= 0 or 100.0 * wait / window < self.options.min_pct:
            return
        first = loader.nlargest(1, "dur_ns").iloc[0]
        ts, dur = int(first["ts_ns"]), int(first["dur_ns"])
        yield self.finding(
            trace,
            message=f"{100.0 * wait / window:.1f}% of the steps were spent in DataLoader __next__",
            recommendation="Use DataLoader(num_workers=N).",
            impact_ns=wait,
            basis="time inside DataLoader __next__ in the steps",
            evidence=[Evidence(name=str(first["name"]), ts_us=ts / 1e3, dur_us=dur / 1e3)],
            location=location_of(trace, int(first["pid"]), int(first["tid"]), ts),
        )
'''


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")  # see tests/conftest.py


def slow_loader(batches: int = 10_000, spin: int = 40_000) -> Any:
    """A DataLoader built on the training thread whose items cost CPU time (a plain loop: no
    Python calls, so ``with_stack`` stays small)."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Items(Dataset[tuple[Any, Any]]):
        def __len__(self) -> int:
            return batches * 4

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            acc = 0
            for k in range(spin):
                acc += k
            return torch.full((16,), float(acc % 7)), torch.zeros(1)

    return DataLoader(Items(), batch_size=4, num_workers=0)


def make_step() -> Callable[[Any, Any], None]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(x: Any, y: Any) -> None:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def cpu_profiler(advisor: Any, *, wait: int = 0, warmup: int = 1, active: int = 3) -> Any:
    import torch.profiler

    return torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        on_trace_ready=advisor,
        record_shapes=True,
        with_stack=True,
    )


def idle_step() -> None:
    """A step whose host mostly waits (as a GPU-bound loop's does), leaving the CPU to the worker."""
    time.sleep(0.005)


def batches(loader: Any) -> Iterator[tuple[Any, Any]]:
    while True:
        yield from loader


def cli_json(trace: Path, *args: str) -> dict[str, Any]:
    from typer.testing import CliRunner

    from traceadvisor.cli import app

    result = CliRunner().invoke(app, ["analyze", str(trace), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def unordered_reasons(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with each skip reason's parts sorted: the runner lists a rule's missing capabilities
    in frozenset order, which follows the process's string hash seed (PYTHONHASHSEED), so the CLI
    and the worker process may list the same parts in different orders."""
    for s in doc["skipped"]:
        head, _, how = s["reason"].partition(": ")
        s["reason"] = (sorted(head.removeprefix("trace lacks ").split(", ")), sorted(how.split("; ")))
    return doc


def test_report_arrives_in_the_loop_and_a_raising_callback_does_not_stop_training(
    tmp_path: Path, rules_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="traceadvisor")
    calls: list[tuple[int, int]] = []
    steps_done = 0

    def on_findings(report: AdvisorReport) -> None:
        calls.append((threading.get_ident(), steps_done))
        raise RuntimeError("the user's callback is broken")

    advisor = Advisor(tmp_path / "out", on_findings=on_findings, rules_dir=rules_dir)
    step = make_step()
    deadline = time.monotonic() + 90
    with cpu_profiler(advisor) as prof:  # steps 1-3 recorded; the window closes in the 4th step()
        for x, y in batches(slow_loader()):
            step(x, y)
            prof.step()  # the advisor wrapped it: ready reports are delivered here
            steps_done += 1
            if steps_done == 4:
                break
        while not advisor.reports and time.monotonic() < deadline:
            idle_step()
            prof.step()
            steps_done += 1
    advisor.close(timeout=60)

    # Delivered on the training thread, at a step after the window closed, and the loop went on.
    assert len(calls) == 1
    assert calls[0][0] == threading.get_ident()
    assert calls[0][1] >= 4
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and "on_findings callback" in r.getMessage()]
    assert errors and errors[0].exc_info is not None and "broken" in str(errors[0].exc_info[1])

    report = advisor.reports[0]
    assert report.cycle == 1 and report.rank == 0 and report.step == 4
    assert [s.step for s in report.steps] == [1, 2, 3]
    planted = [f for f in report.findings if f.rule == "cpu-input-bound"]
    assert planted and planted[0].severity.value == "high"
    assert planted[0].impact is not None and planted[0].impact.share_pct > 50
    assert planted[0].location is not None and planted[0].location.file.endswith("test_advisor.py")
    # The built-in loader rule needs GPU activity: listed as skipped, not silently absent.
    assert any(s["rule"] == "data-loader-bound" and "gpu" in s["reason"] for s in report.to_dict()["skipped"])
    assert any(f.rule == "missing-capture-flags" and "gpu" in f.data["missing"] for f in report.findings)

    # The trace is kept, gzipped, atomically named; to_dict() is what `analyze --format json` prints.
    assert report.trace_path == tmp_path / "out" / "cycle1" / "rank0.json.gz"
    with gzip.open(report.trace_path, "rb") as fh:
        assert json.load(fh)["traceEvents"]
    assert [p.name for p in report.trace_path.parent.iterdir()] == ["rank0.json.gz"]
    assert unordered_reasons(report.to_dict()) == unordered_reasons(
        cli_json(report.trace_path, "--rules-dir", str(rules_dir))
    )
    assert report.timings["analysis_s"] > 0 and report.timings["export_s"] > 0
    # The log record carries the finding and its fix.
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "cycle 1" in r.getMessage()]
    assert logged and "[high] cpu-input-bound (USR101)" in logged[0] and "num_workers" in logged[0]


def test_fail_on_raises_in_the_loop_at_the_first_step_after_the_report(tmp_path: Path, rules_dir: Path) -> None:
    advisor = Advisor(tmp_path, rules_dir=rules_dir, fail_on="high", select=["USR101"])
    step = make_step()
    raised_at = None
    steps_done = 0
    with cpu_profiler(advisor) as prof, pytest.raises(AdvisorFindingsError) as err:
        deadline = time.monotonic() + 90
        for x, y in batches(slow_loader()):
            if steps_done < 4:
                step(x, y)
            else:
                idle_step()
            steps_done += 1
            raised_at = steps_done
            prof.step()
            assert not advisor.reports  # a report is never delivered without raising
            if time.monotonic() > deadline:
                break
    advisor.close(timeout=30)
    assert raised_at is not None and raised_at >= 4  # not before the window (steps 1-3) closed
    assert len(advisor.reports) == 1
    assert [f.rule for f in err.value.findings] == ["cpu-input-bound"]
    assert err.value.report is advisor.reports[0]
    assert "cpu-input-bound" in str(err.value)


def test_profile_context_manager_one_step_window_thread_mode_and_tensorboard(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    step = make_step()
    loader = slow_loader(spin=0)
    # One active step (a capture problem a CPU trace shows: too-few-steps), analysed in a thread.
    with traceadvisor.profile(
        out_dir=tmp_path,
        skip_first=1,
        wait=0,
        warmup=1,
        active=1,
        activities=None,
        mode="thread",
        tensorboard=True,
        fail_on="medium",  # only low findings here: nothing raises
    ) as prof:
        for i, (x, y) in enumerate(batches(loader)):
            step(x, y)
            prof.step()
            if i == 5:
                break
    assert prof.steps == 6
    assert len(prof.reports) == 1
    report = prof.reports[0]
    too_few = [f for f in report.findings if f.rule == "too-few-steps"]
    assert too_few and too_few[0].data == {"steps": 1} and "only 1 profiler step" in too_few[0].message
    assert report.worst_severity is not None and report.worst_severity.value == "low"
    assert prof.key_averages() is not None  # the torch profiler's own API is reachable

    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    scalars = acc.Tags()["scalars"]
    assert "traceadvisor/findings_low" in scalars
    assert acc.Scalars("traceadvisor/findings_low")[0].value == len(report.at_least("low"))
    assert acc.Scalars("traceadvisor/findings_low")[0].step == report.step == 3


def _wait_until(cond: Callable[[], bool], advisor: Advisor, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, advisor.status()
        advisor.poll()
        time.sleep(0.005)


def test_hung_worker_is_killed_after_the_timeout_and_replaced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="traceadvisor")
    advisor = Advisor(tmp_path, analysis_timeout=3.0)
    advisor.submit_trace(FIXTURES / "planted_launch_storm.json.gz")
    advisor.submit_trace(FIXTURES / "pair_tf32_before.json.gz")
    _wait_until(lambda: advisor.status()["running"], advisor)
    pid = advisor.status()["worker_pid"]
    os.kill(pid, signal.SIGSTOP)  # frozen in the middle of the first analysis: a hung worker
    t0 = time.monotonic()
    _wait_until(lambda: bool(advisor.reports), advisor)
    waited = time.monotonic() - t0
    advisor.close(timeout=30)
    assert 2.5 < waited < 60
    assert [r.trace_path for r in advisor.reports] == [FIXTURES / "pair_tf32_before.json.gz"]
    assert advisor.status()["restarts"] == 1
    assert any("did not finish within 3 s" in r.getMessage() for r in caplog.records)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped


def test_killed_worker_does_not_hang_close_and_the_trace_is_kept(
    tmp_path: Path, rules_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="traceadvisor")
    advisor = Advisor(tmp_path, rules_dir=rules_dir)
    step = make_step()
    with cpu_profiler(advisor) as prof:
        for i, (x, y) in enumerate(batches(slow_loader())):
            step(x, y)
            prof.step()
            if i == 3:
                break
    assert advisor.cycles == 1
    _wait_until(lambda: advisor.status()["running"], advisor)
    os.kill(advisor.status()["worker_pid"], signal.SIGKILL)
    t0 = time.monotonic()
    advisor.close(timeout=20)
    assert time.monotonic() - t0 < 10
    assert not advisor.reports
    assert any("worker exited (killed by SIGKILL" in r.getMessage() for r in caplog.records)
    kept = list((tmp_path / "cycle1").iterdir())
    assert [p.name for p in kept] in (["rank0.json.gz"], ["rank0.json"])  # compressed or not, never lost
    assert traceadvisor.load_file(kept[0]).steps.table.shape[0] == 3


def test_an_error_inside_the_advisor_does_not_stop_training(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "cycle1").write_text("a file where the advisor wants a folder")
    advisor = Advisor(tmp_path)
    step = make_step()
    with cpu_profiler(advisor) as prof:
        for i, (x, y) in enumerate(batches(slow_loader(spin=0))):
            step(x, y)
            prof.step()
            if i == 6:
                break
    advisor.close(timeout=5)
    assert i == 6 and advisor.cycles == 1 and not advisor.reports
    assert any("could not save the trace of cycle 1" in r.getMessage() for r in caplog.records)


def test_bad_options_fail_at_construction(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="NOPE"):
        Advisor(tmp_path, select=["NOPE"])
    with pytest.raises(ValueError, match="fail_on"):
        Advisor(tmp_path, fail_on="urgent")
    with pytest.raises(ValueError, match="mode"):
        Advisor(tmp_path, mode="fork")  # type: ignore[arg-type]


def test_importing_the_advisor_and_integrations_does_not_import_torch() -> None:
    code = (
        "import sys, traceadvisor; traceadvisor.Advisor; traceadvisor.profile;"
        "import traceadvisor.integrations.lightning, traceadvisor.integrations.transformers;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'lightning', 'transformers')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_the_worker_of_a_rank_in_a_multi_rank_run_writes_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a launcher (WORLD_SIZE > 1) the advisor's worker analyses each trace once and writes its
    rank summary beside it; the summary's report is the report the worker sends back."""
    import shutil

    from fixture_paths import MULTIRANK_INPUT_DELAY_RANK1

    from traceadvisor.advisor.worker import run_job
    from traceadvisor.ranks.summary_io import read_summary, trace_key

    trace = tmp_path / "rank1.json.gz"
    shutil.copy(MULTIRANK_INPUT_DELAY_RANK1, trace)
    monkeypatch.setenv("WORLD_SIZE", "2")
    result = run_job({"id": 1, "trace": str(trace), "keep": True})
    assert result["ok"], result["error"]
    got = read_summary(trace.with_name("rank1.json.gz.tasummary"), trace_key(trace))
    assert got is not None and got.rank == 1 and got.rank_source == "distributedInfo"
    assert [f["code"] for f in got.report["findings"]] == [f["code"] for f in result["report"]["findings"]]
    assert len(got.tables["collectives"]) > 0


def test_html_report_per_cycle_beside_the_trace(tmp_path: Path) -> None:
    """``html=True``: each analysed cycle's HTML page is written beside its trace, holds that
    cycle's findings, and the timeline stays out of the report sent to the training process."""
    import base64
    import gzip
    import json
    import re

    step = make_step()
    loader = slow_loader(spin=0)
    with traceadvisor.profile(
        out_dir=tmp_path, skip_first=1, wait=0, warmup=1, active=2, activities=None, mode="thread", html=True
    ) as prof:
        for i, (x, y) in enumerate(batches(loader)):
            step(x, y)
            prof.step()
            if i == 6:
                break
    assert len(prof.reports) == 1
    report = prof.reports[0]
    assert report.html_path == tmp_path / "cycle1" / f"rank{report.rank}.html"
    page = report.html_path.read_text()
    codes = re.findall(r'<article class="finding" id="finding-\d+" data-code="([A-Z0-9]+)"', page)
    assert codes == [f.code for f in report.findings]
    blob = re.search(r'<script type="application/octet-stream" id="ta-data">([^<]+)</script>', page)
    assert blob is not None
    data = json.loads(gzip.decompress(base64.b64decode(blob.group(1))))
    assert data  # the page carries the timeline ...
    assert all(t.timeline is None for t in report.report.traces)  # ... the in-loop report does not
    assert "timeline" not in json.dumps(report.to_dict()["traces"])
