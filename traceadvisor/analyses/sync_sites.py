"""Exact source lines of blocking syncs, from the call sites capture recorded (capture/sync_sites.py).

A trace names a Python frame by its function's first line (trace/source.py), so a sync's own
line is not in it. ``traceadvisor capture`` and the in-loop advisor record, during the recorded
steps on a GPU, each sync torch reports through ``torch.cuda.set_sync_debug_mode("warn")``: its
file, exact line, function, the function's first line, step, order within the step and host time,
in the trace's top-level ``"traceadvisor"`` key under ``"sync_sites"``.

Matching a recorded site to a sync in the trace. Every sync torch warns about ends in exactly one
``cudaStreamSynchronize`` (``memcpy_and_sync`` and ``stream_synchronize`` in
c10/cuda/CUDAFunctions.h; ``hipMemcpyWithStream``/``hipStreamSynchronize`` on ROCm), and
``cudaDeviceSynchronize``/``cudaEventSynchronize`` are never warned about, so only those calls are
candidates. Within one step, a candidate's innermost user frame names a file and a function; a
site belongs to the same frame when its file and function are the frame's and, for a frame the
trace names by its first line (``function_start``), that line is the site's ``first_line``. When a
step's frame holds as many candidates as sites, they pair in order. Otherwise (a library's own
``cudaStreamSynchronize`` that torch does not warn about, a warning a ``catch_warnings`` block of
the program hid, the per-step cap) they pair by time: the warning is raised when the op's Python
binding returns (torch/csrc/Exceptions.cpp, ``PyWarningHandler``), just after its sync ended, and
its timestamp is on the profiler's clock (``CLOCK_REALTIME``, a trace ``ts`` plus
``baseTimeNanoseconds``), so a site takes the latest unpaired candidate of its frame that ended
before it, within ``CLOCK_SLACK_NS``. A candidate left unpaired keeps its frame's line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from traceadvisor.analyses.cache import memoised
from traceadvisor.trace.model import Trace

# The runtime calls a warned sync ends in (see above).
WARNED_SYNC_CALLS = ("cudaStreamSynchronize", "hipStreamSynchronize", "hipMemcpyWithStream")
# How far a site's host time may read before the end of its sync: the profiler converts its own
# cycle-counter timestamps to CLOCK_REALTIME (c10::ApproximateClockToUnixTimeConverter), a few µs
# apart from time.time_ns() read in Python.
CLOCK_SLACK_NS = 20_000
SITE_COLUMNS = ["step", "order", "file", "path", "line", "function", "first_line", "ts_ns"]


@memoised
def recorded_sync_sites(trace: Trace) -> pd.DataFrame | None:
    """The recorded sites (``SITE_COLUMNS``, in step then order), with the recorded steps in
    ``.attrs["steps"]`` and dropped counts in ``.attrs["dropped"]``; None when the trace has none
    (not captured by traceadvisor on a GPU) or the block is not in the recorder's form."""
    key = trace.meta.traceadvisor
    block = key.get("sync_sites") if isinstance(key, Mapping) else None
    if not isinstance(block, Mapping):
        return None
    steps, sites = block.get("steps"), block.get("sites")
    if not isinstance(steps, list) or not isinstance(sites, list):
        return None
    rows = [_site_row(s) for s in sites]
    if not all(isinstance(s, int) for s in steps) or any(r is None for r in rows):
        return None
    table = pd.DataFrame([r for r in rows if r is not None], columns=SITE_COLUMNS)
    table = table.sort_values(["step", "order"], kind="stable").reset_index(drop=True)
    table.attrs["steps"] = sorted(set(steps))
    dropped = block.get("dropped")
    table.attrs["dropped"] = dict(dropped) if isinstance(dropped, Mapping) else {}
    return table


def _site_row(site: Any) -> list[Any] | None:
    """One site as a row of ``SITE_COLUMNS``; None when a field is missing or of the wrong type."""
    if not isinstance(site, Mapping):
        return None
    ints = ("step", "order", "line", "first_line", "ts_ns")
    strs = ("file", "function")
    if not all(type(site.get(k)) is int for k in ints) or not all(isinstance(site.get(k), str) for k in strs):
        return None
    path = site.get("path")
    return [site[c] if c != "path" else (path if isinstance(path, str) else site["file"]) for c in SITE_COLUMNS]


@memoised
def sync_site_matches(trace: Trace) -> pd.DataFrame:
    """The blocking runtime calls paired with a recorded site: index = ``trace.runtime`` rows,
    columns ``file`` (as the trace names it), ``line`` (the exact line) and ``function``. Empty when
    the trace has no recorded sites."""
    sites = recorded_sync_sites(trace)
    none = pd.DataFrame(
        {"file": [], "line": np.zeros(0, dtype=np.int64), "function": []}, index=pd.Index([], dtype=np.int64)
    )
    if sites is None or not len(sites):
        return none
    calls = _candidates(trace, sites.attrs["steps"])
    if not len(calls):
        return none
    base = trace.meta.base_time_ns or 0
    pairs: list[tuple[int, int]] = []  # (runtime row, site position)
    for step, in_step in calls.groupby("step", sort=True):
        pairs.extend(_pair_step(in_step, sites[sites["step"] == step], base))
    if not pairs:
        return none
    rows = [r for r, _ in pairs]
    picked = sites.iloc[[s for _, s in pairs]]
    files = [
        calls.at[r, "file"] if isinstance(calls.at[r, "file"], str) else f
        for r, f in zip(rows, picked["file"], strict=True)
    ]
    return pd.DataFrame(
        {"file": files, "line": picked["line"].to_numpy(dtype=np.int64), "function": picked["function"].to_numpy()},
        index=pd.Index(rows, dtype=np.int64),
    ).sort_index()


