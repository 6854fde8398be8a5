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

Several events inside one step (a storm of small kernels, a per-parameter optimizer loop) are a
*block*: an entry of ``events`` with ``each`` and its own ``events``, copied ``count`` times,
``period_us`` apart::

        events:
          - each: {count: 100, period_us: 9.5}
            events:
              - {cat: launch, name: cudaLaunchKernel, ts: 5.5, dur: 8, corr: 1, ext: 1}
              - {cat: kernel, name: tiny, ts: 12.5, dur: 2, corr: 1, ext: 1}

Copy ``k`` (from 0) shifts ``ts`` by ``k * period_us`` and adds ``k * N`` to every ``corr`` and
``ext``, where N is the largest id in the block, so the copies' ids are ``1..count*N``, distinct.
Keep them under 100,000 (``repeat`` adds multiples of 100,000 to the ids of each copy of the case).

A cross-rank rule (``RankRule``) reads several ranks' real traces at once: a case gives them as
``ranks:``, a directory or a list of traces (relative to the YAML file), each entry a path or
``{path: ..., host: ...}`` (the host as if the trace's top-level ``host_name`` said so: ranks on
different hosts have different clocks, which is how a clock-alignment case puts two ranks of one
machine on two hosts)::

      straggler:
        ranks: ../traces/multirank/input_delay_2r           # every *.json(.gz) in it, sorted
        expect: [{severity: high, message_contains: "rank 1"}]
      two_hosts:
        ranks: [../external/hta/sampled_rank-0.json.gz, {path: ../external/hta/sampled_rank-1.json.gz, host: node1}]
        expect: []

Each trace goes through the production map step (``pipeline.rank_summary``) and the summaries are
combined (``ranks/combine.py``) before the rule runs alone on the ``RankRun``; fewer than two
traces: the rule is skipped (it needs ``multi_rank``). ``ranks`` excludes ``trace`` and ``events``.

Every key is checked: a key not listed here (``mesage_contains``) is an error naming it and the
keys allowed there, so a misspelt expectation cannot pass by being ignored.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import gzip
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from traceadvisor.config import Config
from traceadvisor.engine import claimed_by
from traceadvisor.engine.registry import RuleSource, discover
from traceadvisor.engine.rule import AnyRule, Capability, RankRule
from traceadvisor.engine.runner import RunResult, instantiate, run, run_rank_rules
from traceadvisor.pipeline import capabilities, rank_summary
from traceadvisor.ranks.combine import combine
from traceadvisor.ranks.summary import RankSummary
from traceadvisor.report.model import Skipped
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
_KERNEL_ARGS = ("registers per thread", "shared memory", "blocks per SM", "est. achieved occupancy %")
# The keys each part of a case may hold (``check_keys``): anything else is a typo to report.
FILE_KEYS = frozenset({"rule", "options", "cases"})
CASE_KEYS = frozenset(
    {"steps", "gpu_steps", "device", "flags", "repeat", "events", "expect", "trace", "options", "ranks"}
)
RANK_ENTRY_KEYS = frozenset({"path", "host"})
TRACE_SUFFIXES = (".json", ".json.gz")
EVENT_KEYS = frozenset(
    {"cat", "name", "ts", "dur", "tid", "stream", "device", "corr", "ext", "dims", "types", "concrete", "grid"}
    | {"block", "bytes", "seq", "parent", "allocated", "reserved", "args", *_KERNEL_ARGS}
)
BLOCK_KEYS = frozenset({"each", "events"})
REPEAT_KEYS = frozenset({"count", "period_us"})
EXPECT_KEYS = frozenset(
    {"severity", "message_contains", "recommendation_contains", "impact_min_us", "impact_max_us"}
    | {"location_line", "evidence_names", "data"}
)
_ID_STRIDE = 100_000  # ids added per copy of a repeated case


class CaseError(ValueError):
    """A case file or case that does not follow the format (an unknown key, a malformed block)."""


