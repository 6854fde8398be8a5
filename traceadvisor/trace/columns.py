"""Turn batches of decoded events into columnar numpy arrays, one table per event family.

Each batch is bucketed by category (normalised through the alias table of format doc §6), and each
bucket is converted to numpy at once, so no per-event Python objects outlive their batch. Values
arrive with the types ``schema.py`` allows (the reader has dropped any other, with a warning), so
every column is one-dimensional. Numbers in string form (``"inf"``, hex ``"0x0"`` streams,
``"2560"`` sizes) are coerced; what cannot be read becomes NaN (floats) or -1 (ids).

Times are checked when a table is built, for both decoders alike: a row whose ``ts`` or ``dur``
is missing, not a number or absurd is dropped, a negative ``dur`` is set to 0, and both are
counted per table for the warnings (``ColumnSink.warnings``).

Times become int64 nanoseconds, exactly: Kineto writes microseconds with three decimals (format
doc §1.4), and ``floor(ts) * 1000 + round(frac(ts) * 1000)`` recovers those digits from a float64
without the rounding error that ``round(ts * 1000)`` has above 2^43 µs.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from itertools import count, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from traceadvisor.trace.schema import NULL, Args, Event
from traceadvisor.trace.tables import column_names, object_columns

if TYPE_CHECKING:  # pandas is imported when the tables are built: the decoding needs numpy only
    import pandas as pd

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

# Category aliases across kineto versions (format doc §6); unknown categories are kept as they are.
CATEGORY_ALIASES: dict[str, str] = {
    "Operator": "cpu_op",
    "User": "user_annotation",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "gpu_user_Annotation": "gpu_user_annotation",
    "async": "ac2g",
    "async_gpu": "ac2g",
    "async_cpu_to_gpu": "ac2g",
    "forward_backward": "fwdbwd",
}

# The categories of each table, as the warnings name them.
FAMILY_LABELS: dict[str, str] = {
    "host": "cpu_op/user_annotation",
    "frames": "python_function",
    "runtime": "cuda_runtime/cuda_driver",
    "gpu": "kernel/gpu_memcpy/gpu_memset",
    "gpu_annotations": "gpu_user_annotation",
    "syncs": "cuda_sync",
    "memory": "cpu_instant_event",
    "overhead": "overhead",
    "flows": "fwdbwd flow",
    "other": "unknown-category",
}

# Which table each category lands in.
FAMILY: dict[str, str] = {
    "cpu_op": "host",
    "user_annotation": "host",
    "python_function": "frames",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "xpu_runtime": "runtime",
    "xpu_driver": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "runtime",
    "mtia_runtime": "runtime",
    "kernel": "gpu",
    "gpu_memcpy": "gpu",
    "gpu_memset": "gpu",
    "gpu_user_annotation": "gpu_annotations",
    "cuda_sync": "syncs",
    "cpu_instant_event": "memory",
    "overhead": "overhead",
    # ac2g flow arrows repeat what the correlation id already says (runtime call → GPU work), and
    # they are a third of a large trace's events: counted as a known category, not tabled.
    "ac2g": "launch_flows",
    "fwdbwd": "flows",
}


def to_ns(values: Sequence[Any]) -> I64:
    """Microsecond values (numbers or numeric strings) to exact int64 nanoseconds; NaN → MISSING_TIME.

    The whole microseconds are converted to int64 before scaling: for absolute-epoch µs
    (≈1.7e15, torch < 2.4) the nanosecond value exceeds 2^53 and would not survive float64.
    """
    us = floats(values)
    with np.errstate(all="ignore"):  # absurd values (1e308) are flagged below, not warned about
        return _us_to_ns(us)


def _us_to_ns(us: F64) -> I64:
    whole = np.floor(us)
    bad = ~np.isfinite(whole) | (np.abs(whole) > 9.0e15)
    if bad.any():
        whole[bad] = 0.0
    frac_ns = np.rint((us - whole) * 1000.0)
    frac_ns[bad] = 0.0
    out = whole.astype(np.int64) * 1000 + frac_ns.astype(np.int64)
    if bad.any():
        out[bad] = MISSING_TIME
    return out


MISSING_TIME = np.iinfo(np.int64).min


def floats(values: Sequence[Any]) -> F64:
    """Coerce a list of JSON values to float64; None and unreadable values become NaN."""
    try:
        return np.array(values, dtype=np.float64)
    except (ValueError, TypeError, OverflowError):
        return np.array([_float(v) for v in values], dtype=np.float64)


def _float(v: Any) -> float:
    if v is None or isinstance(v, bool):
        return math.nan
    if isinstance(v, (int, float)):
        try:
            return float(v)
        except OverflowError:
            return math.nan
    if isinstance(v, str):
        s = v.strip()
        try:
            return float(int(s, 16)) if s.lower().startswith("0x") else float(s)
        except ValueError:
            return math.nan
    return math.nan


def ints(values: Sequence[Any]) -> I64:
    """Coerce ids to int64 (hex strings allowed); missing or unreadable values become -1."""
    filled = [-1 if v is None else v for v in values]
    try:
        return np.array(filled, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        return np.array([_int(v) for v in filled], dtype=np.int64)


def _int(v: Any) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else -1
    if isinstance(v, float):
        return int(v) if math.isfinite(v) and abs(v) < 9.0e18 else -1
    if isinstance(v, str):
        s = v.strip()
        try:
            n = int(s, 16) if s.lower().startswith("0x") else int(float(s))
            return n if -(2**63) <= n < 2**63 else -1
        except (ValueError, OverflowError):
            return -1
    return -1


class Interner:
    """Names as codes into a shared list of unique strings (most names repeat thousands of times).

    A ``defaultdict`` whose factory is a counter assigns the next code on a miss, so encoding a
    batch is one C-level ``map`` with no Python per name.
    """

    def __init__(self) -> None:
        self.codes: defaultdict[Any, int] = defaultdict(count().__next__)

    def encode(self, names: Sequence[Any]) -> npt.NDArray[np.int32]:
        try:
            return np.fromiter(map(self.codes.__getitem__, names), np.int32, len(names))
        except TypeError:  # an unhashable name (a list, an object): damaged input
            hashable = [s if s is None or s.__class__ in (str, int, float, bool) else str(s) for s in names]
            return np.fromiter(map(self.codes.__getitem__, hashable), np.int32, len(names))

    def strings(self) -> tuple[list[str], npt.NDArray[np.int32] | None]:
        """The names as strings, and a code remapping when two keys read the same (None and "")."""
        keys = list(self.codes)
        if all(k.__class__ is str for k in keys):
            return keys, None
        texts = ["" if k is None else str(k) for k in keys]
        unique: dict[str, int] = {}
        remap = np.fromiter((unique.setdefault(t, len(unique)) for t in texts), np.int32, len(texts))
        return list(unique), remap

    def categorical(self, codes: npt.NDArray[np.int32]) -> pd.Categorical:
        import pandas as pd

        names, remap = self.strings()
        if remap is not None:
            codes = remap[codes]
        cats = pd.Index(names, dtype=object)
        return pd.Categorical.from_codes(codes, categories=cats, validate=False)


def _xyz(values: Sequence[Any]) -> tuple[I64, I64, I64]:
    """Grid/block ``[x, y, z]`` lists to three int columns (missing → 0)."""
    xs, ys, zs = [], [], []
    for v in values:
        if isinstance(v, (list, tuple)) and len(v) == 3:
            x, y, z = (_int(c) for c in v)
        else:
            x = y = z = 0
        xs.append(x)
        ys.append(y)
        zs.append(z)
    return (np.array(xs, dtype=np.int64), np.array(ys, dtype=np.int64), np.array(zs, dtype=np.int64))


def _raw(values: Sequence[Any]) -> npt.NDArray[np.object_]:
    out = np.empty(len(values), dtype=object)
    out[:] = [None if v is NULL or v is None else bytes(v) for v in values]
    return out


def parse_raw(raw: Any) -> Any:
    """A raw JSON argument kept by the loader (``Input Dims``, ``Input type``...) parsed; None if absent or bad."""
    if raw is None or isinstance(raw, float):
        return None
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return None


def _strs(values: Sequence[Any]) -> npt.NDArray[np.object_]:
    out = np.empty(len(values), dtype=object)
    out[:] = [None if v is None else str(v) for v in values]
    return out


def _first(a: list[Any], b: Callable[[], list[Any]]) -> list[Any]:
    """``a`` with its gaps filled from ``b()`` (an alias key); ``b`` is only read when needed."""
    if None not in a:
        return a
    alt = b()
    return [x if x is not None else y for x, y in zip(a, alt, strict=True)]


def _ext_ids(args: list[Args]) -> I64:
    return ints(_first([a.external_id for a in args], lambda: [a.external_id_lower for a in args]))


def _xyz_fast(values: list[Any]) -> tuple[I64, I64, I64]:
    try:
        arr = np.array([(0, 0, 0) if v is None else v for v in values], dtype=np.int64)
        if arr.ndim == 2 and arr.shape[1] == 3:
            return arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy()
    except (ValueError, TypeError, OverflowError):
        pass
    return _xyz(values)


def _collectives(sink: ColumnSink, evs: list[Event], args: list[Args], on_gpu: bool) -> None:
    """Collective metadata (format doc §4.9) is sparse: keep it in its own small table."""
    idx = [i for i, a in enumerate(args) if a.collective_name is not None]
    if not idx:
        return
    sub = [args[i] for i in idx]
    sev = [evs[i] for i in idx]
    cols = sink.times(sev)
    cols["on_gpu"] = np.full(len(idx), on_gpu)
    cols["pid"] = ints([e.pid for e in sev])
    cols["tid"] = ints([e.tid for e in sev])
    cols["correlation"] = ints([a.correlation for a in sub])
    cols["ext_id"] = _ext_ids(sub)
    cols["collective"] = _strs([a.collective_name for a in sub])
    cols["in_nelems"] = floats([a.in_msg_nelems for a in sub])
    cols["out_nelems"] = floats([a.out_msg_nelems for a in sub])
    cols["dtype"] = _strs([a.dtype for a in sub])
    cols["group_size"] = ints([a.group_size for a in sub])
    cols["pg_name"] = _strs(_first([a.pg_name for a in sub], lambda: [a.pg_name_old for a in sub]))
    cols["pg_ranks"] = _strs([a.pg_ranks for a in sub])
    cols["seq"] = ints([a.seq for a in sub])
    sink._append("collectives", cols)


_EMPTY_ARGS = Args()


class ColumnSink:
    """Collects the column arrays of every batch, per table, and concatenates them at the end."""

    def __init__(self) -> None:
        self.parts: dict[str, dict[str, list[Any]]] = {}
        self.names: dict[str, Interner] = {}
        self.metadata: list[Event] = []
        self.other_categories: dict[str, int] = {}
        # per table, counted as it is built: rows dropped for a bad ts / a bad dur, negative durs
        self.bad_ts: dict[str, int] = {}
        self.bad_dur: dict[str, int] = {}
        self.negative_durations: dict[str, int] = {}

    # -- batch intake -------------------------------------------------------------------------
    def add_batch(self, events: list[Event]) -> None:
        # Bucketing is vectorised: one C-level pass maps each category to its table, numpy finds
        # each table's rows (a per-event Python loop here cost more than the JSON decode).
        cats = cast(list[str], [e.cat for e in events])  # or None, which dict.get takes too
        codes = np.fromiter(map(_FAMILY_CODE.get, cats, repeat(-1)), np.int8, len(events))
        buckets: dict[str, list[Event]] = {}
        present = np.bincount(codes + 1, minlength=len(_FAMILIES) + 1)
        for code in np.flatnonzero(present[1:]):
            rows = np.flatnonzero(codes == code).tolist()
            buckets[_FAMILIES[code]] = [events[rows[0]]] if len(rows) == 1 else list(itemgetter(*rows)(events))
        if present[0]:
            self._bucket_slowly([events[i] for i in np.flatnonzero(codes < 0).tolist()], buckets)
        for family, bucket in buckets.items():
            build = _BUILDERS.get(family)
            if build is not None:
                cols = build(self, family, bucket)
                self._append(family, cols)

    def _bucket_slowly(self, events: list[Event], buckets: dict[str, list[Event]]) -> None:
        """Metadata, unknown and ill-typed categories: one event at a time (few in real traces)."""
        for e in events:
            cat = e.cat
            if cat.__class__ is not str:
                if e.ph == "M":
                    self.metadata.append(e)
                    continue
                cat = "" if cat is None else str(cat)
            family = FAMILY.get(cat) or FAMILY.get(CATEGORY_ALIASES.get(cat, ""), "")
            if not family:
                if e.ph == "M":
                    self.metadata.append(e)
                    continue
                family = "other"
                self.other_categories[cat] = self.other_categories.get(cat, 0) + 1
            buckets.setdefault(family, []).append(e)

    def _append(self, family: str, cols: dict[str, Any]) -> None:
        store = self.parts.setdefault(family, {})
        for k, v in cols.items():
            store.setdefault(k, []).append(v)

    def export(self) -> dict[str, Any]:
        """The collected state, for a sink in another process to ``absorb`` (``parallel.py``)."""
        return {
            "parts": self.parts,
            "names": {family: list(it.codes) for family, it in self.names.items()},
            "metadata": self.metadata,
            "other_categories": self.other_categories,
        }

    def absorb(self, state: dict[str, Any]) -> None:
        """Append another sink's exported columns after ours, re-coding its names into our tables."""
        for family, cols in state["parts"].items():
            names = state["names"].get(family)
            if names is not None and "name" in cols:
                remap = self.interner(family).encode(names)
                cols["name"] = [remap[codes] for codes in cols["name"]]
            store = self.parts.setdefault(family, {})
            for k, chunks in cols.items():
                store.setdefault(k, []).extend(chunks)
        self.metadata.extend(state["metadata"])
        for cat, n in state["other_categories"].items():
            self.other_categories[cat] = self.other_categories.get(cat, 0) + n

    def interner(self, family: str) -> Interner:
        it = self.names.get(family)
        if it is None:
            it = self.names[family] = Interner()
        return it

    def times(self, evs: list[Event], duration: bool = True) -> dict[str, Any]:
        """``ts_ns`` (and ``dur_ns``, 0 when absent) as read; ``table`` checks them."""
        cols: dict[str, Any] = {"ts_ns": to_ns([e.ts for e in evs])}
        if duration:
            cols["dur_ns"] = to_ns([0 if e.dur is None else e.dur for e in evs])
        return cols

    # -- final tables -------------------------------------------------------------------------
    def _check_times(self, family: str, data: dict[str, Any]) -> npt.NDArray[np.bool_]:
        """The rows of ``data`` with a missing, unreadable or absurd time (to drop), negative
        durations set to 0 and ``end_ns`` added; counted under ``family``. Collective rows repeat
        a host op's or a kernel's row, which counts them."""
        ts, dur = data["ts_ns"], data.get("dur_ns")
        bad: npt.NDArray[np.bool_] = ts == MISSING_TIME
        counts = family != "collectives"
        if counts and bad.any():
            self.bad_ts[family] = self.bad_ts.get(family, 0) + int(bad.sum())
        if dur is None:
            return bad
        bad_dur: npt.NDArray[np.bool_] = dur == MISSING_TIME
        if counts and (bad_dur & ~bad).any():
            self.bad_dur[family] = self.bad_dur.get(family, 0) + int((bad_dur & ~bad).sum())
        neg = (dur < 0) & ~bad_dur
        if neg.any():
            # Kineto clamps durations to >= 0 (format doc §1.4): a negative one is damage.
            if counts:
                self.negative_durations[family] = self.negative_durations.get(family, 0) + int(neg.sum())
            data["dur_ns"] = dur = np.where(neg, 0, dur)
        data["end_ns"] = ts + dur  # wrong on the bad rows, which are dropped
        return bad | bad_dur

    def warnings(self) -> list[str]:
        """What the tables built so far dropped or changed, one line per kind, naming the tables."""
        out = []
        families = sorted({*self.bad_ts, *self.bad_dur})
        if families:
            dropped = sum(self.bad_ts.values()) + sum(self.bad_dur.values())
            parts = "; ".join(
                f"{_label(f)}: {_time_counts(self.bad_ts.get(f, 0), self.bad_dur.get(f, 0))}" for f in families
            )
            out.append(f"dropped {_events(dropped)} with missing, non-numeric or absurd times ({parts})")
        if self.negative_durations:
            n = sum(self.negative_durations.values())
            parts = "; ".join(f"{_label(f)}: {k} 'dur'" for f, k in sorted(self.negative_durations.items()))
            out.append(f"{_events(n)} had negative durations, set to 0 ({parts})")
        return out

    def table(self, family: str) -> pd.DataFrame:
        import pandas as pd

        store = self.parts.get(family)
        if not store:
            return pd.DataFrame()
        objects = object_columns(family)
        data: dict[str, Any] = {}
        for k, chunks in store.items():
            arr = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
            if k == "name":
                data[k] = self.interner(family).categorical(arr)
            elif k in objects:
                # Text (str or None) and raw JSON (bytes or None) are object, as tables.py declares:
                # typed up front, or pandas scans every row to infer a type (a third of building the
                # host table), and pandas 3 infers its ``str`` dtype for text where pandas 2 keeps object.
                data[k] = pd.Series(arr, dtype=object, copy=False)
            else:
                data[k] = arr
        store.clear()
        bad = self._check_times(family, data)
        if list(data) != column_names(family):  # a builder out of step with tables.py: a bug, not bad input
            raise RuntimeError(f"{family} table built with columns {list(data)}, schema {column_names(family)}")
        df = pd.DataFrame(data, copy=False)
        if not bad.any() and family != "collectives":
            return df  # already labelled 0..n-1
        if bad.any():
            df = df[~bad]
        if family == "collectives":
            # Rows come from two builders (host ops, GPU kernels) in batch order: make it an order
            # that does not depend on where batches were cut.
            df = df.iloc[np.lexsort((df["ts_ns"].to_numpy(), df["on_gpu"].to_numpy()))]
        return df.reset_index(drop=True)


