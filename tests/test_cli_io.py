"""The command line's input and output under real processes, signals and files (issue 10).

A reader killed with ``analyze`` (no orphan decoding on), a trace truncated while it is read (no
SIGBUS), SIGTERM during a report write (no temporary file left), stdout full, closed or gone,
``-o -`` and ``-o`` naming an input trace, Ctrl-C, files in a trace directory that are not traces,
and the default ``--max-size`` from the machine's memory. Everything runs ``python -m traceadvisor``
in a subprocess and acts on it from outside, as a user or the OS would; Linux only (/proc).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_bad_input import gzip_bomb

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc")

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "fixtures" / "traces"
STORM = TRACES / "planted_launch_storm.json.gz"  # 5.4 MB of JSON, Python stacks: the largest fixture
SMALL = TRACES / "train_step.json.gz"
CLI = [sys.executable, "-m", "traceadvisor", "analyze"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRACEADVISOR_DEBUG"}
    return {**env, **extra}


def run(*args: str, stdout: object = subprocess.PIPE, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``traceadvisor analyze ARGS`` (stdout and stderr captured as text unless ``stdout`` is given)."""
    kwargs.setdefault("timeout", 120)
    return subprocess.run([*CLI, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, env=_env(), **kwargs)  # type: ignore[call-overload, no-any-return]


def one_error(p: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit 2 and exactly one ``traceadvisor: error:`` line on stderr, holding ``fragments``."""
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceadvisor: error: "), p.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def wait_for(condition: Callable[[], object], timeout: float, interval: float = 0.001) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())


def children(pid: int) -> list[int]:
    try:
        tasks = [t.name for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return []
    found: list[int] = []
    for tid in tasks:
        try:
            found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return found


def gone(pid: int) -> bool:
    """Ended: no such process, or a zombie (dead, waiting for whoever adopted it to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def has_open(pid: int, path: Path) -> bool:
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if fd.readlink() == path:
                return True
        except OSError:
            continue
    return False


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real trace's events repeated to about 48 MB of JSON: above the two-process reader's 32 MiB
    (trace/parallel.py) and long enough to read (0.3-2 s) for a signal to land mid-read."""
    doc = json.loads(gzip.decompress(STORM.read_bytes()))
    events = json.dumps(doc.pop("traceEvents"))[1:-1].encode()
    copies = 48_000_000 // len(events) + 1
    path = tmp_path_factory.mktemp("big") / "big.json"
    with path.open("wb") as fh:
        fh.write(b"{" + json.dumps(doc)[1:-1].encode() + b', "traceEvents": [')
        fh.write(b", ".join([events] * copies))
        fh.write(b"]}")
    return path


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "rank0.json"
    path.write_bytes(gzip.decompress(SMALL.read_bytes()))
    return path


@pytest.fixture
def cleanup() -> Iterator[list[int]]:
    """Pids to SIGKILL after the test, whatever happened (a leftover reader, a stopped process)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        kill_quietly(pid)


# -- the forked reader dies with analyze ----------------------------------------------------------
def test_killed_analyze_leaves_no_reader_behind(big: Path, tmp_path: Path, cleanup: list[int]) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("the two-process reader needs two CPUs")
    p = subprocess.Popen(
        [*CLI, str(big), "-o", str(tmp_path / "r.json")],
        env=_env(TRACEADVISOR_NATIVE="0"),  # the Python path: the one that forks
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cleanup.append(p.pid)
    assert wait_for(lambda: children(p.pid), 60), "the trace was not split between two processes"
    reader = children(p.pid)[0]
    cleanup.append(reader)
    assert Path(f"/proc/{reader}/cmdline").read_bytes() == Path(f"/proc/{p.pid}/cmdline").read_bytes()  # forked
    # Reading its half: past its set-up (a process stopped between fork and prctl cannot be helped).
    assert wait_for(lambda: has_open(reader, big), 60), "the reader never opened the trace"
    # Frozen, the reader can neither finish nor notice a closed pipe: only its parent's death ends it.
    os.kill(reader, signal.SIGSTOP)
    p.kill()
    p.wait(30)
    assert wait_for(lambda: gone(reader), 5), "the forked reader outlived analyze"


# -- a trace truncated while the native decoder reads it ------------------------------------------
def _analyze_cut_mid_read(
    path: Path, cut: int, cleanup: list[int]
) -> tuple[bool, subprocess.Popen[bytes], bytes, bytes]:
    """Run analyze on ``path``, freeze it while it has the file open, cut the file to ``cut`` bytes,
    let it go on: (whether it was caught with the file open, the process, stdout, stderr)."""
    p = subprocess.Popen([*CLI, str(path), "-f", "json"], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cleanup.append(p.pid)
    caught = wait_for(lambda: has_open(p.pid, path), 60, interval=0.0002)
    if caught:
        os.kill(p.pid, signal.SIGSTOP)
        caught = has_open(p.pid, path)  # still reading it, now frozen mid-read
        if caught:
            os.truncate(path, cut)
        os.kill(p.pid, signal.SIGCONT)
    out, err = p.communicate(timeout=120)
    return caught, p, out, err


def test_trace_truncated_while_read_is_reported_not_fatal(big: Path, tmp_path: Path, cleanup: list[int]) -> None:
    """The native path used to memory-map a file settled for 10 s: truncated by another process
    while mapped, it killed analyze with SIGBUS (exit -7, no message). Now: the cut is reported."""
    size = big.stat().st_size
    for attempt in range(5):  # the process may have closed the file before it was frozen: again
        path = tmp_path / f"settled{attempt}.json"
        shutil.copyfile(big, path)
        old = time.time() - 3600
        os.utime(path, (old, old))  # written an hour ago: a settled file
        caught, p, out, err = _analyze_cut_mid_read(path, size * 4 // 10, cleanup)
        if caught:
            break
    assert caught, "never caught analyze while it had the trace open"
    assert p.returncode == 0, (p.returncode, err.decode())
    lines = err.decode().splitlines()
    assert lines and all(line.startswith("traceadvisor: warning: ") for line in lines), lines
    assert "cut off" in err.decode()
    assert json.loads(out)["traces"][0]["kernel_count"] > 0


# -- SIGTERM during an atomic write ----------------------------------------------------------------
_WRITER = """
import signal, sys
from traceadvisor.atomic import write_bytes
calls = []
if sys.argv[3] == "own-handler":
    signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
write_bytes(sys.argv[1], bytes(int(sys.argv[2])))
print(calls, signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, flush=True)
"""
_SIZE = 256 << 20  # written and fsynced in about 0.4 s here: time for the signal to land mid-write


def _write_and_terminate(tmp_path: Path, handler: str) -> tuple[subprocess.Popen[bytes], bytes]:
    out = tmp_path / "report.json"
    p = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(out), str(_SIZE), handler], env=_env(), stdout=subprocess.PIPE
    )
    try:
        assert wait_for(lambda: list(tmp_path.glob(".report.json.*.tmp")), 60), "no temporary file seen"
        p.send_signal(signal.SIGTERM)
        stdout, _ = p.communicate(timeout=60)
    finally:
        kill_quietly(p.pid)
    return p, stdout


def test_sigterm_during_a_write_removes_the_temporary_file(tmp_path: Path) -> None:
    p, _ = _write_and_terminate(tmp_path, "default")
    assert p.returncode == -signal.SIGTERM  # still killed by the signal, as the default action would
    left = list(tmp_path.iterdir())
    assert not [f for f in left if f.name.endswith(".tmp")], left
    assert left == [] or left[0].stat().st_size == _SIZE  # never a partial report


def test_a_program_handling_sigterm_keeps_its_handler_and_the_write(tmp_path: Path) -> None:
    """``capture`` writes traces inside the user's program: a SIGTERM handler of its own (a
    checkpoint on preemption) is called, and the write completes."""
    p, stdout = _write_and_terminate(tmp_path, "own-handler")
    assert p.returncode == 0
    assert stdout.decode().split() == [f"[{int(signal.SIGTERM)}]", "True"]
    assert [f.name for f in tmp_path.iterdir()] == ["report.json"]
    assert (tmp_path / "report.json").stat().st_size == _SIZE


# -- stdout -------------------------------------------------------------------------------------------
def test_report_to_a_full_device_is_one_line(small: Path) -> None:
    with Path("/dev/full").open("wb") as full:
        p = run(str(small), stdout=full)
    one_error(p, "cannot write the report to stdout (No space left on device)")


def test_report_to_a_closed_stdout_is_one_line(small: Path, tmp_path: Path) -> None:
    closed = ["sh", "-c", 'exec "$@" >&-', "sh", *CLI]
    p = subprocess.run([*closed, str(small)], stderr=subprocess.PIPE, text=True, env=_env())
    one_error(p, "cannot write the report to stdout (stdout is closed)")
    out = tmp_path / "r.json"
    p = subprocess.run(
        [*closed, str(small), "-f", "json", "-o", str(out)], stderr=subprocess.PIPE, text=True, env=_env()
    )
    assert p.returncode == 0 and p.stderr == "", p.stderr  # a report file needs no stdout
    assert json.loads(out.read_text())["traces"][0]["kernel_count"] > 0


def test_reader_gone_before_the_report_is_quiet_exit_0(small: Path) -> None:
    p = subprocess.Popen([*CLI, str(small)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # ``| head`` that has already exited: every write to the pipe fails with EPIPE
    assert p.wait(120) == 0
    assert p.stderr.read() == b""


def test_output_dash_is_stdout(small: Path, tmp_path: Path) -> None:
    p = run(str(small), "-f", "json", "-o", "-", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["traces"][0]["path"] == str(small)
    assert not (tmp_path / "-").exists()


# -- -o naming an input ------------------------------------------------------------------------------
def test_output_naming_an_input_trace_is_refused(small: Path, tmp_path: Path) -> None:
    original = small.read_bytes()
    (tmp_path / "link.json").symlink_to(small)
    os.link(small, tmp_path / "hard.json")
    cases = {
        "the trace itself": ([str(small)], small),
        "a symbolic link to it": ([str(small)], tmp_path / "link.json"),
        "a hard link to it": ([str(small)], tmp_path / "hard.json"),
        "a trace of an input directory": ([str(tmp_path)], small),
    }
    for case, (inputs, output) in cases.items():
        p = run(*inputs, "-f", "json", "-o", str(output))
        one_error(p, f"{output}: is the input trace", "--output")
        assert small.read_bytes() == original, case
    p = run(str(small), "-o", str(tmp_path / "report.json"))  # beside it: fine
    assert p.returncode == 0, p.stderr


# -- Ctrl-C ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("native", ["1", "0"], ids=["native", "python"])
def test_ctrl_c_says_interrupted_and_exits_130(big: Path, native: str, cleanup: list[int]) -> None:
    p = subprocess.Popen(
        [*CLI, str(big), "-f", "json"],
        env=_env(TRACEADVISOR_NATIVE=native),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # A terminal's Ctrl-C: SIGINT with its default disposition (a shell's background job ignores it).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    cleanup.append(p.pid)
    assert wait_for(lambda: has_open(p.pid, big), 60), "analyze never opened the trace"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert (p.returncode, err.decode(), out) == (130, "traceadvisor: interrupted\n", b"")


# -- trace directories ----------------------------------------------------------------------------
def test_directory_entries_that_are_not_traces_are_skipped_with_a_warning(small: Path, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"lr": 0.001, "batch_size": 32}')  # beside the traces
    os.mkfifo(tmp_path / "fifo.json")  # opening it would wait for a writer forever
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "socket.json"))
    (tmp_path / "device.json").symlink_to("/dev/zero")  # reading it would never end
    (tmp_path / "dangling.json").symlink_to(tmp_path / "deleted.json")
    (tmp_path / "folder.json").mkdir()  # a folder: skipped without a word, as before
    try:
        p = run(str(tmp_path), "-f", "json", timeout=120)
    finally:
        listener.close()
    assert p.returncode == 0, p.stderr
    assert [t["path"] for t in json.loads(p.stdout)["traces"]] == [str(small)]
    warnings = p.stderr.splitlines()
    assert all(w.startswith("traceadvisor: warning: ") for w in warnings), warnings
    expected = {
        "config.json": "no traceEvents",
        "fifo.json": "a named pipe (FIFO)",
        "socket.json": "a socket",
        "device.json": "a character device",
        "dangling.json": "a symbolic link to a missing file",
    }
    assert len(warnings) == len(expected), warnings
    for name, why in expected.items():
        line = next((w for w in warnings if f"{tmp_path / name}: " in w), None)
        assert line is not None and why in line and "skipped" in line, (name, warnings)


def test_directory_of_no_trace_fails_with_the_files_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"lr": 0.001}')
    one_error(run(str(tmp_path)), f"{tmp_path / 'config.json'}: ", "no traceEvents")
    (tmp_path / "metrics.json").write_text("[1, 2, 3]")
    p = run(str(tmp_path))
    assert p.returncode == 2
    *warnings, error = p.stderr.splitlines()
    assert len(warnings) == 2 and all("skipped" in w for w in warnings), p.stderr
    assert error == "traceadvisor: error: none of the 2 trace files could be read (see the warnings)"


# -- the default --max-size ---------------------------------------------------------------------------
def _limit_address_space() -> None:
    # Only a safety net, so that a build with the old fixed 16 GiB default fails this test with a
    # MemoryError instead of filling the machine's memory; what the limit is derived from is not it.
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))


def test_default_max_size_is_half_the_memory(tmp_path: Path) -> None:
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if memory > 48 << 30:
        pytest.skip("the bomb that proves it would be over 100 MB on a machine this large")
    # Inflates to 1.1 x the machine's memory: over twice the new default (memory / 2), which the
    # reader refuses as soon as the ratio is known, and under twice the old 16 GiB (on machines up to
    # 29 GiB), which it read on until it ran out of memory.
    bomb = tmp_path / "events.json.gz"
    event = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 1.0}, '
    bomb.write_bytes(gzip_bomb(b'{"traceEvents": [', event, inflated_gib=1.1 * memory / 2**30))
    t0 = time.monotonic()
    p = run(str(bomb), preexec_fn=_limit_address_space, timeout=300)
    line = one_error(p, "--max-size", "the default limit is half of", "memory")
    assert time.monotonic() - t0 < 30
    limit = float(re.search(r"over the ([\d.]+) GiB limit", line).group(1))  # type: ignore[union-attr]
    assert 0 < limit <= float(f"{memory / 2 / 2**30:.3g}"), line  # half the memory, or a lower cgroup limit


def test_cgroup_memory_limits_are_read_up_the_hierarchy(tmp_path: Path) -> None:
    """A container's limit, set on its cgroup or an ancestor, lowers the default (limits.py); the
    walk runs on a copy of cgroupfs's layout (this machine's own cgroups may have no limit)."""
    from traceadvisor.limits import _limits_up

    v1 = tmp_path / "memory"
    (v1 / "docker" / "abc").mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "unlimited"
    (v1 / "docker" / "memory.limit_in_bytes").write_text(f"{4 << 30}\n")
    (v1 / "docker" / "abc" / "memory.limit_in_bytes").write_text(f"{8 << 30}\n")
    assert sorted(_limits_up(v1, "memory.limit_in_bytes", "/docker/abc")) == [4 << 30, 8 << 30]
    v2 = tmp_path / "unified"
    (v2 / "user.slice").mkdir(parents=True)
    (v2 / "user.slice" / "memory.max").write_text("max\n")  # v2's "unlimited"; no file at the root
    assert _limits_up(v2, "memory.max", "/user.slice") == []
    (v2 / "user.slice" / "memory.max").write_text(f"{2 << 30}\n")
    assert _limits_up(v2, "memory.max", "/user.slice") == [2 << 30]
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "memory.max").write_text("1024\n")
    assert _limits_up(v2, "memory.max", "/../elsewhere") == []  # outside a cgroup namespace: not here
