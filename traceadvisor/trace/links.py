"""The links between tables, as columns of them: ``gpu.launch`` (the runtime row that launched each
GPU record), ``runtime.op`` and ``gpu.op`` (the host row of the CPU op that launched it), ``-1``
where there is none. ``Trace.__init__`` adds them once (``add``), before any view of those tables
is taken, so every view has them.

Values are row *positions* (``to_numpy()[launch]``), so the tables must have a RangeIndex (the
model asserts it).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.trace.lanes import ThreadLanes

I64 = npt.NDArray[np.int64]


def external_ids_trustworthy(runtime: pd.DataFrame, gpu: pd.DataFrame) -> bool:
    """Whether runtime/GPU ``External id`` names the launching op (kineto ≥ 2024-02).

    Before kineto#873 (≈ torch 2.3) it merely repeated ``correlation`` (format doc §5.1), and
    matching it against op ids gives false links; then launches are tied by time nesting.
    """
    both = runtime[(runtime["ext_id"] >= 0) & (runtime["correlation"] >= 0)]
    if len(both) == 0:
        both = gpu[(gpu["ext_id"] >= 0) & (gpu["correlation"] >= 0)]
        if len(both) == 0:
            return True
    same = float((both["ext_id"] == both["correlation"]).mean())
    return same < 0.9


class OpsByExtId:
    """The host row of the first CPU op with each External id."""

    def __init__(self, host: pd.DataFrame, is_op: npt.NDArray[np.bool_]) -> None:
        idx = pd.Index(host["ext_id"].to_numpy()[is_op])
        rows = host.index.to_numpy()[is_op]
        if not idx.is_unique:
            keep = ~idx.duplicated()
            idx, rows = idx[keep], rows[keep]
        self.index, self.rows = idx, rows

    def lookup(self, ext: I64) -> I64:
        """The host row of the op with each External id (-1: none)."""
        if not len(self.rows):
            return np.full(len(ext), -1, dtype=np.int64)
        p = self.index.get_indexer(ext)
        return np.where(p >= 0, self.rows[np.maximum(p, 0)], -1).astype(np.int64)


def launch_rows(runtime: pd.DataFrame, gpu: pd.DataFrame) -> I64:
    """Runtime row of each GPU record by correlation id. A graph launch has many GPU records with one id."""
    rt_valid = runtime[runtime["correlation"] >= 0]
    rt_index = pd.Index(rt_valid["correlation"].to_numpy())
    if not rt_index.is_unique:
        keep = ~rt_index.duplicated()
        rt_valid = rt_valid[keep]
        rt_index = rt_index[keep]
    pos = rt_index.get_indexer(gpu["correlation"].to_numpy())
    rt_rows = rt_valid.index.to_numpy()
    launch = np.where(pos >= 0, rt_rows[np.maximum(pos, 0)], -1) if len(rt_rows) else np.full(len(gpu), -1)
    return launch.astype(np.int64)


def launching_ops(
    runtime: pd.DataFrame, ops: OpsByExtId, op_lanes: Callable[[], ThreadLanes], trustworthy: bool
) -> I64:
    """Host row of the CPU op that made each runtime call: by External id when trustworthy, else
    (and for calls without one) the innermost op open on the calling thread at the call.
    ``op_lanes`` is called only when some call needs the time lookup (a recent trace's External
    ids resolve every call, and grouping the ops by thread is then work saved)."""
    result = np.full(len(runtime), -1, dtype=np.int64)
    if not len(runtime):
        return result
    if trustworthy:
        result = ops.lookup(runtime["ext_id"].to_numpy())
    todo = np.flatnonzero(result < 0)
    if len(todo):
        result[todo] = op_lanes().innermost(
            runtime["pid"].to_numpy()[todo], runtime["tid"].to_numpy()[todo], runtime["ts_ns"].to_numpy()[todo]
        )
    return result


def gpu_ops(gpu: pd.DataFrame, launch: I64, runtime_op: I64, ops: OpsByExtId, trustworthy: bool) -> I64:
    """Host row of the CPU op behind each GPU record: its launch call's op, else (kernels with no
    runtime record: launched before the window, or sampled traces) its External id when trustworthy."""
    op = (
        np.where(launch >= 0, runtime_op[np.maximum(launch, 0)], -1).astype(np.int64)
        if len(runtime_op)
        else np.full(len(gpu), -1, dtype=np.int64)
    )
    if trustworthy:
        missing = (op < 0) & (gpu["ext_id"].to_numpy() >= 0)
        if missing.any():
            op[missing] = ops.lookup(gpu["ext_id"].to_numpy()[missing])
    return op
