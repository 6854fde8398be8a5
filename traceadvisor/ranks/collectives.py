"""One rank's collectives: the ``collectives`` table of a ``RankSummary`` (columns: ``summary.py``).

One row per collective or point-to-point operation that actually ran on this rank.

GPU traces (NCCL/RCCL). A row is a communication kernel (``analyses/communication.py`` decides which
kernels are: one test for every rule and report), timed on the GPU. It is described, in this order:

1. ``args``: the kernel's own collective args. Kineto copies ``Collective name``, ``In/Out msg
   nelems``, ``Group size``, ``dtype`` and the process group onto the kernel that
   ``record_param_comms`` launched (kineto ``output_json.cpp::appendCollectiveArgs``; format doc §4.9).
2. ``record_param_comms``: the args of the ``record_param_comms`` host op whose span holds the
   kernel's launch (the runtime call with the kernel's correlation id), on the launching thread.
3. ``host op name``: the op named by the enclosing ``c10d::<op>`` op or ``nccl:<op>`` annotation
   (ProcessGroupNCCL records one around each collective, with the input tensor's shape and type as
   its inputs), for traces whose ``record_param_comms`` carries no args (2022-2023 traces, HTA's
   sampled pair: there, all-to-all, all-gather and all-reduce all ran as
   ``ncclKernel_SendRecv_*``, so the kernel name would have been wrong).
4. ``kernel name``: the labelled fallback, from ``ncclKernel_<Op>_...`` / ``ncclDevKernel_<Op>_...``.
   ``SendRecv`` and ``Generic`` name no op (NCCL runs send, recv and all-to-all as SendRecv
   kernels; RCCL names every kernel ``ncclDevKernel_Generic``): ``unknown``. NVIDIA (nccl#739,
   #2196): a kernel's name does not say which operation it executes, hence last.

CPU traces (gloo). What a real run shows (torch 2.13 CPU, 2 processes under torchrun, DDP with 1 MB
buckets plus explicit all_reduce, all_gather, broadcast and barrier, ``torch.profiler`` with
``ProfilerActivity.CPU``; and the runs in ``fixtures/traces/multirank/``): the main thread records
the ``c10d::<op>`` op that enqueues the work (tens of µs for an async DDP bucket; it returns
before the collective runs) and no ``record_param_comms`` at all. Each of the process group's two
gloo worker threads records a ``gloo:<op>`` user annotation whose span is the collective's
execution, waiting for the peers included (rank 0's first bucket all-reduce lasts 28 ms while
rank 1, which sleeps 20 ms per step, takes 9.9 ms), with the input tensor's ``Input Dims`` and C++
``Input type`` (``float``, ``long int``; none on ``gloo:barrier``). Those annotations are the rows
(``op_source`` ``host op name``, or ``record_param_comms`` when a build also wrote one with args);
the process group comes from ``distributedInfo.pg_config`` when it lists a single group. Without
any worker annotation the rows are the ``record_param_comms`` host ops themselves. The two worker
threads run two buckets at once, so a later collective may start first: gloo's queue is FIFO, so
the k-th annotation of an op belongs to the k-th ``c10d::<op>`` launched before it, and that
launch gives the row its step and its place in ``ordinal``.

``bytes`` is S as nccl-tests defines it, computed by PARAM's single rule ``max(In, Out) msg nelems
x dtype size`` (``et_replay/comm/profiler_trace_analysis.py``; doc multirank §1.2); NaN when the
size or the dtype is unknown.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses.communication import communication_kernels
from traceadvisor.trace.columns import parse_raw
from traceadvisor.trace.model import Trace
from traceadvisor.trace.steps import step_of

COLUMNS: tuple[str, ...] = (
    "op",
    "op_source",
    "pg",
    "pg_ranks",
    "seq",
    "ordinal",
    "dtype",
    "in_nelems",
    "out_nelems",
    "bytes",
    "group_size",
    "on_gpu",
    "stream",
    "start_ns",
    "end_ns",
    "step",
)

OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "all_to_allv",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "send",
    "recv",
    "barrier",
    "unknown",
)

# Element size in bytes of each c10 ScalarType name Kineto writes as ``dtype`` (c10/core/ScalarType.h;
# PARAM's table covers the same names), and of the C++ type names ``Input type`` holds.
DTYPE_BYTES: dict[str, int] = {
    "Byte": 1,
    "Char": 1,
    "Short": 2,
    "Int": 4,
    "Long": 8,
    "Half": 2,
    "Float": 4,
    "Double": 8,
    "ComplexHalf": 4,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "Bool": 1,
    "QInt8": 1,
    "QUInt8": 1,
    "QInt32": 4,
    "BFloat16": 2,
    "QUInt4x2": 1,
    "QUInt2x4": 1,
    "Bits1x8": 1,
    "Bits2x4": 1,
    "Bits4x2": 1,
    "Bits8": 1,
    "Bits16": 2,
    "Float8_e5m2": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2fnuz": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e8m0fnu": 1,
    "Float4_e2m1fn_x2": 1,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
}
# ``Input type`` spells C++ types (``float``, ``long int``, ``c10::BFloat16``): their ScalarType names.
_CPP_DTYPES: dict[str, str] = {
    "float": "Float",
    "double": "Double",
    "c10::half": "Half",
    "c10::bfloat16": "BFloat16",
    "int": "Int",
    "long int": "Long",
    "long": "Long",
    "int64_t": "Long",
    "short int": "Short",
    "short": "Short",
    "unsigned char": "Byte",
    "signed char": "Char",
    "char": "Char",
    "bool": "Bool",
    "c10::complex<float>": "ComplexFloat",
    "c10::complex<double>": "ComplexDouble",
    "c10::complex<c10::half>": "ComplexHalf",
    "unsigned short": "UInt16",
    "unsigned int": "UInt32",
    "unsigned long": "UInt64",
    "c10::float8_e4m3fn": "Float8_e4m3fn",
    "c10::float8_e5m2": "Float8_e5m2",
    "c10::float8_e4m3fnuz": "Float8_e4m3fnuz",
    "c10::float8_e5m2fnuz": "Float8_e5m2fnuz",
}

# Host names that describe a collective: c10d's dispatcher ops and ProcessGroupNCCL / ProcessGroupGloo's
# record_function labels (``nccl:all_reduce``, ``gloo:all_gather``), and c10d's symmetric-memory ops
# (``symm_mem::multimem_all_reduce_``, whose first input is the tensor reduced).
_HOST_COLL = re.compile(r"^(?:c10d::|symm_mem::|nccl:|gloo:|rccl:|xccl:|ucc:|mpi:)(\w+)")
_WORKER_ANNOTATION = re.compile(r"^gloo:(\w+)$")
# ``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_ReduceScatter_...``, ``ncclSymkDevKernel_...``
_KERNEL_OP = re.compile(r"nccl(?:Symk)?(?:Dev)?Kernel_([A-Za-z]+?)(?:_|\(|$)", re.IGNORECASE)
# c10d's symmetric-memory kernels name their op: ``multimem_all_reduce_kernel``, ``one_shot_all_reduce_kernel``
_SYMM_KERNEL_OP = re.compile(r"(all_reduce|all_gather|reduce_scatter|all_to_all)\w*_kernel", re.IGNORECASE)
# record_param_comms values that are not an operation that moved data between ranks: ``wait`` is
# Work.wait() on the host, the coalescing markers bracket the real collectives.
_NOT_OPS = frozenset({"wait", "coalesced", "startcoalescing", "endcoalescing"})


def normalise_op(name: str | None) -> str:
    """The op of a ``Collective name`` arg, a c10d op, an ``nccl:``/``gloo:`` label or a kernel's op
    token: ``allreduce``, ``_allgather_base``, ``all_gather_into_tensor_coalesced``,
    ``reduce_scatter_tensor_coalesced``, ``alltoall_base``... as one of ``OPS``."""
    if not name:
        return "unknown"
    s = name.strip().lower()
    m = _HOST_COLL.match(s)
    if m:
        s = m.group(1)
    s = s.replace("_", "")
    for suffix in ("coalesced", "base", "intotensor", "tensor", "single"):
        s = s.replace(suffix, "")
    if "allreduce" in s:
        return "all_reduce"
    if "allgather" in s:
        return "all_gather"
    if "reducescatter" in s:
        return "reduce_scatter"
    if "alltoallv" in s:
        return "all_to_allv"
    if "alltoall" in s:
        return "all_to_all"
    if s.startswith("broadcast") or s == "bcast":
        return "broadcast"
    if s.startswith("sendrecv"):
        return "unknown"  # NCCL's p2p kernel runs send, recv and all-to-all alike
    for op in ("barrier", "reduce", "gather", "scatter", "send", "recv"):
        if s.startswith(op):
            return op
    return "unknown"


def normalise_dtype(dtype: str | None) -> str | None:
    """A ScalarType name (``Float``) for a ``dtype`` arg or a C++ ``Input type`` (``float``)."""
    if dtype is None:
        return None
    if dtype in DTYPE_BYTES:
        return dtype
    return _CPP_DTYPES.get(dtype.strip().lower(), dtype)


def message_bytes(in_nelems: float, out_nelems: float, dtype: str | None) -> float:
    """S = max(In, Out) nelems x element size (PARAM); NaN when either is unknown."""
    size = DTYPE_BYTES.get(normalise_dtype(dtype) or "")
    vals = [v for v in (in_nelems, out_nelems) if v is not None and not math.isnan(v)]
    if size is None or not vals:
        return math.nan
    return max(vals) * size


def kernel_name_op(name: str) -> str:
    m = _KERNEL_OP.search(name) or _SYMM_KERNEL_OP.search(name)
    return normalise_op(m.group(1)) if m else "unknown"


def rank_collectives(trace: Trace) -> pd.DataFrame:
    """The collectives table (``summary.py``) of one rank's trace."""
    kernels = communication_kernels(trace)
    if len(kernels):
        rows = _gpu_rows(trace, kernels)
    else:
        rows = _host_rows(trace)
    return _frame(rows, trace)


