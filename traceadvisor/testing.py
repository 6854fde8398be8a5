"""Helpers to test rules (built-in or your own) on small traces written as YAML cases.

A case file (``fixtures/rules/<CODE>.yaml``)::

    rule: GK101                  # the rule's code or name
    options: {min_gap_us: 50}    # optional, for every case
    cases:
      gap_after_sync:
        steps: [[0, 1000], [1000, 1000]]      # ProfilerStep windows on the CPU: [ts_us, dur_us]
        gpu_steps: true                       # also write GPU mirrors of the steps (optional)
        device: {name: NVIDIA H100 80GB HBM3, computeMajor: 9, computeMinor: 0, numSms: 132}
        flags: [record_shapes, with_stack]    # top-level capture flags (optional)
        repeat: {count: 4, period_us: 1000}   # copy events and steps this many times (optional)
        events:
          - {cat: op, name: aten::mm, ts: 10, dur: 50, ext: 1, dims: [[64, 64], [64, 64]], types: [float, float]}
          - {cat: launch, name: cudaLaunchKernel, ts: 20, dur: 5, corr: 1, ext: 1}
          - {cat: kernel, name: sgemm, ts: 30, dur: 400, corr: 1, ext: 1, stream: 7}
        expect:                               # [] = must not fire; "skipped" = must be skipped
          - {severity: high, message_contains: "idle", impact_min_us: 100}

Compact categories: ``op`` (cpu_op), ``annotation`` (user_annotation), ``frame`` (python_function),
``launch``/``runtime`` (cuda_runtime), ``driver`` (cuda_driver), ``kernel``, ``memcpy``,
``memset``, ``sync`` (cuda_sync), ``gpu_annotation``, ``memory`` ([memory] instant). Keys: ``ts``,
``dur`` (µs), ``tid`` (host thread, default 1), ``stream`` (default 7), ``device`` (default 0),
``corr`` (correlation), ``ext`` (External id), ``dims``/``types``/``concrete`` (op inputs),
``grid``/``block``, ``bytes``, ``seq`` (sequence number), ``args`` (extra raw args). The cases are
expanded into real Kineto JSON and loaded by the production loader, so rules are tested on exactly
what they will read.
"""

from __future__ import annotations

import copy
import gzip
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from traceadvisor.engine.config import Config
from traceadvisor.engine.registry import RuleSource, discover
from traceadvisor.engine.rule import Rule
from traceadvisor.engine.runner import RunResult, instantiate, run
from traceadvisor.trace.load import load_file

HOST_PID = 100
_CATS = {
    "op": "cpu_op",
    "annotation": "user_annotation",
    "frame": "python_function",
    "launch": "cuda_runtime",
    "runtime": "cuda_runtime",
    "driver": "cuda_driver",
    "kernel": "kernel",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "sync": "cuda_sync",
    "gpu_annotation": "gpu_user_annotation",
    "memory": "cpu_instant_event",
}
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation"}


def expand_event(ev: dict[str, Any], py_ids: list[int]) -> dict[str, Any]:
    """One compact event to a Kineto event."""
    cat = _CATS.get(ev.get("cat", "op"), ev.get("cat", "op"))
    gpu = cat in _GPU_CATS
    out: dict[str, Any] = {
        "ph": "i" if cat == "cpu_instant_event" else "X",
        "cat": cat,
        "name": ev.get("name", "[memory]" if cat == "cpu_instant_event" else "event"),
        "pid": ev.get("device", 0) if gpu else HOST_PID,
        "tid": ev.get("stream", 7) if gpu else ev.get("tid", 1),
        "ts": ev.get("ts", 0),
    }
    if out["ph"] == "X":
        out["dur"] = ev.get("dur", 0)
    args: dict[str, Any] = {}
    if "ext" in ev:
        args["External id"] = ev["ext"]
    if "corr" in ev:
        args["correlation"] = ev["corr"]
    if gpu:
        args["device"] = ev.get("device", 0)
        args["stream"] = ev.get("stream", 7)
    if cat == "kernel":
        args["grid"] = ev.get("grid", [1, 1, 1])
        args["block"] = ev.get("block", [128, 1, 1])
        for key in ("registers per thread", "shared memory", "blocks per SM", "est. achieved occupancy %"):
            if key in ev:
                args[key] = ev[key]
    if "bytes" in ev:
        args["bytes"] = ev["bytes"]
    if "dims" in ev:
        args["Input Dims"] = ev["dims"]
        args["Input type"] = ev.get("types", ["float"] * len(ev["dims"]))
    if "concrete" in ev:
        args["Concrete Inputs"] = ev["concrete"]
    if "seq" in ev:
        args["Sequence number"] = ev["seq"]
    if cat == "python_function":
        py_ids.append(len(py_ids) + 1)
        args["Python id"] = py_ids[-1]
        args["Python parent id"] = ev.get("parent")
    if cat == "cuda_sync":
        args["cuda_sync_kind"] = ev.get("name", "Stream Sync")
    if cat == "cpu_instant_event":
        out["s"] = "t"
        args.update(
            {
                "Bytes": ev.get("bytes", 0),
                "Total Allocated": ev.get("allocated", 0),
                "Total Reserved": ev.get("reserved", 0),
                "Device Type": 1,
                "Device Id": 0,
            }
        )
    args.update(ev.get("args", {}))
    if args:
        out["args"] = args
    return out


