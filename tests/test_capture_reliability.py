"""``traceadvisor capture`` must never break the program, and must leave nothing behind (issue 10).

Real runs of ``python -m traceadvisor capture`` on small CPU training scripts (torch 2.13 CPU):
a program that opens its own ``torch.profiler`` (around the whole loop, and in the middle of a
capture cycle), a process that dies without cleanup (``os._exit``, SIGKILL, SIGTERM, an exception),
a forked child that exits, a training loop on another thread, a program that changes its working
folder, a program with ``atexit`` handlers, and a full disk.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from capture_run import run_capture

pytest.importorskip("torch")

# skip 1 step, warm up 1, record 2, repeat until the end: a cycle every 3 steps.
SMALL = ["--skip-first", "1", "--warmup", "1", "--active", "2"]

# A loop of a few ms per step. ``EVENTS`` (if set) receives the names of the events that the
# program's own profiler recorded, in time order.
PRELUDE = """
import json, os, sys
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(8, 16), torch.randn(8, 4)


def step():
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()


def dump(prof):
    events = sorted(prof.events(), key=lambda e: (e.time_range.start, -e.time_range.end))
    with open(os.environ["EVENTS"], "w") as fh:
        json.dump([e.name for e in events], fh)
"""


def write(path: Path, body: str) -> Path:
    path.write_text(PRELUDE + textwrap.dedent(body))
    return path


def run_plain(cwd: Path, script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


def run_json(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "run.json").read_text())
    return data


def step_names(trace: Path) -> list[str]:
    with gzip.open(trace, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    found = [e for e in events if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")]
    return [e["name"] for e in sorted(found, key=lambda e: float(e["ts"]))]


def leftovers(folder: Path) -> list[str]:
    """Hidden (temporary) files in a run folder and its cycle folders."""
    return sorted(p.name for p in folder.rglob(".*"))


# -- the program's own profiler ---------------------------------------------------------------------


def test_program_profiler_around_the_whole_loop_records_as_without_capture(tmp_path: Path) -> None:
    script = write(
        tmp_path / "own.py",
        """
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(14):
                step()
        dump(prof)
        """,
    )
    plain = run_plain(tmp_path, script, {"EVENTS": str(tmp_path / "plain.json")})
    assert plain.returncode == 0, plain.stderr
    proc = run_capture(
        tmp_path,
        "--out",
        "run",
        "--no-analyze",
        *SMALL,
        "--repeat",
        "0",
        "own.py",
        env={"EVENTS": str(tmp_path / "cap.json")},
    )
    expected = json.loads((tmp_path / "plain.json").read_text())
    got = json.loads((tmp_path / "cap.json").read_text())
    assert len(expected) > 1000
    assert got == expected  # every event, in the same order: capture is out of the way from the start
    record = run_json(tmp_path / "run")
    assert record["exit"] == {"status": "ok", "code": 0, "exception": None}
    assert record["finished_at"] and record["files"] == []
    [warning] = record["warnings"]
    assert f"started its own torch profiler at {script}:" in warning and "stepped aside" in warning
    assert proc.stderr.count("stepped aside") == 1
    # Nothing was captured: ours to say (exit 2), after the program ran to its end.
    assert proc.returncode == 2
    assert "traceadvisor: error: no trace was captured" in proc.stderr


def test_program_profiler_opened_mid_cycle_keeps_capture_traces_and_records_its_own(tmp_path: Path) -> None:
    # Capture records steps 2-3, 5-6, 8-9, 11-12 (cycles of 3); the program opens its profiler after
    # 12 iterations, while capture's fourth cycle records step 11, and profiles 5 iterations.
    script = write(
        tmp_path / "mid.py",
        """
        for i in range(12):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(5):
                step()
        dump(prof)
        for i in range(6):
            step()
        """,
    )
    plain = run_plain(tmp_path, script, {"EVENTS": str(tmp_path / "plain.json")})
    assert plain.returncode == 0, plain.stderr
    proc = run_capture(
        tmp_path,
        "--out",
        "run",
        "--no-analyze",
        *SMALL,
        "--repeat",
        "0",
        "mid.py",
        env={"EVENTS": str(tmp_path / "cap.json")},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "cap.json").read_text()) == json.loads((tmp_path / "plain.json").read_text())
    record = run_json(tmp_path / "run")
    assert record["exit"]["status"] == "ok" and record["finished_at"]
    files = {f["path"]: f for f in record["files"]}
    # The three complete cycles are kept; the fourth was recording step 11 (warm-up 10) when the
    # program's profiler started: saved as partial; nothing after.
    assert [(f["path"], f["partial"]) for f in record["files"]] == [
        ("cycle1/rank0.json.gz", False),
        ("cycle2/rank0.json.gz", False),
        ("cycle3/rank0.json.gz", False),
        ("cycle4/rank0.json.gz", True),
    ]
    assert files["cycle3/rank0.json.gz"]["steps"] == ["ProfilerStep#8", "ProfilerStep#9"]
    assert step_names(tmp_path / "run" / "cycle2/rank0.json.gz") == ["ProfilerStep#5", "ProfilerStep#6"]
    assert step_names(tmp_path / "run" / "cycle4/rank0.json.gz") == ["ProfilerStep#11"]
    [warning] = record["warnings"]
    assert f"at {script}:" in warning and "after 11 steps" in warning
    assert leftovers(tmp_path / "run") == []


# -- run.json is never left "running" -----------------------------------------------------------------

DYING = """
import signal
for i in range(12):
    step()
    if i == 7:
        how = sys.argv[1]
        if how == "raise":
            raise RuntimeError("boom")
        if how == "exit":
            os._exit(3)
        os.kill(os.getpid(), getattr(signal, how))