# -- GPU ------------------------------------------------------------------------------------------


def _gpu_rows(trace: Trace, kernels: pd.Index) -> list[dict[str, Any]]:
    gpu = trace.gpu.loc[kernels, ["ts_ns", "end_ns", "name", "stream", "correlation", "launch", "op"]]
    coll = trace.collectives
    on_gpu = coll[coll["on_gpu"].to_numpy(dtype=bool)]
    own = {(int(c), int(t)): i for i, c, t in zip(on_gpu.index, on_gpu["correlation"], on_gpu["ts_ns"], strict=True)}
    host_coll = coll[~coll["on_gpu"].to_numpy(dtype=bool)]
    host_colls = _HostIndex(
        host_coll[np.array([str(c).lower() not in _NOT_OPS for c in host_coll["collective"]], bool)]
    )
    labels, c10d_ops = _host_named(trace)
    rt_pid = trace.runtime["pid"].to_numpy(dtype=np.int64)
    rt_tid = trace.runtime["tid"].to_numpy(dtype=np.int64)
    rt_ts = trace.runtime["ts_ns"].to_numpy(dtype=np.int64)
    host = trace.host
    records = coll.to_dict("index")  # small (one row per collective op and kernel): rows as dicts

    def host_row(label: Any) -> dict[str, Any] | None:
        if label is None:
            return None
        return {c: host.at[label, c] for c in ("name", "input_dims", "input_types")}

    rows: list[dict[str, Any]] = []
    for ts, end, name, stream, corr, launch, op_row in gpu.itertuples(index=False, name=None):
        if launch >= 0:
            pid, tid, at = int(rt_pid[launch]), int(rt_tid[launch]), int(rt_ts[launch])
        elif op_row >= 0:
            pid, tid, at = int(host.at[op_row, "pid"]), int(host.at[op_row, "tid"]), int(host.at[op_row, "ts_ns"])
        else:
            pid, tid, at = -1, -1, -1
        row: dict[str, Any] = {"on_gpu": True, "stream": int(stream), "start_ns": int(ts), "end_ns": int(end)}
        row["launch_ns"] = at
        j = own.get((int(corr), int(ts)))
        label = labels.innermost(pid, tid, at)
        outer = c10d_ops.innermost(pid, tid, at)
        if j is not None:
            _describe(row, records[j], "args")
        elif (h_j := host_colls.innermost(pid, tid, at)) is not None:
            _describe(row, records[h_j], "record_param_comms")
        elif label is not None or outer is not None:
            _describe_named(row, host_row(label), host_row(outer))
        else:
            row.update(op=kernel_name_op(str(name)), op_source="kernel name")
        rows.append(row)
    return rows


