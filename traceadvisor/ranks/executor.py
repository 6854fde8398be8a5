"""The map step of the multi-rank analysis: one summary per trace, from the cache or built in a worker.

``summaries`` reads each trace's cached summary (``summary_io``) and builds the missing ones, in
this process (``jobs=1``), in a process pool, or on a Dask cluster. Every way goes through the same
``concurrent.futures.Executor`` interface: ``distributed.Client.get_executor()`` is one. A worker
builds the summary, writes it beside the trace (so nothing large moves, and the next run reads it)
and sends back only the summary (tens to hundreds of KB), never the trace's event tables.

A trace that fails (not a trace, unreadable, a worker that died on it) becomes an entry of
``Summaries.errors``; the other traces go on.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from traceadvisor.errors import TraceError, UsageError
from traceadvisor.ranks.summary import RankSummary
from traceadvisor.ranks.summary_io import cached_summary, summary_path, trace_key, write_summary

Build = Callable[[str], RankSummary]


@dataclass(frozen=True)
class RankError:
    """A trace whose summary could not be had: its path and a one-line reason."""

    path: str
    message: str


@dataclass(frozen=True)
class Summaries:
    """What ``summaries`` returns: the summaries of the traces that worked, in the order of the paths
    given, and one ``RankError`` per trace that did not (same order)."""

    summaries: list[RankSummary]
    errors: list[RankError] = field(default_factory=list)
    # How many summaries came from the cache (the rest were built in this run).
    cached: int = 0


@dataclass(frozen=True)
class _Outcome:
    """What a worker sends back: the summary, or why there is none (an exception object may not
    pickle, and a worker's traceback means nothing to the user beyond its last line)."""

    summary: RankSummary | None
    error: str | None = None
    # A warning about the summary's file (it could not be written): the summary itself is good.
    warning: str | None = None


def summaries(
    paths: Sequence[str | Path],
    build: Build,
    jobs: int | None = None,
    executor: str | None = None,
    use_cache: bool = True,
) -> Summaries:
    """The summary of each trace in ``paths``.

    ``build(path)`` makes a trace's summary; it runs in a worker, so it must be a top-level function
    (pickled by reference). With ``use_cache``, a summary cached for the trace's current key (path,
    size, mtime, ``SUMMARY_VERSION``) is used as is, and each built summary is written for the next
    run; without it, nothing is read from or written to the cache.

    ``jobs``: how many traces are built at once (None: the machine's cores; 1: here, in this
    process). ``executor``: None for a local process pool, ``"dask"`` for a new Dask
    ``LocalCluster`` of ``jobs`` workers, ``"tcp://host:port"`` (or ``tls://``) for the Dask
    scheduler there (its workers need traceadvisor installed and the traces at the same paths).

    A ``UsageError`` for bad ``jobs`` or ``executor``, dask missing or its scheduler unreachable;
    any trace's own failure is in ``errors``."""
    if jobs is not None and jobs < 1:
        raise UsageError(f"jobs must be at least 1, not {jobs}")
    names = [str(p) for p in paths]
    found: dict[int, RankSummary] = {}
    if use_cache:
        for i, p in enumerate(names):
            hit = _cached(p)
            if hit is not None:
                found[i] = hit
    cached = len(found)
    todo = [i for i in range(len(names)) if i not in found]
    errors: dict[int, str] = {}
    if todo:
        outcomes = _run(build, [names[i] for i in todo], jobs, executor, use_cache)
        for i, outcome in zip(todo, outcomes, strict=True):
            if outcome.summary is not None:
                found[i] = outcome.summary
            else:
                errors[i] = outcome.error or "no summary"
    return Summaries(
        summaries=[found[i] for i in sorted(found)],
        errors=[RankError(names[i], errors[i]) for i in sorted(errors)],
        cached=cached,
    )


def _cached(path: str) -> RankSummary | None:
    try:
        key = trace_key(path)
    except OSError:
        return None  # missing or unreadable: the build reports it, as the trace's error
    return cached_summary(path, key)


def build_one(build: Build, path: str, write: bool) -> _Outcome:
    """Build one trace's summary (in a worker) and write it where ``summary_path`` says.

    The key is taken before the trace is read: if the file changes while it is read, the summary
    carries the older key and the next run rebuilds it (never a summary stored under a key it does
    not match)."""
    try:
        key = trace_key(path)
        summary = replace(build(path), key=key)
    except (TraceError, OSError) as exc:
        return _Outcome(None, error=_one_line(exc))
    except Exception as exc:  # a builder's bug on this trace: the others still get their summaries
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return _Outcome(None, error=f"{type(exc).__name__}: {_one_line(exc)} ({where.filename}:{where.lineno})")
    warning = None
    if write:
        target = summary_path(path)
        try:
            write_summary(summary, target)
        except OSError as exc:  # a full or read-only disk costs a rebuild next time, not this run
            warning = f"{path}: summary not cached ({target}: {exc.strerror or exc})"
        except TypeError as exc:  # a column the file cannot hold: the builder breaks the contract
            return _Outcome(None, error=f"summary not storable: {_one_line(exc)}")
    return _Outcome(summary, warning=warning)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _run(build: Build, paths: list[str], jobs: int | None, executor: str | None, write: bool) -> list[_Outcome]:
    if executor is None and (jobs == 1 or len(paths) == 1):
        # In this process: no pool to start (a worker must import pandas and the loader: ~1 s).
        return _warned([build_one(build, p, write) for p in paths])
    with _executor(executor, jobs, len(paths)) as pool:
        futures = [pool.submit(build_one, build, p, write) for p in paths]
        return _warned([_result(f) for f in futures])


def _result(future: cf.Future[_Outcome]) -> _Outcome:
    try:
        return future.result()
    except cf.BrokenExecutor:
        # The worker died (killed for memory, a crash in native code): every trace it held fails.
        return _Outcome(None, error="the worker process building it died (out of memory?)")
    except Exception as exc:  # Dask: KilledWorker, a lost connection to the scheduler
        return _Outcome(None, error=f"{type(exc).__name__}: {_one_line(exc)}")


def _warned(outcomes: list[_Outcome]) -> list[_Outcome]:
    import logging

    log = logging.getLogger("traceadvisor")
    for o in outcomes:
        if o.warning:
            log.warning("%s", o.warning)
    return outcomes


@contextmanager
def _executor(kind: str | None, jobs: int | None, n_tasks: int) -> Iterator[cf.Executor]:
    workers = max(1, min(jobs or _cores(), n_tasks))
    if kind is None:
        # Not fork: the parent may already hold threads (pandas/numpy pools, the reader's decoder),
        # and a forked child inherits their locks in whatever state they were (Python 3.12 warns).
        # forkserver forks from a clean single-threaded server; spawn where it is missing.
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method))
        try:
            yield pool
        except BaseException:
            # Ctrl-C or an error here: the traces not started yet are dropped, not built first.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return
    distributed = _import_distributed()
    if kind == "dask":
        # One single-threaded worker process per job: the build is pandas work under the GIL.
        with (
            distributed.LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            yield client.get_executor(pure=False)
        return
    if "://" in kind:
        try:
            client = distributed.Client(kind)
        except OSError as exc:  # nothing listening, a timeout
            raise UsageError(f"--executor {kind}: cannot reach the Dask scheduler ({_one_line(exc)})") from exc
        with client:
            # pure=False: a trace may have changed since another run asked the cluster for it.
            yield client.get_executor(pure=False)
        return
    raise UsageError(f"--executor {kind!r}: expected 'dask' or a Dask scheduler address (tcp://host:8786)")


def _import_distributed() -> Any:  # the module: typed as Any (dask is an optional extra)
    try:
        import distributed
    except ImportError as exc:
        raise UsageError(
            f"the Dask executor needs dask.distributed ({exc.msg}): pip install 'traceadvisor[dask]'"
        ) from exc
    return distributed


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may use (a container's share)
    except AttributeError:
        return os.cpu_count() or 1


__all__ = ["Build", "RankError", "Summaries", "build_one", "summaries"]