"""


@pytest.mark.parametrize(
    ("how", "status", "code", "sig"),
    [
        ("raise", "exception", 1, None),
        ("exit", "abnormal", 3, None),
        ("SIGKILL", "abnormal", 128 + signal.SIGKILL, "SIGKILL"),
        ("SIGTERM", "abnormal", 128 + signal.SIGTERM, "SIGTERM"),
    ],
)
def test_run_json_is_final_whatever_ends_the_process(
    tmp_path: Path, how: str, status: str, code: int, sig: str | None
) -> None:
    write(tmp_path / "die.py", DYING)
    out = tmp_path / "run"
    args = ["--out", str(out), "--no-analyze", *SMALL, "--repeat", "0", "die.py", how]
    with (tmp_path / "stderr.txt").open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "traceadvisor", "capture", *args],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    # Wait for the end without reaping (WNOWAIT): the watcher reads the exit status of the unreaped
    # process (a launcher that reaps at once leaves it unknown: code None).
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    deadline = time.monotonic() + 15
    record: dict[str, Any] = {}
    while time.monotonic() < deadline:
        record = run_json(out)
        if record["exit"]["status"] != "running":
            break
        time.sleep(0.05)
    proc.wait(timeout=60)
    assert record["exit"]["status"] == status, (record.get("exit"), (tmp_path / "stderr.txt").read_text())
    assert record["exit"]["code"] == code
    assert record["exit"].get("signal") == sig
    assert record["finished_at"] and record["duration_s"] > 0
    # The cycles written before the end are listed, and are on disk.
    assert [f["path"] for f in record["files"]][:2] == ["cycle1/rank0.json.gz", "cycle2/rank0.json.gz"]
    assert all((out / f["path"]).is_file() for f in record["files"])
    if status == "abnormal":
        assert "completed by capture's watcher" in record["warnings"][-1]
    assert leftovers(out) == []
    # The watcher is gone once its work is done.
    deadline = time.monotonic() + 10
    while _processes_naming(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_naming(out) == []


def _processes_naming(text: Path) -> list[int]:
    """Live (not zombie) processes whose command line holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(text) in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


# -- a forked child of the program ------------------------------------------------------------------


def test_forked_child_that_exits_prints_no_second_report(tmp_path: Path) -> None:
    write(
        tmp_path / "forks.py",
        """
        for i in range(12):
            step()
            if i == 4:
                pid = os.fork()
                if pid == 0:
                    sys.exit(0)  # the child ends here, as it would without capture
                _, status = os.waitpid(pid, 0)
                with open(os.environ["CHILD"], "w") as fh:
                    fh.write(str(os.waitstatus_to_exitcode(status)))
        """,
    )
    proc = run_capture(tmp_path, "--out", "run", *SMALL, "--repeat", "0", "forks.py", env={"CHILD": "child.txt"})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "child.txt").read_text() == "0"
    # One analysis, one report (the text report names the trace once, in its first line).
    assert proc.stderr.count("traceadvisor: analysing") == 1
    assert proc.stdout.count("device: CPU only") == 1
    # run.json is the parent's: its steps, its end (a child finishing the capture would rewrite it).
    record = run_json(tmp_path / "run")
    assert record["exit"]["status"] == "ok"
    assert record["steps"]["optimizer_steps"] == 12
    assert len(record["files"]) == 4  # 3 complete cycles and the partial one of step 11


# -- a training loop on another thread --------------------------------------------------------------


