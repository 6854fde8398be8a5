"""The in-loop advisor must never break training and must leave nothing behind (issue 10).

Real processes and real signals: a training process killed with SIGKILL/SIGTERM while its worker
analyses (the worker must go too), an analysis in thread mode past its timeout (it must stop, not
hold the GIL for the rest of training), ``profile(close_timeout=...)`` at interpreter exit, and a
full disk (a tmpfs in a private mount namespace). The slow analysis is a user rule that spins in
Python for a minute, loaded through ``rules_dir`` like any ``--rules-dir`` rule.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"

SPIN_RULE = '''
"""USR900: spins for a minute in Python (a stand-in for an analysis that takes long)."""

import os
import time
from collections.abc import Iterator

from traceadvisor import Finding, Rule, Severity, Trace


def _log(mark: str) -> None:
    if os.environ.get("SPIN_LOG"):
        with open(os.environ["SPIN_LOG"], "a") as fh:
            fh.write(mark + "\\n")


class Spin(Rule):
    """Spins for a minute.

    ## Why it matters
    It does not: it keeps the analysis busy.
    ## How it shows up in a trace
    Not at all.
    ## How to fix
    Nothing to fix.
    ## Options
    None.
    ## References
    - https://pytorch.org/docs/stable/profiler.html
    """

    code = "USR900"
    name = "spin"
    severity = Severity.low
    requires = frozenset()

    def check(self, trace: Trace) -> Iterator[Finding]:
        _log("+")  # SPIN_LOG: one line when a check starts, one when it ends (however it ends)
        try:
            end = time.monotonic() + 60
            n = 0
            while time.monotonic() < end:
                n += 1
        finally:
            _log("-")
        yield from ()
'''


@pytest.fixture
def spin_rules(tmp_path: Path) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "spin.py").write_text(SPIN_RULE)
    return folder


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def kill_if_alive(pid: int) -> None:
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


# A training process whose advisor's worker is busy (compressing, then the spinning rule) when the
# process prints the worker's pid and sleeps, waiting to be killed.
TRAINING = """
import sys, time
import torch
from traceadvisor import Advisor

advisor = Advisor(sys.argv[1], rules_dir=sys.argv[2])
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU],
    schedule=torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1),
    on_trace_ready=advisor,
) as prof:
    for i in range(4):
        opt.zero_grad(); model(torch.randn(8, 16)).sum().backward(); opt.step()
        prof.step()
deadline = time.monotonic() + 60
while not advisor.status()["running"] and time.monotonic() < deadline:
    advisor.poll(); time.sleep(0.01)
