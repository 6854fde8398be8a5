"""The CPU-only section (``traces[].cpu``): what a trace without GPU activity still says.

A run captured on a CPU (a user checking the input pipeline on a laptop, a CPU job) has no GPU
timeline, but its steps show where the host time goes: the hot ops and Python frames by self
time, the step's time by part (data loading, optimizer, the ops called from Python, the rest),
the dispatcher's share, and the ops that would make a GPU run wait for the host (``.item()``),
which cost nothing here. Times are the profiled steps' (the profiler's cost included), per step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.report.model import CpuLine, CpuOp, CpuSummary
from traceadvisor.summary.units import pct, us
from traceadvisor.trace.model import Trace

I64 = npt.NDArray[np.int64]
TOP = 8
LOADER_MARK = "DataLoader"
OPTIMIZER_MARKS = ("Optimizer.step#", "Optimizer.zero_grad#")
MULTI_TENSOR_MARKS = ("_foreach_", "_fused_")
# Ops that do no arithmetic (a new view, an uninitialised tensor, a detached alias): their time is
# the dispatcher's and the profiler's, so their median is the trace's own cost of one op.
NO_ARITHMETIC = frozenset(
    {
        "aten::view",
        "aten::t",
        "aten::transpose",
        "aten::as_strided",
        "aten::expand",
        "aten::detach",
        "aten::empty",
        "aten::resolve_conj",
        "aten::resolve_neg",
        "aten::alias",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::permute",
        "aten::reshape",
        "aten::_unsafe_view",
    }
)
# Ops that copy a device value to the host: on a GPU each blocks the host until the GPU has caught
# up (``.item()``, ``.tolist()``, ``bool(t)``, ``float(t)``; shape-dependent ops), on a CPU nothing.
SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::_unique2"})


def cpu_summary(trace: Trace) -> CpuSummary | None:
    """The CPU section of a trace without GPU kernels and with steps; None otherwise."""
    t = trace.steps.table
    if len(trace.kernels) or not len(t):
        return None
    steps = len(t)
    lo, hi = int(t["cpu_start_ns"].min()), int(t["cpu_end_ns"].max())
    step_ns = float((t["cpu_end_ns"] - t["cpu_start_ns"]).sum()) / steps
    host = trace.host
    names = host["name"].astype(str)
    is_ann = host["is_annotation"].to_numpy()
    in_steps = trace.step_of(host["ts_ns"].to_numpy()) >= 0
    parent = trace.nesting["parent"].to_numpy()

    loader = _marked(host, names, is_ann & in_steps, (LOADER_MARK,), contains=True)
    optim = _marked(host, names, is_ann & in_steps, OPTIMIZER_MARKS, contains=False)
    ops = ~is_ann & in_steps
    # Ops called from Python: an op whose parent is no op (a step, an annotation, the root).
    parent_is_op = np.zeros(len(host), dtype=bool)
    has_parent = parent >= 0
    parent_is_op[has_parent] = ~is_ann[parent[has_parent]]
    top_level = ops & ~parent_is_op
    inside = _inside(host, loader) | _inside(host, optim)
    compute = float(host["dur_ns"].to_numpy()[top_level & ~inside].sum()) / steps
    data_ns = float(host.loc[loader, "dur_ns"].sum()) / steps
    optim_ns = float(host.loc[optim, "dur_ns"].sum()) / steps

    per_op = _per_op_ns(host, names, ops)
    ops_per_step = float(ops.sum()) / steps
    sync = ops & names.isin(SYNC_OPS).to_numpy()
    opt_names = names[ops & _inside(host, optim)]
    per_tensor = None if not optim.any() else not bool(opt_names.str.contains("|".join(MULTI_TENSOR_MARKS)).any())

    return CpuSummary(
        steps=steps,
        step_us=step_ns / 1e3,
        data_loading_us=data_ns / 1e3,
        optimizer_us=optim_ns / 1e3,
        compute_us=compute / 1e3,
        other_us=max(0.0, step_ns - data_ns - optim_ns - compute) / 1e3,
        ops_per_step=ops_per_step,
        per_op_us=per_op / 1e3 if per_op is not None else None,
        dispatch_us=ops_per_step * (per_op or 0.0) / 1e3,
        optimizer_per_tensor=per_tensor,
        syncs_per_step=float(sync.sum()) / steps,
        sync_ops=tuple(sorted(set(names[sync]))),
        sync_sites=_sites(trace, host[sync]),
        top_ops=_top_ops(host, names, ops, parent, lo, hi, steps, step_ns),
        top_lines=_top_lines(trace, lo, hi, steps, step_ns),
    )


def _marked(
    host: pd.DataFrame, names: pd.Series, keep: npt.NDArray[np.bool_], marks: tuple[str, ...], contains: bool
) -> npt.NDArray[np.bool_]:
    hit = np.zeros(len(host), dtype=bool)
    for m in marks:
        hit |= (names.str.contains(m, regex=False) if contains else names.str.startswith(m)).to_numpy()
    return hit & keep


def _inside(host: pd.DataFrame, spans: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Host rows that start strictly inside one of the ``spans`` rows on the same thread."""
    out = np.zeros(len(host), dtype=bool)
    if not spans.any():
        return out
    ts = host["ts_ns"].to_numpy()
    tid = host["tid"].to_numpy()
    pid = host["pid"].to_numpy()
    for row in np.flatnonzero(spans):
        start, end = ts[row], ts[row] + host["dur_ns"].to_numpy()[row]
        out |= (pid == pid[row]) & (tid == tid[row]) & (ts > start) & (ts < end)
    return out


