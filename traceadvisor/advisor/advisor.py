"""``Advisor``: an ``on_trace_ready`` handler that saves each profiling cycle's trace, analyses it off
the training thread, and delivers the report to callbacks, logging and TensorBoard.

Threading contract: the training thread only exports the trace (``export_chrome_trace``, which
torch runs synchronously inside the ``prof.step()`` that closes a window) and hands a small job to
the backend. Compression and analysis run in a worker process (or thread). Reports are delivered
on the thread that calls ``prof.step()`` / ``poll()`` / ``close()`` (the training thread), at the
first step after the analysis finished: callbacks never run in a worker thread, and
``fail_on`` raises where the user can see it, in the training loop.
"""

from __future__ import annotations

import atexit
import copy
import itertools
import logging
import os
import sys
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from traceadvisor.advisor.backend import Backend, Outcome, ProcessBackend, ThreadBackend
from traceadvisor.advisor.report import AdvisorReport
from traceadvisor.advisor.sinks import ConsoleSink, TensorBoardSink
from traceadvisor.capture import cupti
from traceadvisor.capture.export import export_chrome_json
from traceadvisor.capture.gpu_power import PowerRecorder
from traceadvisor.capture.runinfo import trace_path
from traceadvisor.capture.sync_sites import SyncSiteRecorder, profiler_recording
from traceadvisor.capture.unprofiled import UnprofiledSteps, now_ns, profiler_off, recorded_steps
from traceadvisor.config import Config
from traceadvisor.report.finding import Severity

logger = logging.getLogger("traceadvisor")

Callback = Callable[[AdvisorReport], object]
Mode = Literal["process", "thread"]
_MAX_REPORTS_KEPT = 64  # ``Advisor.reports`` keeps the latest ones; a repeat=0 schedule runs forever
_job_ids = itertools.count(1)


class AdvisorFindingsError(RuntimeError):
    """Raised in the training loop when a report has a finding at or above ``fail_on``.

    ``report`` is that report; on the other ranks of a multi-process run, which stop together with
    rank 0 but did not analyse, it is ``None`` and ``findings`` is empty.
    """

    def __init__(self, report: AdvisorReport | None, threshold: Severity) -> None:
        self.report = report
        self.threshold = threshold
        self.findings = report.at_least(threshold) if report is not None else []
        if report is None or not self.findings:
            message = f"traceadvisor: rank 0 reported findings at or above {threshold.value}; every rank stops"
        else:
            top = self.findings[0]
            message = (
                f"traceadvisor: {len(self.findings)} finding(s) at or above {threshold.value} in {report.summary()}: "
                f"[{top.severity.value}] {top.rule}: {top.message}"
            )
        super().__init__(message)


@dataclass
class _Job:
    """The advisor's side of a submitted job: where its files are and what it belongs to."""

    id: int
    cycle: int
    rank: int
    step: int | None
    trace: Path
    raw: Path | None
    keep: bool
    export_s: float | None
    head: dict[str, Any] | None = None  # the trace's top-level "traceadvisor" key, added when compressed