def _candidates(trace: Trace, steps: list[int]) -> pd.DataFrame:
    """The warned-sync runtime calls in the recorded ``steps``, with their step, end time and
    innermost user frame (``file``, ``line``, ``function``, ``line_kind``; None without one)."""
    rt = trace.runtime
    names = rt["name"]
    if isinstance(names.dtype, pd.CategoricalDtype):  # tested once per distinct name, not per row
        per_name = np.append(names.cat.categories.isin(WARNED_SYNC_CALLS), False)  # code -1: no name
        calls = rt[per_name[names.cat.codes.to_numpy()]]
    else:
        calls = rt[names.astype(str).isin(WARNED_SYNC_CALLS).to_numpy()]
    if not len(calls):
        return calls
    step = trace.step_of(calls["ts_ns"].to_numpy())
    calls = calls[np.isin(step, steps)].assign(step=step[np.isin(step, steps)])
    frames = trace.source_of(calls["pid"].to_numpy(), calls["tid"].to_numpy(), calls["ts_ns"].to_numpy())
    cols = {c: [f[c] if f is not None else None for f in frames] for c in ("file", "line", "function", "line_kind")}
    return calls.assign(**cols).sort_values("ts_ns", kind="stable")


def _pair_step(calls: pd.DataFrame, sites: pd.DataFrame, base_ns: int) -> list[tuple[int, int]]:
    """Pairs (runtime row, position in the sites table) of one step: per frame, in order when the
    counts agree, else by time."""
    groups: dict[Any, list[int]] = {}  # a frame key -> positions of its sites, in order
    keys = [_frame_key(r) for r in calls.itertuples()]
    known = set(keys)
    for pos, site in zip(sites.index.tolist(), sites.itertuples(), strict=True):
        groups.setdefault(_site_key(site, known), []).append(pos)
    pairs: list[tuple[int, int]] = []
    rows = calls.index.to_numpy()
    ends = calls["end_ns"].to_numpy() + base_ns
    for key, positions in groups.items():
        mine = [i for i, k in enumerate(keys) if k == key]
        if not mine:
            continue
        if len(mine) == len(positions) and all(
            _same_frame(calls.iloc[i], sites.loc[p]) for i, p in zip(mine, positions, strict=True)
        ):
            pairs.extend((int(rows[i]), p) for i, p in zip(mine, positions, strict=True))
            continue
        pairs.extend(_pair_by_time(rows[mine], ends[mine], sites.loc[positions, "ts_ns"].to_numpy(), positions))
    return pairs


def _frame_key(call: Any) -> tuple[str, str] | None:
    """The frame a candidate's user frame is, as (file, function); None without a frame."""
    return (call.file, call.function) if isinstance(call.file, str) else None


def _site_key(site: Any, known: set[tuple[str, str] | None]) -> tuple[str, str] | None:
    """The candidates' frame key a site belongs to: its file and function, the file as the trace
    names it (the profiler strips the ``sys.path`` folder it was run from, which the recorder
    replicates; a path that ends in the trace's name also matches). None when the step's calls
    have no frames at all (a trace without ``with_stack``): the sites then pair with all of them."""
    if known == {None}:
        return None
    for key in known:
        if key is not None and key[1] == site.function and _same_file(key[0], site.file, site.path):
            return key
    return (site.file, site.function)


def _same_file(trace_file: str, file: str, path: str) -> bool:
    return trace_file in (file, path) or path.replace("\\", "/").endswith("/" + trace_file.lstrip("/"))


def _same_frame(call: pd.Series, site: pd.Series) -> bool:
    """A frame named by its first line is the site's function only if that line is the site's
    ``first_line`` (two functions of one name in one file); other frames carry no such check."""
    return call["line_kind"] != "function_start" or int(call["line"]) == int(site["first_line"])


def _pair_by_time(rows: Any, ends: Any, site_ts: Any, positions: list[int]) -> list[tuple[int, int]]:
    """Each site (in order) takes the latest call after the previous pair that ended before the
    site's time (plus ``CLOCK_SLACK_NS``); sites without one stay unpaired."""
    order = np.argsort(ends, kind="stable")
    rows, ends = rows[order], ends[order]
    pairs: list[tuple[int, int]] = []
    taken = -1
    for ts, pos in zip(site_ts.tolist(), positions, strict=True):
        j = int(np.searchsorted(ends, ts + CLOCK_SLACK_NS, side="right")) - 1
        if j > taken:
            pairs.append((int(rows[j]), pos))
            taken = j
    return pairs


__all__ = ["CLOCK_SLACK_NS", "WARNED_SYNC_CALLS", "recorded_sync_sites", "sync_site_matches"]
