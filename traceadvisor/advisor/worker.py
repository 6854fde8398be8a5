"""One analysis job, and the worker process that runs jobs off the training thread.

A job turns what the training thread exported into a kept trace and a report: it compresses the
plain JSON that ``export_chrome_trace`` wrote to a temporary name into the final ``.json.gz``
(written atomically), then analyses that file exactly as ``traceadvisor analyze --format json``
would. Both steps are slow for big traces (gzip and JSON parsing run at tens to hundreds of MB/s),
which is why they run here and not in the training loop.

The worker process is started by ``backend.ProcessBackend`` as a fresh ``python`` running
``main([FD, PRIORITY, PARENT_PID])`` and talks over a socket (``FD``) with pickled messages:
``("job", payload)`` in; ``("ready", pid)``, ``("started", job_id)`` and ``("done", job_id,
result)`` out. It never imports torch.

The worker never outlives the training process. A process killed with SIGKILL or SIGTERM (the OOM
killer, preemption, Slurm) runs no cleanup, and a worker busy with an analysis does not read its
socket, so it would go on at full speed until the job ends. A thread of the worker watches its
parent instead: when ``os.getppid()`` is no longer the training process (the kernel re-parents an
orphan to init or a subreaper), the worker keeps what the training thread wrote and exits. Linux's
``PR_SET_PDEATHSIG`` is not used: it fires when the *thread* that started the worker ends, not the
process, and the advisor may start its worker from a thread that ends before training does.
"""

from __future__ import annotations

import gzip
import io
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from traceadvisor.capture.unprofiled import with_key

# zlib's default level: within a few percent of level 9's size at a fraction of its time. (torch's
# own ``.gz`` export compresses at the gzip module's default, 9, on the training thread.)
GZIP_LEVEL = 6
# How often the worker looks for its parent: an orphaned worker is gone within about this long.
PARENT_POLL_S = 0.25
_CHUNK = 4 << 20

# The job the worker process is running (for the parent watch to keep its trace).
_current: dict[str, Any] | None = None


def run_job(job: dict[str, Any], cancel: threading.Event | None = None) -> dict[str, Any]:
    """Compress (if asked), analyse (if asked) and clean up one trace; never raises.

    ``cancel`` (thread mode), set by the training thread when the job is past its time, stops the
    job between compression chunks and inside the analysis (``pipeline.analyze``'s ``cancel``).
    """
    from traceadvisor.errors import Cancelled, raise_if_cancelled

    timings: dict[str, float] = {}
    trace = Path(job["trace"])
    result: dict[str, Any] = {"id": job["id"], "ok": False, "report": None, "error": None, "trace": str(trace)}
    try:
        raw = job.get("raw")
        if raw is not None:
            t0 = time.perf_counter()
            compress(Path(raw), trace, cancel, job.get("head"))
            timings["compress_s"] = time.perf_counter() - t0
        if job.get("analyze", True):
            raise_if_cancelled(cancel)
            t0 = time.perf_counter()
            html = html_path(trace) if job.get("html") else None
            result["report"] = analyze_to_json(trace, job.get("config"), job.get("max_bytes"), cancel, html)
            result["html"] = str(html) if html is not None else None
            timings["analysis_s"] = time.perf_counter() - t0
        result["ok"] = True
    except Cancelled:
        result["error"] = "cancelled"
    except Exception as exc:
        result["error"] = _describe(exc)
    finally:
        if not job.get("keep", True):
            trace.unlink(missing_ok=True)
            result["trace"] = None
        result["timings"] = timings
    return result


def compress(raw: Path, final: Path, cancel: threading.Event | None = None, head: dict[str, Any] | None = None) -> None:
    """gzip ``raw`` into ``final`` atomically, then remove ``raw``; ``head``: the top-level
    ``"traceadvisor"`` key to add (the unprofiled step times; spliced into the first chunk).

    The compressed bytes are built in memory (about a tenth of the JSON) and written through
    ``atomic.write_bytes``: a reader never sees a half-written ``.json.gz``. ``cancel`` is checked
    between 4 MiB chunks (``Cancelled``; ``raw`` is left for the advisor to keep).
    """
    from traceadvisor.atomic import write_bytes
    from traceadvisor.errors import raise_if_cancelled

    buf = io.BytesIO()
    with raw.open("rb") as src, gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=GZIP_LEVEL, mtime=0) as gz:
        first = True
        while chunk := src.read(_CHUNK):
            raise_if_cancelled(cancel)
            gz.write(with_key(chunk, head) if first and head is not None else chunk)
            first = False
    write_bytes(final, buf.getvalue())
    raw.unlink(missing_ok=True)


def keep_unfinished(job: dict[str, Any]) -> None:
    """The job will not finish (its training process is gone): keep what the training thread wrote
    as the plain ``.json`` (when no ``.json.gz`` was written) and drop half-written files."""
    trace = Path(job["trace"])
    for partial in trace.parent.glob(f".{trace.name}.*.tmp"):  # atomic.write_bytes's temporary file
        partial.unlink(missing_ok=True)
    raw = Path(job["raw"]) if job.get("raw") else None
    if raw is None or not raw.exists():
        return
    if trace.exists() or not job.get("keep", True):
        raw.unlink()
    else:
        raw.replace(trace.with_suffix(""))  # rank0.json.gz -> rank0.json


