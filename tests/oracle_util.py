"""An independent re-computation of GPU busy/idle time and profiler-step windows (test oracle).

Nothing here uses traceadvisor's reader, tables or interval code: the trace is read with plain
``json``/``gzip``; every number is parsed as ``decimal.Decimal`` from its raw text, so microsecond
``ts``/``dur`` values become exact integer nanoseconds (``Decimal("4431950183523.664") * 1000``),
whatever their magnitude (absolute epoch microseconds need 61 bits as ns, more than a float64
mantissa holds). Intervals are merged with a sorted sweep in pure Python.

Definitions (the ones traceadvisor documents in ``trace/model.py`` and ``summary/``):

* GPU work: ``ph:"X"`` events of category ``kernel``/``gpu_memcpy``/``gpu_memset`` (and the old
  aliases ``Kernel``/``Memcpy``/``Memset``); device = ``args.device``, else ``pid``; negative
  ``dur`` counts as 0 (format doc §1.4). ``cuda_sync`` events are not GPU work.
* Busy time of a device in ``[lo, hi)``: length of the union of its GPU intervals inside it.
* The main device: the one with the largest summed GPU duration.
* CPU step window: ``user_annotation`` ``ProfilerStep#N`` spans (min start / max end per name).
* GPU step window: ``gpu_user_annotation`` ``ProfilerStep#N`` on the main device (min start / max
  end over streams); for a step without one, the span of the main device's GPU work whose
  launching runtime call (same ``correlation``) starts inside the CPU step.
* Analysis window: first step GPU start to last step GPU end; without GPU step windows, the span
  of the main device's GPU work; CPU-only: the span of the CPU steps, else of all host events.

The module also holds session caches (``oracle()``, ``traceadvisor_traces()``) so each trace is
read once per test session; ``traceadvisor_traces`` is the only place traceadvisor is imported.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import fixture_paths

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
GPU_CATS = {
    "kernel": 0,
    "Kernel": 0,
    "gpu_memcpy": 1,
    "Memcpy": 1,
    "gpu_memset": 2,
    "Memset": 2,
}
HOST_ANNOTATION_CATS = {"user_annotation", "User"}
HOST_CATS = {"cpu_op", "Operator", *HOST_ANNOTATION_CATS}
GPU_ANNOTATION_CATS = {"gpu_user_annotation", "gpu_user_Annotation"}

REPO = fixture_paths.REPO
EXTERNAL = fixture_paths.EXTERNAL
FIXTURES = fixture_paths.FIXTURE_TRACES


def external_traces() -> list[Path]:
    """Every trace of the vendored external set (``fixtures/external/**/*.json.gz``); raises when it is missing."""
    return fixture_paths.external_traces()


def fixture_traces() -> list[Path]:
    """Every trace under ``fixtures/traces/`` (may not exist yet)."""
    if not FIXTURES.is_dir():
        return []
    return sorted(p for p in FIXTURES.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))


def all_traces() -> list[Path]:
    return external_traces() + fixture_traces()


def trace_id(path: Path) -> str:
    """A short, stable test id: the path relative to the external set or the repository."""
    for base in (EXTERNAL, REPO):
        try:
            return str(path.resolve().relative_to(base))
        except ValueError:
            continue
    return path.name


def to_ns(value: Any) -> int:
    """A microsecond value parsed as Decimal (or its text) to exact integer nanoseconds."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"not a time: {value!r}")
    d = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    ns = d * 1000
    if not ns.is_finite() or ns != ns.to_integral_value():
        raise ValueError(f"time {value!r} µs is not a whole number of ns")
    return int(ns)


def _as_int(value: Any) -> int | None:
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def read_events(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(top-level object, traceEvents)`` with every number as ``Decimal``."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw, parse_float=Decimal, parse_int=Decimal)
    if isinstance(doc, list):
        return {}, doc
    return doc, list(doc.get("traceEvents") or [])


def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of half-open intervals: a sorted sweep, touching intervals joined."""
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def covered(merged: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Length of merged (disjoint) intervals inside ``[lo, hi)``."""
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in merged)