def _label(family: str) -> str:
    return FAMILY_LABELS.get(family, family)


def _events(n: int) -> str:
    return "1 event" if n == 1 else f"{n} events"


def _time_counts(ts: int, dur: int) -> str:
    return ", ".join(f"{n} '{key}'" for key, n in (("ts", ts), ("dur", dur)) if n)


# "Operator" is cpu_op's name before kineto 0.4 (format doc §6): an op, not an annotation.
_OP_CATEGORIES = ("cpu_op", "Operator")
_DRIVER_CATEGORIES = ("cuda_driver", "xpu_driver", "privateuse1_driver")


def _host(sink: ColumnSink, family: str, evs: list[Event]) -> dict[str, Any]:
    args = [e.args or _EMPTY_ARGS for e in evs]
    cols = sink.times(evs)
    cols["name"] = sink.interner(family).encode([e.name for e in evs])
    cols["is_annotation"] = np.array([e.cat not in _OP_CATEGORIES for e in evs], dtype=bool)
    cols["pid"] = ints([e.pid for e in evs])
    cols["tid"] = ints([e.tid for e in evs])
    cols["ext_id"] = _ext_ids(args)
    cols["seq_nr"] = ints([a.sequence_number for a in args])
    cols["fwd_tid"] = ints([a.fwd_thread_id for a in args])
    cols["rf_id"] = ints([a.record_function_id for a in args])
    cols["unfinished"] = np.array([a.finished is False for a in args], dtype=bool)
    cols["input_dims"] = _raw([a.input_dims for a in args])
    cols["input_types"] = _raw([a.input_type for a in args])
    cols["concrete_inputs"] = _raw([a.concrete_inputs for a in args])
    _collectives(sink, evs, args, on_gpu=False)
    return cols