def expand_case(case: dict[str, Any]) -> dict[str, Any]:
    """A compact case to a Kineto trace document."""
    repeat = case.get("repeat") or {"count": 1, "period_us": 0}
    count, period = int(repeat.get("count", 1)), float(repeat.get("period_us", 0))
    events: list[dict[str, Any]] = []
    py_ids: list[int] = []
    step_no = 0
    for k in range(count):
        shift = k * period
        for n, (ts, dur) in enumerate(case.get("steps", [])):
            step = {"cat": "annotation", "name": f"ProfilerStep#{step_no + n}", "ts": ts + shift, "dur": dur}
            events.append(expand_event(step, py_ids))
            if case.get("gpu_steps"):
                gpu = {"cat": "gpu_annotation", "name": step["name"], "ts": ts + shift, "dur": dur}
                events.append(expand_event(gpu, py_ids))
        step_no += len(case.get("steps", []))
        for ev in case.get("events", []):
            e = copy.deepcopy(ev)
            e["ts"] = e.get("ts", 0) + shift
            if k and "corr" in e:
                e["corr"] = e["corr"] + k * 100_000
            if k and "ext" in e:
                e["ext"] = e["ext"] + k * 100_000
            events.append(expand_event(e, py_ids))
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if "device" in case:
        dev = {"id": 0, **case["device"]}
        doc["deviceProperties"] = [dev]
    for flag in case.get("flags", []):
        doc[flag] = 1
    doc["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
    return doc


def write_case_trace(case: dict[str, Any], folder: Path, name: str = "case") -> Path:
    """Expand a case and write it as ``.json.gz`` into ``folder``."""
    path = folder / f"{name}.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(expand_case(case), fh)
    return path


def find_rule(key: str, rules_dirs: list[Path] | None = None) -> type[Rule]:
    """A discovered rule by code or name."""
    sources: list[RuleSource] = discover(rules_dirs)
    for s in sources:
        if key in (s.cls.code, s.cls.name):
            return s.cls
    raise KeyError(f"no rule {key!r}")


def run_case(rule_cls: type[Rule], case: dict[str, Any], options: dict[str, Any] | None = None) -> RunResult:
    """Run one rule alone on one case, through the real loader and runner."""
    trace_path = case.get("trace")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(trace_path) if trace_path else write_case_trace(case, Path(tmp))
        trace = load_file(path)
        config = Config(rule_options={rule_cls.code: {**(options or {}), **case.get("options", {})}})
        rules = instantiate([rule_cls], config)
        return run(rules, [trace])


@dataclass
class CaseFile:
    """A parsed case file."""

    path: Path
    rule: str
    options: dict[str, Any]
    cases: dict[str, dict[str, Any]]


def load_case_file(path: Path) -> CaseFile:
    """Read ``fixtures/rules/<CODE>.yaml``; relative ``trace:`` paths resolve from the file."""
    doc = yaml.safe_load(path.read_text())
    cases = doc.get("cases") or {}
    for case in cases.values():
        if "trace" in case:
            case["trace"] = str((path.parent / case["trace"]).resolve())
    return CaseFile(path=path, rule=str(doc["rule"]), options=doc.get("options") or {}, cases=cases)


def check_case(rule_cls: type[Rule], case: dict[str, Any], options: dict[str, Any] | None = None) -> RunResult:
    """Run a case and assert its ``expect``; return the result for further checks."""
    result = run_case(rule_cls, case, options)
    expect = case.get("expect", [])
    assert not result.errors, f"rule raised: {result.errors}"
    if expect == "skipped":
        assert result.skipped, "rule was expected to be skipped"
        return result
    assert not result.skipped, f"rule was skipped: {result.skipped}"
    got = result.findings
    summary = [(f.severity.value, f.message) for f in got]
    assert len(got) == len(expect), f"expected {len(expect)} findings, got {len(got)}: {summary}"
    for f, want in zip(got, expect, strict=True):
        if "severity" in want:
            assert f.severity.value == want["severity"], (
                f"severity {f.severity.value} != {want['severity']}: {f.message}"
            )
        if "message_contains" in want:
            assert want["message_contains"] in f.message, f"{want['message_contains']!r} not in {f.message!r}"
        if "recommendation_contains" in want:
            assert want["recommendation_contains"] in f.recommendation, f.recommendation
        if "impact_min_us" in want:
            assert f.impact is not None and f.impact.time_us >= want["impact_min_us"], f.impact
        if "impact_max_us" in want:
            assert f.impact is not None and f.impact.time_us <= want["impact_max_us"], f.impact
        if "location_line" in want:
            assert f.location is not None and f.location.line == want["location_line"], f.location
        if "evidence_names" in want:
            names = [e.name for e in f.evidence]
            for n in want["evidence_names"]:
                assert n in names, f"{n!r} not in evidence {names}"
        for key, value in (want.get("data") or {}).items():
            assert f.data.get(key) == value, f"data[{key}] = {f.data.get(key)!r} != {value!r}"
    return result