def _clipped(ts: I64, dur: I64, lo: int, hi: int) -> I64:
    clipped: I64 = np.clip(ts + dur, lo, hi) - np.clip(ts, lo, hi)
    return clipped


def _self_ns(ts: I64, dur: I64, parent: I64, lo: int, hi: int) -> I64:
    """Each event's time inside [lo, hi] less its direct children's (``parent``: row, -1 at the root)."""
    own = _clipped(ts, dur, lo, hi)
    children = np.zeros(len(own), dtype=np.int64)
    has = parent >= 0
    np.add.at(children, parent[has], own[has])
    out: I64 = np.maximum(own - children, 0)
    return out


def _top_ops(
    host: pd.DataFrame,
    names: pd.Series,
    ops: npt.NDArray[np.bool_],
    parent: I64,
    lo: int,
    hi: int,
    steps: int,
    step_ns: float,
) -> tuple[CpuOp, ...]:
    own = _self_ns(host["ts_ns"].to_numpy(), host["dur_ns"].to_numpy(), parent, lo, hi)
    df = pd.DataFrame({"name": names[ops].to_numpy(), "self": own[ops]})
    g = df.groupby("name", sort=False)["self"].agg(["sum", "count"]).sort_values("sum", ascending=False)
    return tuple(
        CpuOp(
            name=str(n),
            self_us=us(r["sum"]) / steps,
            calls=float(r["count"]) / steps,
            share_pct=float(pct(float(r["sum"]) / steps, step_ns)),
        )
        for n, r in g.head(TOP).iterrows()
    )


def _top_lines(trace: Trace, lo: int, hi: int, steps: int, step_ns: float) -> tuple[CpuLine, ...]:
    frames = trace.frames
    if not len(frames):
        return ()
    loc = trace.frame_locations
    py_id = frames["py_id"].to_numpy()
    row_of = pd.Series(np.arange(len(frames)), index=py_id)
    row_of = row_of[~row_of.index.duplicated()]
    parent = row_of.reindex(frames["py_parent"].to_numpy()).fillna(-1).to_numpy().astype(np.int64)
    own = _self_ns(frames["ts_ns"].to_numpy(), frames["dur_ns"].to_numpy(), parent, lo, hi)
    is_user = loc["is_user"].to_numpy().astype(bool)
    # The nearest user frame above each frame (itself excluded), walking up at most the stack's depth.
    above = np.full(len(frames), -1, dtype=np.int64)
    cur = parent.copy()
    for _ in range(256):
        live = (above < 0) & (cur >= 0)
        if not live.any():
            break
        found = live & is_user[np.maximum(cur, 0)]
        above[found] = cur[found]
        cur = np.where(live & ~found, parent[np.maximum(cur, 0)], -1)
    keep = own > 0
    df = pd.DataFrame(
        {
            "file": loc["file"].astype(str).to_numpy()[keep],
            "line": loc["line"].to_numpy()[keep],
            "function": loc["function"].astype(str).to_numpy()[keep],
            "name": frames["name"].astype(str).to_numpy()[keep],
            "user": is_user[keep],
            "above": above[keep],
            "own": own[keep],
        }
    )
    if not len(df):
        return ()
    # Built-in functions carry an object address in their name ("... at 0x7f..."): one row per function.
    df["key"] = np.where(df["line"].isna(), df["name"].str.replace(r" at 0x[0-9a-f]+", "", regex=True), df["name"])
    g = df.groupby("key", sort=False).agg(
        own=("own", "sum"),
        calls=("own", "size"),
        file=("file", "first"),
        line=("line", "first"),
        function=("function", "first"),
        user=("user", "first"),
        above=("above", lambda a: int(pd.Series(a).mode().iloc[0])),
    )
    g = g.sort_values("own", ascending=False).head(TOP)
    out = []
    for key, r in g.iterrows():
        line = _int_or_none(r["line"])
        builtin = line is None
        out.append(
            CpuLine(
                file=str(key) if builtin else str(r["file"]),
                line=line,
                function="" if builtin else str(r["function"]),
                self_us=us(r["own"]) / steps,
                calls=float(r["calls"]) / steps,
                share_pct=float(pct(float(r["own"]) / steps, step_ns)),
                is_user=bool(r["user"]),
                user=None if r["user"] or r["above"] < 0 else _describe(loc, int(r["above"])),
            )
        )
    return tuple(out)


def _int_or_none(v: Any) -> int | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) or pd.isna(v) else int(v)


def _describe(loc: pd.DataFrame, row: int) -> str:
    r = loc.iloc[row]
    line = _int_or_none(r["line"])
    return f"{r['function']} ({r['file']}:{line})" if line is not None else str(r["file"])


def _sites(trace: Trace, rows: pd.DataFrame) -> tuple[str, ...]:
    """The user's source lines of the sync ops, most calls first."""
    if not len(rows) or not len(trace.frames):
        return ()
    found = trace.source_of(rows["pid"].to_numpy(), rows["tid"].to_numpy(), rows["ts_ns"].to_numpy())
    counts: dict[str, int] = {}
    for f in found:
        if f is not None:
            key = f"{f['function']} ({f['file']}:{f['line']})"
            counts[key] = counts.get(key, 0) + 1
    return tuple(k for k, _ in sorted(counts.items(), key=lambda kv: -kv[1]))


def _per_op_ns(host: pd.DataFrame, names: pd.Series, ops: npt.NDArray[np.bool_]) -> float | None:
    """The median time of the ops that do no arithmetic: one op's dispatch (profiled)."""
    free = ops & names.isin(NO_ARITHMETIC).to_numpy()
    if not free.any():
        return None
    return float(np.median(host["dur_ns"].to_numpy()[free]))
