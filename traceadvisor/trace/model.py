"""The trace model: columnar tables plus the derived views every rule shares.

Tables (pandas DataFrames, times in int64 nanoseconds: ``ts_ns``, ``dur_ns``, ``end_ns``):

* ``host``: CPU ops and user annotations (``is_annotation``), with ``pid``, ``tid``, ``ext_id``,
  autograd ``seq_nr``, input shapes kept as raw JSON bytes until asked for;
* ``frames``: Python frames (``with_stack``); ``runtime``: CUDA/HIP runtime and driver calls;
* ``gpu``: kernels, memcpys and memsets (``kind`` 0/1/2) with launch geometry and bytes;
* ``gpu_annotations``, ``syncs`` (``cuda_sync``), ``memory`` (``[memory]`` instants),
  ``collectives`` (NCCL metadata from ops and kernels), ``flows`` (forward → backward arrows;
  the ac2g launch arrows are not kept: the correlation id says the same), ``overhead``, ``other``.

Derived views are computed once, on first use, and cached: links (``gpu.launch``, ``gpu.op``,
``runtime.op``), host nesting (``parent``, ``depth``), steps, per-device busy intervals and idle
gaps, source locations, and the dependency graph (``graph.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.trace import intervals
from traceadvisor.trace.columns import KERNEL, MEMCPY, MEMSET
from traceadvisor.trace.schema import Event
from traceadvisor.trace.tables import empty_table

if TYPE_CHECKING:
    from traceadvisor.analyses.graph import CriticalPath, TraceGraph
    from traceadvisor.roofline.peaks import GpuConfig
    from traceadvisor.roofline.view import Roofline

I64 = npt.NDArray[np.int64]

_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_FRAME_NAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")
# Frames from these locations are library code; the first frame outside them is the user's line.
_LIBRARY_PARTS = ("site-packages/", "dist-packages/", "torch/", "<built-in", "threading.py", "runpy.py")


@dataclass
class TraceMeta:
    """What the file says about itself."""

    path: str
    rank: int | None = None
    world_size: int | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    distributed: dict[str, Any] | None = None
    flags: dict[str, bool] = field(default_factory=dict)
    base_time_ns: int | None = None
    top_keys: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    truncated: bool = False
    unknown_categories: dict[str, int] = field(default_factory=dict)


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


class Trace:
    """One rank's trace: tables, metadata and cached derived views."""

    def __init__(self, meta: TraceMeta, tables: dict[str, pd.DataFrame], metadata_events: list[Event]) -> None:
        self.meta = meta
        get = tables.get
        self.host: pd.DataFrame = _table(get("host"), "host")
        self.frames: pd.DataFrame = _table(get("frames"), "frames")
        self.runtime: pd.DataFrame = _table(get("runtime"), "runtime")
        self.gpu: pd.DataFrame = _table(get("gpu"), "gpu")
        self.gpu_annotations: pd.DataFrame = _table(get("gpu_annotations"), "gpu_annotations")
        self.syncs: pd.DataFrame = _table(get("syncs"), "syncs")
        self.memory: pd.DataFrame = _table(get("memory"), "memory")
        self.collectives: pd.DataFrame = _table(get("collectives"), "collectives")
        self.flows: pd.DataFrame = _table(get("flows"), "flows")
        self.overhead: pd.DataFrame = _table(get("overhead"), "overhead")
        self.other: pd.DataFrame = _table(get("other"), "other")
        self.process_labels, self.thread_names = _read_metadata(metadata_events)
        # Links are columns of the base tables (gpu.launch, gpu.op, runtime.op): add them now so
        # that every view of those tables has them.
        self.links  # noqa: B018

    # -- identity ------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self.meta.path

    @property
    def rank(self) -> int | None:
        return self.meta.rank

    @cached_property
    def platform(self) -> str:
        """``cuda``, ``rocm`` or ``cpu`` (HIP runtime names mark ROCm, format doc §7)."""
        if len(self.runtime) and self.runtime["name"].cat.categories.str.startswith("hip").any():
            return "rocm"
        if any(
            "roctracer_version" in k or "hip_runtime_version" in k or "rocprofiler" in k for k in self.meta.top_keys
        ):
            return "rocm"
        if len(self.gpu) or len(self.runtime):
            return "cuda"
        return "cpu"

    @cached_property
    def kernels(self) -> pd.DataFrame:
        """GPU kernels only (a filtered view of ``gpu`` keeping its row labels), with links."""
        self.links  # noqa: B018 - adds launch/op columns first
        return self.gpu[self.gpu["kind"] == KERNEL]

    @cached_property
    def ops(self) -> pd.DataFrame:
        """CPU operators only (no user annotations), keeping ``host`` row labels."""
        return self.host[~self.host["is_annotation"]]

    @cached_property
    def annotations(self) -> pd.DataFrame:
        """User annotations (``record_function``, ``ProfilerStep#N``, optimizer steps)."""
        return self.host[self.host["is_annotation"]]

    @cached_property
    def device_ids(self) -> list[int]:
        """GPU devices with activity, busiest first."""
        if not len(self.gpu):
            return []
        busy = self.gpu.groupby("device", sort=False)["dur_ns"].sum().sort_values(ascending=False)
        return [int(d) for d in busy.index]

    def device_properties(self, device: int | None = None) -> dict[str, Any] | None:
        """``deviceProperties`` entry of a device (the busiest one by default)."""
        if device is None:
            device = self.device_ids[0] if self.device_ids else None
        for d in self.meta.devices:
            if device is None or d.get("id") == device:
                return d
        return None

    # -- links -----------------------------------------------------------------------------
    @cached_property
    def external_ids_trustworthy(self) -> bool:
        """Whether runtime/GPU ``External id`` names the launching op (kineto ≥ 2024-02).

        Before kineto#873 (≈ torch 2.3) it merely repeated ``correlation`` (format doc §5.1), and
        matching it against op ids gives false links; then launches are tied by time nesting.
        """
        rt = self.runtime
        both = rt[(rt["ext_id"] >= 0) & (rt["correlation"] >= 0)]
        if len(both) == 0:
            g = self.gpu
            both = g[(g["ext_id"] >= 0) & (g["correlation"] >= 0)]
            if len(both) == 0:
                return True
        same = float((both["ext_id"] == both["correlation"]).mean())
        return same < 0.9

    @cached_property
    def links(self) -> None:
        """Compute ``gpu.launch`` (runtime row), ``runtime.op`` and ``gpu.op`` (host row), ``-1`` if none."""
        rt, gpu = self.runtime, self.gpu
        # Runtime call ↔ GPU work by correlation. A graph launch has many GPU records with one id.
        rt_valid = rt[rt["correlation"] >= 0]
        rt_index = pd.Index(rt_valid["correlation"].to_numpy())
        if not rt_index.is_unique:
            keep = ~rt_index.duplicated()
            rt_valid = rt_valid[keep]
            rt_index = rt_index[keep]
        pos = rt_index.get_indexer(gpu["correlation"].to_numpy())
        rt_rows = rt_valid.index.to_numpy()
        launch = np.where(pos >= 0, rt_rows[np.maximum(pos, 0)], -1) if len(rt_rows) else np.full(len(gpu), -1)
        gpu["launch"] = launch.astype(np.int64)
        rt["op"] = self._launching_ops()
        rt_op = rt["op"].to_numpy()
        gpu["op"] = (
            np.where(launch >= 0, rt_op[np.maximum(launch, 0)], -1).astype(np.int64)
            if len(rt_op)
            else np.full(len(gpu), -1, dtype=np.int64)
        )
        # Kernels with no runtime record (launched before the window, or sampled traces) still
        # name their op through External id when that id is trustworthy.
        if self.external_ids_trustworthy:
            missing = (gpu["op"].to_numpy() < 0) & (gpu["ext_id"].to_numpy() >= 0)
            if missing.any():
                gpu.loc[missing, "op"] = self._ops_by_ext_id(gpu.loc[missing, "ext_id"].to_numpy())
        return None

    @cached_property
    def _is_op(self) -> npt.NDArray[np.bool_]:
        """Which host rows are CPU ops: the links read op columns through it, not through ``ops``
        (a copy of the whole host table, object columns included, that only some rules need)."""
        is_op: npt.NDArray[np.bool_] = ~self.host["is_annotation"].to_numpy()
        return is_op

    @cached_property
    def _op_by_ext_id(self) -> tuple[pd.Index, I64]:
        """Distinct op External ids (first op of each) and the host row of each."""
        is_op = self._is_op
        idx = pd.Index(self.host["ext_id"].to_numpy()[is_op])
        rows = self.host.index.to_numpy()[is_op]
        if not idx.is_unique:
            keep = ~idx.duplicated()
            idx, rows = idx[keep], rows[keep]
        return idx, rows

    def _ops_by_ext_id(self, ext: I64) -> I64:
        idx, rows = self._op_by_ext_id
        if not len(rows):
            return np.full(len(ext), -1, dtype=np.int64)
        p = idx.get_indexer(ext)
        return np.where(p >= 0, rows[np.maximum(p, 0)], -1).astype(np.int64)

    def _launching_ops(self) -> I64:
        rt = self.runtime
        result = np.full(len(rt), -1, dtype=np.int64)
        if not len(rt):
            return result
        ext = rt["ext_id"].to_numpy()
        if self.external_ids_trustworthy:
            result = self._ops_by_ext_id(ext)
        todo = np.flatnonzero(result < 0)
        if len(todo):
            result[todo] = self.innermost_op_at(
                rt["pid"].to_numpy()[todo], rt["tid"].to_numpy()[todo], rt["ts_ns"].to_numpy()[todo]
            )
        return result

    def innermost_op_at(self, pid: I64, tid: I64, ts: I64) -> I64:
        """Host row of the innermost CPU op on ``(pid, tid)`` whose span contains ``ts`` (-1 if none)."""
        return self._op_lanes.innermost(pid, tid, ts)

    @cached_property
    def _op_lanes(self) -> _ThreadLanes:
        return _ThreadLanes.of(self.host, self._is_op)

    @cached_property
    def nesting(self) -> pd.DataFrame:
        """``parent`` (host row, -1 at the root) and ``depth`` of every host event, per thread.

        Ops nest strictly on a thread except at schedule boundaries, where ``ProfilerStep#N`` can
        end inside an optimizer annotation (format doc §10.4); such partial overlaps take the
        innermost event open at their start as parent.
        """
        host = self.host
        parent = np.full(len(host), -1, dtype=np.int64)
        depth = np.zeros(len(host), dtype=np.int64)
        if len(host):
            order = np.lexsort(
                (-host["dur_ns"].to_numpy(), host["ts_ns"].to_numpy(), host["tid"].to_numpy(), host["pid"].to_numpy())
            )
            ts = host["ts_ns"].to_numpy()[order].tolist()
            end = host["end_ns"].to_numpy()[order].tolist()
            pid = host["pid"].to_numpy()[order].tolist()
            tid = host["tid"].to_numpy()[order].tolist()
            rows = host.index.to_numpy()[order].tolist()
            stack: list[int] = []  # positions in the sorted order
            cur = None
            par_out = [-1] * len(rows)
            dep_out = [0] * len(rows)
            for i in range(len(rows)):
                key = (pid[i], tid[i])
                if key != cur:
                    stack.clear()
                    cur = key
                t = ts[i]
                while stack and end[stack[-1]] <= t:
                    stack.pop()
                if stack:
                    par_out[i] = rows[stack[-1]]
                    dep_out[i] = len(stack)
                stack.append(i)
            parent[order] = par_out
            depth[order] = dep_out
        return pd.DataFrame({"parent": parent, "depth": depth}, index=host.index)

    # -- steps ---------------------------------------------------------------------------------
    @cached_property
    def steps(self) -> Steps:
        """Profiler steps with their CPU and GPU windows (see ``Steps``)."""
        ann = self.annotations
        cols = ["step", "name", "cpu_start_ns", "cpu_end_ns", "gpu_start_ns", "gpu_end_ns", "gpu_basis"]
        # The step number of each distinct annotation name (-1: not a step), then of each row.
        codes, categories = name_codes(ann["name"])
        number = np.full(len(categories), -1, dtype=np.int64)
        for c in np.unique(codes[codes >= 0]).tolist():
            m = _STEP_NAME.match(str(categories[c]))
            if m:
                number[c] = self._step_number(m.group(0), int(m.group(1)))
        row_number = np.where(codes >= 0, number[np.maximum(codes, 0)], -1)
        is_step = np.flatnonzero(row_number >= 0)
        if not len(is_step):
            return Steps(pd.DataFrame({c: [] for c in cols}))
        ts, end = ann["ts_ns"].to_numpy()[is_step].tolist(), ann["end_ns"].to_numpy()[is_step].tolist()
        spans: dict[tuple[int, str], list[tuple[int, int]]] = {}
        for step, c, t, e in zip(row_number[is_step].tolist(), codes[is_step].tolist(), ts, end, strict=True):
            spans.setdefault((step, str(categories[c])), []).append((t, e))
        per_step = {key: _step_windows(found) for key, found in spans.items()}
        windows = [(key, w) for key, found in per_step.items() for w in found]
        repeated = sorted(key[1] for key, found in per_step.items() if len(found) > 1)
        if repeated:
            self.meta.warnings.append(_repeated_steps_warning(repeated))
        windows.sort(key=lambda kw: (kw[1][0], kw[0]))  # start order; ties in (step, name) order
        table = pd.DataFrame(
            {
                "step": np.array([k[0] for k, _ in windows], dtype=np.int64),
                "name": np.array([k[1] for k, _ in windows], dtype=object),
                "cpu_start_ns": np.array([w[0] for _, w in windows], dtype=np.int64),
                "cpu_end_ns": np.array([w[1] for _, w in windows], dtype=np.int64),
            }
        )
        gs, ge, basis = self._gpu_step_windows(table)
        table["gpu_start_ns"] = gs
        table["gpu_end_ns"] = ge
        table["gpu_basis"] = basis
        return Steps(table)

    def _step_number(self, name: str, n: int) -> int:
        """``n``, or the largest int64 for a number beyond it (with a warning): the step table's
        numbers are int64 for the vectorised lookups (``step_of``); its name keeps the digits."""
        if n <= _MAX_STEP:
            return n
        self.meta.warnings.append(f"{name[:60]}: step number beyond int64; numbered {_MAX_STEP} in the step table")
        return _MAX_STEP

    def _gpu_step_windows(self, table: pd.DataFrame) -> tuple[I64, I64, list[str]]:
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
        dev = self.device_ids[0] if self.device_ids else None
        if dev is None:
            return gs, ge, basis
        launch = self.gpu["launch"].to_numpy()
        g = np.flatnonzero((self.gpu["device"].to_numpy() == dev) & (launch >= 0))
        launch_ts = self.runtime["ts_ns"].to_numpy()[launch[g]]
        starts = table["cpu_start_ns"].to_numpy()
        ends = table["cpu_end_ns"].to_numpy()
        k = np.searchsorted(starts, launch_ts, side="right") - 1
        inside = (k >= 0) & (launch_ts < ends[np.maximum(k, 0)])
        if inside.any():
            k, g = k[inside], g[inside]
            first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
            last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
            np.minimum.at(first, k, self.gpu["ts_ns"].to_numpy()[g])
            np.maximum.at(last, k, self.gpu["end_ns"].to_numpy()[g])
            rows = np.unique(k)
            gs[rows], ge[rows] = first[rows], last[rows]
            for i in rows.tolist():
                basis[i] = "launches"
        todo = [i for i in range(n) if basis[i] == "none"]
        ga = self.gpu_annotations
        if todo and len(ga):
            mine = ga[ga["device"] == dev]
            mine = mine[mine["name"].astype(str).str.match(_STEP_NAME)]
            if len(mine):
                span = mine.groupby(mine["name"].astype(str)).agg(s=("ts_ns", "min"), e=("end_ns", "max"))
                work = self.gpu[self.gpu["device"] == dev]
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

    def step_of(self, ts: I64) -> I64:
        """Step number whose CPU window holds each host timestamp (-1 outside every step)."""
        t = self.steps.table
        if not len(t):
            return np.full(len(ts), -1, dtype=np.int64)
        starts = t["cpu_start_ns"].to_numpy()
        ends = t["cpu_end_ns"].to_numpy()
        k = np.searchsorted(starts, ts, side="right") - 1
        ok = (k >= 0) & (ts < ends[np.maximum(k, 0)])
        return np.where(ok, t["step"].to_numpy()[np.maximum(k, 0)], -1)

    # -- GPU time ------------------------------------------------------------------------------
    def busy_intervals(self, device: int, include_syncs: bool = False) -> tuple[I64, I64]:
        """Merged busy intervals of a device over all streams (kernels, memcpys, memsets)."""
        key = (device, include_syncs)
        cache = self._busy_cache
        if key not in cache:
            g = self.gpu[self.gpu["device"] == device]
            s, e = g["ts_ns"].to_numpy(), g["end_ns"].to_numpy()
            if include_syncs and len(self.syncs):
                sy = self.syncs[self.syncs["device"] == device]
                s = np.concatenate((s, sy["ts_ns"].to_numpy()))
                e = np.concatenate((e, sy["end_ns"].to_numpy()))
            cache[key] = intervals.merge(s, e)
        return cache[key]

    @cached_property
    def _busy_cache(self) -> dict[tuple[int, bool], tuple[I64, I64]]:
        return {}

    def busy_ns(self, device: int, lo: int, hi: int) -> int:
        """GPU busy time of a device inside ``[lo, hi)``."""
        s, e = self.busy_intervals(device)
        return int(intervals.covered(s, e, lo, hi)[0])

    def idle_gaps(self, device: int, lo: int, hi: int) -> pd.DataFrame:
        """Idle gaps of a device inside ``[lo, hi)`` (``start_ns``, ``end_ns``, ``dur_ns``)."""
        s, e = self.busy_intervals(device)
        gs, ge = intervals.gaps(s, e, lo, hi)
        return pd.DataFrame({"start_ns": gs, "end_ns": ge, "dur_ns": ge - gs})

    @cached_property
    def analysis_window(self) -> tuple[int, int, str]:
        """The window that GPU metrics cover: ``(start_ns, end_ns, basis)``.

        With profiler steps, from the first step's GPU start to the last step's GPU end (the
        steady state the schedule recorded); else the span of all GPU work; for a CPU-only trace
        the span of the CPU steps or of all host events.
        """
        t = self.steps.table
        if len(t) and (t["gpu_start_ns"] >= 0).any():
            ok = t[t["gpu_start_ns"] >= 0]
            return int(ok["gpu_start_ns"].min()), int(ok["gpu_end_ns"].max()), "steps (GPU windows)"
        if len(self.gpu):
            dev = self.device_ids[0]
            g = self.gpu[self.gpu["device"] == dev]
            return int(g["ts_ns"].min()), int(g["end_ns"].max()), "GPU activity span"
        if len(t):
            return int(t["cpu_start_ns"].min()), int(t["cpu_end_ns"].max()), "steps (CPU windows)"
        if len(self.host):
            return int(self.host["ts_ns"].min()), int(self.host["end_ns"].max()), "host activity span"
        return 0, 0, "empty"

    @cached_property
    def analysed_span(self) -> tuple[int, int]:
        """Wall-clock span of the analysed steps on both timelines (the time findings are shares of).

        From the earliest CPU or GPU start of the first step to the latest CPU or GPU end of the
        last step: a data-loader-bound step is long on the CPU, an asynchronous one on the GPU.
        Without steps, the analysis window.
        """
        t = self.steps.table
        if len(t):
            starts = t["cpu_start_ns"].to_numpy()
            ends = t["cpu_end_ns"].to_numpy()
            g = t[t["gpu_start_ns"] >= 0]
            lo = int(min(starts.min(), g["gpu_start_ns"].min() if len(g) else starts.min()))
            hi = int(max(ends.max(), g["gpu_end_ns"].max() if len(g) else ends.max()))
            return lo, hi
        lo, hi, _ = self.analysis_window
        return lo, hi

    @property
    def analysed_ns(self) -> int:
        """Length of ``analysed_span``: the denominator of every finding's ``share_pct``."""
        lo, hi = self.analysed_span
        return hi - lo

    @cached_property
    def idle_attribution(self) -> pd.DataFrame:
        """Idle gaps of the busiest device in the analysis window, each with one primary cause.

        Columns ``start_ns``, ``end_ns``, ``dur_ns``, ``cause`` (sync, data_loading, optimizer,
        launch_bound, cpu_op, launch_latency, unknown), ``detail``, ``host_row``, ``launch_row``,
        ``blocking_row`` and ``host_events``; see ``idle.py``. Each cause has one owning rule
        (``idle.CLAIMED_BY``), so no idle nanosecond is claimed twice.
        """
        from traceadvisor.analyses import idle

        if not self.device_ids:
            return idle.empty()
        lo, hi, _ = self.analysis_window
        return idle.attribute(self, self.device_ids[0], lo, hi)

    def stream_queues(self, device: int) -> pd.DataFrame:
        """Per-stream launch queue: for each GPU op, launch time, start, end and queue delay."""
        self.links  # noqa: B018
        g = self.gpu[(self.gpu["device"] == device) & (self.gpu["launch"] >= 0)]
        rt = self.runtime
        launch = g["launch"].to_numpy()
        df = pd.DataFrame(
            {
                "stream": g["stream"].to_numpy(),
                "launch_ns": rt["ts_ns"].to_numpy()[launch],
                "launch_end_ns": rt["end_ns"].to_numpy()[launch],
                "start_ns": g["ts_ns"].to_numpy(),
                "end_ns": g["end_ns"].to_numpy(),
            },
            index=g.index,
        )
        df["queue_delay_ns"] = df["start_ns"] - df["launch_end_ns"]
        return df.sort_values(["stream", "start_ns"], kind="stable")

    # -- source locations -----------------------------------------------------------------------
    @cached_property
    def frame_locations(self) -> pd.DataFrame:
        """``file``, ``line``, ``function`` parsed from Python frame names, and ``is_user``."""
        f = self.frames
        names = pd.Series(f["name"].cat.categories)
        parts = names.str.extract(_FRAME_NAME)
        user = parts["file"].notna() & ~parts["file"].fillna("").str.contains(
            "|".join(re.escape(p) for p in _LIBRARY_PARTS)
        )
        codes = f["name"].cat.codes.to_numpy()
        return pd.DataFrame(
            {
                "file": parts["file"].to_numpy(dtype=object)[codes],
                "line": pd.to_numeric(parts["line"], errors="coerce").to_numpy()[codes],
                "function": parts["func"].to_numpy(dtype=object)[codes],
                "is_user": user.to_numpy()[codes],
            },
            index=f.index,
        )

    def source_of(self, pid: I64, tid: I64, ts: I64) -> list[dict[str, Any] | None]:
        """The innermost *user* Python frame (outside torch and site-packages) active at ``ts``."""
        out: list[dict[str, Any] | None] = [None] * len(ts)
        if not len(self.frames) or not len(ts):
            return out
        loc = self.frame_locations
        rows = self._user_frame_lanes.innermost(pid, tid, ts)
        for k in np.flatnonzero(rows >= 0).tolist():
            r = rows[k]
            out[k] = {"file": loc.at[r, "file"], "line": int(loc.at[r, "line"]), "function": loc.at[r, "function"]}
        return out

    @cached_property
    def _user_frame_lanes(self) -> _ThreadLanes:
        return _ThreadLanes.of(self.frames, self.frame_locations["is_user"].to_numpy())

    # -- roofline ------------------------------------------------------------------------------
    gpu_config: GpuConfig | None = None  # [tool.traceadvisor.gpu]; set before ``roofline`` is first read

    @cached_property
    def roofline(self) -> Roofline:
        """Peaks and the per-kernel roofline (FLOPs, bytes, bound) of this trace (``traceadvisor/roofline``)."""
        from traceadvisor.roofline.view import Roofline

        return Roofline(self, self.gpu_config)

    # -- graph ---------------------------------------------------------------------------------
    @cached_property
    def graph(self) -> TraceGraph:
        """The dependency graph (built on first use; large traces pay only if a rule asks)."""
        from traceadvisor.analyses.graph import TraceGraph

        return TraceGraph.build(self)

    def step_critical_path(self, step: int) -> CriticalPath | None:
        """Critical path of one step: from the step's last GPU work back to its CPU start."""
        from traceadvisor.analyses.graph import TraceGraph

        t = self.steps.table
        row = t[t["step"] == step]
        if not len(row):
            return None
        r = row.iloc[0]
        lo = int(r["cpu_start_ns"])
        hi = int(max(r["cpu_end_ns"], r["gpu_end_ns"]))
        g = TraceGraph.build(self, (lo, hi))
        end_nodes = [n for n in g.g if n[0] == "gpu" and int(r["gpu_start_ns"]) <= g.g.nodes[n]["start"] < hi]
        if not end_nodes:
            return g.critical_path(start_bound=lo)
        last = max(end_nodes, key=lambda n: g.g.nodes[n]["end"])
        return g.critical_path(last, start_bound=lo)


