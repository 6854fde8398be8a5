"""A small real rank-summary builder: a trace's collectives, steps, a per-step busy/idle breakdown
and kernel class totals from ``load_file``, without the single-rank report (``pipeline.rank_summary``
builds the full one). Shared by tests/test_ranks_scaleout.py and bench/ranks_scale.py (its ``light``
builder); a module of its own at top level, because executor workers import the builder by name."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceadvisor.ranks.summary import RankSummary, TraceKey

_COMM = re.compile(r"nccl|rccl", re.IGNORECASE)


def build_small(path: str) -> RankSummary:
    """A real summary of one trace (the module docstring); its report holds a nested value, so a
    summary's encoding is tested on one."""
    from traceadvisor.trace.load import load_file

    t = load_file(path)
    c = t.collectives
    pg = c["pg_name"].fillna("").astype(str)
    collectives = pd.DataFrame(
        {
            "op": c["collective"].fillna("unknown").astype(str),
            "op_source": pd.Series(["args"] * len(c), dtype="str"),
            "pg": pg,
            "pg_ranks": c["pg_ranks"].fillna("").astype(str),
            "seq": c["seq"].astype("int64"),
            "ordinal": pg.groupby(pg).cumcount().astype("int64"),
            "dtype": c["dtype"].fillna("").astype(str),
            "in_nelems": c["in_nelems"].astype("float64"),
            "out_nelems": c["out_nelems"].astype("float64"),
            "group_size": c["group_size"].astype("int64"),
            "on_gpu": c["on_gpu"].astype(bool),
            "start_ns": c["ts_ns"].astype("int64"),
            "end_ns": c["end_ns"].astype("int64"),
            "step": t.step_of(c["ts_ns"].to_numpy()).astype("int64"),
        }
    )
    st = t.steps.table
    end = np.maximum(st["cpu_end_ns"].to_numpy(), st["gpu_end_ns"].to_numpy())
    steps = pd.DataFrame(
        {"step": st["step"], "start_ns": st["cpu_start_ns"], "end_ns": end, "cpu_end_ns": st["cpu_end_ns"]}
    ).astype("int64")
    main = t.device_ids[0] if t.device_ids else None
    busy = [
        t.busy_ns(main, int(lo), int(hi)) if main is not None else 0 for lo, hi in zip(steps.start_ns, end, strict=True)
    ]
    step_ns = (steps.end_ns - steps.start_ns).to_numpy()
    zeros = np.zeros(len(steps), dtype=np.int64)
    breakdown = pd.DataFrame(
        {
            "step": steps.step.to_numpy(),
            "step_ns": step_ns,
            "compute_ns": np.asarray(busy, dtype=np.int64),
            "comm_ns": zeros,
            "comm_exposed_ns": zeros,
            "memcpy_exposed_ns": zeros,
            "idle_ns": step_ns - np.asarray(busy, dtype=np.int64),
        }
    )
    k = t.kernels
    cls = np.where(k["name"].astype(str).str.contains(_COMM).to_numpy(), "communication", "compute")
    classes = (
        pd.DataFrame({"cls": cls, "dur_ns": k["dur_ns"].to_numpy()})
        .groupby("cls", sort=True)["dur_ns"]
        .agg(["count", "sum"])
        .reset_index()
        .rename(columns={"sum": "total_ns"})
    )
    classes = classes.astype({"cls": "str", "count": "int64", "total_ns": "int64"})
    empty = np.zeros(0, dtype=np.int64)
    return RankSummary(
        key=TraceKey(path=path, size=-1, mtime_ns=-1),  # the executor puts the real key
        rank=t.meta.rank,
        rank_source="distributedInfo" if t.meta.rank is not None else "unknown",
        world_size=t.meta.world_size,
        host=None,
        device=(t.device_properties() or {}).get("name"),
        base_time_ns=t.meta.base_time_ns,
        tables={
            "collectives": collectives,
            "steps": steps,
            "breakdown": breakdown,
            "comm_exposed": pd.DataFrame({"coll": empty, "start_ns": empty, "end_ns": empty}),
            "kernel_classes": classes,
        },
        report={"kernel_count": len(k), "warnings": list(t.meta.warnings), "nested": {"ratio": 0.25, "none": None}},
        warnings=tuple(t.meta.warnings),
    )
