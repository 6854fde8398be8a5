"""The report as typed data: what ``analyze`` found, built once by the pipeline, read by every renderer.

Frozen dataclasses, one per object of the JSON report (schema in the README), each with
``to_dict`` (exactly the JSON report's object, keys in its order) and ``from_dict`` (its inverse,
for the advisor's worker pipe and for tests). Dicts exist only at those two edges: the JSON
renderer and the pipe. Times are microseconds computed from exact nanoseconds (``ns / 1000``).

This module imports no pipeline, trace or analysis code (an import-linter contract): it is plain
data that a renderer, the advisor or a test can build and read without pandas.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from traceadvisor import __version__
from traceadvisor.report.finding import Finding, Severity

SCHEMA_VERSION = 1

# A value the report passes on as the trace gave it (``deviceProperties`` entries are not
# validated by the loader: a hostile trace may put any JSON value there).
JsonValue = Any


def _maybe_dict(item: Any) -> dict[str, Any] | None:
    return item.to_dict() if item is not None else None


def _optional_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _dicts(items: tuple[Any, ...]) -> list[dict[str, Any]]:
    return [i.to_dict() for i in items]


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """``traces[].device``: the main device and what its ``deviceProperties`` entry says.

    The JSON object carries ``name`` when the trace had a (non-empty) properties entry for the
    device, and each other figure only where the entry had it: ``given`` names the keys it carries
    besides ``id`` (a property may be present and null, which the report keeps as null)."""

    id: int | None
    name: JsonValue = None
    compute_capability: str | None = None
    sm_count: JsonValue = None
    memory_bytes: JsonValue = None
    given: frozenset[str] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        for key in _DEVICE_KEYS:
            if key in self.given:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeviceInfo:
        return cls(
            id=d.get("id"),
            name=d.get("name"),
            compute_capability=d.get("compute_capability"),
            sm_count=d.get("sm_count"),
            memory_bytes=d.get("memory_bytes"),
            given=frozenset(k for k in _DEVICE_KEYS if k in d),
        )


_DEVICE_KEYS = ("name", "compute_capability", "sm_count", "memory_bytes")


@dataclass(frozen=True, slots=True)
class DeviceSummary:
    """``traces[].devices[]``: one device's busy and idle time inside the analysis window."""

    id: int
    busy_us: float
    idle_us: float
    busy_pct: float
    kernel_count: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "busy_us": self.busy_us,
            "idle_us": self.idle_us,
            "busy_pct": self.busy_pct,
            "kernel_count": self.kernel_count,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeviceSummary:
        return cls(d["id"], d["busy_us"], d["idle_us"], d["busy_pct"], d["kernel_count"])


@dataclass(frozen=True, slots=True)
class StepSummary:
    """``traces[].steps[]``: one profiler step's CPU span, GPU span (``gpu_start_us`` None: no GPU
    work) and the main device's busy time inside the GPU span."""

    name: str
    step: int
    cpu_start_us: float
    cpu_dur_us: float
    gpu_start_us: float | None
    gpu_dur_us: float
    gpu_busy_us: float
    gpu_busy_pct: float
    gpu_window_basis: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "step": self.step,
            "cpu_start_us": self.cpu_start_us,
            "cpu_dur_us": self.cpu_dur_us,
            "gpu_start_us": self.gpu_start_us,
            "gpu_dur_us": self.gpu_dur_us,
            "gpu_busy_us": self.gpu_busy_us,
            "gpu_busy_pct": self.gpu_busy_pct,
            "gpu_window_basis": self.gpu_window_basis,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepSummary:
        return cls(
            d["name"],
            d["step"],
            d["cpu_start_us"],
            d["cpu_dur_us"],
            d["gpu_start_us"],
            d["gpu_dur_us"],
            d["gpu_busy_us"],
            d["gpu_busy_pct"],
            d["gpu_window_basis"],
        )


@dataclass(frozen=True, slots=True)
class KernelSummary:
    """``traces[].top_kernels[]``: a kernel name's calls and total time in the window."""

    name: str
    count: int
    total_us: float
    share_pct: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "count": self.count, "total_us": self.total_us, "share_pct": self.share_pct}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KernelSummary:
        return cls(d["name"], d["count"], d["total_us"], d["share_pct"])