_MAX_WALK = 64


class _HostIndex:
    """Host spans per (pid, tid), to find the innermost one holding a time (a launch)."""

    def __init__(self, frame: pd.DataFrame, keep: npt.NDArray[np.bool_] | None = None) -> None:
        if keep is not None:
            frame = frame[keep]
        self.by_thread: dict[tuple[int, int], tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], pd.Index]] = {}
        for key, g in frame.groupby(["pid", "tid"], sort=False):
            g = g.sort_values("ts_ns", kind="stable")
            pid, tid = key  # type: ignore[misc]
            self.by_thread[(int(pid), int(tid))] = (
                g["ts_ns"].to_numpy(dtype=np.int64),
                g["end_ns"].to_numpy(dtype=np.int64),
                g.index,
            )

    def innermost(self, pid: int, tid: int, at: int) -> Any:
        """Label of the latest-starting span on (pid, tid) holding ``at``; None when none does."""
        found = self.by_thread.get((pid, tid))
        if found is None or at < 0:
            return None
        starts, ends, labels = found
        k = int(np.searchsorted(starts, at, side="right")) - 1
        # spans on one thread nest: walk back from the latest start to the first that still holds
        # ``at``, past the siblings that ended before it (a few: collectives nest 2-3 deep; the cap
        # keeps a launch outside every span from scanning the whole thread)
        for _ in range(_MAX_WALK):
            if k < 0:
                break
            if ends[k] >= at:
                return labels[k]
            k -= 1
        return None