@dataclass(frozen=True)
class _ThreadLanes:
    """Some rows of an event table, grouped by thread ``(pid, tid)`` in ascending order, each
    thread's in start order, longest first on ties (the order ``intervals.innermost`` needs)."""

    pid: I64
    tid: I64
    starts: I64
    ends: I64
    rows: I64  # row labels

    @classmethod
    def of(cls, events: pd.DataFrame, keep: npt.NDArray[np.bool_]) -> _ThreadLanes:
        at = np.flatnonzero(keep)
        pid, tid = events["pid"].to_numpy()[at], events["tid"].to_numpy()[at]
        ts = events["ts_ns"].to_numpy()[at]
        at = at[_thread_start_order(pid, tid, ts, events["dur_ns"].to_numpy()[at])]
        pid, tid, start, end = (events[c].to_numpy()[at] for c in ("pid", "tid", "ts_ns", "end_ns"))
        return cls(pid, tid, start, end, events.index.to_numpy()[at])

    def innermost(self, pid: I64, tid: I64, ts: I64) -> I64:
        """Row label of the innermost event on the same thread containing each ``ts`` (-1 if none)."""
        out = np.full(len(ts), -1, dtype=np.int64)
        if not len(self.rows) or not len(ts):
            return out
        bounds = np.flatnonzero((self.pid[1:] != self.pid[:-1]) | (self.tid[1:] != self.tid[:-1])) + 1
        for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), len(self.rows)], strict=True):
            sel = np.flatnonzero((pid == self.pid[a]) & (tid == self.tid[a]))
            if not len(sel):
                continue
            pos = intervals.innermost(self.starts[a:b], self.ends[a:b], ts[sel])
            out[sel] = np.where(pos >= 0, self.rows[a:b][np.maximum(pos, 0)], -1)
        return out