@dataclass(frozen=True, slots=True)
class IdleCauseSummary:
    """``traces[].idle_breakdown[]``: GPU idle time of one primary cause, the rule that claims the
    cause (None: no loaded rule does), and the cause's largest detail."""

    cause: str
    idle_us: float
    gaps: int
    share_pct: float
    claimed_by: str | None
    top_detail: str
    top_detail_us: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "idle_us": self.idle_us,
            "gaps": self.gaps,
            "share_pct": self.share_pct,
            "claimed_by": self.claimed_by,
            "top_detail": self.top_detail,
            "top_detail_us": self.top_detail_us,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> IdleCauseSummary:
        return cls(
            d["cause"], d["idle_us"], d["gaps"], d["share_pct"], d["claimed_by"], d["top_detail"], d["top_detail_us"]
        )


@dataclass(frozen=True, slots=True)
class AnnotationRow:
    """``traces[].annotations.rows[]``: one top-level annotation name's time, share and calls."""

    name: str
    time_us: float
    share_pct: float
    calls: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "time_us": self.time_us, "share_pct": self.share_pct, "calls": self.calls}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AnnotationRow:
        return cls(d["name"], d["time_us"], d["share_pct"], d["calls"])


@dataclass(frozen=True, slots=True)
class Bottleneck:
    """``traces[].annotations.bottleneck``: the annotation with the most time and what to do about it."""

    name: str
    share_pct: float
    advice: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "share_pct": self.share_pct, "advice": self.advice, "message": self.message}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Bottleneck:
        return cls(d["name"], d["share_pct"], d["advice"], d["message"])


@dataclass(frozen=True, slots=True)
class AnnotationSummary:
    """``traces[].annotations``: time per top-level user annotation (``basis`` ``gpu`` or ``cpu``)."""

    basis: str
    total_us: float
    unannotated_us: float
    unannotated_pct: float
    rows: tuple[AnnotationRow, ...]
    bottleneck: Bottleneck | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "basis": self.basis,
            "total_us": self.total_us,
            "unannotated_us": self.unannotated_us,
            "unannotated_pct": self.unannotated_pct,
            "rows": _dicts(self.rows),
            "bottleneck": self.bottleneck.to_dict() if self.bottleneck is not None else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AnnotationSummary:
        b = d.get("bottleneck")
        return cls(
            d["basis"],
            d["total_us"],
            d["unannotated_us"],
            d["unannotated_pct"],
            tuple(AnnotationRow.from_dict(r) for r in d["rows"]),
            Bottleneck.from_dict(b) if b is not None else None,
        )


@dataclass(frozen=True, slots=True)
class RooflinePeaks:
    """``traces[].roofline.peaks``: the device's peaks (TFLOP/s per dtype, None: no such unit) and
    where each figure came from."""

    device: str
    model: str | None
    sm_count: int | None
    memory_bandwidth_gbs: float
    tflops: Mapping[str, float | None]
    sources: Mapping[str, str]
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "model": self.model,
            "sm_count": self.sm_count,
            "memory_bandwidth_gbs": self.memory_bandwidth_gbs,
            "tflops": dict(self.tflops),
            "sources": dict(self.sources),
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RooflinePeaks:
        return cls(
            d["device"],
            d["model"],
            d["sm_count"],
            d["memory_bandwidth_gbs"],
            dict(d["tflops"]),
            dict(d["sources"]),
            d["note"],
        )


@dataclass(frozen=True, slots=True)
class BoundShare:
    """``traces[].roofline.by_bound[]``: modelled kernel time limited by one bound."""

    bound: str
    time_us: float
    share_pct: float
    kernels: int

    def to_dict(self) -> dict[str, Any]:
        return {"bound": self.bound, "time_us": self.time_us, "share_pct": self.share_pct, "kernels": self.kernels}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BoundShare:
        return cls(d["bound"], d["time_us"], d["share_pct"], d["kernels"])


@dataclass(frozen=True, slots=True)
class RooflineKernel:
    """``traces[].roofline.top_kernels[]``: one (kernel, launching op, dtype) on the roofline; a
    figure the trace cannot give is None."""

    name: str
    op: str
    dtype: str
    count: int
    time_us: float
    share_pct: float
    gflop: float | None
    mbytes: float
    intensity: float | None
    achieved_tflops: float | None
    achieved_gbs: float | None
    peak_tflops: float | None
    peak_figure: str | None
    roof_pct: float | None
    bound: str
    basis: str

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RooflineKernel:
        return cls(**{name: d[name] for name in cls.__slots__})


