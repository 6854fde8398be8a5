"""The table schema: every event table's columns, in order, with their kind and meaning, declared once.

Everything else follows this declaration or is checked against it:

* ``columns.ColumnSink.table`` refuses to build a table whose columns are not these, in this
  order, and gives the text and JSON columns their declared dtype;
* ``empty_table(family)`` is built from it, so a trace without (say) syncs has a ``syncs`` table
  with the same columns and dtypes as one that has them;
* ``tests/test_table_schema.py`` checks the Python column builders, the C decoder's ``ColSpec``
  arrays in ``_kineto.c`` (parsed out of the source) and the tables both decoders load from real
  traces against it, and ``mismatches`` names any difference;
* ``docs/tables.md`` is generated from it (``python -m traceadvisor.trace.tables``; the test checks).

Column order is the order in which columns are made: those read from the events (by both
decoders, in the same order), then ``end_ns`` (computed from ``ts_ns + dur_ns`` when the table is
built, after bad times are dropped: ``columns.ColumnSink._check_times``), then the ``derived``
columns the model adds after load (the links: ``gpu.launch``, ``gpu.op``, ``runtime.op``).

Dtypes, one per kind, the same on every supported pandas (>= 2.2, < 4):

* times and ids are int64 (``-1`` for a missing id; times are exact nanoseconds, never rounded);
* quantities that may be absent or fractional are float64 (NaN when absent);
* ``name`` is categorical over an object index of str (names repeat thousands of times);
* ``text`` columns are object holding str or None. Not pandas' ``str`` dtype: pandas 3 infers
  ``str`` from an object array of strings but pandas 2 keeps ``object``, so leaving it to
  inference gave a dtype that depended on the pandas version (and ``other.category`` was ``str``
  when loaded, ``object`` when empty). Setting it also spares pandas a scan of every row.
* ``json`` columns are object holding the argument's raw JSON bytes or None, parsed on demand
  (``columns.parse_raw``): most rules never read input shapes.

This module imports no pandas at import time: the decoding processes (``parallel.py``) read the
schema before any table is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

Kind = Literal["int64", "float64", "int8", "bool", "name", "text", "json"]
# made by both decoders / computed when the table is built / added by the model after load
Origin = Literal["decoded", "computed", "derived"]

# The C decoder's column kind letters (``ColSpec.kind`` in _kineto.c, read by native.py): a name is
# exported as int32 codes into the table's name list, text and JSON as bytes (or None).
NATIVE_KIND: dict[Kind, str] = {
    "int64": "q",
    "float64": "d",
    "int8": "b",
    "bool": "?",
    "name": "i",
    "text": "S",
    "json": "R",
}
_NUMPY: dict[Kind, type[np.generic]] = {
    "int64": np.int64,
    "float64": np.float64,
    "int8": np.int8,
    "bool": np.bool_,
    "text": np.object_,
    "json": np.object_,
}


@dataclass(frozen=True)
class Column:
    """One column of an event table."""

    name: str
    kind: Kind
    meaning: str
    origin: Origin = "decoded"


_TS = Column(
    "ts_ns",
    "int64",
    "start, ns: the trace's µs with three decimals, exact (relative to baseTimeNanoseconds where given)",
)
_DUR = Column("dur_ns", "int64", "duration, ns (0 when absent; a negative one is set to 0 with a warning)")
_END = Column("end_ns", "int64", "ts_ns + dur_ns", "computed")
_NAME = Column("name", "name", "event name")
_PID = Column("pid", "int64", "process id (-1 if missing)")
_TID = Column("tid", "int64", "thread id (-1 if missing)")
_EXT = Column("ext_id", "int64", "'External id': the launching op's id (before torch 2.3 a copy of correlation)")
_CORR = Column("correlation", "int64", "CUPTI correlation id, shared by a runtime call and the GPU work it caused")
_DEVICE = Column("device", "int64", "GPU index ('device' arg, else the event's pid)")

TABLES: dict[str, tuple[Column, ...]] = {
    "host": (
        _TS,
        _DUR,
        _NAME,
        Column("is_annotation", "bool", "user_annotation (record_function, ProfilerStep#N), not a cpu_op"),
        _PID,
        _TID,
        _EXT,
        Column("seq_nr", "int64", "autograd 'Sequence number', shared by a forward op and its backward node"),
        Column("fwd_tid", "int64", "'Fwd thread id' of a backward op: the thread its forward ran on"),
        Column("rf_id", "int64", "'Record function id': the RecordFunction handle"),
        Column("unfinished", "bool", "'finished': false: still open when the profiler stopped"),
        Column("input_dims", "json", "'Input Dims' (record_shapes), raw JSON"),
        Column("input_types", "json", "'Input type' (record_shapes), raw JSON"),
        Column("concrete_inputs", "json", "'Concrete Inputs': scalar argument values, raw JSON"),
        _END,
    ),
    "frames": (
        _TS,
        _DUR,
        _NAME,
        _PID,
        _TID,
        Column("py_id", "int64", "'Python id' of the frame"),
        Column("py_parent", "int64", "'Python parent id': the calling frame"),
        Column("module_id", "int64", "'Python module id' of an nn.Module frame"),
        _END,
    ),
    "runtime": (
        _TS,
        _DUR,
        _NAME,
        Column("is_driver", "bool", "a driver API call (cuda_driver, ...), not a runtime API call"),
        _PID,
        _TID,
        _CORR,
        _EXT,
        Column("cbid", "int64", "CUPTI callback id ('cbid', or 'cid' in older traces)"),
        Column("stream_arg", "int64", "'stream' argument of the call, where recorded"),
        _END,
        Column("op", "int64", "host row of the op that made the call (-1 if none)", "derived"),
    ),
    "gpu": (
        _TS,
        _DUR,
        _NAME,
        Column("kind", "int8", "0 kernel, 1 memcpy, 2 memset (columns.KERNEL, MEMCPY, MEMSET)"),
        _DEVICE,
        Column("stream", "int64", "CUDA stream ('stream' arg, else the event's tid)"),
        _CORR,
        _EXT,
        Column("grid_x", "int64", "grid size x (0 if absent)"),
        Column("grid_y", "int64", "grid size y (0 if absent)"),
        Column("grid_z", "int64", "grid size z (0 if absent)"),
        Column("block_x", "int64", "block size x (0 if absent)"),
        Column("block_y", "int64", "block size y (0 if absent)"),
        Column("block_z", "int64", "block size z (0 if absent)"),
        Column("registers", "float64", "'registers per thread'"),
        Column("shared_mem", "float64", "'shared memory' per block, bytes"),
        Column("blocks_per_sm", "float64", "'blocks per SM'"),
        Column("warps_per_sm", "float64", "'warps per SM'"),
        Column("occupancy_pct", "float64", "'est. achieved occupancy %'"),
        Column("graph_id", "int64", "CUDA graph id of a kernel run by a graph launch (-1 if none)"),
        Column("bytes", "float64", "bytes copied or set ('bytes', or 'size' in older traces)"),
        _END,
        Column("launch", "int64", "runtime row of the call that launched it (-1 if none)", "derived"),
        Column("op", "int64", "host row of the op that launched it (-1 if none)", "derived"),
    ),
    "gpu_annotations": (
        _TS,
        _DUR,
        _NAME,
        Column("device", "int64", "GPU index (the event's pid)"),
        Column("stream", "int64", "stream (the event's tid)"),
        _EXT,
        _END,
    ),
    "syncs": (
        _TS,
        _DUR,
        _NAME,
        _DEVICE,
        Column("stream", "int64", "stream that waited ('stream' arg; -1 for a device-wide sync)"),
        _CORR,
        _EXT,
        Column("wait_on_stream", "int64", "stream that recorded the awaited event"),
        Column("wait_on_event_corr", "int64", "correlation of the cudaEventRecord awaited"),
        _END,
    ),
    "memory": (
        _TS,
        _NAME,
        _PID,
        _TID,
        Column("bytes", "float64", "'Bytes' allocated (negative: freed)"),
        Column("total_allocated", "float64", "'Total Allocated' after the event, bytes"),
        Column("total_reserved", "float64", "'Total Reserved' after the event, bytes"),
        Column("device_type", "int64", "c10 DeviceType (0 CPU, 1 CUDA, ...)"),
        Column("device_id", "int64", "device index"),
    ),
    "collectives": (
        _TS,
        _DUR,
        Column("on_gpu", "bool", "from a collective kernel, not from a host op (record_param_comms)"),
        _PID,
        _TID,
        _CORR,
        _EXT,
        Column("collective", "text", "'Collective name' (allreduce, ...)"),
        Column("in_nelems", "float64", "'In msg nelems'"),
        Column("out_nelems", "float64", "'Out msg nelems'"),
        Column("dtype", "text", "element type ('dtype')"),
        Column("group_size", "int64", "'Group size'"),
        Column("pg_name", "text", "'Process Group Name' (or 'Process Group ID' in older traces)"),
        Column("pg_ranks", "text", "'Process Group Ranks', as written ('[0, 1]')"),
        Column("seq", "int64", "'Seq': the collective's sequence number"),
        _END,
    ),
    "flows": (
        _TS,
        Column("is_start", "bool", "the arrow's start ('s'), not its end"),
        Column("is_fwdbwd", "bool", "a forward -> backward arrow"),
        Column("flow_id", "int64", "arrow id, shared by its two ends"),
        _PID,
        _TID,
    ),
    "overhead": (_TS, _DUR, _NAME, _END),
    "other": (_TS, _DUR, _NAME, Column("category", "text", "the event's category, as written"), _END),
}

FAMILIES: tuple[str, ...] = tuple(TABLES)


def columns(family: str, derived: bool = False) -> tuple[Column, ...]:
    """The columns of ``family`` in order: as loaded, or with the model's derived ones too."""
    return tuple(c for c in TABLES[family] if derived or c.origin != "derived")


