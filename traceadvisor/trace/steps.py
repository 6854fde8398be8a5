"""Profiler steps: ``ProfilerStep#N`` windows on the CPU and, separately, on the busiest GPU."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

I64 = npt.NDArray[np.int64]

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
# The step table's numbers are int64 for the vectorised lookups (``step_of``).
MAX_STEP = int(np.iinfo(np.int64).max)
COLUMNS = ["step", "name", "cpu_start_ns", "cpu_end_ns", "gpu_start_ns", "gpu_end_ns", "gpu_basis"]


@dataclass(frozen=True)
class Steps:
    """Profiler steps: ``ProfilerStep#N`` windows on the CPU and, separately, on each GPU.

    ``table`` has one row per step: ``step`` (N), ``name``, ``cpu_start_ns``, ``cpu_end_ns``,
    ``gpu_start_ns``, ``gpu_end_ns`` (-1 when the step launched no GPU work), ``gpu_basis``
    (``annotation``: kineto's GPU mirror of the step; ``launches``: span of the GPU work launched
    from inside the CPU step).
    """

    table: pd.DataFrame

    def __len__(self) -> int:
        return len(self.table)


def name_codes(names: pd.Series) -> tuple[npt.NDArray[np.intp], pd.Index]:
    """Codes (-1: missing) and distinct values of a name column, categorical or not."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        return names.cat.codes.to_numpy().astype(np.intp), names.cat.categories
    codes, uniques = pd.factorize(names)
    return codes.astype(np.intp), pd.Index(uniques)


def find_steps(
    annotations: pd.DataFrame,
    gpu: pd.DataFrame,
    runtime: pd.DataFrame,
    gpu_annotations: pd.DataFrame,
    device: int | None,
    warnings: list[str],
) -> Steps:
    """The steps of the CPU annotations, with GPU windows on ``device`` (the busiest; None: no GPU).
    What is odd about them (a number beyond int64, a number that repeats) is appended to ``warnings``."""
    ann = annotations
    # The step number of each distinct annotation name (-1: not a step), then of each row.
    codes, categories = name_codes(ann["name"])
    number = np.full(len(categories), -1, dtype=np.int64)
    for c in np.unique(codes[codes >= 0]).tolist():
        m = STEP_NAME.match(str(categories[c]))
        if m:
            number[c] = _step_number(m.group(0), int(m.group(1)), warnings)
    row_number = np.where(codes >= 0, number[np.maximum(codes, 0)], -1)
    is_step = np.flatnonzero(row_number >= 0)
    if not len(is_step):
        return Steps(pd.DataFrame({c: [] for c in COLUMNS}))
    ts, end = ann["ts_ns"].to_numpy()[is_step].tolist(), ann["end_ns"].to_numpy()[is_step].tolist()
    spans: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for step, c, t, e in zip(row_number[is_step].tolist(), codes[is_step].tolist(), ts, end, strict=True):
        spans.setdefault((step, str(categories[c])), []).append((t, e))
    per_step = {key: _step_windows(found) for key, found in spans.items()}
    windows = [(key, w) for key, found in per_step.items() for w in found]
    repeated = sorted(key[1] for key, found in per_step.items() if len(found) > 1)
    if repeated:
        warnings.append(_repeated_steps_warning(repeated))
    windows.sort(key=lambda kw: (kw[1][0], kw[0]))  # start order; ties in (step, name) order
    table = pd.DataFrame(
        {
            "step": np.array([k[0] for k, _ in windows], dtype=np.int64),
            "name": np.array([k[1] for k, _ in windows], dtype=object),
            "cpu_start_ns": np.array([w[0] for _, w in windows], dtype=np.int64),
            "cpu_end_ns": np.array([w[1] for _, w in windows], dtype=np.int64),
        }
    )
    gs, ge, basis = _gpu_step_windows(table, gpu, runtime, gpu_annotations, device)
    table["gpu_start_ns"] = gs
    table["gpu_end_ns"] = ge
    table["gpu_basis"] = basis
    return Steps(table)


