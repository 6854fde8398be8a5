"""One rank's trace reduced to what the cross-rank analysis needs (docs/multirank.md).

A ``RankSummary`` is small (tens to hundreds of KB for a trace of hundreds of MB) and columnar: the
map step (one process per trace, or a Dask worker) builds it, writes it beside the trace, and the
reduce step (one process) combines thousands of them. Times are ns (int64) on the rank's own clock;
the combine step aligns clocks across hosts.

Tables (each a DataFrame; the column lists below are the contract between the map and reduce steps):

``collectives`` (``ranks/collectives.py``): one row per collective or point-to-point operation the
rank ran: ``op`` (normalised: all_reduce, all_gather, reduce_scatter, all_to_all, all_to_allv,
broadcast, reduce, gather, scatter, send, recv, barrier, unknown), ``op_source`` (``args``,
``record_param_comms`` or ``kernel name`` when only the name was there), ``pg`` (process group
name, "" when unknown), ``pg_ranks`` (as written, "" when unknown), ``seq`` (-1 when absent),
``ordinal`` (order within ``pg`` on this rank), ``dtype``, ``in_nelems``, ``out_nelems``,
``bytes`` (S as nccl-tests defines it, NaN when unknown), ``group_size`` (-1 when unknown),
``on_gpu`` (a kernel, not a host op), ``stream`` (-1 on the host), ``start_ns``, ``end_ns``,
``step`` (profiler step number whose window holds the start, -1 outside every step); ``build.py``
adds ``profiler_ns``: the profiler's own host cost recorded on the step thread before the start.

``steps``: ``step``, ``start_ns``, ``end_ns`` (the step's span: CPU start to the later of CPU end and
its GPU work's end), ``cpu_end_ns``, ``profiler_ns`` (the profiler's host cost before the start).

``breakdown`` (``ranks/breakdown.py``): one row per step: ``step``, ``step_ns``, ``compute_ns``,
``comm_ns``, ``comm_exposed_ns``, ``memcpy_exposed_ns``, ``idle_ns`` (compute + comm_exposed +
memcpy_exposed + idle = step).

``comm_exposed``: the parts of each collective not overlapped by compute, one row per interval:
``coll`` (row index into ``collectives``), ``start_ns``, ``end_ns``. The combine step splits them
into exposed wait (the first ``wait`` ns of the collective, waiting for peers) and exposed transfer.

``kernel_classes``: ``cls`` (compute, communication, memcpy, memset), ``count``, ``total_ns``.

``host_gaps`` (``ranks/breakdown.py``): per step, the longest spans of the step's thread outside
every op: ``step``, ``start_ns``, ``end_ns``, and the user's source there (``file``, ``line``,
``function``, ``line_kind``; "" / -1 without stacks).

``breakdown`` also carries, beside the sum, ``start_ns``, ``input_ns``, ``host_ns`` and ``h2d_ns``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

# Bumped whenever what a summary holds changes: cached summaries of another version are rebuilt.
SUMMARY_VERSION = "2"

TABLES = ("collectives", "steps", "breakdown", "comm_exposed", "kernel_classes", "host_gaps")


@dataclass(frozen=True)
class TraceKey:
    """What a cached summary was built from: a summary is reused only when all of it matches."""

    path: str
    size: int
    mtime_ns: int
    version: str = SUMMARY_VERSION


@dataclass(frozen=True)
class RankSummary:
    key: TraceKey
    rank: int | None
    rank_source: str  # "distributedInfo", "file name", "run.json", "unknown"
    world_size: int | None
    host: str | None  # hostname when the trace or run.json names it
    device: str | None  # the main GPU's name
    base_time_ns: int | None
    tables: dict[str, pd.DataFrame]
    # the single-rank report of this trace (Report.to_dict()): findings, summaries, skipped rules
    report: dict[str, Any]
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def table(self, name: str) -> pd.DataFrame:
        return self.tables[name]