def column_names(family: str, derived: bool = False) -> list[str]:
    return [c.name for c in columns(family, derived)]


def decoded(family: str) -> tuple[Column, ...]:
    """The columns the decoders make (Python builders and C ColSpec alike), in their order."""
    return tuple(c for c in TABLES[family] if c.origin == "decoded")


def object_columns(family: str) -> frozenset[str]:
    """The text and JSON columns of ``family``: object dtype, set explicitly when a table is built."""
    return _OBJECT[family]


_OBJECT: dict[str, frozenset[str]] = {
    family: frozenset(c.name for c in cols if c.kind in ("text", "json")) for family, cols in TABLES.items()
}


def empty_table(family: str) -> pd.DataFrame:
    """A table of ``family`` with no rows: the loaded columns, in order, with their dtypes."""
    import pandas as pd

    data: dict[str, Any] = {}
    for c in columns(family):
        if c.kind == "name":
            data[c.name] = pd.Categorical.from_codes([], categories=pd.Index([], dtype=object))
        else:
            data[c.name] = np.empty(0, _NUMPY[c.kind])
    return pd.DataFrame(data)


def mismatches(family: str, table: pd.DataFrame, derived: bool = False) -> list[str]:
    """How ``table`` differs from the schema of ``family`` (names, order, dtypes); empty if it does not.

    ``derived``: whether the model's derived columns are expected (a ``Trace``'s tables) or not (a
    table as the loader builds it).
    """
    import pandas as pd

    want = columns(family, derived)
    names = [c.name for c in want]
    got = [str(c) for c in table.columns]
    if got != names:
        return [f"{family}: columns {got}, schema {names}"]
    out = []
    for c in want:
        dtype = table[c.name].dtype
        if c.kind == "name":
            if not isinstance(dtype, pd.CategoricalDtype):
                out.append(f"{family}.{c.name}: dtype {dtype}, schema category")
            elif dtype.categories.dtype != np.dtype(object):
                out.append(f"{family}.{c.name}: categories {dtype.categories.dtype}, schema object")
        elif dtype != np.dtype(_NUMPY[c.kind]):
            out.append(f"{family}.{c.name}: dtype {dtype}, schema {np.dtype(_NUMPY[c.kind])} ({c.kind})")
    if not isinstance(table.index, pd.RangeIndex):
        out.append(f"{family}: index {type(table.index).__name__}, schema RangeIndex")
    return out


def markdown() -> str:
    """The schema as Markdown tables, one per event table (docs/tables.md holds this text; a test checks)."""
    out = []
    for family, cols in TABLES.items():
        out += [f"### `{family}`", "", "| column | kind | made | meaning |", "|---|---|---|---|"]
        out += [f"| `{c.name}` | {c.kind} | {c.origin} | {c.meaning.replace('|', '/')} |" for c in cols]
        out.append("")
    return "\n".join(out)


__all__ = [
    "FAMILIES",
    "NATIVE_KIND",
    "TABLES",
    "Column",
    "Kind",
    "Origin",
    "column_names",
    "columns",
    "decoded",
    "empty_table",
    "markdown",
    "mismatches",
]


if __name__ == "__main__":  # python -m traceadvisor.trace.tables: the text for docs/tables.md
    print(markdown(), end="")