@dataclass(frozen=True, slots=True)
class RooflineSummary:
    """``traces[].roofline``: peaks (or the reason there are none), time by bound, top kernels, and
    the text of each basis the figures shown rest on."""

    available: bool
    reason: str
    peaks: RooflinePeaks | None
    kernel_time_us: float = 0.0
    modelled_time_us: float = 0.0
    modelled_pct: float = 0.0
    by_bound: tuple[BoundShare, ...] = ()
    top_kernels: tuple[RooflineKernel, ...] = ()
    bases: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "peaks": self.peaks.to_dict() if self.peaks is not None else None,
            "kernel_time_us": self.kernel_time_us,
            "modelled_time_us": self.modelled_time_us,
            "modelled_pct": self.modelled_pct,
            "by_bound": _dicts(self.by_bound),
            "top_kernels": _dicts(self.top_kernels),
            "bases": dict(self.bases),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RooflineSummary:
        p = d.get("peaks")
        return cls(
            d["available"],
            d["reason"],
            RooflinePeaks.from_dict(p) if p is not None else None,
            d["kernel_time_us"],
            d["modelled_time_us"],
            d["modelled_pct"],
            tuple(BoundShare.from_dict(b) for b in d["by_bound"]),
            tuple(RooflineKernel.from_dict(k) for k in d["top_kernels"]),
            dict(d["bases"]),
        )


@dataclass(frozen=True, slots=True)
class MeasuredSteps:
    """``traces[].measured_unprofiled_step_us``: step times measured outside the profiler's active
    window (by ``capture`` or the in-loop advisor, docs/capture.md): their median and how many."""

    median_us: float
    count: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"median_us": self.median_us, "count": self.count, "source": self.source}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> MeasuredSteps | None:
        if d is None:
            return None
        return cls(median_us=d["median_us"], count=d["count"], source=d["source"])

    @classmethod
    def of_key(cls, key: object) -> MeasuredSteps | None:
        """From a trace's top-level ``"traceadvisor"`` value; None without usable step times."""
        if not isinstance(key, Mapping):
            return None
        times = key.get("unprofiled_step_us")
        if not isinstance(times, list):
            return None
        values = [float(t) for t in times if isinstance(t, int | float) and not isinstance(t, bool) and t > 0]
        if not values:
            return None
        source = key.get("source")
        return cls(median_us=statistics.median(values), count=len(values), source=str(source or "unknown"))


@dataclass(frozen=True, slots=True)
class StepTime:
    """``traces[].step_time``: the profiled step time and the one predicted without the profiler
    (the trace replayed without the profiler's host cost, whatif/profiler_cost.py), both the spacing
    of step ends, with the GPU's busy time per step and its share of each."""

    profiled_step_us: float
    unprofiled_step_us: float | None
    gpu_busy_per_step_us: float
    gpu_busy_profiled_pct: float
    gpu_busy_unprofiled_pct: float | None
    # what the prediction rests on: ``calibrated`` (fitted to steps timed without the profiler that
    # the trace carries) or ``uncalibrated`` (the bundled costs alone); None without a prediction
    unprofiled_basis: str | None = None
    # why the prediction is less sure than its basis says (None otherwise): uncalibrated, where the
    # bundled costs are known to be unreliable for this trace; calibrated, where the measured step
    # was out of the calibration's reach
    unprofiled_caveat: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "profiled_step_us": self.profiled_step_us,
            "unprofiled_step_us": self.unprofiled_step_us,
            "gpu_busy_per_step_us": self.gpu_busy_per_step_us,
            "gpu_busy_profiled_pct": self.gpu_busy_profiled_pct,
            "gpu_busy_unprofiled_pct": self.gpu_busy_unprofiled_pct,
            "unprofiled_basis": self.unprofiled_basis,
            "unprofiled_caveat": self.unprofiled_caveat,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> StepTime | None:
        return None if d is None else cls(**d)