def test_loop_on_another_thread_says_why_no_step_was_seen(tmp_path: Path) -> None:
    write(
        tmp_path / "threaded.py",
        """
        import threading

        def train():
            for i in range(12):
                step()

        t = threading.Thread(target=train, name="trainer")
        t.start()
        t.join()
        """,
    )
    proc = run_capture(tmp_path, "--out", "run", "--no-analyze", *SMALL, "threaded.py")
    assert proc.returncode == 2  # nothing captured
    record = run_json(tmp_path / "run")
    [warning] = [w for w in record["warnings"] if "no step" in w]
    assert "another thread ('trainer': 12 optimizer steps)" in warning
    assert "thread-local" in warning and "traceadvisor.profile()" in warning


# -- what the analysis after the run uses -----------------------------------------------------------


def test_analysis_uses_the_starting_folder_for_config_and_output(tmp_path: Path) -> None:
    # The starting folder's configuration ignores TQ101 (missing-capture-flags), which every CPU
    # trace gets; the program then moves to a folder without configuration.
    (tmp_path / "traceadvisor.toml").write_text('ignore = ["TQ101"]\n')
    (tmp_path / "elsewhere").mkdir()
    write(
        tmp_path / "moves.py",
        """
        os.chdir("elsewhere")
        for i in range(12):
            step()
        """,
    )
    proc = run_capture(tmp_path, "--out", "run", *SMALL, "-f", "json", "-o", "report.json", "moves.py")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "elsewhere" / "report.json").exists()
    report = json.loads((tmp_path / "report.json").read_text())
    codes = {f["code"] for f in report["findings"]}
    assert "TQ101" not in codes
    # Without the configuration, the same trace has that finding: the test can fail.
    plain = subprocess.run(
        [sys.executable, "-m", "traceadvisor", "analyze", "-f", "json", str(tmp_path / "run" / "cycle1/rank0.json.gz")],
        cwd=tmp_path / "elsewhere",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "TQ101" in {f["code"] for f in json.loads(plain.stdout)["findings"]}


def test_program_atexit_handlers_run_after_the_analysis(tmp_path: Path) -> None:
    write(
        tmp_path / "atexit_prog.py",
        """
        import atexit
        atexit.register(lambda: open("atexit.txt", "w").write("ran"))
        for i in range(6):
            step()
        """,
    )
    proc = run_capture(tmp_path, "--out", "run", *SMALL, "atexit_prog.py")
    assert proc.returncode == 0, proc.stderr
    assert "traceadvisor: analysing" in proc.stderr
    assert (tmp_path / "atexit.txt").read_text() == "ran"


# -- a full disk ------------------------------------------------------------------------------------


def in_small_filesystem(cwd: Path, mount: Path, size: str, command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (sh) with a tmpfs of ``size`` mounted at ``mount``, in a private mount namespace
    (``unshare``; skips the test where the system does not allow one). The mount ends with the
    command, so the command itself lists what it left."""
    unshare = shutil.which("unshare")
    if unshare is None or sys.platform != "linux":
        pytest.skip("needs Linux unshare")
    mount.mkdir()
    flags = [] if os.geteuid() == 0 else ["-r"]  # root needs no user namespace
    probe = subprocess.run([unshare, *flags, "-m", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode(errors='replace').strip()}")
    script = f"mount -t tmpfs -o size={size} tmpfs {mount} || exit 99; {command}"
    proc = subprocess.run(
        [unshare, *flags, "-m", "sh", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    if proc.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs: {proc.stderr.strip()}")
    return proc


def test_full_disk_names_the_cause_and_leaves_no_partial_file(tmp_path: Path) -> None:
    write(
        tmp_path / "train.py",
        """
        for i in range(8):
            step()
        """,
    )
    disk = tmp_path / "disk"
    command = (
        f"{sys.executable} -m traceadvisor capture --out {disk}/run --no-analyze {' '.join(SMALL)} train.py; "
        f"echo EXIT=$?; ls -a {disk}/run; cat {disk}/run/run.json"
    )
    proc = in_small_filesystem(tmp_path, disk, "48k", command)
    out = proc.stdout
    assert "EXIT=2" in out  # no trace was captured
    listing, _, doc = out.partition("EXIT=2")[2].partition("{")
    names = listing.split()
    assert [n for n in names if n.startswith(".") and n not in (".", "..")] == []
    record = json.loads("{" + doc)
    [warning] = [w for w in record["warnings"] if "could not write" in w]
    assert "No space left" in warning or "no space left" in warning
    assert "FileNotFoundError" not in warning
