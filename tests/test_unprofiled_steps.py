"""Step times measured outside the profiler's active window (issue 12 item 2, capture side).

A real training loop (torch CPU) with a known ``time.sleep`` per step runs under ``traceadvisor
capture`` and under the in-loop advisor; the step times they store (``run.json``, the trace's
top-level ``"traceadvisor"`` key) are checked against the same loop timed without any profiler, and
the key is followed through load -> report.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fixture_paths import FIXTURE_TRACES

from traceadvisor.capture.unprofiled import UnprofiledSteps, with_key
from traceadvisor.report.format import step_time_line
from traceadvisor.report.model import StepTime
from traceadvisor.summary.step_time import step_time
from traceadvisor.trace.load import load_file

torch = pytest.importorskip("torch")

SLEEP_S = 0.03  # per step: large against a tiny model's compute, so the expected step time is known
STEPS = 14

# A loop whose step is a known sleep plus a tiny model; the step after a few steps is ~SLEEP_S.
TRAIN = f"""
import sys, time
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(8, 16), torch.randn(8, 4)
for i in range({STEPS}):
    time.sleep({SLEEP_S})
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
time.sleep(0.5)  # after the loop: the step the run's end closes must not be counted
"""

# The same loop timed by itself, without any profiler: the reference the stored times must match.
REFERENCE = (
    TRAIN.replace("time.sleep(0.5)", "print(json.dumps(times))")
    .replace("for i in range", "import json\ntimes = []\nlast = None\nfor i in range")
    .replace(
        "    opt.step()\n",
        "    opt.step()\n    now = time.perf_counter()\n"
        "    times.append(None if last is None else (now - last) * 1e6)\n    last = now\n",
    )
)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRACEADVISOR_DEBUG"}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def _reference_median_us(tmp_path: Path) -> float:
    script = tmp_path / "reference.py"
    script.write_text(REFERENCE)
    proc = _run([sys.executable, str(script)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    times = [t for t in json.loads(proc.stdout.strip().splitlines()[-1]) if t is not None]
    return sorted(times)[len(times) // 2]


def _top(trace: Path) -> dict[str, Any]:
    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    assert isinstance(doc, dict)
    return doc


def test_capture_times_the_skipped_and_wait_steps_and_the_report_shows_them(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    # Steps 0-2 skipped, then per cycle: wait 2, warmup 1, active 2; two cycles (steps 3-12), step 13 after.
    args = ["--skip-first", "3", "--wait", "2", "--warmup", "1", "--active", "2", "--repeat", "2"]
    proc = _run(
        [sys.executable, "-m", "traceadvisor", "capture", "--out", "run", *args, "--no-analyze", "train.py"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    stored = run["unprofiled_steps"]
    assert stored["source"] == "capture"
    # Unprofiled: skipped 1, 2 (0 starts at the program's start), waits 3, 4 and 8, 9, and 13 is closed
    # by the end of the run (it holds the 0.5 s after the loop): not measured. Warmup and active steps
    # (5, 6, 7 and 10, 11, 12) ran the profiler.
    assert stored["unprofiled_steps"] == [1, 2, 3, 4, 8, 9]
    assert stored["profiled_steps"] == [6, 7, 11, 12]
    assert not set(stored["unprofiled_steps"]) & {5, 6, 7, 10, 11, 12}

    reference = _reference_median_us(tmp_path)
    times = stored["unprofiled_step_us"]
    assert len(times) == 6
    median = sorted(times)[len(times) // 2]
    assert abs(median - reference) <= 0.2 * reference, (median, reference)
    assert all(t < 0.5e6 for t in times)  # no step holds the 0.5 s after the loop

    # Each trace carries the times measured up to its export, and its own recorded steps.
    first, second = tmp_path / "run" / "cycle1/rank0.json.gz", tmp_path / "run" / "cycle2/rank0.json.gz"
    key0, key1 = _top(first)["traceadvisor"], _top(second)["traceadvisor"]
    assert key0["unprofiled_steps"] == [1, 2, 3, 4] and key0["profiled_steps"] == [6, 7]
    assert key1["unprofiled_steps"] == [1, 2, 3, 4, 8, 9] and key1["profiled_steps"] == [11, 12]
    assert key1["unprofiled_step_us"] == times

    # load -> report: the JSON report's traces[].measured_unprofiled_step_us and the text line.
    report = _run([sys.executable, "-m", "traceadvisor", "analyze", str(second), "--format", "json"], tmp_path)
    assert report.returncode in (0, 1), report.stderr
    summary = json.loads(report.stdout)["traces"][0]["measured_unprofiled_step_us"]
    assert summary["count"] == 6 and summary["source"] == "capture"
    # (the JSON report writes µs to the nanosecond)
    assert summary["median_us"] == round((sorted(times)[2] + sorted(times)[3]) / 2, 3)
    text = _run([sys.executable, "-m", "traceadvisor", "analyze", str(second)], tmp_path)
    assert "measured unprofiled step:" in text.stdout and "median of 6 steps, profiler off" in text.stdout


def test_a_trace_without_the_key_reports_none(tmp_path: Path) -> None:
    fixture = sorted((Path(__file__).parent.parent / "fixtures" / "traces").glob("*.json.gz"))[0]
    proc = _run([sys.executable, "-m", "traceadvisor", "analyze", str(fixture), "--format", "json"], tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["traces"][0]["measured_unprofiled_step_us"] is None


def test_with_key_splices_a_first_key_into_the_object() -> None:
    body = b'\n {\n  "schemaVersion": 1, "traceEvents": []}\n'
    doc = json.loads(with_key(body, {"unprofiled_step_us": [1.5]}))
    assert list(doc) == ["traceadvisor", "schemaVersion", "traceEvents"]
    assert doc["traceadvisor"] == {"unprofiled_step_us": [1.5]}
    assert json.loads(with_key(b"{}", {"a": 1})) == {"traceadvisor": {"a": 1}}
    with pytest.raises(ValueError):
        with_key(b"[1]", {})


def test_only_unprofiled_steps_between_two_boundaries_are_measured() -> None:
    clock = UnprofiledSteps("capture")
    clock.boundary(0, True, 1_000, 1_500)  # step 0 began at the program's start: not measured
    clock.boundary(1, True, 31_500, 32_000)  # 30 µs, the boundary's own cost (500 ns) excluded
    clock.boundary(2, False, 90_000, 95_000)  # profiled: not measured
    clock.boundary(3, True, 95_123, 96_000)  # 123 ns: nanosecond decimals kept
    clock.forget_boundary()
    clock.boundary(4, True, 200_000, 200_100)  # closed by the run's end: not measured
    assert clock.times == [(1, 30.0), (3, 0.123)]
    assert clock.key([2]) == {
        "unprofiled_step_us": [30.0, 0.123],
        "unprofiled_steps": [1, 3],
        "profiled_steps": [2],
        "cupti_attached_steps": [],
        "source": "capture",
    }


ADVISED = f"""
import json, sys, time
import torch
from torch import nn
import traceadvisor

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(8, 16), torch.randn(8, 4)
with traceadvisor.profile(out_dir="prof", skip_first=0, wait=3, warmup=1, active=2, repeat=2, analyze=False) as prof:
    for i in range({STEPS}):
        time.sleep({SLEEP_S})
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        prof.step()
"""


def test_the_advisor_times_the_wait_steps_into_its_traces(tmp_path: Path) -> None:
    script = tmp_path / "advised.py"
    script.write_text(textwrap.dedent(ADVISED))
    proc = _run([sys.executable, str(script)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    traces = sorted((tmp_path / "prof").glob("cycle*/rank*.json.gz"))
    assert len(traces) == 2, (traces, proc.stderr)
    key = _top(traces[-1])["traceadvisor"]
    assert key["source"] == "advisor"
    # Steps 0-2 wait (0 starts before the first boundary), 3 warmup, 4-5 active; 6-8 wait, 9 warmup, 10-11 active.
    assert key["unprofiled_steps"] == [1, 2, 6, 7, 8]
    assert key["profiled_steps"] == [10, 11]
    reference = _reference_median_us(tmp_path)
    median = sorted(key["unprofiled_step_us"])[2]
    assert abs(median - reference) <= 0.2 * reference, (median, reference)


@pytest.mark.parametrize(
    ("trace_name", "basis", "caveat"),
    [
        # carries the steps capture timed without the profiler: the prediction is fitted to them
        ("capture_sync_sites", "calibrated", False),
        # eager code, no timed steps: the bundled costs, no known weakness
        ("p12_storm_before_stack", "uncalibrated", False),
        # torch.compile'd code with stacks, no timed steps: predicted 13.6 ms against 4.1 ms measured
        ("p12_storm_compile_after_stack", "uncalibrated", True),
        # the same compiled code without stacks: no Python launcher frames recorded, no caveat
        ("p12_storm_compile_after_nostack", "uncalibrated", False),
    ],
)
def test_the_predicted_step_says_what_it_rests_on(trace_name: str, basis: str, caveat: bool) -> None:
    trace = load_file(FIXTURE_TRACES / f"{trace_name}.json.gz")
    st = step_time(trace, trace.device_ids[0])
    assert st is not None and st.unprofiled_step_us is not None
    assert st.unprofiled_basis == basis
    assert (st.unprofiled_caveat is not None) == caveat
    line = step_time_line(st)
    assert ("calibrated to the steps timed without it" in line) == (basis == "calibrated")
    assert ("uncalibrated: torch.compile'd code recorded with stacks" in line) == caveat
    assert StepTime.from_dict(st.to_dict()) == st


def test_steps_run_with_cupti_still_attached_are_not_the_programs_step_time() -> None:
    """After a CUDA trace, Kineto leaves CUPTI attached unless TEARDOWN_CUPTI was "1" when the trace
    ended, and its callbacks slow every CUDA call with the profiler off (the GPU pairs: a per-parameter
    AdamW step 9.1 ms detached against 12.7 and 14.6 ms attached). The wait steps between two cycles
    of a repeat schedule are such steps: counted apart, never as step times."""
    from traceadvisor.capture.unprofiled import UnprofiledSteps

    u = UnprofiledSteps("capture")
    clock = iter(range(0, 10**9, 1000))
    for step in (1, 2):  # before any trace: the program's own speed
        u.boundary(step, True, next(clock), next(clock))
    u.trace_ended(profiles_cuda=True, teardown_env=None)  # a first cycle ends, CUPTI stays attached
    for step in (5, 6):
        u.boundary(step, True, next(clock), next(clock))
    u.trace_ended(profiles_cuda=True, teardown_env="1")  # the last cycle detaches it
    u.boundary(9, True, next(clock), next(clock))
    u.trace_ended(profiles_cuda=False, teardown_env=None)  # a CPU-only trace attaches nothing
    u.boundary(10, True, next(clock), next(clock))
    key = u.key([3, 4, 7, 8])
    assert key["unprofiled_steps"] == [2, 9, 10]  # step 1 began at the program's start: never timed
    assert key["cupti_attached_steps"] == [5, 6]
    assert key["unprofiled_step_us"] == [1.0, 1.0, 1.0]
