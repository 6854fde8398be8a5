"""Where analysis jobs run: a worker process (default) or a worker thread.

Both backends run jobs one at a time, in order, and are driven by the training thread: ``submit``
and ``collect`` never block unless asked to wait, and ``collect`` is where timeouts and dead
workers are noticed. A job that cannot finish (its worker died, hung past ``timeout``, or the
advisor closed first) comes back as an ``Outcome`` with ``failure`` set, never as an exception.

Why a separate process by default: the analysis parses JSON and builds tables in Python and
pandas; in a thread it would hold the GIL for long stretches and stall the training loop's Python
code (the GIL is handed over only every 5 ms, ``sys.getswitchinterval``).

Why ``subprocess`` running a fresh ``python`` (``worker.main``) and not ``fork``: a process
that holds CUDA state must not be forked (the child inherits a CUDA context it cannot use; CUDA
documents fork without exec as unsupported, and torch raises "Cannot re-initialize CUDA in forked
subprocess"). ``subprocess`` forks and immediately execs a fresh interpreter from C, as
multiprocessing's ``spawn`` does, so no CUDA state is shared. Unlike ``spawn`` and
``forkserver`` it does not re-import the user's ``__main__`` in the child: both run the training
script's module body again as ``__mp_main__``, which re-runs any training code that is not under
``if __name__ == "__main__":``.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

from traceadvisor.advisor.worker import run_job

# The worker's entry point (``-c``, not ``-m``: runpy would warn that the package already imported it).
# The priority is lowered before anything heavy is imported (traceadvisor/worker_priority.py).
_WORKER_MAIN = (
    "import sys; from traceadvisor.worker_priority import lower_priority; lower_priority(sys.argv[2]); "
    "from traceadvisor.advisor.worker import main; sys.exit(main(sys.argv[1:]))"
)
# How often a waiting ``collect`` wakes up to check that the worker is alive and within its time.
_WAKE_S = 0.2


@dataclass
class Outcome:
    """What became of a job: the worker's ``result``, or why there is none (``failure``)."""

    job: dict[str, Any]
    result: dict[str, Any] | None = None
    failure: str | None = None


# A job's timeout counts from the moment its worker says it started it. Before that the worker
# may still be starting (a fresh interpreter importing pandas takes seconds, more when niced on a
# busy machine); it gets this much longer before it counts as hung.
STARTUP_GRACE_S = 60.0


@dataclass
class _Flight:
    job: dict[str, Any]
    head_since: float | None = None  # when the job became the next one to run
    started_at: float | None = None  # when the worker said it began the job

    @property
    def started(self) -> bool:
        return self.started_at is not None

    def overdue(self, timeout: float, now: float) -> bool:
        if self.started_at is not None:
            return now - self.started_at > timeout
        return self.head_since is not None and now - self.head_since > timeout + STARTUP_GRACE_S


@dataclass
class _Queue:
    """Jobs submitted and not finished, in order; the first is the one running."""

    flights: OrderedDict[int, _Flight] = field(default_factory=OrderedDict)

    def add(self, job: dict[str, Any], now: float) -> None:
        self.flights[job["id"]] = _Flight(job, head_since=None if self.flights else now)

    def finish(self, job_id: int, now: float) -> _Flight | None:
        flight = self.flights.pop(job_id, None)
        if self.flights:
            head = next(iter(self.flights.values()))
            if head.head_since is None:
                head.head_since = now
        return flight

    def head(self) -> _Flight | None:
        return next(iter(self.flights.values()), None)

    @property
    def running(self) -> bool:
        """Whether the worker said it started the first job."""
        head = self.head()
        return head is not None and head.started

    def drain(self) -> list[_Flight]:
        out = list(self.flights.values())
        self.flights.clear()
        return out


class Backend(Protocol):
    """The interface the advisor drives."""

    @property
    def pending(self) -> int: ...

    @property
    def broken(self) -> str | None: ...

    @property
    def running(self) -> bool: ...

    def submit(self, job: dict[str, Any]) -> list[Outcome]: ...

    def collect(self, wait: float = 0.0) -> list[Outcome]: ...

    def abandon(self, why: str) -> list[Outcome]: ...

    def close(self) -> None: ...


def _fail(flights: list[_Flight], why: str) -> list[Outcome]:
    return [Outcome(f.job, failure=why) for f in flights]


