"""``load``: paths (files, directories) to ``Trace`` objects, one per file (rank)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceadvisor.errors import TraceError
from traceadvisor.trace.columns import ColumnSink
from traceadvisor.trace.parallel import read_columns
from traceadvisor.trace.reader import DEFAULT_MAX_INFLATED_BYTES

if TYPE_CHECKING:
    from traceadvisor.trace.model import Trace, TraceMeta

TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
# The run record ``traceadvisor capture`` writes beside its traces: not a trace.
_RUN_RECORD = re.compile(r"run(-rank\d+)?\.json")


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; directories expanded to the trace files directly inside them."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        try:
            if p.is_dir():
                found = sorted(
                    f
                    for f in p.iterdir()
                    if f.is_file() and f.name.endswith((".json", ".json.gz")) and not _RUN_RECORD.fullmatch(f.name)
                )
                if not found:
                    raise TraceError(f"{p}: directory has no .json or .json.gz trace files")
                out.extend(found)
            elif p.exists():
                out.append(p)
            else:
                raise TraceError(f"{p}: no such file or directory")
        except OSError as exc:  # a name too long, a folder that cannot be listed
            raise TraceError(f"{p}: cannot access ({exc.strerror or exc})") from None
    if not out:
        raise TraceError("no trace given")
    return out


def load(
    paths: str | Path | Iterable[str | Path],
    max_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    meanwhile: Callable[[], object] | None = None,
    after_each: Callable[[], object] | None = None,
) -> list[Trace]:
    """Load one trace per file. Ranks come from ``distributedInfo``, else from the file name.

    ``meanwhile`` runs once, overlapped with the decoding of the first file where it can be
    (``parallel.read_columns``); ``after_each`` after each file (a cancelled analysis raises there)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files = expand_paths(paths)
    traces = []
    for i, f in enumerate(files):
        traces.append(load_file(f, max_bytes=max_bytes, meanwhile=meanwhile if i == 0 else None))
        if after_each is not None:
            after_each()
    if len(traces) > 1:
        _assign_missing_ranks(traces)
    return traces


def load_file(
    path: str | Path, max_bytes: int = DEFAULT_MAX_INFLATED_BYTES, meanwhile: Callable[[], object] | None = None
) -> Trace:
    """Read one trace file into a ``Trace``."""
    from traceadvisor.trace.model import Trace

    path = Path(path)
    sink, result = read_columns(path, max_bytes, meanwhile=meanwhile)
    tables = {family: sink.table(family) for family in list(sink.parts)}
    warnings = list(result.warnings)
    if result.dropped_events:
        warnings.append(f"dropped {result.dropped_events} events with missing or ill-typed fields")
    if sink.bad_times:
        warnings.append(f"dropped {sink.bad_times} events with missing, non-numeric or absurd times")
    if sink.negative_durations:
        warnings.append(f"{sink.negative_durations} events had negative durations (set to 0)")
    if not any(len(t) for t in tables.values()):
        if result.truncated:
            raise TraceError(f"{path}: trace is cut off before any complete, usable event")
        why = f" ({'; '.join(warnings)})" if warnings else ""
        raise TraceError(f"{path}: trace has no usable events{why}")
    meta = _meta(path, result.top, sink, warnings, result.truncated)
    return Trace(meta, tables, sink.metadata)


def _meta(path: Path, top: dict[str, Any], sink: ColumnSink, warnings: list[str], truncated: bool) -> TraceMeta:
    from traceadvisor.trace.model import TraceMeta

    dist = top.get("distributedInfo")
    rank = None
    world = None
    if isinstance(dist, dict):
        rank = _as_int(dist.get("rank"))
        world = _as_int(dist.get("world_size"))
    devices = top.get("deviceProperties")
    meta = top.get("metadata") if isinstance(top.get("metadata"), dict) else {}
    flags = {
        k: bool(top.get(k) or (meta or {}).get(k))
        for k in ("record_shapes", "with_stack", "profile_memory", "with_modules", "with_flops")
    }
    return TraceMeta(
        path=str(path),
        rank=rank,
        world_size=world,
        devices=[d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else [],
        distributed=dist if isinstance(dist, dict) else None,
        flags=flags,
        base_time_ns=_as_int(top.get("baseTimeNanoseconds")),
        top_keys=sorted(top),
        warnings=warnings,
        truncated=truncated,
        unknown_categories=dict(sink.other_categories),
    )


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return None


def _assign_missing_ranks(traces: list[Trace]) -> None:
    for t in traces:
        if t.meta.rank is None:
            m = _RANK_IN_NAME.search(Path(t.meta.path).name)
            if m:
                t.meta.rank = int(m.group(1))
    if any(t.meta.rank is None for t in traces):
        used = {t.meta.rank for t in traces}
        nxt = 0
        for t in traces:
            if t.meta.rank is None:
                while nxt in used:
                    nxt += 1
                t.meta.rank = nxt
                used.add(nxt)
                t.meta.warnings.append(f"rank unknown (no distributedInfo, no rank in file name); numbered {nxt}")