def _thread_start_order(pid: I64, tid: I64, ts: I64, dur: I64) -> npt.NDArray[np.intp]:
    """``np.lexsort((-dur, ts, tid, pid))``, faster on the order tables usually come in.

    The loader keeps each thread's events in file order, which kineto writes by start (longest
    first on ties): then stable sorts by thread alone (a few runs of equal keys: fast) give the
    lexicographic order, checked in one pass; otherwise the full sort runs.
    """
    order = np.argsort(tid, kind="stable")
    if len(pid) and not (pid == pid[0]).all():
        order = order[np.argsort(pid[order], kind="stable")]
    p, t, s, d = pid[order], tid[order], ts[order], dur[order]
    step = np.diff(s)
    ordered = (p[1:] != p[:-1]) | (t[1:] != t[:-1]) | (step > 0) | ((step == 0) & (d[1:] <= d[:-1]))
    if ordered.all():
        return order
    return np.lexsort((-dur, ts, tid, pid))


def name_codes(names: pd.Series) -> tuple[npt.NDArray[np.intp], pd.Index]:
    """Codes (-1: missing) and distinct values of a name column, categorical or not."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        return names.cat.codes.to_numpy().astype(np.intp), names.cat.categories
    codes, uniques = pd.factorize(names)
    return codes.astype(np.intp), pd.Index(uniques)


_MAX_STEP = int(np.iinfo(np.int64).max)


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


def _table(df: pd.DataFrame | None, family: str) -> pd.DataFrame:
    if df is None or not len(df):
        return empty_table(family)
    return df


def _read_metadata(events: list[Event]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    labels: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    for e in events:
        a = e.args
        if a is None:
            continue
        if e.name == "process_labels" and isinstance(e.pid, int) and isinstance(a.labels, str):
            labels[e.pid] = a.labels
        elif e.name == "thread_name" and isinstance(e.pid, int) and isinstance(e.tid, int) and isinstance(a.name, str):
            threads.setdefault((e.pid, e.tid), a.name)
    return labels, threads


__all__ = ["KERNEL", "MEMCPY", "MEMSET", "Steps", "Trace", "TraceMeta", "name_codes"]
