"""Rank summaries on disk: one ``.tasummary`` file beside each trace, reused while the trace is unchanged.

The file is msgpack (msgspec), never pickle: summaries sit beside traces on shared disks, and
unpickling a file someone else wrote runs their code. What is decoded is checked against a fixed
schema (``_File``); numeric columns are raw little-endian buffers of a whitelisted numpy dtype
(int64 ns kept exact, NaN kept), text columns lists of str/None. A file that fails any check is
treated as missing: the caller rebuilds it.

Not compressed: on 1,000 summaries of 3 KB (``bench/ranks_scale.py``) reading took 1.21 s plain,
1.26 s at gzip level 1 and 1.25 s at level 6 (warm page cache): the time is in decoding and
building DataFrames, not in bytes from disk. A compressed file is not read either: decompressing
an untrusted file is a way to exhaust memory (a gzip bomb) for no gain.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from traceadvisor.atomic import write_bytes
from traceadvisor.ranks.summary import SUMMARY_VERSION, RankSummary, TraceKey

SUFFIX = ".tasummary"
_FORMAT = "traceadvisor-rank-summary"

# Numeric columns travel as raw buffers: only these dtypes are accepted back (never "O": an object
# buffer would be pointers), always little-endian on disk.
_NUMERIC = {
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
    "bool",
}
# Text columns: pandas 3's default string dtype ("str", missing = NaN), the nullable "string"
# (missing = pd.NA) and "object" columns whose values are all str or None.
_TEXT = {"str", "string", "object"}


class _Column(msgspec.Struct, forbid_unknown_fields=True):
    dtype: str
    values: bytes | list[str | None]


class _Table(msgspec.Struct, forbid_unknown_fields=True):
    columns: dict[str, _Column]


class _Key(msgspec.Struct, forbid_unknown_fields=True):
    path: str
    size: int
    mtime_ns: int
    version: str


class _Scalars(msgspec.Struct, forbid_unknown_fields=True):
    rank: int | None
    rank_source: str
    world_size: int | None
    host: str | None
    device: str | None
    base_time_ns: int | None


class _File(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    key: _Key
    scalars: _Scalars
    tables: dict[str, _Table]
    report: dict[str, Any]
    warnings: list[str]


class _Header(msgspec.Struct):
    """The start of any version's file: read first, so a file of another version is not decoded."""

    format: str
    key: _Key


def _enc_hook(obj: Any) -> Any:
    # Report.to_dict() holds numpy scalars (a float64 mean, an int64 count): stored as the Python
    # number of the same value (float64 -> float is exact; they compare equal after the trip).
    if isinstance(obj, np.generic):
        return obj.item()
    raise NotImplementedError(f"a summary's report cannot hold a {type(obj).__name__}")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_DECODER = msgspec.msgpack.Decoder(_File)
_HEADER_DECODER = msgspec.msgpack.Decoder(_Header)

# What a damaged or foreign file can raise while it is read and rebuilt: all mean "missing".
_UNREADABLE = (OSError, msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError)


def trace_key(path: str | Path) -> TraceKey:
    """The key of a trace as it is now on disk (``os.stat``). The path is absolute but symlinks are
    kept: the same file reached through another name is another key (a rebuild, never a mix-up)."""
    st = Path(path).stat()
    return TraceKey(path=_absolute(path), size=st.st_size, mtime_ns=st.st_mtime_ns)


def _absolute(path: str | Path) -> str:
    # abspath, not resolve(): ".." is folded but symlinks are kept (resolving them could name a
    # folder the user never gave, and a worker on another host may see another target).
    return os.path.abspath(path)  # noqa: PTH100


def beside_path(trace_path: str | Path) -> Path:
    """``<trace file name>.tasummary`` in the trace's folder."""
    p = Path(trace_path)
    return p.with_name(p.name + SUFFIX)