def gaps(merged: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """Idle intervals inside ``[lo, hi)`` between merged busy intervals."""
    out = []
    t = lo
    for s, e in merged:
        if e <= lo or s >= hi:
            continue
        if s > t:
            out.append((t, min(s, hi)))
        t = max(t, e)
    if t < hi:
        out.append((t, hi))
    return [(a, b) for a, b in out if b > a]


@dataclass
class GpuEvent:
    ts: int
    end: int
    device: int
    stream: int | None
    kind: int
    name: str
    correlation: int | None


@dataclass
class Step:
    step: int
    name: str
    cpu_start: int
    cpu_end: int
    gpu_start: int = -1
    gpu_end: int = -1
    basis: str = "none"


@dataclass
class OracleTrace:
    """One trace file, re-read independently."""

    path: Path
    gpu: list[GpuEvent] = field(default_factory=list)
    host_span: tuple[int, int] | None = None
    cpu_steps: dict[str, tuple[int, int]] = field(default_factory=dict)
    gpu_step_annotations: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)
    launch_ts: dict[int, int] = field(default_factory=dict)  # correlation -> runtime call start
    fractional_times: bool = False  # any ts/dur with a sub-µs part (ns-precision kineto)
    max_abs_ns: int = 0  # largest |ts| or |end| of any duration event, in ns
    # Non-GPU events that carry an integer ``args.stream`` (HTA counts those as GPU work).
    host_with_stream: list[tuple[int, int, str, int]] = field(default_factory=list)
    _merged: dict[int, list[tuple[int, int]]] = field(default_factory=dict, repr=False)

    # -- devices and busy time ---------------------------------------------------------------
    @functools.cached_property
    def devices(self) -> list[int]:
        """Devices with GPU work, the busiest (largest summed duration) first."""
        total: dict[int, int] = {}
        for g in self.gpu:
            total[g.device] = total.get(g.device, 0) + (g.end - g.ts)
        return sorted(total, key=lambda d: (-total[d], d))

    @property
    def main_device(self) -> int | None:
        return self.devices[0] if self.devices else None

    def merged(self, device: int) -> list[tuple[int, int]]:
        """Merged busy intervals of a device (cached)."""
        if device not in self._merged:
            self._merged[device] = merge([(g.ts, g.end) for g in self.gpu if g.device == device])
        return self._merged[device]

    def busy(self, device: int, lo: int, hi: int) -> int:
        return covered(self.merged(device), lo, hi)

    def gaps(self, device: int, lo: int, hi: int) -> list[tuple[int, int]]:
        return gaps(self.merged(device), lo, hi)

    # -- steps and window ---------------------------------------------------------------------
    @functools.cached_property
    def steps(self) -> list[Step]:
        out = [
            Step(int(STEP_NAME.match(name).group(1)), name, s, e)  # type: ignore[union-attr]
            for name, (s, e) in self.cpu_steps.items()
        ]
        out.sort(key=lambda st: st.cpu_start)
        dev = self.main_device
        if dev is None:
            return out
        # GPU work launched (runtime call start) inside the CPU step, from any thread.
        for g in self.gpu:
            if g.device != dev or g.correlation is None or g.correlation not in self.launch_ts:
                continue
            t = self.launch_ts[g.correlation]
            holders = [st for st in out if st.cpu_start <= t < st.cpu_end]
            if not holders:
                continue
            st = max(holders, key=lambda x: x.cpu_start)
            if st.basis == "none":
                st.gpu_start, st.gpu_end, st.basis = g.ts, g.end, "launches"
            else:
                st.gpu_start, st.gpu_end = min(st.gpu_start, g.ts), max(st.gpu_end, g.end)
        # Steps without launches in the trace: the GPU work inside the step's GPU annotation.
        for st in out:
            ann = self.gpu_step_annotations.get((dev, st.name))
            if st.basis != "none" or ann is None:
                continue
            inside = [g for g in self.gpu if g.device == dev and ann[0] <= g.ts and g.end <= ann[1]]
            if inside:
                st.gpu_start = min(g.ts for g in inside)
                st.gpu_end = max(g.end for g in inside)
                st.basis = "annotation"
        return out

    @functools.cached_property
    def analysis_window(self) -> tuple[int, int, str]:
        with_gpu = [st for st in self.steps if st.gpu_start >= 0]
        if with_gpu:
            return min(s.gpu_start for s in with_gpu), max(s.gpu_end for s in with_gpu), "steps (GPU windows)"
        dev = self.main_device
        if dev is not None:
            mine = [g for g in self.gpu if g.device == dev]
            return min(g.ts for g in mine), max(g.end for g in mine), "GPU activity span"
        if self.steps:
            return min(s.cpu_start for s in self.steps), max(s.cpu_end for s in self.steps), "steps (CPU windows)"
        if self.host_span is not None:
            return self.host_span[0], self.host_span[1], "host activity span"
        return 0, 0, "empty"