@dataclass(frozen=True, slots=True)
class StepVariation:
    """``traces[].step_variation``: how far the profiled steps' spans differ. A step's span runs
    from its CPU start to the later of its CPU end and its GPU end (its work done), or over its GPU
    work alone where that began after its CPU part ended (``summary.steps.step_spans_ns``: the GPU
    was still busy with earlier steps); steps of zero span are left out. ``unstable``: the slowest
    is at least ``summary/steps.UNSTABLE_STEP_RATIO`` times the fastest, so a mean per step
    describes no real step."""

    min_us: float
    max_us: float
    ratio: float
    slowest: str  # the slowest step's name
    slowest_is_first: bool  # often warm-up work: allocator growth, cuDNN/Triton autotuning, compiling
    steps: int
    unstable: bool

    def describe(self, fmt: Callable[[float], str]) -> str:
        """One line for a report, times written by ``fmt`` (the renderers' ``fmt_time``)."""
        times = f"{self.ratio:.1f}" if self.ratio < 10 else f"{self.ratio:.0f}"
        first = " (the first: warm-up?)" if self.slowest_is_first else ""
        return (
            f"steps vary {times}x: {fmt(self.min_us)} to {fmt(self.max_us)}, slowest {self.slowest}{first}; "
            "per-step means mix them"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_us": self.min_us,
            "max_us": self.max_us,
            "ratio": self.ratio,
            "slowest": self.slowest,
            "slowest_is_first": self.slowest_is_first,
            "steps": self.steps,
            "unstable": self.unstable,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> StepVariation | None:
        return None if d is None else cls(**d)


# The kinds of span a timeline lane draws (``TimelineLane.kind`` indexes it); idle gaps use the
# idle causes (``Timeline.causes``) instead.
TIMELINE_KINDS = ("kernel", "memcpy", "memset", "cpu_op", "python", "annotation")


@dataclass(frozen=True, slots=True)
class TimelineLane:
    """One lane of the HTML report's timeline: a host thread (CPU ops and annotations, nested by
    ``depth``), its Python frames, a GPU stream, or a device's idle gaps (``role``: ``thread``,
    ``python``, ``stream``, ``idle``). Columns, sorted by start (``start_us``: after the timeline's
    ``origin_ns``, so that it keeps whole ns, which a trace's absolute µs in a float cannot: at
    4.4e12 µs a double's step is ~1 ns); ``name`` indexes ``Timeline.names``,
    ``kind`` indexes ``TIMELINE_KINDS`` (for ``idle``: ``Timeline.causes``)."""

    label: str
    role: str
    start_us: tuple[float, ...]
    dur_us: tuple[float, ...]
    depth: tuple[int, ...]
    name: tuple[int, ...]
    kind: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "role": self.role,
            "start_us": list(self.start_us),
            "dur_us": list(self.dur_us),
            "depth": list(self.depth),
            "name": list(self.name),
            "kind": list(self.kind),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TimelineLane:
        return cls(
            label=d["label"],
            role=d["role"],
            start_us=tuple(d["start_us"]),
            dur_us=tuple(d["dur_us"]),
            depth=tuple(d["depth"]),
            name=tuple(d["name"]),
            kind=tuple(d["kind"]),
        )


@dataclass(frozen=True, slots=True)
class Timeline:
    """The compact timeline of one trace that the HTML report draws (``summary/timeline.py``):
    lanes of spans over ``[start_us, end_us]`` (the trace's own clock; ``origin_ns``, the start in
    exact ns, is what the lanes' starts count from), the names they index, and
    what was left out (``sampled``: None when every span of the window is there). Only the HTML
    report asks for it (``analyze(..., timeline=True)``); it is absent from the other outputs."""

    start_us: float
    end_us: float
    origin_ns: int
    names: tuple[str, ...]
    causes: tuple[str, ...]
    lanes: tuple[TimelineLane, ...]
    spans: int
    total_spans: int
    sampled: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_us": self.start_us,
            "end_us": self.end_us,
            "origin_ns": self.origin_ns,
            "names": list(self.names),
            "causes": list(self.causes),
            "lanes": _dicts(self.lanes),
            "spans": self.spans,
            "total_spans": self.total_spans,
            "sampled": self.sampled,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Timeline | None:
        if d is None:
            return None
        return cls(
            start_us=d["start_us"],
            end_us=d["end_us"],
            origin_ns=d["origin_ns"],
            names=tuple(d["names"]),
            causes=tuple(d["causes"]),
            lanes=tuple(TimelineLane.from_dict(x) for x in d["lanes"]),
            spans=d["spans"],
            total_spans=d["total_spans"],
            sampled=d.get("sampled"),
        )


@dataclass(frozen=True, slots=True)
class CpuOp:
    """``traces[].cpu.top_ops[]``: one op name's self time in the steps (its time less its children's)."""

    name: str
    self_us: float  # per step
    calls: float  # per step
    share_pct: float  # of the profiled step

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "self_us": self.self_us, "calls": self.calls, "share_pct": self.share_pct}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CpuOp:
        return cls(**d)


