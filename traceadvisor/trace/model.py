"""The trace model: columnar tables plus the derived views every rule shares.

Tables (pandas DataFrames with a RangeIndex, times in int64 nanoseconds: ``ts_ns``, ``dur_ns``, ``end_ns``):

* ``host``: CPU ops and user annotations (``is_annotation``), with ``pid``, ``tid``, ``ext_id``,
  autograd ``seq_nr``, input shapes kept as raw JSON bytes until asked for;
* ``frames``: Python frames (``with_stack``); ``runtime``: CUDA/HIP runtime and driver calls;
* ``gpu``: kernels, memcpys and memsets (``kind`` 0/1/2) with launch geometry and bytes;
* ``gpu_annotations``, ``syncs`` (``cuda_sync``), ``memory`` (``[memory]`` instants),
  ``collectives`` (NCCL metadata from ops and kernels), ``flows`` (forward → backward arrows;
  the ac2g launch arrows are not kept: the correlation id says the same), ``overhead``, ``other``.

Built at construction: the links (``gpu.launch``, ``gpu.op``, ``runtime.op``: ``links.py``) and
the steps (``steps.py``). Computed once on first use (pure views, no side effects): host nesting,
per-device busy intervals, the analysis window, source locations (``source.py``).

What is *computed from* a trace (idle attribution, the dependency graph, the roofline, ...) lives
beside it in ``traceadvisor.analyses`` and ``traceadvisor.roofline``, as functions of the trace
memoised per trace (``analyses/cache.py`` through ``Trace.memo``); this module imports neither.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.trace import intervals, links, steps
from traceadvisor.trace.columns import KERNEL, MEMCPY, MEMSET
from traceadvisor.trace.device import GpuConfig
from traceadvisor.trace.lanes import ThreadLanes, nesting
from traceadvisor.trace.schema import Event
from traceadvisor.trace.source import frame_locations, user_frames_at
from traceadvisor.trace.steps import Steps, name_codes
from traceadvisor.trace.tables import empty_table

I64 = npt.NDArray[np.int64]
R = TypeVar("R")


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
    # The top-level "traceadvisor" key written by capture and the advisor (unprofiled step times;
    # docs/capture.md), as the file gave it; None when absent.
    traceadvisor: Any = None
    # The top-level "host_name" kineto writes (torch >= 2.4): ranks on one host share a clock.
    host_name: str | None = None


class Trace:
    """One rank's trace: tables, metadata, links, steps and cached derived views.

    ``gpu`` (a ``GpuConfig``, ``[tool.traceadvisor.gpu]``) says how the roofline chooses the GPU's
    peaks; it is given here, once, and read as ``gpu_config`` (``trace.gpu`` is the GPU table).
    """

    def __init__(
        self,
        meta: TraceMeta,
        tables: dict[str, pd.DataFrame],
        metadata_events: list[Event],
        gpu: GpuConfig | None = None,
    ) -> None:
        self.meta = meta
        self._gpu_config = gpu
        # Extra kernel-name patterns (regexes) that are communication, beside NCCL/RCCL's
        # (``[tool.traceadvisor] communication-kernels``, e.g. vLLM's ``cross_device_reduce``): set by
        # the pipeline from the configuration right after loading, before any analysis reads it.
        self.communication_patterns: tuple[str, ...] = ()
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
        self._busy: dict[tuple[int, bool], tuple[I64, I64]] = {}
        self._memo: dict[Hashable, Any] = {}
        self.external_ids_trustworthy = links.external_ids_trustworthy(self.runtime, self.gpu)
        self._add_links()
        # The steps come after the links (a step's GPU window is the work launched inside it); what
        # is odd about them goes into the trace's warnings now, not whenever a view first asks.
        self.steps: Steps = steps.find_steps(
            self.annotations, self.gpu, self.runtime, self.gpu_annotations, self._busiest, self.meta.warnings
        )

    def _add_links(self) -> None:
        """Add ``gpu.launch``, ``runtime.op`` and ``gpu.op`` (``links.py``) as columns of the base
        tables, so that every view of them (``kernels``, a rule's filter) has them."""
        ops = links.OpsByExtId(self.host, self._is_op)
        launch = links.launch_rows(self.runtime, self.gpu)
        self.gpu["launch"] = launch
        runtime_op = links.launching_ops(self.runtime, ops, lambda: self._op_lanes, self.external_ids_trustworthy)
        self.runtime["op"] = runtime_op
        self.gpu["op"] = links.gpu_ops(self.gpu, launch, runtime_op, ops, self.external_ids_trustworthy)

    # -- identity ------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self.meta.path

    @property
    def rank(self) -> int | None:
        return self.meta.rank

    @property
    def gpu_config(self) -> GpuConfig | None:
        """The GPU configuration given at construction (None: match the trace's GPU to the table)."""
        return self._gpu_config

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
        if self.meta.truncated:
            return self._platform_of_header()
        return "cpu"

    def _platform_of_header(self) -> str:
        """The platform a trace cut off before its GPU events says in its header. Kineto writes
        ``deviceProperties`` (``[]`` without a GPU) and the CUPTI versions first and its CPU ops
        before the GPU activity (format doc §1, §2), so a cut file may have no GPU event and still be
        a GPU trace. Only for a cut file: a complete one with a GPU visible but only CPU activity
        recorded (``activities=[CPU]``) is a CPU trace. A 64-wide warp is an AMD wavefront."""
        keys = self.meta.top_keys
        if any(k in keys for k in ("cupti_version", "cuda_runtime_version", "cuda_driver_version")):
            return "cuda"
        if self.meta.devices:
            return "rocm" if any(d.get("warpSize") == 64 for d in self.meta.devices) else "cuda"
        return "cpu"

    @cached_property
    def kernels(self) -> pd.DataFrame:
        """GPU kernels only (a filtered view of ``gpu`` keeping its row labels), with links."""
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

    @property
    def _busiest(self) -> int | None:
        return self.device_ids[0] if self.device_ids else None

    def device_properties(self, device: int | None = None) -> dict[str, Any] | None:
        """``deviceProperties`` entry of a device (the busiest one by default)."""
        if device is None:
            device = self._busiest
        for d in self.meta.devices:
            if device is None or d.get("id") == device:
                return d
        return None

    # -- host structure ------------------------------------------------------------------------
    @cached_property
    def _is_op(self) -> npt.NDArray[np.bool_]:
        """Which host rows are CPU ops: the links read op columns through it, not through ``ops``
        (a copy of the whole host table, object columns included, that only some rules need)."""
        is_op: npt.NDArray[np.bool_] = ~self.host["is_annotation"].to_numpy()
        return is_op

    @cached_property
    def _op_lanes(self) -> ThreadLanes:
        return ThreadLanes.of(self.host, self._is_op)

    def innermost_op_at(self, pid: I64, tid: I64, ts: I64) -> I64:
        """Host row of the innermost CPU op on ``(pid, tid)`` whose span contains ``ts`` (-1 if none)."""
        return self._op_lanes.innermost(pid, tid, ts)

    @cached_property
    def nesting(self) -> pd.DataFrame:
        """``parent`` (host row, -1 at the root) and ``depth`` of every host event (``lanes.nesting``)."""
        return nesting(self.host)

    def step_of(self, ts: I64) -> I64:
        """Step number whose CPU window holds each host timestamp (-1 outside every step)."""
        return steps.step_of(self.steps, ts)

    # -- GPU time ------------------------------------------------------------------------------
    def busy_intervals(self, device: int, include_syncs: bool = False) -> tuple[I64, I64]:
        """Merged busy intervals of a device over all streams (kernels, memcpys, memsets)."""
        key = (device, include_syncs)
        if key not in self._busy:
            g = self.gpu[self.gpu["device"] == device]
            s, e = g["ts_ns"].to_numpy(), g["end_ns"].to_numpy()
            if include_syncs and len(self.syncs):
                sy = self.syncs[self.syncs["device"] == device]
                s = np.concatenate((s, sy["ts_ns"].to_numpy()))
                e = np.concatenate((e, sy["end_ns"].to_numpy()))
            self._busy[key] = intervals.merge(s, e)
        return self._busy[key]

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
            g = self.gpu[self.gpu["device"] == self.device_ids[0]]
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

    # -- source locations -----------------------------------------------------------------------
    @cached_property
    def frame_locations(self) -> pd.DataFrame:
        """``file``, ``line``, ``function`` parsed from Python frame names, and ``is_user``."""
        return frame_locations(self.frames)

    def source_of(self, pid: I64, tid: I64, ts: I64) -> list[dict[str, Any] | None]:
        """The innermost *user* Python frame (outside torch and site-packages) active at ``ts``."""
        if not len(self.frames):
            return [None] * len(ts)
        return user_frames_at(self.frame_locations, self._user_frame_lanes, pid, tid, ts)

    @cached_property
    def _user_frame_lanes(self) -> ThreadLanes:
        return ThreadLanes.of(self.frames, self.frame_locations["is_user"].to_numpy())

    # -- analyses' cache -----------------------------------------------------------------------
    def memo(self, key: Hashable, compute: Callable[[Trace], R]) -> R:
        """``compute(self)``, once per ``key`` for this trace (``analyses.cache.memoised`` calls it).

        A method, so that the engine's read-only view of the trace (``engine.isolation``) calls it
        on the trace itself: rules (given the view) and report sections (given the trace) share
        one result, and ``compute`` always sees the trace, never a view.
        """
        if key not in self._memo:
            self._memo[key] = compute(self)
        return cast(R, self._memo[key])


def _table(df: pd.DataFrame | None, family: str) -> pd.DataFrame:
    if df is None or not len(df):
        return empty_table(family)
    # Link columns (gpu.launch, gpu.op, runtime.op) are row positions used as labels: the two agree
    # only on a 0..n-1 RangeIndex.
    index = df.index
    if not (isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1):
        raise ValueError(f"table {family!r} must have a RangeIndex 0..n-1 (link columns are row positions)")
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