class ProcessBackend:
    """Jobs run in one long-lived worker process, replaced when it dies or hangs."""

    def __init__(self, *, priority: str, timeout: float, max_restarts: int) -> None:
        self.priority = priority
        self.timeout = timeout
        self.max_restarts = max_restarts
        self.restarts = 0
        self.worker_pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._queue = _Queue()
        self._broken: str | None = None

    @property
    def pending(self) -> int:
        return len(self._queue.flights)

    @property
    def broken(self) -> str | None:
        """Why analysis is off for good (the worker failed too often), or ``None``."""
        return self._broken

    @property
    def running(self) -> bool:
        return self._queue.running

    def submit(self, job: dict[str, Any]) -> list[Outcome]:
        if self._broken:
            return [Outcome(job, failure=self._broken)]
        self._queue.add(job, time.monotonic())
        return self._send(job)

    def _send(self, job: dict[str, Any]) -> list[Outcome]:
        try:
            if self._proc is None:
                self._start()
            assert self._conn is not None
            self._conn.send(("job", job))
        except OSError as exc:  # could not start, or the worker died before reading
            return self._worker_lost(f"the analysis worker could not be reached ({exc})")
        return []

    def _start(self) -> None:
        parent, child = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_MAIN, str(child.fileno()), self.priority, str(os.getpid())],
                pass_fds=(child.fileno(),),
                env=worker_env(),
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self.worker_pid = self._proc.pid
        self._conn = Connection(parent.detach())

    def collect(self, wait: float = 0.0) -> list[Outcome]:
        out: list[Outcome] = []
        deadline = time.monotonic() + wait
        while self._queue.flights and self._conn is not None:
            out.extend(self._receive(max(0.0, min(deadline - time.monotonic(), _WAKE_S))))
            out.extend(self._check_health())
            if time.monotonic() >= deadline or not self._queue.flights:
                break
        return out

    def _receive(self, wait: float) -> list[Outcome]:
        out: list[Outcome] = []
        conn = self._conn
        assert conn is not None
        try:
            ready = conn.poll(wait)
            while ready:
                msg = conn.recv()
                now = time.monotonic()
                if msg[0] == "started" and msg[1] in self._queue.flights:
                    self._queue.flights[msg[1]].started_at = now
                elif msg[0] == "done":
                    flight = self._queue.finish(msg[1], now)
                    if flight is not None:
                        out.append(Outcome(flight.job, result=msg[2]))
                ready = conn.poll(0)
        except (EOFError, OSError):
            pass  # the worker is gone; _check_health says why
        return out

    def _check_health(self) -> list[Outcome]:
        proc = self._proc
        if proc is None:
            return []
        code = proc.poll()
        if code is not None:
            return self._worker_lost(f"the analysis worker exited ({_exit_reason(code)})")
        head = self._queue.head()
        if head is not None and head.overdue(self.timeout, time.monotonic()):
            return self._worker_lost(f"the analysis did not finish within {self.timeout:g} s; its worker was killed")
        return []

    def _worker_lost(self, why: str) -> list[Outcome]:
        """The head job fails with ``why``; the others go to a new worker while restarts are left."""
        self._kill()
        flights = self._queue.drain()
        out: list[Outcome] = []
        if flights:
            out.append(Outcome(flights[0].job, failure=why))
            flights = flights[1:]
        self.restarts += 1
        if self.restarts > self.max_restarts:
            self._broken = f"analysis is off: the worker failed {self.restarts} times (last: {why})"
            return out + _fail(flights, self._broken)
        now = time.monotonic()
        for f in flights:
            self._queue.add(f.job, now)
        for f in flights:
            lost = self._send(f.job)
            if lost:
                return out + lost
        return out

    def abandon(self, why: str) -> list[Outcome]:
        """Stop now: kill the worker and fail what is left with ``why``."""
        self._kill()
        return _fail(self._queue.drain(), why)

    def close(self) -> None:
        """Ask an idle worker to exit (or kill a busy one) and release the socket."""
        if self._proc is not None and self._conn is not None and not self._queue.flights:
            try:
                self._conn.send(("stop",))
                self._proc.wait(timeout=2.0)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            try:
                self._proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL cannot end
                pass
        if self._conn is not None:
            self._conn.close()
        self._proc = None
        self._conn = None


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = "; out of memory?" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"


