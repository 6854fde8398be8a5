"""Triton launch records in a trace: kernel name, grid, bytes of the tensor arguments, declared FLOPs.

``traceadvisor capture`` (``traceadvisor.workloads.triton_hooks``) wraps each Triton launch in a
CPU op named ``triton::<kernel> grid=(x,y,z) bytes=<n> [flops=<n>]``. The kernel that launch
produced names that op as its launching op (``trace.kernels["op"]``: the driver call's External
id, or time nesting in old traces), so the records join kernels without any further matching.
A custom Triton kernel has no aten op whose shapes give its FLOPs and bytes; these records are
what the roofline uses for it. Fields a record lacks (an unknown launch path records the name
only) are -1.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from traceadvisor.analyses.cache import memoised
from traceadvisor.trace.model import Trace

PREFIX = "triton::"
_FIELD = re.compile(r"(\w+)=(\([^)]*\)|\S+)")
COLUMNS = ["kernel", "grid_x", "grid_y", "grid_z", "bytes", "flops"]


def parse(name: str) -> dict[str, Any] | None:
    """The fields of one record name, or None when ``name`` is not a Triton launch record.

    >>> parse("triton::add_kernel grid=(4,1,1) bytes=49152 flops=4096")["grid_x"]
    4
    """
    if not name.startswith(PREFIX):
        return None
    head, _, rest = name[len(PREFIX) :].partition(" ")
    if not head:
        return None
    out: dict[str, Any] = {"kernel": head, "grid_x": -1, "grid_y": -1, "grid_z": -1, "bytes": -1, "flops": -1}
    for key, value in _FIELD.findall(rest):
        if key == "grid":
            dims = [d.strip() for d in value.strip("()").split(",")]
            if len(dims) == 3 and all(d.isdigit() for d in dims):
                out["grid_x"], out["grid_y"], out["grid_z"] = (int(d) for d in dims)
        elif key in ("bytes", "flops") and value.isdigit():
            out[key] = int(value)
    return out


@memoised
def launches(trace: Trace) -> pd.DataFrame:
    """One row per launch record (index: the record's ``host`` row), with its time and thread.

    Columns ``kernel``, ``grid_x``, ``grid_y``, ``grid_z``, ``bytes``, ``flops`` (-1: not
    recorded), ``ts_ns``, ``dur_ns``, ``end_ns``, ``pid``, ``tid``.
    """
    host = trace.host
    names = host["name"].astype("category")
    # Parse each distinct name once: a record's name repeats for every launch of the same shape.
    fields = {c: p for c in names.cat.categories.astype(str) if c.startswith(PREFIX) and (p := parse(c)) is not None}
    if not fields:
        return _empty()
    mask = names.isin(list(fields)).to_numpy()
    rows = host[mask]
    if not len(rows):
        return _empty()
    table = pd.DataFrame([fields[str(n)] for n in rows["name"]], index=rows.index, columns=COLUMNS)
    for col in COLUMNS[1:]:
        table[col] = table[col].astype(np.int64)
    for col in ("ts_ns", "dur_ns", "end_ns", "pid", "tid"):
        table[col] = rows[col].to_numpy()
    return table


@memoised
def kernels(trace: Trace) -> pd.DataFrame:
    """GPU kernels launched under a record (index: ``gpu`` row) with the record's fields.

    A kernel belongs to the record that is its launching op; a kernel without that link (a
    record written as a user annotation by torch < 2.2) to the record on its launching thread
    whose span holds the launch call. Columns: the kernel's ``name``, ``ts_ns``, ``dur_ns``,
    ``record`` (host row of the record), the record's ``kernel``, ``grid_x/y/z``, ``bytes``,
    ``flops``, and ``grid_matches`` (the kernel's grid in the trace equals the recorded one: a
    cross-check of the link; False also where the trace has no grid for the kernel).
    """
    recs = launches(trace)
    k = trace.kernels
    if not len(recs) or not len(k):
        return _empty_kernels()
    record = np.where(np.isin(k["op"].to_numpy(), recs.index.to_numpy()), k["op"].to_numpy(), -1)
    todo = np.flatnonzero((record < 0) & (k["launch"].to_numpy() >= 0))
    if len(todo):
        rt = trace.runtime
        launch = k["launch"].to_numpy()[todo]
        record[todo] = _record_at(
            recs, rt["pid"].to_numpy()[launch], rt["tid"].to_numpy()[launch], rt["ts_ns"].to_numpy()[launch]
        )
    k = k[record >= 0]
    record = record[record >= 0]
    rec = recs.loc[record]
    out = pd.DataFrame(
        {
            "name": k["name"].astype(str).to_numpy(),
            "ts_ns": k["ts_ns"].to_numpy(),
            "dur_ns": k["dur_ns"].to_numpy(),
            "record": record,
            **{c: rec[c].to_numpy() for c in COLUMNS},
        },
        index=k.index,
    )
    out["grid_matches"] = (
        (k["grid_x"].to_numpy() == out["grid_x"].to_numpy())
        & (k["grid_y"].to_numpy() == out["grid_y"].to_numpy())
        & (k["grid_z"].to_numpy() == out["grid_z"].to_numpy())
    )
    return out


@memoised
def by_kernel(trace: Trace) -> pd.DataFrame:
    """Per recorded kernel name: ``launches``, ``gpu_time_ns``, and ``bytes`` and ``flops`` in total.

    On a GPU trace, over the launches whose kernel is in the trace; on a CPU trace
    (``TRITON_INTERPRET=1``), over every record, with ``gpu_time_ns`` 0. ``bytes`` or ``flops`` is
    -1 when no launch of the kernel recorded it.
    """
    k = kernels(trace)
    src = k if len(k) else launches(trace)
    if not len(src):
        return pd.DataFrame({c: np.empty(0, np.int64) for c in ("launches", "gpu_time_ns", "bytes", "flops")})
    df = pd.DataFrame(
        {
            "kernel": src["kernel"].to_numpy(),
            "launches": 1,
            "gpu_time_ns": src["dur_ns"].to_numpy() if len(k) else 0,
            "bytes": src["bytes"].clip(lower=0).to_numpy(),
            "bytes_known": src["bytes"].to_numpy() >= 0,
            "flops": src["flops"].clip(lower=0).to_numpy(),
            "flops_known": src["flops"].to_numpy() >= 0,
        }
    )
    out = df.groupby("kernel", sort=False).sum()
    for col in ("bytes", "flops"):
        out[col] = np.where(out[f"{col}_known"].to_numpy() > 0, out[col].to_numpy(), -1)
    out = out[["launches", "gpu_time_ns", "bytes", "flops"]].astype(np.int64)
    return out.sort_values("gpu_time_ns", ascending=False, kind="stable")


def _record_at(recs: pd.DataFrame, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
    """Host row of the record on the same thread whose span holds each time (-1 if none)."""
    out = np.full(len(ts), -1, dtype=np.int64)
    for (p, t), grp in recs.groupby(["pid", "tid"], sort=False):
        sel = np.flatnonzero((pid == p) & (tid == t))
        if not len(sel):
            continue
        order = np.argsort(grp["ts_ns"].to_numpy(), kind="stable")
        starts, ends = grp["ts_ns"].to_numpy()[order], grp["end_ns"].to_numpy()[order]
        rows = grp.index.to_numpy()[order]
        j = np.searchsorted(starts, ts[sel], side="right") - 1
        ok = (j >= 0) & (ts[sel] < ends[np.maximum(j, 0)])
        out[sel] = np.where(ok, rows[np.maximum(j, 0)], -1)
    return out


def _empty() -> pd.DataFrame:
    cols: dict[str, object] = {"kernel": np.empty(0, object)}
    cols.update({c: np.empty(0, np.int64) for c in [*COLUMNS[1:], "ts_ns", "dur_ns", "end_ns", "pid", "tid"]})
    return pd.DataFrame(cols)


def _empty_kernels() -> pd.DataFrame:
    cols: dict[str, object] = {"name": np.empty(0, object)}
    cols.update({c: np.empty(0, np.int64) for c in ("ts_ns", "dur_ns", "record")})
    cols["kernel"] = np.empty(0, object)
    cols.update({c: np.empty(0, np.int64) for c in COLUMNS[1:]})
    cols["grid_matches"] = np.empty(0, bool)
    return pd.DataFrame(cols)