@dataclass(frozen=True, slots=True)
class CpuLine:
    """``traces[].cpu.top_lines[]``: one Python frame's self time in the steps (its time less its child
    frames'), with the user's own frame it ran under (``user``: "function (file:line)", None when
    the frame is the user's own or none of the user's is above it). ``line`` is the frame's line as
    the profiler names it: the function's first line (``Location.line_kind`` "function_start")."""

    file: str
    line: int | None
    function: str
    self_us: float  # per step
    calls: float  # per step
    share_pct: float
    is_user: bool
    user: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "self_us": self.self_us,
            "calls": self.calls,
            "share_pct": self.share_pct,
            "is_user": self.is_user,
            "user": self.user,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CpuLine:
        return cls(**d)


@dataclass(frozen=True, slots=True)
class CpuSummary:
    """``traces[].cpu``: the analysis a CPU-only trace supports (summary/cpu.py). Times are per step
    of the profiled steps (the profiler's cost included), shares over the profiled step.

    The step's parts: ``data_loading_us`` (DataLoader ``__next__``), ``optimizer_us``
    (``Optimizer.step``/``zero_grad``), ``compute_us`` (the other ops called from Python: forward,
    backward, loss), ``other_us`` (the rest: Python between ops, the profiler). ``dispatch_us``:
    ``ops_per_step`` x ``per_op_us``, the median time of the ops that do no arithmetic (views,
    ``empty``, ``detach``: their time is the dispatcher's), an estimate inside the parts above.
    ``syncs_per_step``: ops that make a GPU run wait for the host (``.item()`` and the like);
    ``sync_sites``: where the user's code calls them."""

    steps: int
    step_us: float
    data_loading_us: float
    optimizer_us: float
    compute_us: float
    other_us: float
    ops_per_step: float
    per_op_us: float | None
    dispatch_us: float
    optimizer_per_tensor: bool | None  # None without an optimizer step
    syncs_per_step: float
    sync_ops: tuple[str, ...]
    sync_sites: tuple[str, ...]
    top_ops: tuple[CpuOp, ...]
    top_lines: tuple[CpuLine, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "step_us": self.step_us,
            "data_loading_us": self.data_loading_us,
            "optimizer_us": self.optimizer_us,
            "compute_us": self.compute_us,
            "other_us": self.other_us,
            "ops_per_step": self.ops_per_step,
            "per_op_us": self.per_op_us,
            "dispatch_us": self.dispatch_us,
            "optimizer_per_tensor": self.optimizer_per_tensor,
            "syncs_per_step": self.syncs_per_step,
            "sync_ops": list(self.sync_ops),
            "sync_sites": list(self.sync_sites),
            "top_ops": _dicts(self.top_ops),
            "top_lines": _dicts(self.top_lines),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> CpuSummary | None:
        if d is None:
            return None
        return cls(
            **{k: v for k, v in d.items() if k not in ("sync_ops", "sync_sites", "top_ops", "top_lines")},
            sync_ops=tuple(d["sync_ops"]),
            sync_sites=tuple(d["sync_sites"]),
            top_ops=tuple(CpuOp.from_dict(x) for x in d["top_ops"]),
            top_lines=tuple(CpuLine.from_dict(x) for x in d["top_lines"]),
        )


@dataclass(frozen=True, slots=True)
class HostStallSummary:
    """``traces[].host_stalls[]``: a one-off host stall of one profiled step (whatif/one_off_stalls.py):
    the event whose own time held it (``name``, on host thread ``tid`` of process ``pid``), the
    stretch with nothing recorded that held it (``start_us``, ``dur_us``), how much more its own time
    was than the same event's least in the window's other steps (``excess_us``; that least:
    ``usual_us``), and what the predicted unprofiled step leaves out of it (``left_out_us``: the
    excess, within the stretch; 0 where the profiler's own step work or an Inductor wrapper's gaps
    already take that time out)."""

    step: str
    pid: int
    tid: int
    name: str
    start_us: float
    dur_us: float
    excess_us: float
    usual_us: float
    left_out_us: float

    def describe(self, fmt: Callable[[float], str]) -> str:
        """One line for a report, times written by ``fmt`` (the renderers' ``fmt_time``)."""
        left = (
            "left out of the predicted step"
            if self.left_out_us > 0
            else "already out of the predicted step with the profiler's own time"
        )
        return (
            f"host stall in {self.step}: {fmt(self.excess_us)} more in {self.name} than in the other steps "
            f"({fmt(self.usual_us)}), a one-off pause (garbage collection, page faults, the host descheduled); "
            f"{left}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "pid": self.pid,
            "tid": self.tid,
            "name": self.name,
            "start_us": self.start_us,
            "dur_us": self.dur_us,
            "excess_us": self.excess_us,
            "usual_us": self.usual_us,
            "left_out_us": self.left_out_us,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostStallSummary:
        return cls(**d)


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """``traces[]``: one trace's device, analysis window, GPU busy time, steps, top kernels, idle
    time by cause, roofline, annotations, capture flags and load warnings."""

    path: str
    rank: int | None
    platform: str
    device: DeviceInfo | None
    window_us: float
    window_start_us: float
    window_basis: str
    gpu_busy_us: float
    gpu_idle_us: float
    gpu_busy_pct: float
    kernel_count: int
    devices: tuple[DeviceSummary, ...]
    steps: tuple[StepSummary, ...]
    top_kernels: tuple[KernelSummary, ...]
    idle_breakdown: tuple[IdleCauseSummary, ...]
    roofline: RooflineSummary
    annotations: AnnotationSummary | None
    capture: Mapping[str, bool]
    warnings: tuple[str, ...]
    # Max over steps of |replayed - measured| / measured step span, % (whatif/replay.py); None
    # without steps. How far a what-if saving computed by the replay can be trusted on this trace.
    replay_error_pct: float | None = None
    # Mean per step of the GPU waits on work outside the trace (another rank, another process, a
    # host node in a CUDA graph) that the replay keeps as measured; None without steps.
    replay_external_wait_us: float | None = None
    # Step times measured with the profiler off (capture's skipped and wait steps; the trace's
    # top-level "traceadvisor" key); None when the trace does not carry them.
    measured_unprofiled_step_us: MeasuredSteps | None = None
    # Profiled and predicted unprofiled step time, GPU busy on both; None without steps or a GPU.
    step_time: StepTime | None = None
    # How far the profiled steps' spans differ (None with fewer than two steps of some length).
    step_variation: StepVariation | None = None
    # One-off host stalls of the window's steps (whatif/one_off_stalls.py), in time order.
    host_stalls: tuple[HostStallSummary, ...] = ()
    # The HTML report's timeline (``analyze(..., timeline=True)``); None otherwise. Written by
    # ``to_dict`` only when present, so the JSON report of an ordinary analysis has no such key.
    timeline: Timeline | None = None
    # The CPU-only analysis (summary/cpu.py): hot ops and Python lines by self time, the step's time
    # by part, the syncs a GPU would pay for; None for a trace with GPU kernels. Written by
    # ``to_dict`` only when present.
    cpu: CpuSummary | None = None

    @property
    def unprofiled_step_us(self) -> float | None:
        """The predicted unprofiled step (also written as ``traces[].unprofiled_step_us``)."""
        return self.step_time.unprofiled_step_us if self.step_time is not None else None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "path": self.path,
            "rank": self.rank,
            "platform": self.platform,
            "device": self.device.to_dict() if self.device is not None else None,
            "window_us": self.window_us,
            "window_start_us": self.window_start_us,
            "window_basis": self.window_basis,
            "gpu_busy_us": self.gpu_busy_us,
            "gpu_idle_us": self.gpu_idle_us,
            "gpu_busy_pct": self.gpu_busy_pct,
            "kernel_count": self.kernel_count,
            "devices": _dicts(self.devices),
            "steps": _dicts(self.steps),
            "top_kernels": _dicts(self.top_kernels),
            "idle_breakdown": _dicts(self.idle_breakdown),
            "roofline": self.roofline.to_dict(),
            "annotations": self.annotations.to_dict() if self.annotations is not None else None,
            "capture": dict(self.capture),
            "warnings": list(self.warnings),
            "replay_error_pct": self.replay_error_pct,
            "replay_external_wait_us": self.replay_external_wait_us,
            "measured_unprofiled_step_us": _maybe_dict(self.measured_unprofiled_step_us),
            "unprofiled_step_us": self.unprofiled_step_us,
            "step_time": _maybe_dict(self.step_time),
            "step_variation": _maybe_dict(self.step_variation),
            "host_stalls": _dicts(self.host_stalls),
        }
        if self.timeline is not None:
            d["timeline"] = self.timeline.to_dict()
        if self.cpu is not None:
            d["cpu"] = self.cpu.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TraceSummary:
        device, annotations = d.get("device"), d.get("annotations")
        return cls(
            path=d["path"],
            rank=d["rank"],
            platform=d["platform"],
            device=DeviceInfo.from_dict(device) if device is not None else None,
            window_us=d["window_us"],
            window_start_us=d["window_start_us"],
            window_basis=d["window_basis"],
            gpu_busy_us=d["gpu_busy_us"],
            gpu_idle_us=d["gpu_idle_us"],
            gpu_busy_pct=d["gpu_busy_pct"],
            kernel_count=d["kernel_count"],
            devices=tuple(DeviceSummary.from_dict(x) for x in d["devices"]),
            steps=tuple(StepSummary.from_dict(x) for x in d["steps"]),
            top_kernels=tuple(KernelSummary.from_dict(x) for x in d["top_kernels"]),
            idle_breakdown=tuple(IdleCauseSummary.from_dict(x) for x in d["idle_breakdown"]),
            roofline=RooflineSummary.from_dict(d["roofline"]),
            annotations=AnnotationSummary.from_dict(annotations) if annotations is not None else None,
            capture=dict(d["capture"]),
            warnings=tuple(d["warnings"]),
            replay_error_pct=d.get("replay_error_pct"),
            replay_external_wait_us=d.get("replay_external_wait_us"),
            measured_unprofiled_step_us=MeasuredSteps.from_dict(d.get("measured_unprofiled_step_us")),
            step_time=StepTime.from_dict(d.get("step_time")),
            step_variation=StepVariation.from_dict(d.get("step_variation")),
            host_stalls=tuple(HostStallSummary.from_dict(x) for x in d.get("host_stalls", ())),
            timeline=Timeline.from_dict(d.get("timeline")),
            cpu=CpuSummary.from_dict(d.get("cpu")),
        )


@dataclass(frozen=True, slots=True)
class Skipped:
    """``skipped[]``: a rule not run on a trace, and why (a capability the trace lacks)."""

    rule: str
    code: str
    trace: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "code": self.code, "trace": self.trace, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Skipped:
        return cls(d["rule"], d["code"], d["trace"], d["reason"])


@dataclass(frozen=True, slots=True)
class RuleError:
    """``errors[]``: a rule that failed on a trace (raised, timed out, yielded a bad finding)."""

    rule: str
    code: str
    trace: str
    error: str

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "code": self.code, "trace": self.trace, "error": self.error}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RuleError:
        return cls(d["rule"], d["code"], d["trace"], d["error"])


