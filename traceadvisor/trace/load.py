"""``load``: paths (files, directories) to ``Trace`` objects, one per file (rank)."""

from __future__ import annotations

import logging
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceadvisor.errors import TraceError
from traceadvisor.trace.columns import ColumnSink
from traceadvisor.trace.device import GpuConfig
from traceadvisor.trace.parallel import read_columns
from traceadvisor.trace.reader import DEFAULT_MAX_INFLATED_BYTES

if TYPE_CHECKING:
    from traceadvisor.trace.model import Trace, TraceMeta

TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
# The run record ``traceadvisor capture`` writes beside its traces: not a trace.
_RUN_RECORD = re.compile(r"run(-rank\d+)?\.json")
# Files skipped in a directory are reported here (the command line prints them as warnings).
_log = logging.getLogger(__name__)
_NOT_FILES = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; directories expanded to the trace files directly inside them."""
    return [f for f, _ in _expand(paths)]


def _expand(paths: Iterable[str | Path]) -> list[tuple[Path, bool]]:
    """``expand_paths``, each file with whether it was found in a directory (not named)."""
    out: list[tuple[Path, bool]] = []
    for raw in paths:
        p = Path(raw)
        try:
            if p.is_dir():
                found = _trace_files(p)
                if not found:
                    raise TraceError(f"{p}: directory has no .json or .json.gz trace files")
                out.extend((f, True) for f in found)
            elif p.exists():
                out.append((p, False))
            else:
                raise TraceError(f"{p}: no such file or directory")
        except OSError as exc:  # a name too long, a folder that cannot be listed
            raise TraceError(f"{p}: cannot access ({exc.strerror or exc})") from None
    if not out:
        raise TraceError("no trace given")
    return out


def _trace_files(folder: Path) -> list[Path]:
    """The regular files directly in ``folder`` named like traces. Other entries so named are
    skipped with a warning, unopened: opening a FIFO waits for a writer, a device may never end.
    A sub-folder is skipped silently (one rank per file, not per folder)."""
    found = []
    for f in sorted(folder.iterdir()):
        if not f.name.endswith((".json", ".json.gz")) or _RUN_RECORD.fullmatch(f.name):
            continue
        why = _not_a_file(f)
        if why is None:
            found.append(f)
        elif why:
            _log.warning("%s: skipped: %s, not a trace file", f, why)
    return found


def _not_a_file(f: Path) -> str | None:
    """Why ``f`` is not a regular file (after links), "" for a folder; None for a regular file."""
    try:
        mode = f.stat().st_mode
    except FileNotFoundError:
        return "a symbolic link to a missing file" if f.is_symlink() else "removed while listed"
    except OSError as exc:  # a loop of links, a name too long
        return f"cannot be examined ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return ""
    return _NOT_FILES.get(stat.S_IFMT(mode), "not a regular file")


def load(
    paths: str | Path | Iterable[str | Path],
    max_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    meanwhile: Callable[[], object] | None = None,
    after_each: Callable[[], object] | None = None,
    gpu: GpuConfig | None = None,
) -> list[Trace]:
    """Load one trace per file. Ranks come from ``distributedInfo``, else from the file name.

    ``gpu`` (``[tool.traceadvisor.gpu]``) is given to every trace: how its roofline picks the peaks.

    ``meanwhile`` runs once, overlapped with the decoding of the first file where it can be
    (``parallel.read_columns``); ``after_each`` after each file (a cancelled analysis raises there).

    A file found in a directory that is not a readable trace (a config or results ``.json`` beside
    the traces) is skipped with a warning; the directory fails only if no trace remains. A file
    named on its own must be a trace."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    traces: list[Trace] = []
    skipped: list[TraceError] = []
    pending = meanwhile

    def run_meanwhile() -> object:
        nonlocal pending
        fn, pending = pending, None
        return None if fn is None else fn()

    for f, in_folder in _expand(paths):
        try:
            # ``meanwhile`` goes with each file until one has run it: a skipped file may fail first.
            traces.append(load_file(f, max_bytes=max_bytes, meanwhile=run_meanwhile if pending else None, gpu=gpu))
        except TraceError as exc:
            if not in_folder:
                raise
            skipped.append(exc)
        if after_each is not None:
            after_each()
    _report_skipped(skipped, any_loaded=bool(traces))
    if len(traces) > 1:
        _assign_missing_ranks(traces)
        _warn_shared_ranks(traces)
    return traces


def expand_named(paths: Iterable[str | Path]) -> list[tuple[Path, bool]]:
    """Each trace file with whether it was found in a directory (True) or named (False): a file
    found in a directory that is not a trace is skipped with a warning, a named one fails."""
    return _expand(paths)


def report_skipped(skipped: list[TraceError], any_loaded: bool) -> None:
    """``load``'s handling of files skipped from a directory (a warning each; an error if none loaded)."""
    _report_skipped(skipped, any_loaded)


def _report_skipped(skipped: list[TraceError], any_loaded: bool) -> None:
    """A warning per skipped file; if none was loaded, the error (the file's own, if only one)."""
    if not any_loaded and len(skipped) == 1:
        raise skipped[0]
    for exc in skipped:
        _log.warning("%s; skipped", exc)
    if not any_loaded and skipped:
        raise TraceError(f"none of the {len(skipped)} trace files could be read (see the warnings)")


def load_file(
    path: str | Path,
    max_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    meanwhile: Callable[[], object] | None = None,
    gpu: GpuConfig | None = None,
) -> Trace:
    """Read one trace file into a ``Trace`` (``gpu``: its GPU configuration, see ``load``)."""
    # Imported here, not at the top: pandas (which the model needs) then loads while the first
    # file decodes in a second process (parallel.py). The model does not import this module.
    from traceadvisor.trace.model import Trace

    path = Path(path)
    sink, result = read_columns(path, max_bytes, meanwhile=meanwhile)
    tables = {family: sink.table(family) for family in list(sink.parts)}
    warnings = list(result.warnings)
    if result.dropped_events:
        warnings.append(f"dropped {result.dropped_events} events that are not JSON objects")
    warnings.extend(sink.warnings())  # times dropped or clamped, per table
    if not any(len(t) for t in tables.values()):
        if result.truncated:
            raise TraceError(f"{path}: trace is cut off before any complete, usable event")
        why = f" ({'; '.join(warnings)})" if warnings else ""
        raise TraceError(f"{path}: trace has no usable events{why}")
    meta = _meta(path, result.top, sink, warnings, result.truncated)
    return Trace(meta, tables, sink.metadata, gpu=gpu)


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
        traceadvisor=top.get("traceadvisor"),
        host_name=top["host_name"] if isinstance(top.get("host_name"), str) else None,
    )


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return None


def _warn_shared_ranks(traces: list[Trace]) -> None:
    """A warning on each trace whose rank another file claims too (two runs' traces in one folder,
    or a file copied under another name): the cross-rank comparisons would mix them up."""
    by_rank: dict[int | None, list[Trace]] = {}
    for t in traces:
        by_rank.setdefault(t.meta.rank, []).append(t)
    for rank, same in by_rank.items():
        if len(same) < 2:
            continue
        for t in same:
            others = [o.meta.path for o in same if o is not t]
            shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            t.meta.warnings.append(f"rank {rank} is also claimed by {shown}: several files for one rank")


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