def parse(path: Path) -> OracleTrace:
    """Read a trace file into an ``OracleTrace``."""
    _top, events = read_events(path)
    o = OracleTrace(Path(path))
    host_lo: int | None = None
    host_hi: int | None = None
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if not isinstance(cat, str) or "ts" not in e:
            continue
        try:
            ts = to_ns(e["ts"])
            dur = max(to_ns(e.get("dur", 0)), 0)
        except (ValueError, ArithmeticError):
            continue
        if ts % 1000 or dur % 1000:
            o.fractional_times = True
        end = ts + dur
        o.max_abs_ns = max(o.max_abs_ns, abs(ts), abs(end))
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        name = e.get("name") if isinstance(e.get("name"), str) else ""
        if cat in GPU_CATS:
            dev = _as_int(args.get("device"))
            if dev is None:
                dev = _as_int(e.get("pid"))
            if dev is None:
                continue
            o.gpu.append(
                GpuEvent(
                    ts, end, dev, _as_int(args.get("stream")), GPU_CATS[cat], name, _as_int(args.get("correlation"))
                )
            )
        elif cat in HOST_CATS:
            host_lo = ts if host_lo is None else min(host_lo, ts)
            host_hi = end if host_hi is None else max(host_hi, end)
            if cat in HOST_ANNOTATION_CATS and STEP_NAME.match(name):
                s0, e0 = o.cpu_steps.get(name, (ts, end))
                o.cpu_steps[name] = (min(s0, ts), max(e0, end))
        elif cat in GPU_ANNOTATION_CATS and STEP_NAME.match(name):
            dev = _as_int(args.get("device"))
            if dev is None:
                dev = _as_int(e.get("pid"))
            if dev is None:
                continue
            s0, e0 = o.gpu_step_annotations.get((dev, name), (ts, end))
            o.gpu_step_annotations[(dev, name)] = (min(s0, ts), max(e0, end))
        elif cat == "Runtime" or cat.endswith(("_runtime", "_driver")):
            corr = _as_int(args.get("correlation"))
            if corr is not None and corr >= 0:
                o.launch_ts.setdefault(corr, ts)
        if cat not in GPU_CATS and cat != "cuda_sync" and _as_int(args.get("stream")) is not None:
            o.host_with_stream.append((ts, end, name, _as_int(args.get("stream"))))  # type: ignore[arg-type]
    if host_lo is not None and host_hi is not None:
        o.host_span = (host_lo, host_hi)
    return o


@functools.cache
def oracle(path: str) -> OracleTrace:
    """Session cache of ``parse``."""
    return parse(Path(path))


@functools.cache
def traceadvisor_traces(path: str) -> tuple[Any, ...]:
    """Session cache of ``traceadvisor.load(path)`` (the code under test, not the oracle)."""
    import traceadvisor

    return tuple(traceadvisor.load(path))
