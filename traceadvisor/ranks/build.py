"""The map step: one rank's loaded trace -> its ``RankSummary`` (docs/multirank.md).

``pipeline.rank_summary`` loads a trace, analyses it alone (every single-rank rule) and calls
``summary_of``; it runs in a worker process (``ranks/executor.py``) or in capture, the advisor and
the callbacks right after a trace is written, so the reduce step never loads a raw trace.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.ranks.breakdown import breakdown, host_gaps, step_spans
from traceadvisor.ranks.collectives import rank_collectives
from traceadvisor.ranks.summary import RankSummary, TraceKey
from traceadvisor.trace.columns import KERNEL
from traceadvisor.trace.model import Trace

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def summary_of(trace: Trace, key: TraceKey, report: dict[str, object]) -> RankSummary:
    """The summary of a loaded trace whose single-rank report is ``report``."""
    colls = rank_collectives(trace)
    colls = colls.assign(profiler_ns=profiler_time_before(trace, colls["start_ns"].to_numpy(dtype=np.int64)))
    table, exposed = breakdown(trace, colls)
    rank, source = rank_of(trace)
    return RankSummary(
        key=key,
        rank=rank,
        rank_source=source,
        world_size=trace.meta.world_size,
        host=host_of(trace),
        device=_device_name(trace),
        base_time_ns=trace.meta.base_time_ns,
        tables={
            "collectives": colls.reset_index(drop=True),
            "steps": _steps_with_profiler(trace),
            "breakdown": table,
            "comm_exposed": exposed,
            "kernel_classes": kernel_classes(trace),
            "host_gaps": host_gaps(trace),
        },
        report=report,
        warnings=tuple(trace.meta.warnings),
    )


def _steps_with_profiler(trace: Trace) -> pd.DataFrame:
    """``steps`` with the profiler's host cost recorded on the step thread before each step starts."""
    steps = step_spans(trace)
    return steps.assign(profiler_ns=profiler_time_before(trace, steps["start_ns"].to_numpy(dtype=np.int64)))


def profiler_time_before(trace: Trace, times: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The profiler's own host cost recorded on the thread that records the steps before each time
    (``whatif/profiler_cost.py``, calibrated to the trace's measured unprofiled steps): the
    straggler's replay compares the ranks' progress without it, since a rank that records more
    events (a bigger batch through a Python collate) is slowed by the profiler more than the others,
    which it is not in an unprofiled run.

    Only for a trace that carries measured unprofiled steps (``traceadvisor capture``, the advisor):
    uncalibrated, the per-event costs (fitted on an H100 host) took out 5 ms a step from the rank
    with the 4x batch of fixtures/traces/multirank/uneven_work_2r where its measured excess was
    14.0 ms and the profiled one 14.3 ms (the replay then said 9.4 ms); zeros otherwise."""
    from traceadvisor.ranks.breakdown import step_thread
    from traceadvisor.whatif.host_time import thread_key
    from traceadvisor.whatif.profiler_cost import measured_unprofiled_ns, unprofiled_overrides

    thread = step_thread(trace)
    if thread is None or not len(times) or measured_unprofiled_ns(trace) is None:
        return np.zeros(len(times), dtype=np.int64)
    key = thread_key(np.array([thread[0]]), np.array([thread[1]]))
    removed = unprofiled_overrides(trace).host_removed
    return removed.removed_by_thread(np.repeat(key, len(times)), times).astype(np.int64)


def rank_of(trace: Trace) -> tuple[int | None, str]:
    """The rank and where it came from: ``distributedInfo``, the file name (``rank[-_]?N``), the
    capture's ``run.json`` beside the trace, or unknown (never guessed)."""
    dist = trace.meta.distributed
    if isinstance(dist, dict) and isinstance(dist.get("rank"), int):
        return int(dist["rank"]), "distributedInfo"
    m = _RANK_IN_NAME.search(Path(trace.meta.path).name)
    if m:
        return int(m.group(1)), "file name"
    run = Path(trace.meta.path).parent / "run.json"
    try:
        info = json.loads(run.read_text()) if run.is_file() else None
    except (OSError, ValueError):
        info = None
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"]), "run.json"
    return None, "unknown"


def host_of(trace: Trace) -> str | None:
    """The host the rank ran on: kineto's top-level ``host_name`` (ranks on one host share a clock)."""
    return trace.meta.host_name


def _device_name(trace: Trace) -> str | None:
    for d in trace.meta.devices:
        name = d.get("name")
        if isinstance(name, str):
            return name
    return None


def kernel_classes(trace: Trace) -> pd.DataFrame:
    """``kernel_classes`` table: count and total time of compute, communication, memcpy, memset."""
    from traceadvisor.analyses.communication import communication_kernels
    from traceadvisor.trace.columns import MEMCPY, MEMSET

    g = trace.gpu
    comm = g.index.isin(communication_kernels(trace))
    kind = g["kind"].to_numpy()
    dur = (g["end_ns"] - g["ts_ns"]).to_numpy()
    classes = {
        "compute": (kind == KERNEL) & ~comm,
        "communication": comm,
        "memcpy": kind == MEMCPY,
        "memset": kind == MEMSET,
    }
    return pd.DataFrame(
        {
            "cls": list(classes),
            "count": [int(m.sum()) for m in classes.values()],
            "total_ns": [int(dur[m].sum()) for m in classes.values()],
        }
    )