@dataclass(frozen=True, slots=True)
class ConfigInfo:
    """``config``: which configuration file applied (``path`` None: none), how it was found, and
    whether its rules-dir ran (``rules_dir_trusted`` None without a file)."""

    path: str | None = None
    found_by: str | None = None
    isolated: bool = False
    rules_dir_trusted: bool | None = None
    rules_dirs: tuple[str, ...] = ()
    skipped_rules_dirs: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "found_by": self.found_by,
            "isolated": self.isolated,
            "rules_dir_trusted": self.rules_dir_trusted,
            "rules_dirs": list(self.rules_dirs),
            "skipped_rules_dirs": list(self.skipped_rules_dirs),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConfigInfo:
        return cls(
            d.get("path"),
            d.get("found_by"),
            bool(d.get("isolated", False)),
            d.get("rules_dir_trusted"),
            tuple(d.get("rules_dirs") or ()),
            tuple(d.get("skipped_rules_dirs") or ()),
            tuple(d.get("warnings") or ()),
        )

    def note(self) -> tuple[str, str] | None:
        """``(path, how)`` for the text and Markdown reports' config line, e.g. ``("/repo/traceadvisor.toml",
        "discovered; rules-dir not loaded: not trusted")``; None when no file applied. Unescaped:
        each renderer escapes the path its own way."""
        if not self.path:
            return None
        how = self.found_by or ""
        if self.skipped_rules_dirs:
            how += "; rules-dir not loaded: not trusted"
        elif self.rules_dirs:
            how += "; rules-dir loaded"
        return self.path, how


