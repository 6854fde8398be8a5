"""The streaming reader: batches cut at ``}, {`` boundaries must decode exactly what a whole-file
JSON parse gives, whatever the block size, the layout and the text inside strings."""

from __future__ import annotations

import gzip
import json
import math
import random
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from traceadvisor.trace import reader
from traceadvisor.trace.columns import KERNEL
from traceadvisor.trace.load import load_file
from traceadvisor.trace.schema import Event

BLOCKS = [97, 1000, 4096, None]  # None: the default block size

# Text that looks like structure but sits inside strings.
TRICKY_NAMES = [
    "aten::mm",
    "a},{b",
    "x}, {y",
    'q"} {"ph": "X"}, {"',
    "}, {",
    "},\n  {",
    '] , "traceName": "fake"}',
    'void f<float>(int, {1, 2}) "quoted"',
    "back\\slash}, {\\",
    "unicode ☃ 😀 \u00e9",
    "tab\there",
    '"traceEvents": [',
]


def _events(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "thread 1 (python)"}},
    ]
    ts = 4458676522690.655
    for i in range(n):
        ts = round(ts + rnd.randint(1, 5000) / 1000, 3)
        name = TRICKY_NAMES[i % len(TRICKY_NAMES)]
        dur = round(rnd.randint(0, 900000) / 1000, 3)
        out.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": dur,
                "args": {"External id": i, "Input Dims": [[2, 3], []], "stack": [{"f": "a}, {"}, {"f": "b"}]},
            }
        )
        out.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": round(ts + 0.5, 3),
                "dur": 3.25,
                "args": {"External id": i, "correlation": 1000 + i, "cbid": 211},
            }
        )
        out.append(
            {
                "ph": "X",
                "cat": "kernel" if i % 7 else "gpu_memcpy",
                "name": f"kernel_{i % 13} {name}",
                "pid": 0,
                "tid": 7,
                "ts": round(ts + 10.125, 3),
                "dur": dur / 2,
                "args": {
                    "device": 0,
                    "stream": 7,
                    "correlation": 1000 + i,
                    "grid": [i % 5 + 1, 1, 1],
                    "block": [128, 1, 1],
                    "occupancy": {"est": 50.0, "limits": [{"by": "regs"}, {"by": "smem"}]},
                    "est. achieved occupancy %": 50,
                },
            }
        )
        if i % 5 == 0:
            out.append({"ph": "s", "id": 1000 + i, "pid": 1, "tid": 1, "ts": ts, "cat": "ac2g", "name": "ac2g"})
            out.append(
                {"ph": "f", "id": 1000 + i, "pid": 0, "tid": 7, "ts": ts + 10, "cat": "ac2g", "name": "ac2g", "bp": "e"}
            )
    out.append({"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": ts + 1e6})
    return out


HEAD = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU}, {x"}, {"id": 1, "name": "GPU"}]}
TAIL = {
    "distributedInfo": {
        "backend": "nccl",
        "rank": 3,
        "world_size": 8,
        "pg_config": [{"pg_name": "0", "ranks": [0, 1]}, {"pg_name": "1", "ranks": [2, 3]}],
    },
    "INFO": ["log line ] with }, { and ]", "CuptiActivityProfiler.cpp:333] Record counts"],
    "traceName": "/tmp/tmpu3g3sevh.json",
    "displayTimeUnit": "ms",
    "baseTimeNanoseconds": 1711964646000000000,
}


def kineto_text(head: dict[str, Any], events: list[dict[str, Any]], tail: dict[str, Any]) -> str:
    """Kineto's pretty layout: one key per line at the top, each event as ``  {\\n    ...\\n  }``."""
    lines = ["{"]
    lines += [f'  "{k}": {json.dumps(v, ensure_ascii=False)},' for k, v in head.items()]
    lines.append('  "traceEvents": [')
    lines.append(",\n".join("  {\n    " + json.dumps(e, ensure_ascii=False)[1:-1] + "\n  }" for e in events))
    lines.append("  ]" + ("," if tail else ""))
    lines.append(",\n".join(f'  "{k}": {json.dumps(v)}' for k, v in tail.items()))
    lines.append("}")
    return "\n".join(lines)


def _write_synthetic(tmp: Path, kind: str) -> Path:
    events = _events(300)
    if kind == "minified":
        doc = {**HEAD, "traceEvents": events, **TAIL}
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    elif kind == "pretty":
        text = kineto_text(HEAD, events, TAIL)
    elif kind == "legacy":
        text = json.dumps(events)
    elif kind == "indent":
        text = json.dumps({**HEAD, "traceEvents": events, **TAIL}, indent=4)
    else:
        raise AssertionError(kind)
    path = tmp / f"{kind}.json"
    path.write_text(text, encoding="utf-8")
    return path


def _load_json(path: Path) -> Any:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data)