def worker_env() -> dict[str, str]:
    """The worker's environment: finds this traceadvisor, uses one BLAS/OpenMP thread, no GPU."""
    import traceadvisor

    env = dict(os.environ)
    root = str(Path(traceadvisor.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    # numpy/pandas thread pools would compete with the training loop for cores; one is plenty.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[var] = "1"
    # The worker is background work on one core: no second decoding process (trace/parallel.py).
    env["TRACEADVISOR_JOBS"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""  # the analysis never touches a GPU
    return env


class ThreadBackend:
    """Jobs run in a daemon thread of the training process.

    Cheaper to start and needs no interpreter, but the analysis competes with the training
    loop for the GIL. The thread is not reniced: a low-priority thread that holds the GIL when
    the OS preempts it makes the training thread wait longer (priority inversion).

    A thread cannot be killed, so a job past ``timeout`` is *cancelled*: its ``cancel`` event is set,
    and the analysis stops at its next check (between loading and summarising, before each rule,
    every 50 ms inside a rule; ``analysis.analyze``), within one C call at worst (decoding a file,
    one pandas operation). An abandoned thread that went on analysing would hold the GIL for the
    rest of its job (steps went from 1.3 ms to 130 ms). The jobs after it go to a fresh thread,
    which starts only once the cancelled one has returned: one analysis at a time competes with
    training, never two.
    """

    def __init__(self, *, timeout: float) -> None:
        self.timeout = timeout
        self._queue = _Queue()
        self._results: queue.SimpleQueue[tuple[int, str, int, dict[str, Any] | None]] = queue.SimpleQueue()
        self._jobs: queue.SimpleQueue[tuple[dict[str, Any], threading.Event] | None] | None = None
        self._cancels: dict[int, threading.Event] = {}
        self._thread: threading.Thread | None = None
        self._generation = 0

    @property
    def pending(self) -> int:
        return len(self._queue.flights)

    @property
    def broken(self) -> str | None:
        return None

    @property
    def running(self) -> bool:
        return self._queue.running

    def submit(self, job: dict[str, Any]) -> list[Outcome]:
        self._queue.add(job, time.monotonic())
        if self._jobs is None:
            self._start()
        assert self._jobs is not None
        cancel = self._cancels[job["id"]] = threading.Event()
        self._jobs.put((job, cancel))
        return []

    def _start(self) -> None:
        self._generation += 1
        jobs: queue.SimpleQueue[tuple[dict[str, Any], threading.Event] | None] = queue.SimpleQueue()
        self._jobs = jobs
        thread = threading.Thread(
            target=self._serve,
            args=(self._generation, jobs, self._thread),
            name="traceadvisor-analysis",
            daemon=True,
        )
        self._thread = thread
        thread.start()

    def _serve(
        self,
        generation: int,
        jobs: queue.SimpleQueue[tuple[dict[str, Any], threading.Event] | None],
        previous: threading.Thread | None,
    ) -> None:
        if previous is not None:
            previous.join()  # a cancelled job still returning: never two analyses at once
        while True:
            item = jobs.get()
            if item is None:
                return
            job, cancel = item
            if cancel.is_set():
                continue  # failed already (the advisor closed, or it waited past the timeout)
            self._results.put((generation, "started", job["id"], None))
            self._results.put((generation, "done", job["id"], run_job(job, cancel)))

    def collect(self, wait: float = 0.0) -> list[Outcome]:
        out: list[Outcome] = []
        deadline = time.monotonic() + wait
        while self._queue.flights:
            remaining = deadline - time.monotonic()
            try:
                if remaining > 0:
                    gen, kind, job_id, result = self._results.get(timeout=min(remaining, _WAKE_S))
                else:
                    gen, kind, job_id, result = self._results.get_nowait()
            except queue.Empty:
                out.extend(self._check_timeout())
                if time.monotonic() >= deadline:
                    break
                continue
            if gen != self._generation:
                continue  # a late answer from a cancelled thread
            if kind == "started" and job_id in self._queue.flights:
                self._queue.flights[job_id].started_at = time.monotonic()
            elif kind == "done" and result is not None:
                flight = self._queue.finish(job_id, time.monotonic())
                self._cancels.pop(job_id, None)
                if flight is not None:
                    out.append(Outcome(flight.job, result=result))
        out.extend(self._check_timeout())
        return out

    def _check_timeout(self) -> list[Outcome]:
        head = self._queue.head()
        if head is None or not head.overdue(self.timeout, time.monotonic()):
            return []
        why = f"the analysis did not finish within {self.timeout:g} s; it was cancelled (thread mode)"
        self._cancel(head.job["id"])
        rest = self._queue.drain()[1:]
        self._retire()
        for f in rest:
            self._cancel(f.job["id"])  # the old thread skips its copy; the fresh thread gets a new one
            self.submit(f.job)
        return [Outcome(head.job, failure=why)]

    def _cancel(self, job_id: int) -> None:
        event = self._cancels.pop(job_id, None)
        if event is not None:
            event.set()

    def _retire(self) -> None:
        if self._jobs is not None:
            self._jobs.put(None)  # the old thread exits once its current job returns
        self._jobs = None
        self._generation += 1

    def abandon(self, why: str) -> list[Outcome]:
        for job_id in list(self._cancels):
            self._cancel(job_id)
        self._retire()
        return _fail(self._queue.drain(), why)

    def close(self) -> None:
        for job_id in list(self._cancels):
            self._cancel(job_id)
        self._retire()