@dataclass(frozen=True, slots=True)
class VerdictFix:
    """One of the verdict's top fixes: the finding's rule, its saving per step, the step after it."""

    rule: str
    code: str
    ranks: tuple[int, ...]
    saving_per_step_us: float
    step_after_us: float
    # the finding's likely range per step (a replayed saving's: whatif.saving_range), else None
    likely_low_per_step_us: float | None = None
    likely_high_per_step_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "code": self.code,
            "ranks": list(self.ranks),
            "saving_per_step_us": self.saving_per_step_us,
            "step_after_us": self.step_after_us,
            "likely_low_per_step_us": self.likely_low_per_step_us,
            "likely_high_per_step_us": self.likely_high_per_step_us,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VerdictFix:
        return cls(
            rule=str(d["rule"]),
            code=str(d["code"]),
            ranks=tuple(int(r) for r in d.get("ranks") or ()),
            saving_per_step_us=float(d["saving_per_step_us"]),
            step_after_us=float(d["step_after_us"]),
            likely_low_per_step_us=_optional_float(d.get("likely_low_per_step_us")),
            likely_high_per_step_us=_optional_float(d.get("likely_high_per_step_us")),
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    """``verdict``: what to do first. The step (predicted without the profiler where the trace can
    be replayed, else as profiled: ``basis``; with several ranks the slowest rank's), and the top
    fixes by saving per step, each with the step it predicts after it alone."""

    step_us: float
    basis: str  # "predicted without the profiler" | "profiled"
    fixes: tuple[VerdictFix, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"step_us": self.step_us, "basis": self.basis, "fixes": [f.to_dict() for f in self.fixes]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Verdict | None:
        if d is None:
            return None
        return cls(
            step_us=float(d["step_us"]),
            basis=str(d["basis"]),
            fixes=tuple(VerdictFix.from_dict(f) for f in d.get("fixes") or ()),
        )


@dataclass(frozen=True, slots=True)
class RankRow:
    """One row of the rank comparison table: means per step over the rank's steps, µs."""

    rank: int
    host: str
    step_us: float
    compute_us: float
    exposed_wait_us: float
    exposed_transfer_us: float
    memcpy_exposed_us: float
    idle_us: float
    straggler: bool

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RankRow:
        return cls(**{f: d[f] for f in cls.__slots__})


@dataclass(frozen=True, slots=True)
class RanksSummary:
    """``ranks``: the multi-rank section (``ranks/combine.py``): how clocks were aligned, how the
    collectives matched, the rank comparison table, what is wrong with the set of ranks."""

    alignment: str  # none | shared-host | collective-end (residual X µs) [refused: ...]
    offsets_us: dict[str, float]  # per host, applied unless refused
    match_key: str  # how collectives were matched across ranks
    coverage_pct: float  # matched collective rows / all rows
    collectives: int  # matched instances
    rows: tuple[RankRow, ...]
    straggler: int | None
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "alignment": self.alignment,
            "offsets_us": dict(self.offsets_us),
            "match_key": self.match_key,
            "coverage_pct": self.coverage_pct,
            "collectives": self.collectives,
            "rows": [r.to_dict() for r in self.rows],
            "straggler": self.straggler,
            "problems": list(self.problems),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> RanksSummary | None:
        if d is None:
            return None
        return cls(
            alignment=str(d["alignment"]),
            offsets_us={str(k): float(v) for k, v in d["offsets_us"].items()},
            match_key=str(d["match_key"]),
            coverage_pct=float(d["coverage_pct"]),
            collectives=int(d["collectives"]),
            rows=tuple(RankRow.from_dict(r) for r in d["rows"]),
            straggler=d.get("straggler"),
            problems=tuple(d.get("problems") or ()),
        )


@dataclass(frozen=True, slots=True)
class Report:
    """Everything ``analyze`` found; ``to_dict`` is the versioned JSON report."""

    traces: tuple[TraceSummary, ...] = ()
    findings: tuple[Finding, ...] = ()  # ranked by impact
    skipped: tuple[Skipped, ...] = ()
    errors: tuple[RuleError, ...] = ()
    config: ConfigInfo | None = None
    # several ranks of one run: the cross-rank section (None for a single trace)
    ranks: RanksSummary | None = None
    # what to do first (None without steps)
    verdict: Verdict | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "traceadvisor", "version": __version__},
            "traces": _dicts(self.traces),
            "findings": _dicts(self.findings),
            "skipped": _dicts(self.skipped),
            "errors": _dicts(self.errors),
            "config": self.config.to_dict() if self.config is not None else None,
            "ranks": self.ranks.to_dict() if self.ranks is not None else None,
            "verdict": self.verdict.to_dict() if self.verdict is not None else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Report:
        config = d.get("config")
        return cls(
            traces=tuple(TraceSummary.from_dict(t) for t in d.get("traces") or ()),
            findings=tuple(Finding.from_dict(f) for f in d.get("findings") or ()),
            skipped=tuple(Skipped.from_dict(s) for s in d.get("skipped") or ()),
            errors=tuple(RuleError.from_dict(e) for e in d.get("errors") or ()),
            config=ConfigInfo.from_dict(config) if config is not None else None,
            ranks=RanksSummary.from_dict(d.get("ranks")),
            verdict=Verdict.from_dict(d.get("verdict")),
        )

    def worst_severity(self) -> Severity | None:
        """The highest severity among the findings (None: no findings)."""
        return max((f.severity for f in self.findings), key=lambda s: s.rank, default=None)