def _frames(sink: ColumnSink, family: str, evs: list[Event]) -> dict[str, Any]:
    args = [e.args or _EMPTY_ARGS for e in evs]
    cols = sink.times(evs)
    cols["name"] = sink.interner(family).encode([e.name for e in evs])
    cols["pid"] = ints([e.pid for e in evs])
    cols["tid"] = ints([e.tid for e in evs])
    cols["py_id"] = ints([a.python_id for a in args])
    cols["py_parent"] = ints([a.python_parent_id for a in args])
    cols["module_id"] = ints([a.python_module_id for a in args])
    return cols


def _runtime(sink: ColumnSink, family: str, evs: list[Event]) -> dict[str, Any]:
    args = [e.args or _EMPTY_ARGS for e in evs]
    cols = sink.times(evs)
    cols["name"] = sink.interner(family).encode([e.name for e in evs])
    cols["is_driver"] = np.array([e.cat in _DRIVER_CATEGORIES for e in evs], dtype=bool)
    cols["pid"] = ints([e.pid for e in evs])
    cols["tid"] = ints([e.tid for e in evs])
    cols["correlation"] = ints([a.correlation for a in args])
    cols["ext_id"] = _ext_ids(args)
    cols["cbid"] = ints(_first([a.cbid for a in args], lambda: [a.cid for a in args]))
    cols["stream_arg"] = ints([a.stream for a in args])
    return cols