def check_keys(value: object, allowed: frozenset[str], where: str) -> dict[str, Any]:
    """``value`` as a mapping whose keys are all in ``allowed``; else ``CaseError`` naming the key."""
    if not isinstance(value, dict):
        raise CaseError(f"{where}: expected a mapping, got {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise CaseError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
    return value


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
        for key in _KERNEL_ARGS:
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


def expand_case(case: dict[str, Any], where: str = "case") -> dict[str, Any]:
    """A compact case to a Kineto trace document (``CaseError`` on a key the format lacks)."""
    check_keys(case, CASE_KEYS, where)
    repeat = check_keys(case.get("repeat") or {"count": 1, "period_us": 0}, REPEAT_KEYS, f"{where}: repeat")
    count, period = int(repeat.get("count", 1)), float(repeat.get("period_us", 0))
    body = flatten_events(case.get("events", []), f"{where}: events")
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
        for ev in body:
            events.append(expand_event(_shifted(ev, shift, k * _ID_STRIDE), py_ids))
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if "device" in case:
        dev = {"id": 0, **case["device"]}
        doc["deviceProperties"] = [dev]
    for flag in case.get("flags", []):
        doc[flag] = 1
    doc["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
    return doc


def flatten_events(entries: list[Any], where: str) -> list[dict[str, Any]]:
    """The case's events with every block (``each`` + ``events``) copied out, in order."""
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(entries):
        here = f"{where}[{i}]"
        if isinstance(entry, dict) and "each" in entry:
            check_keys(entry, BLOCK_KEYS, here)
            each = check_keys(entry["each"], REPEAT_KEYS, f"{here}: each")
            inner = flatten_events(entry.get("events") or [], f"{here}: events")
            stride = max((int(e[k]) for e in inner for k in ("corr", "ext") if k in e), default=0)
            for k in range(int(each.get("count", 1))):
                out.extend(_shifted(e, k * float(each.get("period_us", 0)), k * stride) for e in inner)
        else:
            out.append(copy.deepcopy(check_keys(entry, EVENT_KEYS, here)))
    return out


def _shifted(ev: dict[str, Any], dt_us: float, id_offset: int) -> dict[str, Any]:
    """A copy of ``ev`` ``dt_us`` later, its correlation and External ids ``id_offset`` higher."""
    e = copy.deepcopy(ev)
    e["ts"] = e.get("ts", 0) + dt_us
    for key in ("corr", "ext"):
        if id_offset and key in e:
            e[key] = e[key] + id_offset
    return e


def write_case_trace(case: dict[str, Any], folder: Path, name: str = "case") -> Path:
    """Expand a case and write it as ``.json.gz`` into ``folder``."""
    path = folder / f"{name}.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(expand_case(case), fh)
    return path


def find_rule(key: str, rules_dirs: list[Path] | None = None) -> type[AnyRule]:
    """A discovered rule by code or name."""
    sources: list[RuleSource] = discover(rules_dirs)
    for s in sources:
        if key in (s.cls.code, s.cls.name):
            return s.cls
    raise KeyError(f"no rule {key!r}")


def run_case(rule_cls: type[AnyRule], case: dict[str, Any], options: dict[str, Any] | None = None) -> RunResult:
    """Run one rule alone on one case, through the real loader and runner."""
    if "ranks" in case:
        return run_ranks_case(rule_cls, case, options)
    trace_path = case.get("trace")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(trace_path) if trace_path else write_case_trace(case, Path(tmp))
        trace = load_file(path)
        config = Config(rule_options={rule_cls.code: {**(options or {}), **case.get("options", {})}})
        rules = instantiate([rule_cls], config, _claims_with(rule_cls))
        return run(rules, [trace], capabilities=capabilities([trace]))


def rank_entries(spec: object, base: Path | None = None, where: str = "ranks") -> list[tuple[Path, str | None]]:
    """A case's ``ranks:`` as (trace path, host override or None), paths resolved from ``base``: a
    directory (its ``*.json``/``*.json.gz``, sorted) or a list of paths / ``{path, host}``."""

    def resolve(p: object) -> Path:
        path = Path(str(p))
        return (base / path).resolve() if base is not None and not path.is_absolute() else path

    if isinstance(spec, str):
        folder = resolve(spec)
        if not folder.is_dir():
            raise CaseError(f"{where}: {folder} is not a directory (give a directory or a list of traces)")
        return [(p, None) for p in sorted(folder.iterdir()) if p.name.endswith(TRACE_SUFFIXES)]
    if not isinstance(spec, list):
        raise CaseError(f"{where}: a directory or a list of traces, not {type(spec).__name__}")
    out: list[tuple[Path, str | None]] = []
    for i, entry in enumerate(spec):
        if isinstance(entry, dict):
            e = check_keys(entry, RANK_ENTRY_KEYS, f"{where}[{i}]")
            if "path" not in e:
                raise CaseError(f"{where}[{i}]: missing key 'path'")
            out.append((resolve(e["path"]), str(e["host"]) if "host" in e else None))
        else:
            out.append((resolve(entry), None))
    return out


def run_ranks_case(rule_cls: type[AnyRule], case: dict[str, Any], options: dict[str, Any] | None = None) -> RunResult:
    """Run one cross-rank rule alone on the ``RankRun`` combined from a case's ``ranks:`` traces."""
    both = sorted({"trace", "events", "steps"} & set(case))
    if both:
        raise CaseError(f"ranks: a case gives ranks or one trace, not both (also has {', '.join(both)})")
    if not (isinstance(rule_cls, type) and issubclass(rule_cls, RankRule)):
        raise CaseError(f"ranks: {rule_cls.code} is not a cross-rank rule (RankRule)")
    entries = rank_entries(case["ranks"])
    config = Config(rule_options={rule_cls.code: {**(options or {}), **case.get("options", {})}})
    rules = instantiate([rule_cls], config, _claims_with(rule_cls))
    if len(entries) < 2:
        reason = f"needs {Capability.multi_rank.value}: {Capability.multi_rank.how_to_capture}"
        return RunResult(skipped=[Skipped(rule_cls.name, rule_cls.code, "ranks", reason)])
    summaries = [_summary(str(p), p.stat().st_size, p.stat().st_mtime_ns, host) for p, host in entries]
    return run_rank_rules(rules, combine(summaries))


@functools.lru_cache(maxsize=64)
def _summary(path: str, size: int, mtime_ns: int, host: str | None) -> RankSummary:
    """One rank's summary (the production map step), kept for the other cases on the same trace:
    a summary is immutable, and (size, mtime) key it as the on-disk summary cache does."""
    summary = rank_summary(path)
    return summary if host is None else dataclasses.replace(summary, host=host)


def _claims_with(rule_cls: type[AnyRule]) -> dict[str, str | None]:
    """The idle causes' claimants among the built-in rules and ``rule_cls`` (in place of a built-in
    rule of its code), as a run that loaded them would see them."""
    others = [s.cls for s in discover(include_entry_points=False) if s.cls.code != rule_cls.code]
    return claimed_by([*others, rule_cls])


@dataclass
class CaseFile:
    """A parsed case file."""

    path: Path
    rule: str
    options: dict[str, Any]
    cases: dict[str, dict[str, Any]]


def load_case_file(path: Path) -> CaseFile:
    """Read ``fixtures/rules/<CODE>.yaml``; relative ``trace:`` paths resolve from the file."""
    doc = check_keys(yaml.safe_load(path.read_text()), FILE_KEYS, str(path))
    cases = doc.get("cases") or {}
    for name, case in cases.items():
        check_keys(case, CASE_KEYS, f"{path}: case {name}")
        for i, want in enumerate(case.get("expect") if isinstance(case.get("expect"), list) else []):
            check_keys(want, EXPECT_KEYS, f"{path}: case {name}: expect[{i}]")
        if "trace" in case:
            case["trace"] = str((path.parent / case["trace"]).resolve())
        if "ranks" in case:
            entries = rank_entries(case["ranks"], path.parent, f"{path}: case {name}: ranks")
            case["ranks"] = [{"path": str(p), **({"host": h} if h is not None else {})} for p, h in entries]
    return CaseFile(path=path, rule=str(doc["rule"]), options=doc.get("options") or {}, cases=cases)


def check_case(rule_cls: type[AnyRule], case: dict[str, Any], options: dict[str, Any] | None = None) -> RunResult:
    """Run a case and assert its ``expect``; return the result for further checks."""
    expect = case.get("expect", [])
    if expect != "skipped":
        if not isinstance(expect, list):
            raise CaseError(f"expect: a list of findings, [] or 'skipped', not {expect!r}")
        for i, want in enumerate(expect):
            check_keys(want, EXPECT_KEYS, f"expect[{i}]")
    result = run_case(rule_cls, case, options)
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