def watch_parent(parent: int, interval: float = PARENT_POLL_S) -> threading.Thread:
    """A daemon thread that ends this process once ``parent`` is gone, keeping the running job's trace."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        job = _current
        if job is not None:
            try:
                keep_unfinished(job)
            except OSError:
                pass
        os._exit(0)

    thread = threading.Thread(target=watch, name="traceadvisor-parent-watch", daemon=True)
    thread.start()
    return thread


def html_path(trace: Path) -> Path:
    """Where a trace's HTML report goes: beside it, ``cycle<N>/rank<R>.html``."""
    name = trace.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return trace.with_name(name + ".html")


def analyze_to_json(
    trace: Path,
    config: Any,
    max_bytes: int | None,
    cancel: threading.Event | None = None,
    html: Path | None = None,
) -> dict[str, Any]:
    """The report of one trace as the JSON document ``traceadvisor analyze --format json`` prints
    (``Report.to_dict``), for the pipe to the training process, which rebuilds the ``Report``.
    With ``html``, the analysis also keeps the timeline and writes the HTML report there
    (atomically); the timeline does not cross the pipe.

    Encoded and decoded by the JSON renderer's encoder: a number a rule put in its finding's
    ``data`` as a numpy scalar arrives as a plain number, as in the JSON report, and nothing but
    JSON types crosses the process boundary.
    """
    import msgspec

    from traceadvisor.pipeline import analyze
    from traceadvisor.report.render_json import encode
    from traceadvisor.trace.reader import DEFAULT_MAX_INFLATED_BYTES

    limit = max_bytes or DEFAULT_MAX_INFLATED_BYTES
    timeline = html is not None
    if _world_size() > 1:
        report = _analyze_and_summarise(trace, config, limit, cancel, timeline)
    else:
        report = analyze([trace], config, max_bytes=limit, cancel=cancel, timeline=timeline)
    if html is not None:
        from dataclasses import replace

        from traceadvisor.atomic import write_bytes
        from traceadvisor.report import render

        write_bytes(html, render(report, "html"))
        report = replace(report, traces=tuple(replace(t, timeline=None) for t in report.traces))
    doc: dict[str, Any] = msgspec.json.decode(encode(report.to_dict()))
    return doc


def _world_size() -> int:
    """The launcher's world size (torchrun and its kin set WORLD_SIZE, which the worker inherits)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _analyze_and_summarise(
    trace: Path, config: Any, max_bytes: int, cancel: threading.Event | None, timeline: bool = False
) -> Any:
    """A rank of a multi-rank run: analyse the trace once and also write its rank summary beside it
    (``<trace>.tasummary``, docs/multirank.md), here on the node that holds it, so ``analyze
    --jobs``/``--executor`` combine the ranks without moving or re-reading a trace."""
    from traceadvisor.config import Config
    from traceadvisor.pipeline import analyze_traces
    from traceadvisor.ranks.build import summary_of
    from traceadvisor.ranks.summary_io import summary_path, trace_key, write_summary
    from traceadvisor.trace.load import load_file

    config = config or Config()
    key = trace_key(trace)
    loaded = load_file(trace, max_bytes=max_bytes, gpu=config.gpu)
    loaded.communication_patterns = tuple(config.communication_kernels)
    report = analyze_traces([loaded], config, cancel=cancel, timeline=timeline)
    try:
        # the cached summary never holds a timeline (analyze_scaled's cache contract)
        plain = report.to_dict()
        for t in plain.get("traces", ()):
            t.pop("timeline", None)
        write_summary(summary_of(loaded, key, plain), summary_path(trace))
    except OSError:
        pass  # the summary is a cache: analyze builds it again from the trace
    return report


def _describe(exc: BaseException) -> str:
    from traceadvisor.errors import TraceError, UsageError

    if isinstance(exc, (TraceError, UsageError)):
        return str(exc)
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" ({Path(frame.filename).name}:{frame.lineno})" if frame else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _warm_up() -> None:
    """Import the analysis now (a second or more), so the first job does not pay for it."""
    import traceadvisor.engine.runner
    import traceadvisor.pipeline
    import traceadvisor.report.model
    import traceadvisor.report.render_json
    import traceadvisor.summary.annotations
    import traceadvisor.summary.roofline
    import traceadvisor.trace.model  # noqa: F401
    from traceadvisor.engine.registry import discover

    discover([])


def main(argv: list[str]) -> int:
    """The worker process: serve jobs from the socket until told to stop or the parent goes away."""
    global _current
    fd = int(argv[0])
    if len(argv) > 2:
        watch_parent(int(argv[2]))
    # its priority (argv[1]) was lowered by its command before any import (backend._WORKER_MAIN): not
    # again, since a niceness adds up (os.nice(10) twice is nice 19)
    # Anything a library prints must not reach the parent's stdout (it is the user's).
    os.dup2(2, 1)
    import warnings
    from multiprocessing.connection import Connection

    warnings.simplefilter("ignore")  # pandas/numpy deprecation chatter is not the user's business
    conn = Connection(fd)
    _warm_up()

    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return 0  # the parent is gone
        if msg[0] == "stop":
            return 0
        if msg[0] == "job":
            job = _current = msg[1]
            conn.send(("started", job["id"]))
            result = run_job(job)
            _current = None
            try:
                conn.send(("done", job["id"], result))
            except OSError:
                return 0