def _key_of_dict(e: dict[str, Any]) -> tuple[Any, ...]:
    args = e.get("args")
    corr = args.get("correlation") if isinstance(args, dict) else None
    return (e.get("ph"), e.get("cat"), e.get("name"), e.get("ts"), e.get("dur"), corr)


def _key_of_event(e: Event) -> tuple[Any, ...]:
    return (e.ph, e.cat, e.name, e.ts, e.dur, e.args.correlation if e.args else None)


def read_all(path: Path) -> tuple[list[Event], reader.ReadResult]:
    batches, result = reader.read_events(path)
    events = [e for batch in batches for e in batch]
    return events, result


def _assert_same_events(events: list[Event], expected: list[dict[str, Any]]) -> None:
    assert len(events) == len(expected)
    by_cat = Counter(e.cat for e in events)
    assert by_cat == Counter(e.get("cat") for e in expected)
    for cat in by_cat:
        got = math.fsum(e.dur for e in events if e.cat == cat and isinstance(e.dur, (int, float)))
        want = math.fsum(e["dur"] for e in expected if e.get("cat") == cat and isinstance(e.get("dur"), (int, float)))
        assert got == want, cat
    assert Counter(map(_key_of_event, events)) == Counter(map(_key_of_dict, expected))


def _real(external: Path, name: str) -> Path:
    return external / "hta" / name


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("name", ["nccl_data.json.gz", "mi250_minitoy_train_ROCm6_2_kineto.json.gz"])
def test_real_trace_split_matches_json_loads(
    external_traces: Path, name: str, block: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block is not None:
        monkeypatch.setattr(reader, "BLOCK_BYTES", block)
    path = _real(external_traces, name)
    doc = _load_json(path)
    events, result = read_all(path)
    _assert_same_events(events, doc["traceEvents"])
    assert result.top == {k: v for k, v in doc.items() if k != "traceEvents"}
    assert result.warnings == [] and not result.truncated and result.dropped_events == 0


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("kind", ["minified", "pretty", "indent", "legacy"])
def test_synthetic_split_matches_json_loads(
    tmp_path: Path, kind: str, block: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write_synthetic(tmp_path, kind)
    if block is not None:
        monkeypatch.setattr(reader, "BLOCK_BYTES", block)
    doc = _load_json(path)
    events, result = read_all(path)
    expected = doc if kind == "legacy" else doc["traceEvents"]
    _assert_same_events(events, expected)
    assert result.warnings == [] and not result.truncated and result.dropped_events == 0
    if kind != "legacy":
        assert result.top == {k: v for k, v in doc.items() if k != "traceEvents"}
        assert result.top["distributedInfo"]["rank"] == 3
        assert result.top["traceName"] == "/tmp/tmpu3g3sevh.json"


def test_gzip_of_synthetic_trace_matches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _write_synthetic(tmp_path, "pretty")
    gz = tmp_path / "pretty.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    monkeypatch.setattr(reader, "BLOCK_BYTES", 1000)
    events, result = read_all(gz)
    _assert_same_events(events, _load_json(plain)["traceEvents"])
    assert result.warnings == []


def test_distributed_info_after_events_sets_rank(tmp_path: Path) -> None:
    for kind in ("minified", "pretty"):
        trace = load_file(_write_synthetic(tmp_path, kind))
        assert trace.meta.rank == 3 and trace.meta.world_size == 8
        assert trace.meta.base_time_ns == 1711964646000000000
        assert trace.meta.warnings == []


def test_distributed_info_of_real_trace(external_traces: Path) -> None:
    trace = load_file(_real(external_traces, "nccl_data.json.gz"))
    assert trace.meta.rank == 0 and trace.meta.world_size == 2


def test_kernel_timestamps_keep_nanoseconds_exactly(external_traces: Path) -> None:
    path = _real(external_traces, "nccl_data.json.gz")
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    assert any(e["ts"] != int(e["ts"]) for e in kernels)  # fractional microseconds
    want_ts = sorted(int(Decimal(e["ts"]) * 1000) for e in kernels)
    want_end = sorted(int(Decimal(e["ts"]) * 1000 + Decimal(e["dur"]) * 1000) for e in kernels)
    gpu = load_file(path).gpu
    k = gpu[gpu["kind"] == KERNEL]
    assert sorted(k["ts_ns"].tolist()) == want_ts
    assert sorted(k["end_ns"].tolist()) == want_end


# -- damaged events among good ones ----------------------------------------------------------------
DAMAGE = {
    # name: (replacement of the "dur" value text of one event, what the event becomes)
    "nan": ('"dur": NaN', "repaired"),
    "infinity": ('"dur": -Infinity', "repaired"),
    "huge exponent": ('"dur": 1e400', "kept"),
    "unescaped quote": ('"dur": 1.5, "name": "say "hi" twice"', "repaired"),
    "control character": ('"dur": 1.5, "name": "line\nbreak"', "repaired"),
    "bad utf-8": ('"dur": 1.5, "name": "\udcff\udcfe"', "repaired"),
    "lone surrogate": ('"dur": 1.5, "name": "\\ud83d x"', "kept"),
    "args not an object": ('"dur": 1.5, "args": [1, 2]', "kept"),
    "deep nesting": ('"dur": 1.5, "deep": ' + "[" * 5000 + "]" * 5000, "skipped"),
    "broken syntax": ('"dur": 1.5 1.5', "skipped"),
}


@pytest.mark.parametrize("block", [97, 4096, None])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_event_is_contained(
    tmp_path: Path, damage: str, block: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _events(60)
    victim = 50  # well inside the array, not in the first or last batch of the small blocks
    text = kineto_text(HEAD, events, TAIL)
    lines = text.split("\n")
    marker = json.dumps(events[victim], ensure_ascii=False)[1:-1]
    idx = next(i for i, line in enumerate(lines) if line == "    " + marker)
    dur_text = f'"dur": {json.dumps(events[victim]["dur"])}'
    replacement, outcome = DAMAGE[damage]
    assert dur_text in lines[idx]
    lines[idx] = lines[idx].replace(dur_text, replacement)
    path = tmp_path / "damaged.json"
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape"))
    if block is not None:
        monkeypatch.setattr(reader, "BLOCK_BYTES", block)
    got, result = read_all(path)
    others = events[:victim] + events[victim + 1 :]
    got_keys = Counter(map(_key_of_event, got))
    for e in others:  # every other event is read exactly as written
        assert got_keys[_key_of_dict(e)] >= 1, e
    assert len(got) == len(others) + (0 if outcome == "skipped" else 1)
    assert result.top["distributedInfo"]["rank"] == 3  # the tail is still read
    assert not result.truncated
    if outcome == "repaired":
        assert result.repaired_events == 1 and any("not valid JSON" in w for w in result.warnings)
    elif outcome == "skipped":
        assert result.skipped_events + result.deep_events == 1 and result.warnings


def test_cut_off_trace_keeps_every_complete_event(external_traces: Path, tmp_path: Path) -> None:
    data = gzip.decompress(_real(external_traces, "nccl_data.json.gz").read_bytes())
    events = json.loads(data)["traceEvents"]
    start = data.index(b'"traceEvents"')
    path = tmp_path / "cut.json"
    for frac in (0.3, 0.77):
        cut = start + int((len(data) - start) * frac)
        path.write_bytes(data[:cut])
        got, result = read_all(path)
        assert result.truncated and len(result.warnings) == 1 and "cut off" in result.warnings[0]
        # Exactly the events that ended before the cut (kineto closes each with "\n  }"), in order.
        complete = data[start:cut].count(b"\n  }")
        assert 0 < complete < len(events) and len(got) == complete
        assert list(map(_key_of_event, got)) == list(map(_key_of_dict, events[:complete]))