def _gpu(sink: ColumnSink, family: str, evs: list[Event]) -> dict[str, Any]:
    args = [e.args or _EMPTY_ARGS for e in evs]
    cols = sink.times(evs)
    cols["name"] = sink.interner(family).encode([e.name for e in evs])
    cols["kind"] = np.array([_GPU_KIND.get(e.cat or "", 0) for e in evs], dtype=np.int8)
    dev = ints([a.device for a in args])
    cols["device"] = np.where(dev >= 0, dev, ints([e.pid for e in evs]))
    stream = ints([a.stream for a in args])
    cols["stream"] = np.where(stream >= 0, stream, ints([e.tid for e in evs]))
    cols["correlation"] = ints([a.correlation for a in args])
    cols["ext_id"] = _ext_ids(args)
    gx, gy, gz = _xyz_fast([a.grid for a in args])
    bx, by, bz = _xyz_fast([a.block for a in args])
    cols.update(grid_x=gx, grid_y=gy, grid_z=gz, block_x=bx, block_y=by, block_z=bz)
    cols["registers"] = floats([a.registers for a in args])
    cols["shared_mem"] = floats([a.shared_memory for a in args])
    cols["blocks_per_sm"] = floats([a.blocks_per_sm for a in args])
    cols["warps_per_sm"] = floats([a.warps_per_sm for a in args])
    cols["occupancy_pct"] = floats([a.occupancy for a in args])
    cols["graph_id"] = ints([a.graph_id for a in args])
    cols["bytes"] = floats(_first([a.bytes for a in args], lambda: [a.size for a in args]))
    _collectives(sink, evs, args, on_gpu=True)
    return cols