time.sleep(0.5)  # into the analysis (the compression of this small trace takes milliseconds)
print(advisor.status()["worker_pid"], flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_worker_ends_with_its_killed_training_process(tmp_path: Path, spin_rules: Path, sig: signal.Signals) -> None:
    (tmp_path / "train.py").write_text(TRAINING)
    out = tmp_path / "prof"
    proc = subprocess.Popen(
        [sys.executable, "train.py", str(out), str(spin_rules)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    worker = 0
    try:
        assert proc.stdout is not None
        worker = int(proc.stdout.readline())
        assert alive(worker)
        os.kill(proc.pid, sig)  # the OOM killer, preemption, Slurm
        assert proc.wait(timeout=30) == -sig
        t0 = time.monotonic()
        while alive(worker) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        gone_after = time.monotonic() - t0
        assert not alive(worker), "the worker outlived the training process"
        assert gone_after < 3.0
    finally:
        proc.kill()
        proc.wait()
        if worker:
            kill_if_alive(worker)
    # What the training thread handed over is kept, and nothing half-written is left.
    assert sorted(p.name for p in (out / "cycle1").iterdir()) in (["rank0.json.gz"], ["rank0.json"])


# The two thread-mode tests interrupt an analysis thread with an asynchronous exception; they run
# in a fresh interpreter (tests/thread_mode_cases.py), because in the suite's one process a Lightning
# fit that ran after them once hung inside the profiler's start (main thread spinning in Python,
# not reproduced in a fresh process); a test of one behaviour must not be able to break another.
THREAD_MODE_CASES = Path(__file__).with_name("thread_mode_cases.py")


@pytest.mark.parametrize(
    "case",
    [
        "test_thread_mode_cancels_an_analysis_past_its_timeout",
        "test_a_cancelled_analysis_never_runs_beside_the_next_one",
    ],
)
def test_thread_mode_in_a_fresh_interpreter(case: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"{THREAD_MODE_CASES}::{case}"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=THREAD_MODE_CASES.parents[1],
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout


PROFILE_AT_EXIT = """
import sys, time
import torch
import traceadvisor

prof = traceadvisor.profile(sys.argv[1], skip_first=0, wait=0, warmup=1, active=1, close_timeout=1.0,
                            rules_dir=sys.argv[2], activities=[torch.profiler.ProfilerActivity.CPU])
prof.__enter__()
for i in range(3):
    torch.randn(8, 8).sum()
    prof.step()
while not prof.advisor.status()["running"]:
    prof.advisor.poll(); time.sleep(0.01)
print(prof.advisor.status()["worker_pid"], flush=True)
# The block is never left: the advisor is closed at interpreter exit, within close_timeout.
"""


def test_profile_close_timeout_applies_at_interpreter_exit(tmp_path: Path, spin_rules: Path) -> None:
    (tmp_path / "prog.py").write_text(PROFILE_AT_EXIT)
    proc = subprocess.Popen(
        [sys.executable, "prog.py", str(tmp_path / "prof"), str(spin_rules)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker = 0
    try:
        assert proc.stdout is not None
        worker = int(proc.stdout.readline())
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=40)  # the default close_timeout would wait 60 s
        exited_after = time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait()
        if worker:
            kill_if_alive(worker)
    assert proc.returncode == 0, err
    assert exited_after < 10
    assert not alive(worker)
    assert sorted(p.name for p in (tmp_path / "prof" / "cycle1").iterdir()) == ["rank0.json.gz"]


# -- a full disk ------------------------------------------------------------------------------------

FULL_DISK = """
import logging, os, sys
import torch
from traceadvisor import Advisor

logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="LOG %(message)s")
advisor = Advisor(sys.argv[1], analyze=False)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 4))
opt = torch.optim.Adam(model.parameters())
with torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU],
    schedule=torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1),
    on_trace_ready=advisor, record_shapes=True, with_stack=True,
) as prof:
    for i in range(5):
        opt.zero_grad(); model(torch.randn(64, 256)).sum().backward(); opt.step()
        prof.step()
advisor.close(30)
print("LEFT", sorted(str(p.relative_to(sys.argv[1])) for p in __import__("pathlib").Path(sys.argv[1]).rglob("*")))
"""


def test_full_disk_names_the_cause_and_leaves_nothing(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None or sys.platform != "linux":
        pytest.skip("needs Linux unshare")
    (tmp_path / "prog.py").write_text(FULL_DISK)
    disk = tmp_path / "disk"
    disk.mkdir()
    flags = [] if os.geteuid() == 0 else ["-r"]
    probe = subprocess.run([unshare, *flags, "-m", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip("no private mount namespace here")
    script = f"mount -t tmpfs -o size=48k tmpfs {disk} || exit 99; {sys.executable} prog.py {disk}/prof"
    proc = subprocess.run(
        [unshare, *flags, "-m", "sh", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    if proc.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    logs = [line for line in proc.stdout.splitlines() if line.startswith("LOG ")]
    [saved] = [line for line in logs if "could not save the trace of cycle 1" in line]
    assert "no space left on the device" in saved
    assert "FileNotFoundError" not in proc.stdout
    # No half-written JSON (kineto's ``.tmp.tmp``) and no empty cycle folder.
    assert proc.stdout.splitlines()[-1] == "LEFT []"


def test_worker_parent_watch_keeps_the_trace_it_was_given(tmp_path: Path) -> None:
    # The worker's clean-up when its training process is gone, on a job it had not compressed yet.
    from traceadvisor.advisor.worker import keep_unfinished

    folder = tmp_path / "cycle1"
    folder.mkdir()
    raw = folder / ".rank0.json.123.tmp"
    raw.write_text('{"traceEvents": []}')
    (folder / ".rank0.json.gz.abc.tmp").write_bytes(b"half")
    keep_unfinished({"trace": str(folder / "rank0.json.gz"), "raw": str(raw), "keep": True})
    assert sorted(p.name for p in folder.iterdir()) == ["rank0.json"]
    assert (folder / "rank0.json").read_text() == '{"traceEvents": []}'