def step_of(steps: Steps, ts: I64) -> I64:
    """Step number whose CPU window holds each host timestamp (-1 outside every step)."""
    t = steps.table
    if not len(t):
        return np.full(len(ts), -1, dtype=np.int64)
    starts = t["cpu_start_ns"].to_numpy()
    ends = t["cpu_end_ns"].to_numpy()
    k = np.searchsorted(starts, ts, side="right") - 1
    ok = (k >= 0) & (ts < ends[np.maximum(k, 0)])
    return np.where(ok, t["step"].to_numpy()[np.maximum(k, 0)], -1)


def _step_number(name: str, n: int, warnings: list[str]) -> int:
    """``n``, or the largest int64 for a number beyond it (with a warning): the step table's
    numbers are int64 for the vectorised lookups (``step_of``); its name keeps the digits."""
    if n <= MAX_STEP:
        return n
    warnings.append(f"{name[:60]}: step number beyond int64; numbered {MAX_STEP} in the step table")
    return MAX_STEP


def _gpu_step_windows(
    table: pd.DataFrame, gpu: pd.DataFrame, runtime: pd.DataFrame, gpu_annotations: pd.DataFrame, dev: int | None
) -> tuple[I64, I64, list[str]]:
    """GPU window of each step: the span of the GPU work launched from inside its CPU window.

    A launch belongs to step N when its runtime call starts inside ``ProfilerStep#N`` on the
    CPU, from any thread (backward kernels are launched from the autograd thread). kineto's GPU
    mirror of the step annotation is not used as the window: it spans only the work correlated
    to the step range on the launching thread outside nested ranges, so it misses the backward
    pass, and it is widened by 1 ns (older kineto: 1 µs) on each side (format doc §1.4). It is
    the fallback for steps whose launches are not in the trace (sampled traces): then the
    window is the span of the GPU work inside the annotation.
    """
    n = len(table)
    gs = np.full(n, -1, dtype=np.int64)
    ge = np.full(n, -1, dtype=np.int64)
    basis = ["none"] * n
    if dev is None:
        return gs, ge, basis
    launch = gpu["launch"].to_numpy()
    g = np.flatnonzero((gpu["device"].to_numpy() == dev) & (launch >= 0))
    launch_ts = runtime["ts_ns"].to_numpy()[launch[g]]
    starts = table["cpu_start_ns"].to_numpy()
    ends = table["cpu_end_ns"].to_numpy()
    k = np.searchsorted(starts, launch_ts, side="right") - 1
    inside = (k >= 0) & (launch_ts < ends[np.maximum(k, 0)])
    if inside.any():
        k, g = k[inside], g[inside]
        first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(first, k, gpu["ts_ns"].to_numpy()[g])
        np.maximum.at(last, k, gpu["end_ns"].to_numpy()[g])
        rows = np.unique(k)
        gs[rows], ge[rows] = first[rows], last[rows]
        for i in rows.tolist():
            basis[i] = "launches"
    todo = [i for i in range(n) if basis[i] == "none"]
    ga = gpu_annotations
    if todo and len(ga):
        mine = ga[ga["device"] == dev]
        mine = mine[mine["name"].astype(str).str.match(STEP_NAME)]
        if len(mine):
            span = mine.groupby(mine["name"].astype(str)).agg(s=("ts_ns", "min"), e=("end_ns", "max"))
            work = gpu[gpu["device"] == dev]
            ws, we = work["ts_ns"].to_numpy(), work["end_ns"].to_numpy()
            names = table["name"].tolist()
            for i in todo:
                if names[i] not in span.index:
                    continue
                lo, hi = int(span.at[names[i], "s"]), int(span.at[names[i], "e"])
                sel = (ws >= lo) & (we <= hi)
                if sel.any():
                    gs[i], ge[i] = int(ws[sel].min()), int(we[sel].max())
                    basis[i] = "annotation"
    return gs, ge, basis


def _step_windows(found: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The windows of one step name: its records merged where they overlap (a step recorded once
    per thread, in odd traces), kept apart where they do not (the numbers repeat: two profiling
    sessions in one file, or a restarted schedule), so no window spans the time between them."""
    out: list[list[int]] = []
    for t, e in sorted(found):
        if out and t <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([t, e])
    return [(t, e) for t, e in out]


def _repeated_steps_warning(names: list[str]) -> str:
    shown = ", ".join(n[:60] for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"step numbers repeat at different times ({shown}): several profiling sessions in one file? "
        "kept as separate steps"
    )