def _host_named(trace: Trace) -> tuple[_HostIndex, _HostIndex]:
    """The nccl:/gloo: labels (they carry the collective's input tensor) and the c10d::<op> ops
    (their inputs are (output, input) for the ``_base`` ops) that may hold a launch."""
    names = trace.host["name"].astype(str)
    coll = names.str.match(_HOST_COLL).to_numpy(dtype=bool)
    c10d = names.str.startswith("c10d::").to_numpy(dtype=bool)
    return _HostIndex(trace.host, coll & ~c10d), _HostIndex(trace.host, c10d)


def _describe(row: dict[str, Any], c: Mapping[str, Any], source: str) -> None:
    row.update(
        op=normalise_op(c["collective"]),
        op_source=source,
        pg=_text(c["pg_name"]),
        pg_ranks=_text(c["pg_ranks"]),
        seq=int(c["seq"]),
        dtype=normalise_dtype(c["dtype"]),
        in_nelems=float(c["in_nelems"]),
        out_nelems=float(c["out_nelems"]),
        group_size=int(c["group_size"]),
    )


def _describe_named(
    row: dict[str, Any], label: Mapping[str, Any] | None, c10d: Mapping[str, Any] | None = None
) -> None:
    """Op from an nccl:/gloo: label or a c10d op's name. Input size and dtype from the label's first
    input (ProcessGroupNCCL/Gloo pass the collective's input tensors to its record_function);
    for c10d's ``_base`` ops (``_allgather_base_``, ``alltoall_base_``, ``_reduce_scatter_base_``),
    whose inputs are (output, input), both sizes from the op."""
    named = label if label is not None else c10d
    assert named is not None
    name = str(named["name"])
    row.update(op=normalise_op(name), op_source="host op name")
    if label is not None:
        dims = _nelems(parse_raw(label["input_dims"]))
        if dims:
            row["in_nelems"] = dims[0]
        types = parse_raw(label["input_types"])
        if isinstance(types, list) and types and isinstance(types[0], str) and types[0]:
            row["dtype"] = normalise_dtype(types[0])
    if c10d is not None and "_base" in str(c10d["name"]):
        dims = _nelems(parse_raw(c10d["input_dims"]))
        if len(dims) >= 2 and not math.isnan(dims[0]) and not math.isnan(dims[1]):
            row["out_nelems"], row["in_nelems"] = dims[0], dims[1]
        if "dtype" not in row:
            types = parse_raw(c10d["input_types"])
            if isinstance(types, list) and len(types) >= 2 and isinstance(types[1], str) and types[1]:
                row["dtype"] = normalise_dtype(types[1])


def _nelems(dims: Any) -> list[float]:
    """Elements of each tensor of an ``Input Dims`` list (NaN for a non-tensor input)."""
    if not isinstance(dims, list):
        return []
    out: list[float] = []
    for d in dims:
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            out.append(float(np.prod(d, dtype=np.float64)))
        else:
            out.append(math.nan)
    return out