class Advisor:
    """Save, analyse and report each cycle of a ``torch.profiler.profile`` schedule.

    Use it as ``torch.profiler.profile(schedule=..., on_trace_ready=Advisor("runs/prof"))`` and
    call ``prof.step()`` each iteration (the advisor wraps that profiler's ``step`` so reports are
    delivered at the next step), or through ``traceadvisor.profile(...)`` and the Lightning and
    Hugging Face callbacks. Each cycle's trace is written as ``<out_dir>/cycle<N>/rank<R>.json.gz``
    (one folder per cycle, so ``traceadvisor analyze <out_dir>/cycle<N>`` sees all ranks).

    Arguments:
        out_dir: folder for the traces (created).
        on_findings: a callable (or several) receiving each ``AdvisorReport``, on the training thread.
            An exception in it is logged and training continues.
        select, ignore: rules to run or skip (codes, code prefixes or names, as ``analyze --select``).
        fail_on: ``"low"``, ``"medium"`` or ``"high"``: raise ``AdvisorFindingsError`` from the next
            ``prof.step()`` (or ``poll()``/``close()``) after a report has a finding at or above it.
        keep_traces: keep the trace files after analysis (default) or delete them.
        config: a configuration file, a ``Config``, or ``None`` for the nearest ``traceadvisor.toml``
            or ``[tool.traceadvisor]`` in ``pyproject.toml`` (as ``analyze`` does).
        rules_dir: folders of your own rules.
        mode: ``"process"`` (default: a low-priority worker process, no GIL contention) or ``"thread"``.
        analyze: analyse the traces (``False``: only save them, compressed, off the training thread).
        report: deliver reports to logging, TensorBoard and ``on_findings`` (``False`` on ranks other
            than 0 in the integrations).
        rank: the rank in the file names; default from ``torch.distributed``, else ``$RANK``, else 0.
        tensorboard: a ``SummaryWriter``, a log directory, or ``True`` (``<out_dir>/tensorboard``).
        analysis_timeout: seconds one job may run before its worker is killed (or its thread abandoned).
        close_timeout: seconds ``close`` waits when the interpreter exits without an explicit close.
        worker_priority: ``"idle"`` (default: the worker runs only on CPU time the training loop and
            other normal tasks leave, ``SCHED_IDLE`` on Linux, nice 19 elsewhere), or a niceness (0-19).
        max_pending: skip the analysis of a new cycle (keeping its trace) while this many are unfinished.
        max_restarts: worker replacements allowed before analysis is turned off with a warning.
        hook_step: wrap the profiler's ``step`` to deliver reports; turn off if you call ``poll()``.
        max_trace_gib: refuse traces that inflate past this size (as ``analyze --max-size``).
        console: print the run's first report, and every later one with a medium or high finding,
            to stderr (the rest go to logging); ``False``: every report to logging only.
        html: also write each analysed cycle's HTML report beside its trace
            (``<out_dir>/cycle<N>/rank<R>.html``: offline, with the timeline; ``AdvisorReport.html``).
    """

    def __init__(
        self,
        out_dir: str | Path,
        on_findings: Callback | Iterable[Callback] | None = None,
        select: str | Sequence[str] | None = None,
        ignore: str | Sequence[str] | None = None,
        fail_on: str | Severity | None = None,
        keep_traces: bool = True,
        *,
        config: str | Path | Config | None = None,
        rules_dir: str | Path | Sequence[str | Path] | None = None,
        mode: Mode = "process",
        analyze: bool = True,
        report: bool = True,
        rank: int | None = None,
        tensorboard: Any = None,
        analysis_timeout: float = 900.0,
        close_timeout: float = 60.0,
        worker_priority: int | Literal["idle"] = "idle",
        max_pending: int = 2,
        max_restarts: int = 2,
        hook_step: bool = True,
        max_trace_gib: float = 16.0,
        console: bool = True,
        html: bool = False,
    ) -> None:
        if mode not in ("process", "thread"):
            raise ValueError(f"mode must be 'process' or 'thread', not {mode!r}")
        try:
            self.fail_on = Severity(fail_on) if fail_on is not None else None
        except ValueError:
            raise ValueError(f"fail_on must be 'low', 'medium' or 'high', not {fail_on!r}") from None
        if not analysis_timeout > 0 or not close_timeout >= 0 or max_pending < 1 or max_restarts < 0:
            raise ValueError("analysis_timeout must be > 0, close_timeout >= 0, max_pending >= 1, max_restarts >= 0")
        # Absolute: the worker process keeps the cwd it started with, the training script may chdir.
        self.out_dir = Path(out_dir).absolute()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.keep_traces = keep_traces
        self.html = html
        self.mode: Mode = mode
        self.analyze = analyze
        self.report = report
        self.rank = rank
        self.analysis_timeout = float(analysis_timeout)
        self.close_timeout = float(close_timeout)
        if worker_priority != "idle" and not (isinstance(worker_priority, int) and 0 <= worker_priority <= 19):
            raise ValueError(f"worker_priority must be 'idle' or a niceness 0-19, not {worker_priority!r}")
        self.worker_priority = worker_priority
        self.max_pending = max_pending
        self.max_restarts = max_restarts
        self.hook_step = hook_step
        self.max_bytes = int(max_trace_gib * 2**30) if max_trace_gib < 2**32 else sys.maxsize
        # Configuration errors (an unknown rule in select) surface here, on the caller's thread.
        self.config = build_config(config, select, ignore, rules_dir) if analyze else None
        if on_findings is None:
            self._callbacks: list[Callback] = []
        elif callable(on_findings):
            self._callbacks = [on_findings]
        else:
            self._callbacks = list(on_findings)
        self._console = ConsoleSink(console)
        self._tensorboard = TensorBoardSink(tensorboard, self.out_dir / "tensorboard") if tensorboard else None
        self.reports: deque[AdvisorReport] = deque(maxlen=_MAX_REPORTS_KEPT)
        self.cycles = 0
        self._backend: Backend | None = None
        self._jobs: dict[int, _Job] = {}
        self._ready: list[AdvisorReport] = []
        self._closed = False
        self._warned: set[str] = set()
        self._hooked: tuple[weakref.ref[Any], Any, bool] | None = None
        # Step times with the profiler off, written into each trace (docs/capture.md). Seen from the
        # first cycle's end when the advisor wraps ``prof.step`` itself, from the first step under
        # ``traceadvisor.profile()``.
        self.unprofiled = UnprofiledSteps("advisor")
        # The Python line of each blocking sync in the recorded steps (GPU only; docs/capture.md),
        # told the steps as the unprofiled times are.
        self.sync_sites = SyncSiteRecorder("advisor")
        # the GPU's power state as the profiler turns on (the program unprofiled) and as each window ends
        self.power = PowerRecorder("advisor")
        atexit.register(self._at_exit)

    # -- the on_trace_ready entry point ---------------------------------------------------------
    def __call__(self, prof: Any) -> None:
        """Called by torch.profiler at the end of each cycle: save the trace, queue its analysis."""
        try:
            if self._closed:
                self._warn_once("closed", "traceadvisor: the advisor is closed; a new profiling cycle was not saved")
                return
            if self.hook_step:
                self._hook(prof)
            self.unprofiled.trace_ended(cupti.profiles_cuda(prof), os.environ.get(cupti.ENV))
            self.cycles += 1
            rank = self.rank if self.rank is not None else detect_rank()
            # cycle<N>/rank<R>.json.gz: the names capture gives its traces too (one function decides both).
            trace = self.out_dir / trace_path(rank, "cycle", self.cycles)
            folder = trace.parent
            folder.mkdir(parents=True, exist_ok=True)
            # Plain JSON first (kineto writes it directly; the .gz suffix would make torch gzip it
            # here, on the training thread); the worker compresses it into ``trace`` atomically.
            raw = folder / f".rank{rank}.json.{os.getpid()}.tmp"
            t0 = time.perf_counter()
            try:
                # Raises (and leaves no half-written file) where kineto fails silently: a full disk.
                export_chrome_json(prof, raw)
            except BaseException:
                _remove_if_empty(folder)
                raise
            export_s = time.perf_counter() - t0
            step = getattr(prof, "step_num", None)
            job = _Job(next(_job_ids), self.cycles, rank, step, trace, raw, self.keep_traces, export_s)
            steps = recorded_steps(prof)
            job.head = {**self.unprofiled.key(steps), **self.sync_sites.key(steps), **self.power.key(steps)}
            self._submit(job, analyze=self.analyze)
        except OSError as exc:
            logger.warning(
                "traceadvisor: could not save the trace of cycle %d: %s; training continues", self.cycles, exc
            )
        except Exception:
            logger.exception("traceadvisor: could not save the trace of cycle %d; training continues", self.cycles)

    def submit_trace(self, path: str | Path, *, step: int | None = None) -> None:
        """Analyse an existing trace file in the background (the file is left in place)."""
        self.cycles += 1
        rank = self.rank if self.rank is not None else detect_rank()
        job = _Job(next(_job_ids), self.cycles, rank, step, Path(path).absolute(), None, True, None)
        self._submit(job, analyze=True)

    def _submit(self, job: _Job, analyze: bool) -> None:
        backend = self._get_backend()
        if backend is None or backend.broken:
            self._warn_once("broken", f"traceadvisor: {backend.broken if backend else 'no analysis worker'}")
            self._keep(job)
            return
        if backend.pending >= self.max_pending:
            kept = self._keep(job)
            logger.warning(
                "traceadvisor: cycle %d not analysed: %d analyses are still running (trace kept at %s)",
                job.cycle,
                backend.pending,
                kept,
            )
            return
        self._jobs[job.id] = job
        payload = {
            "id": job.id,
            "trace": str(job.trace),
            "raw": str(job.raw) if job.raw is not None else None,
            "head": job.head,
            "analyze": analyze,
            "html": self.html,
            "keep": job.keep,
            "config": self.config,
            "max_bytes": self.max_bytes,
        }
        self._handle(backend.submit(payload))

    def _get_backend(self) -> Backend | None:
        if self._backend is None:
            if self.mode == "process" and os.name == "posix" and sys.executable:
                self._backend = ProcessBackend(
                    priority=str(self.worker_priority), timeout=self.analysis_timeout, max_restarts=self.max_restarts
                )
            else:
                if self.mode == "process":
                    self._warn_once("thread", "traceadvisor: no worker process on this platform; analysing in a thread")
                self._backend = ThreadBackend(timeout=self.analysis_timeout)
        return self._backend

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending(self) -> int:
        """Analyses submitted and not yet finished."""
        return self._backend.pending if self._backend is not None else 0

    def status(self) -> dict[str, Any]:
        """What the background side is doing: jobs pending, whether the first one started, the
        worker process's id and restarts (process mode), and why analysis is off (if it is)."""
        backend = self._backend
        return {
            "mode": self.mode,
            "cycles": self.cycles,
            "pending": backend.pending if backend is not None else 0,
            "running": bool(backend is not None and backend.running),
            "worker_pid": getattr(backend, "worker_pid", None),
            "restarts": getattr(backend, "restarts", 0),
            "broken": backend.broken if backend is not None else None,
            "closed": self._closed,
        }

    # -- results --------------------------------------------------------------------------------
    def _handle(self, outcomes: list[Outcome]) -> None:
        for out in outcomes:
            job = self._jobs.pop(out.job["id"], None)
            if job is None:
                continue
            if out.failure is not None:
                kept = self._keep(job)
                where = f"trace kept at {kept}" if kept else "trace not kept"
                logger.warning("traceadvisor: cycle %d was not analysed: %s (%s)", job.cycle, out.failure, where)
                continue
            result = out.result or {}
            trace = Path(result["trace"]) if result.get("trace") else None
            if not result.get("ok"):
                # A compression that failed (a full disk) leaves the exported JSON: keep it visibly.
                kept = self._keep(job) if job.raw is not None else trace
                logger.warning(
                    "traceadvisor: analysis of cycle %d failed: %s (trace: %s)", job.cycle, result.get("error"), kept
                )
                continue
            if result.get("report") is None:
                continue  # saved only (analyze=False)
            timings = dict(result.get("timings") or {})
            if job.export_s is not None:
                timings["export_s"] = job.export_s
            self._ready.append(
                AdvisorReport.from_document(
                    result["report"],
                    cycle=job.cycle,
                    rank=job.rank,
                    step=job.step,
                    trace_path=trace,
                    timings=timings,
                    html_path=Path(result["html"]) if result.get("html") else None,
                )
            )

    def _keep(self, job: _Job) -> Path | None:
        """Keep what the training thread wrote when no worker will finish the job: the plain JSON."""
        raw = job.raw
        try:
            if raw is not None:
                # A worker killed while writing the .gz leaves atomic.write_bytes's temporary file.
                for partial in job.trace.parent.glob(f".{job.trace.name}.*.tmp"):
                    partial.unlink(missing_ok=True)
            if raw is None or not raw.exists():
                return job.trace if job.trace.exists() else None
            if not job.keep:
                raw.unlink()
                return None
            if job.trace.exists():
                raw.unlink()
                return job.trace
            plain = job.trace.with_suffix("")  # rank0.json.gz -> rank0.json
            raw.replace(plain)
            return plain
        except OSError as exc:
            logger.warning("traceadvisor: could not keep the trace of cycle %d: %s", job.cycle, exc)
            return None

    def poll(self, *, raise_findings: bool = True) -> list[AdvisorReport]:
        """Deliver the reports that are ready, on the calling thread; return them.

        Raises ``AdvisorFindingsError`` (after delivering) when ``fail_on`` is met, unless
        ``raise_findings`` is false.
        """
        try:
            if self._backend is not None and self._backend.pending:
                self._handle(self._backend.collect(0.0))
        except Exception:
            logger.exception("traceadvisor: checking on the analysis failed; training continues")
        return self._deliver(raise_findings=raise_findings)

    def wait(self, timeout: float | None = None, *, raise_findings: bool = True) -> list[AdvisorReport]:
        """Block until the analyses submitted so far finish (at most ``timeout`` seconds; they go on
        running after it), then deliver the reports, as ``poll`` does."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        try:
            backend = self._backend
            while backend is not None and backend.pending:
                wait = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
                self._handle(backend.collect(wait))
                if deadline is not None and time.monotonic() >= deadline:
                    break
        except Exception:
            logger.exception("traceadvisor: waiting for the analysis failed; training continues")
        return self._deliver(raise_findings=raise_findings)

    def _deliver(self, raise_findings: bool) -> list[AdvisorReport]:
        delivered: list[AdvisorReport] = []
        tripped: AdvisorReport | None = None
        while self._ready:
            report = self._ready.pop(0)
            self.reports.append(report)
            delivered.append(report)
            if self.report:
                self._send(report)
            if self.fail_on is not None and tripped is None and report.at_least(self.fail_on):
                tripped = report
        if tripped is not None and raise_findings:
            assert self.fail_on is not None
            raise AdvisorFindingsError(tripped, self.fail_on)
        return delivered

    def _send(self, report: AdvisorReport) -> None:
        sinks: list[tuple[str, Callback]] = [("console", self._console)]
        if self._tensorboard is not None:
            sinks.append(("TensorBoard", self._tensorboard))
        sinks.extend((f"on_findings callback {getattr(cb, '__qualname__', repr(cb))}", cb) for cb in self._callbacks)
        for name, sink in sinks:
            try:
                sink(report)
            except Exception:
                logger.exception(
                    "traceadvisor: %s raised on the report of cycle %d; training continues", name, report.cycle
                )

    # -- shutdown -------------------------------------------------------------------------------
    def close(self, timeout: float | None = None, *, raise_findings: bool = True) -> list[AdvisorReport]:
        """Wait for analyses still running (up to ``timeout`` seconds; ``None``: until each finishes
        or hits ``analysis_timeout``), deliver their reports, stop the worker. Idempotent.

        Analyses not finished in time are abandoned; their traces are kept (plain JSON when the
        compression had not finished). Raises ``AdvisorFindingsError`` when ``fail_on`` is met by a
        report delivered here, unless ``raise_findings`` is false.
        """
        if self._closed:
            return []
        self._closed = True
        atexit.unregister(self._at_exit)
        self._unhook()
        self.sync_sites.stop()
        self.power.close()
        backend = self._backend
        try:
            if backend is not None:
                deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
                while backend.pending:
                    wait = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
                    self._handle(backend.collect(wait))
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                if backend.pending:
                    self._handle(backend.abandon(f"still running when the advisor closed (close timeout {timeout} s)"))
                backend.close()
        except Exception:
            logger.exception("traceadvisor: error while closing the advisor")
        try:
            return self._deliver(raise_findings=raise_findings)
        finally:
            if self._tensorboard is not None:
                try:
                    self._tensorboard.close()
                except Exception:
                    logger.exception("traceadvisor: could not close the TensorBoard writer")

    def _at_exit(self) -> None:
        try:
            self.close(self.close_timeout, raise_findings=False)
        except Exception:  # pragma: no cover - close logs its own errors
            logger.exception("traceadvisor: error while closing the advisor at exit")

    def __enter__(self) -> Advisor:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(raise_findings=exc_type is None)

    # -- delivering at the next step ------------------------------------------------------------
    def _hook(self, prof: Any) -> None:
        """Wrap ``prof.step`` (on that profiler object only) so each step ends with ``poll()``."""
        if self._hooked is not None and self._hooked[0]() is prof:
            return
        self._unhook()
        had_own = "step" in vars(prof)
        original = prof.step
        me = weakref.ref(self)

        def step(*args: Any, **kwargs: Any) -> Any:
            started, number, off = now_ns(), getattr(prof, "step_num", -1), profiler_off(prof)
            result = original(*args, **kwargs)
            advisor = me()
            if advisor is not None and not advisor.closed:
                advisor.power.boundary(off, profiler_off(prof))  # reads NVML where the profiler turns on
                advisor.record_syncs(prof, getattr(prof, "step_num", -1))
                advisor.poll()
                advisor.unprofiled.boundary(number, off, started, now_ns())
            return result

        prof.step = step
        self._hooked = (weakref.ref(prof), original if had_own else None, had_own)

    def record_syncs(self, prof: Any, step: int) -> None:
        """Step ``step`` of ``prof`` (None: the profiler is gone) begins: record its syncs' call sites
        if the profiler records it, else stop recording. Never raises into the training loop."""
        try:
            self.sync_sites.step(step, profiler_recording(prof))
        except Exception:
            logger.exception("traceadvisor: could not record sync call sites; training continues")
            self.sync_sites.skipped = "failed"
            self.sync_sites.stop()

    def _unhook(self) -> None:
        if self._hooked is None:
            return
        ref, original, had_own = self._hooked
        self._hooked = None
        prof = ref()
        if prof is None:
            return
        try:
            if had_own:
                prof.step = original
            elif "step" in vars(prof):
                del prof.step
        except Exception:  # pragma: no cover - an object that refuses attribute changes
            pass

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning("%s", message)


def build_config(
    config: str | Path | Config | None,
    select: str | Sequence[str] | None,
    ignore: str | Sequence[str] | None,
    rules_dir: str | Path | Sequence[str | Path] | None,
) -> Config:
    """The run's configuration, merged as ``analyze`` merges its options, and checked now."""
    from traceadvisor.config import resolve_config
    from traceadvisor.engine.registry import discover
    from traceadvisor.engine.runner import instantiate
    from traceadvisor.engine.runner import select as select_rules
    from traceadvisor.report.safe_text import one_line

    if isinstance(config, Config):
        cfg = copy.deepcopy(config)
    else:
        # As ``analyze``: a discovered file's rules-dir runs only when trusted (TRACEADVISOR_TRUST_CONFIG=1).
        cfg = resolve_config(config)
        for warning in cfg.origin.warnings:
            logger.warning("traceadvisor: %s", one_line(warning))
    if select:
        cfg.select = _names(select)
    if ignore:
        cfg.ignore = [*cfg.ignore, *_names(ignore)]
    if rules_dir:
        dirs = [rules_dir] if isinstance(rules_dir, (str, Path)) else list(rules_dir)
        cfg.rules_dirs = [*cfg.rules_dirs, *(Path(d).resolve() for d in dirs)]
    instantiate(select_rules(discover(cfg.rules_dirs), cfg), cfg)
    return cfg


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:  # not empty (another rank's trace), or already gone
        pass


def _names(value: str | Sequence[str]) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    return [s.strip() for item in items for s in item.split(",") if s.strip()]


def detect_rank() -> int:
    """This process's rank: ``torch.distributed`` when initialised, else ``$RANK`` (torchrun), else 0."""
    dist = sys.modules.get("torch.distributed")  # never import torch just to ask
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # pragma: no cover - a half-initialised process group
        pass
    for var in ("RANK", "SLURM_PROCID"):
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 0