KERNEL, MEMCPY, MEMSET = 0, 1, 2
_GPU_KIND = {
    "kernel": KERNEL,
    "Kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "Memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "Memset": MEMSET,
}


def _gpu_annotations(sink: ColumnSink, family: str, evs: list[Event]) -> dict[str, Any]:
    args = [e.args or _EMPTY_ARGS for e in evs]
    cols = sink.times(evs)
    cols["name"] = sink.interner(family).encode([e.name for e in evs])
    cols["device"] = ints([e.pid for e in evs])
    cols["stream"] = ints([e.tid for e in evs])
    cols["ext_id"] = ints([a.external_id for a in args])
    return cols


def _syncs(sink: ColumnSink, family: str, evs: list[Event]) -> dict[str, Any]:
    args = [e.args or _EMPTY_ARGS for e in evs]
    cols = sink.times(evs)
    cols["name"] = sink.interner(family).encode([e.name for e in evs])
    pid = ints([e.pid for e in evs])
    dev = ints([a.device for a in args])
    cols["device"] = np.where(dev >= 0, dev, pid)
    cols["stream"] = ints([a.stream for a in args])
    cols["correlation"] = ints([a.correlation for a in args])
    cols["ext_id"] = ints([a.external_id for a in args])
    cols["wait_on_stream"] = ints([a.wait_on_stream for a in args])
    cols["wait_on_event_corr"] = ints([a.wait_on_event_corr for a in args])
    return cols