def _text(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


# -- CPU (gloo) -----------------------------------------------------------------------------------


def _host_rows(trace: Trace) -> list[dict[str, Any]]:
    host = trace.host
    names = host["name"].astype(str)
    worker = host[names.str.match(_WORKER_ANNOTATION).to_numpy(dtype=bool) & host["is_annotation"].to_numpy()]
    coll = trace.collectives
    rpc = coll[~coll["on_gpu"].to_numpy(dtype=bool)]
    rpc = rpc[np.array([str(c).lower() not in _NOT_OPS for c in rpc["collective"]], dtype=bool)]
    rows: list[dict[str, Any]] = []
    if not len(worker):
        return _rpc_rows(rpc)
    # launches on the host, per op, in order: c10d::<op> ops (and record_param_comms with args)
    launches = host[names.str.startswith("c10d::").to_numpy(dtype=bool) & ~host["is_annotation"].to_numpy()]
    queue: dict[str, list[int]] = {}
    for i in launches.sort_values("ts_ns", kind="stable").index:
        queue.setdefault(normalise_op(str(host.at[i, "name"])), []).append(int(i))
    rpc_at = {(int(p), int(t)): j for j, p, t in zip(rpc.index, rpc["pid"], rpc["ts_ns"], strict=True)}
    rpc_index = _HostIndex(rpc)
    taken: dict[str, int] = {}
    for i in worker.sort_values("ts_ns", kind="stable").index:
        w = worker.loc[i]
        row: dict[str, Any] = {"on_gpu": False, "stream": -1, "start_ns": int(w["ts_ns"]), "end_ns": int(w["end_ns"])}
        _describe_named(row, w.to_dict())
        op = str(row["op"])
        launch_ns = int(w["ts_ns"])
        q = queue.get(op, [])
        k = taken.get(op, 0)
        # FIFO: the earliest launch of this op not yet taken, if it came before the execution (work
        # enqueued before the profiler's window has no launch in the trace)
        if k < len(q) and int(host.at[q[k], "ts_ns"]) <= launch_ns:
            c10d = q[k]
            taken[op] = k + 1
            launch_ns = int(host.at[c10d, "ts_ns"])
            j = rpc_index.innermost(int(host.at[c10d, "pid"]), int(host.at[c10d, "tid"]), launch_ns)
            if j is None:
                j = rpc_at.get((int(host.at[c10d, "pid"]), launch_ns))
            if j is not None:
                _describe(row, rpc.loc[j].to_dict(), "record_param_comms")
        row["launch_ns"] = launch_ns
        rows.append(row)
    _pg_from_distributed_info(rows, trace.meta.distributed)
    return rows


def _rpc_rows(rpc: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows from the record_param_comms host ops themselves (no worker-thread annotation)."""
    rows: list[dict[str, Any]] = []
    for i in rpc.index:
        c = rpc.loc[i]
        row: dict[str, Any] = {"on_gpu": False, "stream": -1, "start_ns": int(c["ts_ns"]), "end_ns": int(c["end_ns"])}
        row["launch_ns"] = row["start_ns"]
        _describe(row, c.to_dict(), "record_param_comms")
        rows.append(row)
    return rows


def _pg_from_distributed_info(rows: list[dict[str, Any]], dist: Mapping[str, Any] | None) -> None:
    """Rows with no process group take it from ``distributedInfo.pg_config`` when it lists exactly
    one group: every collective then ran in it."""
    pgs = (dist or {}).get("pg_config")
    if not isinstance(pgs, list) or len(pgs) != 1 or not isinstance(pgs[0], dict):
        return
    pg = pgs[0]
    ranks = pg.get("ranks")
    ranks_text = str(list(ranks)) if isinstance(ranks, list) else _text(ranks)
    size = pg.get("pg_size")
    for row in rows:
        if not row.get("pg"):
            row["pg"] = _text(pg.get("pg_name"))
            row["pg_ranks"] = ranks_text
            if row.get("group_size", -1) < 0 and isinstance(size, int):
                row["group_size"] = size
    for row in rows:
        # an all-gather's output is n inputs, a reduce-scatter's input n outputs (nccl-tests' S)
        n = row.get("group_size", -1)
        if n > 0 and row["op_source"] == "host op name" and math.isnan(row.get("out_nelems", math.nan)):
            inn = row.get("in_nelems", math.nan)
            if row["op"] in ("all_gather", "gather"):
                row["out_nelems"] = inn * n
            elif row["op"] in ("all_reduce", "broadcast", "reduce", "all_to_all"):
                row["out_nelems"] = inn


# -- the table ------------------------------------------------------------------------------------


def _frame(rows: Sequence[dict[str, Any]], trace: Trace) -> pd.DataFrame:
    n = len(rows)

    def col(key: str, default: Any) -> list[Any]:
        return [r.get(key, default) if r.get(key, default) is not None else default for r in rows]

    df = pd.DataFrame(
        {
            "op": pd.Series(col("op", "unknown"), dtype=object),
            "op_source": pd.Series(col("op_source", "kernel name"), dtype=object),
            "pg": pd.Series(col("pg", ""), dtype=object),
            "pg_ranks": pd.Series(col("pg_ranks", ""), dtype=object),
            "seq": np.array(col("seq", -1), dtype=np.int64),
            "ordinal": np.full(n, -1, dtype=np.int64),
            "dtype": pd.Series(col("dtype", None), dtype=object),
            "in_nelems": np.array(col("in_nelems", math.nan), dtype=np.float64),
            "out_nelems": np.array(col("out_nelems", math.nan), dtype=np.float64),
            "bytes": np.full(n, math.nan),
            "group_size": np.array(col("group_size", -1), dtype=np.int64),
            "on_gpu": np.array(col("on_gpu", False), dtype=bool),
            "stream": np.array(col("stream", -1), dtype=np.int64),
            "start_ns": np.array(col("start_ns", -1), dtype=np.int64),
            "end_ns": np.array(col("end_ns", -1), dtype=np.int64),
            "step": np.full(n, -1, dtype=np.int64),
        }
    )
    if not n:
        return df
    df["bytes"] = [
        message_bytes(a, b, d) for a, b, d in zip(df["in_nelems"], df["out_nelems"], df["dtype"], strict=True)
    ]
    launch = np.array([r.get("launch_ns", -1) for r in rows], dtype=np.int64)
    df["step"] = np.where(launch >= 0, step_of(trace.steps, launch), -1).astype(np.int64)
    # a kernel whose launch is not in the trace (launched before the window; ROCm kernels without
    # their runtime call): the step whose GPU window holds it
    lost = (launch < 0) & df["on_gpu"].to_numpy()
    if lost.any():
        df.loc[lost, "step"] = _gpu_step(trace, df["start_ns"].to_numpy()[lost])
    # the ordinal counts in launch order (the program's order, the same on every rank) where the
    # launch is in the trace: gloo's two worker threads may start a later collective first
    df["_order"] = np.where(launch >= 0, launch, df["start_ns"].to_numpy())
    df = df.sort_values(["_order", "start_ns"], kind="stable")
    df["ordinal"] = df.groupby("pg", sort=False).cumcount().astype(np.int64)
    df = df.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    return df[list(COLUMNS)]


def _gpu_step(trace: Trace, ts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    t = trace.steps.table
    out = np.full(len(ts), -1, dtype=np.int64)
    if not len(t):
        return out
    starts = t["gpu_start_ns"].to_numpy(dtype=np.int64)
    ends = t["gpu_end_ns"].to_numpy(dtype=np.int64)
    for i, x in enumerate(ts.tolist()):
        hit = np.flatnonzero((starts >= 0) & (starts <= x) & (x < ends))
        if len(hit):
            out[i] = int(t["step"].to_numpy()[hit[0]])
    return out


def parse_ranks(text: str | Sequence[int] | None, group_size: int | None = None) -> list[int] | None:
    """The ranks of ``Process Group Ranks`` (``"[0, 1]"``); None when absent or unreadable. A list
    cut with ``...`` is rebuilt from the stride of its first two entries up to ``group_size``
    entries, as PARAM's ``_parse_ranks`` does (without the size: the entries written)."""
    if text is None:
        return None
    if not isinstance(text, str):
        return [int(r) for r in text]
    s = text.strip()
    if not s or s == "[]":
        return None
    if "..." in s:
        head = [int(x) for x in re.findall(r"-?\d+", s.split("...")[0])]
        if len(head) < 2 or not group_size or group_size < len(head):
            return head or None
        stride = head[1] - head[0]
        return [head[0] + stride * i for i in range(group_size)]
    try:
        value = ast.literal_eval(s)
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return [int(v) for v in value]
    return None