def cache_dir() -> Path:
    """The per-user fallback folder (``$XDG_CACHE_HOME``, else ``~/.cache``, as the XDG base-directory
    specification says) for summaries of traces in folders we may not write."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "traceadvisor" / "summaries"


def fallback_path(trace_path: str | Path) -> Path:
    digest = hashlib.sha256(_absolute(trace_path).encode("utf-8", "surrogateescape")).hexdigest()
    return cache_dir() / f"{digest}{SUFFIX}"


def summary_path(trace_path: str | Path) -> Path:
    """Where the summary of ``trace_path`` is written: beside the trace, or in the per-user cache
    folder when the trace's folder is not writable (a read-only dataset, another user's run)."""
    beside = beside_path(trace_path)
    if os.access(beside.parent, os.W_OK | os.X_OK):
        return beside
    return fallback_path(trace_path)


def cached_summary(trace_path: str | Path, key: TraceKey) -> RankSummary | None:
    """The summary of ``trace_path`` with this key from either place (beside the trace first: a
    summary shipped with a read-only dataset is used), or None."""
    for candidate in dict.fromkeys((beside_path(trace_path), summary_path(trace_path))):
        found = read_summary(candidate, key)
        if found is not None:
            return found
    return None


def write_summary(summary: RankSummary, path: str | Path) -> None:
    """Write ``summary`` to ``path`` atomically (a reader sees the old file or the new one).

    Raises TypeError for a column of a dtype the format does not carry (a builder's bug)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, encode_summary(summary))


def encode_summary(summary: RankSummary) -> bytes:
    k = summary.key
    doc = _File(
        format=_FORMAT,
        key=_Key(path=k.path, size=k.size, mtime_ns=k.mtime_ns, version=k.version),
        scalars=_Scalars(
            rank=summary.rank,
            rank_source=summary.rank_source,
            world_size=summary.world_size,
            host=summary.host,
            device=summary.device,
            base_time_ns=summary.base_time_ns,
        ),
        tables={name: _encode_table(name, df) for name, df in summary.tables.items()},
        report=summary.report,
        warnings=list(summary.warnings),
    )
    return _ENCODER.encode(doc)


def read_summary(path: str | Path, key: TraceKey) -> RankSummary | None:
    """The summary stored at ``path`` if it was built from exactly ``key`` (path, size, mtime_ns and
    ``SUMMARY_VERSION``); None when the file is missing, stale, of another version or damaged."""
    path = Path(path)
    try:
        if not path.is_file():  # a FIFO named like a summary would block the read forever
            return None
        data = path.read_bytes()
        header = _HEADER_DECODER.decode(data)
        if header.format != _FORMAT or _as_key(header.key) != key:
            return None
        return _decode(_DECODER.decode(data))
    except _UNREADABLE:
        return None


def decode_summary(data: bytes) -> RankSummary:
    """A summary from ``encode_summary``'s bytes, without the key check (raises on a bad file)."""
    return _decode(_DECODER.decode(data))


def _as_key(k: _Key) -> TraceKey:
    return TraceKey(path=k.path, size=k.size, mtime_ns=k.mtime_ns, version=k.version)


def _decode(doc: _File) -> RankSummary:
    s = doc.scalars
    return RankSummary(
        key=_as_key(doc.key),
        rank=s.rank,
        rank_source=s.rank_source,
        world_size=s.world_size,
        host=s.host,
        device=s.device,
        base_time_ns=s.base_time_ns,
        tables={name: _decode_table(t) for name, t in doc.tables.items()},
        report=doc.report,
        warnings=tuple(doc.warnings),
    )


def _encode_table(name: str, df: pd.DataFrame) -> _Table:
    columns: dict[str, _Column] = {}
    for col in df.columns:
        if not isinstance(col, str):
            raise TypeError(f"summary table {name!r}: column name {col!r} is not a string")
        columns[col] = _encode_column(f"{name}.{col}", df[col])
    return _Table(columns=columns)


def _encode_column(where: str, s: pd.Series) -> _Column:
    dtype = str(s.dtype)
    if dtype in _NUMERIC:
        arr = s.to_numpy()
        return _Column(dtype=dtype, values=arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
    if dtype in _TEXT:
        values = [None if _missing(v) else v for v in s.tolist()]
        bad = next((v for v in values if v is not None and not isinstance(v, str)), None)
        if bad is not None:
            raise TypeError(f"summary column {where}: {type(bad).__name__} value {bad!r} in a text column")
        return _Column(dtype=dtype, values=values)
    raise TypeError(f"summary column {where}: dtype {dtype} is not one of {sorted(_NUMERIC | _TEXT)}")


def _missing(v: object) -> bool:
    # None, NaN (pandas 3 "str" columns) and pd.NA ("string" columns) all mean a missing text value.
    return v is None or v is pd.NA or (isinstance(v, float) and v != v)


def _decode_table(t: _Table) -> pd.DataFrame:
    data: dict[str, Any] = {}
    n: int | None = None
    for name, col in t.columns.items():
        if isinstance(col.values, bytes):
            if col.dtype not in _NUMERIC:
                raise ValueError(f"column {name}: numeric buffer of dtype {col.dtype!r}")
            le = np.dtype(col.dtype).newbyteorder("<")
            arr = np.frombuffer(col.values, dtype=le).astype(np.dtype(col.dtype))  # a writable native copy
            series = pd.Series(arr, name=name, copy=False)
        else:
            if col.dtype not in _TEXT:
                raise ValueError(f"column {name}: text values of dtype {col.dtype!r}")
            series = pd.Series(col.values, name=name, dtype=col.dtype)
        if n is not None and len(series) != n:
            raise ValueError(f"column {name}: {len(series)} rows, not {n}")
        n = len(series)
        data[name] = series
    return pd.DataFrame(data, index=pd.RangeIndex(n or 0))


__all__ = [
    "SUFFIX",
    "SUMMARY_VERSION",
    "beside_path",
    "cache_dir",
    "cached_summary",
    "decode_summary",
    "encode_summary",
    "fallback_path",
    "read_summary",
    "summary_path",
    "trace_key",
    "write_summary",
]