def _memory(sink: ColumnSink, family: str, evs: list[Event]) -> dict[str, Any]:
    evs = [e for e in evs if e.name in ("[memory]", "[OutOfMemory]")]
    args = [e.args or _EMPTY_ARGS for e in evs]
    cols = sink.times(evs, duration=False)
    cols["name"] = sink.interner(family).encode([e.name for e in evs])
    cols["pid"] = ints([e.pid for e in evs])
    cols["tid"] = ints([e.tid for e in evs])
    cols["bytes"] = floats([a.mem_bytes for a in args])
    cols["total_allocated"] = floats([a.total_allocated for a in args])
    cols["total_reserved"] = floats([a.total_reserved for a in args])
    cols["device_type"] = ints([a.device_type for a in args])
    cols["device_id"] = ints([a.device_id for a in args])
    return cols


def _overhead(sink: ColumnSink, family: str, evs: list[Event]) -> dict[str, Any]:
    cols = sink.times(evs)
    cols["name"] = sink.interner(family).encode([e.name for e in evs])
    return cols


def _flows(sink: ColumnSink, family: str, evs: list[Event]) -> dict[str, Any]:
    cols = sink.times(evs, duration=False)
    cols["is_start"] = np.array([e.ph == "s" for e in evs], dtype=bool)
    cols["is_fwdbwd"] = np.array([e.cat in ("fwdbwd", "forward_backward") for e in evs], dtype=bool)
    cols["flow_id"] = ints([e.id for e in evs])
    cols["pid"] = ints([e.pid for e in evs])
    cols["tid"] = ints([e.tid for e in evs])
    return cols


def _other(sink: ColumnSink, family: str, evs: list[Event]) -> dict[str, Any]:
    evs = [e for e in evs if e.ph == "X"]
    cols = sink.times(evs)
    cols["name"] = sink.interner(family).encode([e.name for e in evs])
    cols["category"] = _strs([e.cat for e in evs])
    return cols


_BUILDERS: dict[str, Callable[[ColumnSink, str, list[Event]], dict[str, Any]]] = {
    "host": _host,
    "frames": _frames,
    "runtime": _runtime,
    "gpu": _gpu,
    "gpu_annotations": _gpu_annotations,
    "syncs": _syncs,
    "memory": _memory,
    "overhead": _overhead,
    "flows": _flows,
    "other": _other,
}

# Table of every known category and alias, as small integer codes for the vectorised bucketing.
_FAMILIES: list[str] = sorted(set(FAMILY.values()))
_FAMILY_CODE: dict[str, int] = {
    cat: _FAMILIES.index(FAMILY.get(cat) or FAMILY[CATEGORY_ALIASES[cat]]) for cat in [*FAMILY, *CATEGORY_ALIASES]
}
