"""A watcher that outlives the captured process and finishes a ``run.json`` it left "running".

Capture rewrites ``run.json`` when the program ends, whatever the program did (an exception, a
``sys.exit``, Ctrl-C). What no code in the process can handle is its death: SIGKILL (the OOM killer,
a scheduler's hard kill), a signal without a handler (SIGTERM on preemption, SIGSEGV), ``os._exit``
in the program. So capture starts a small helper process that holds the read end of a pipe whose
write end only the captured process holds. The kernel closes every descriptor of a process that
ends, however it ends, so the helper reads end-of-file exactly when the process is gone. Capture writes one byte
before it closes the pipe once its final ``run.json`` is written: the helper then exits and touches
nothing. End-of-file without that byte means the process died; then, if ``run.json`` still says
"running", the helper rewrites it (atomically) as ended abnormally, with the exit status when it
can read it, and removes the temporary files that process left in the run folder.

The write end must stay in this process alone: the pipe is created non-inheritable (closed by
``exec``, so no subprocess holds it), and a child made by ``os.fork`` (multiprocessing, DataLoader
workers) closes its copy at once (``os.register_at_fork``); otherwise the helper would wait for that
child too.

The exit status: until its parent reaps it, an ended process is a zombie whose
``/proc/<pid>/stat`` still holds its wait status (field 52, Linux >= 3.5). The helper reads it when
it wakes up; a launcher that reaps at once (a shell, torchrun) may win that race, and the status is
then recorded as unknown.

The helper starts its own session (``setsid``), so Ctrl-C in a terminal, which signals the whole
foreground process group, does not reach it, and ignores SIGTERM/SIGHUP/SIGINT sent to the job: it
must outlive the process it watches to do its one job, and it ends by itself at end-of-file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_MAIN = "import sys; from traceadvisor.capture.watcher import main; sys.exit(main(sys.argv[1:]))"
_RELEASED = b"\n"  # capture finished run.json itself

# Write ends held by this process: closed in forked children (see the module docstring).
_held: set[int] = set()


def _close_in_child() -> None:
    for fd in list(_held):
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


class RunWatcher:
    """Starts the helper for one ``run.json``; ``release()`` once the run has written its final state."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, run_file: Path, temp_patterns: list[str]) -> bool:
        """Watch this process for ``run_file``; False (nothing started) where no helper can run."""
        if os.name != "posix" or not sys.executable:
            return False
        read_end, write_end = os.pipe()  # both non-inheritable (PEP 446)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _MAIN, str(os.getpid()), str(run_file), *temp_patterns],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # a helper outliving the program must not write on its terminal
                env=_helper_env(),
                start_new_session=True,
                close_fds=True,
            )
        except OSError:
            os.close(write_end)
            return False
        finally:
            os.close(read_end)
        self._fd = write_end
        _held.add(write_end)
        return True

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def release(self) -> None:
        """The run is final (or capture already said why it could not write it): the helper exits."""
        fd, self._fd = self._fd, None
        if fd is None or fd not in _held:
            return  # not started, or a forked child (its copy is closed already)
        _held.discard(fd)
        try:
            os.write(fd, _RELEASED)
        except OSError:
            pass
        os.close(fd)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass  # it finishes by itself; nothing waits on it


def _helper_env() -> dict[str, str]:
    import traceadvisor

    env = dict(os.environ)
    root = str(Path(traceadvisor.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


# -- the helper process ------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """``main([PID, RUN_FILE, TEMP_PATTERN...])``: wait for end-of-file on stdin, then finish ``RUN_FILE``."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    pid, run_file, patterns = int(argv[0]), Path(argv[1]), argv[2:]
    while True:
        try:
            data = os.read(0, 4096)
        except InterruptedError:
            continue
        except OSError:
            break
        if not data:
            break  # end-of-file: the process is gone
        if _RELEASED in data:
            return 0
    if finish(run_file, wait_status(pid), time.time()):
        remove_temporary_files(run_file.parent, patterns)
    return 0


def wait_status(pid: int, patience_s: float = 1.0) -> int | None:
    """The wait status of ``pid`` once it is an unreaped zombie (``/proc/<pid>/stat`` field 52), else None.

    The kernel closes an exiting process's files (our end-of-file) before it marks it a zombie, so
    the process may still be exiting when we look: look again for up to ``patience_s``.
    """
    deadline = time.monotonic() + patience_s
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None  # reaped already
        fields = stat[stat.rindex(")") + 2 :].split()  # field 3 onwards: the command name may hold spaces
        if fields and fields[0] == "Z" and len(fields) >= 50:
            try:
                return int(fields[49])  # field 52
            except ValueError:
                return None
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


def describe_status(status: int | None) -> tuple[int | None, str | None, str]:
    """``(code, signal name, words)`` for a wait status: code as a shell reports it (128 + signal)."""
    if status is None:
        return None, None, "ended abruptly (a signal or os._exit; its exit status was not seen)"
    if os.WIFSIGNALED(status):
        num = os.WTERMSIG(status)
        try:
            name = signal.Signals(num).name
        except ValueError:
            name = f"signal {num}"
        hint = " (the OOM killer, or a hard kill)" if num == signal.SIGKILL else ""
        return 128 + num, name, f"was killed by {name}{hint}"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    return code, None, f"ended with exit status {code} before capture finished (os._exit?)"


def finish(run_file: Path, status: int | None, now: float) -> bool:
    """Rewrite ``run_file`` as ended abnormally if it still says "running"; True if it did."""
    from traceadvisor.atomic import write_bytes
    from traceadvisor.capture.runinfo import now_iso

    try:
        data: dict[str, Any] = json.loads(run_file.read_bytes())
    except (OSError, ValueError):
        return False
    exit_info = data.get("exit")
    if not isinstance(exit_info, dict) or exit_info.get("status") != "running":
        return False
    code, sig, words = describe_status(status)
    data["exit"] = {"status": "abnormal", "code": code, "signal": sig, "exception": None}
    data["finished_at"] = now_iso()
    started = data.get("started_at")
    if isinstance(started, str):
        try:
            import datetime as dt

            data["duration_s"] = round(now - dt.datetime.fromisoformat(started).timestamp(), 3)
        except ValueError:
            pass
    warnings = data.setdefault("warnings", [])
    if isinstance(warnings, list):
        warnings.append(
            f"the process {words}; run.json was completed by capture's watcher: the files listed were written "
            "before, a cycle that was recording is lost"
        )
    data["updated_at"] = now_iso()
    try:
        write_bytes(run_file, (json.dumps(data, indent=2, default=str) + "\n").encode())
    except OSError:
        return False
    return True


def remove_temporary_files(folder: Path, patterns: list[str]) -> None:
    """Remove what the dead process was writing: temporary exports and atomic-write files."""
    for pattern in patterns:
        for path in folder.glob(pattern):
            try:
                path.unlink()
            except OSError:
                pass
