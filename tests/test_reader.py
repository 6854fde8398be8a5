"""The streaming reader: batches cut at ``}, {`` boundaries must decode exactly what a whole-file
JSON parse gives, whatever the block size, the layout and the text inside strings."""

from __future__ import annotations

import gzip
import json
import math
import random
import sys
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


# -- limits of the reader's own: nesting depth, event size; gzip checksums ------------------------
TRAIN = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "train_step.json.gz"


def _op(name: str, extra: str = "") -> str:
    return f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 1, "ts": 5, "dur": 1{extra}}}'


def _nested(levels: int) -> str:
    """``"args": {"x": [[...]]}``: with the event and args, ``levels`` levels in all."""
    return ', "args": {"x": ' + "[" * (levels - 2) + "]" * (levels - 2) + "}"


@pytest.mark.parametrize("recursion_limit", [None, 50_000])
@pytest.mark.parametrize("decoder", ["1", "0"])
def test_events_nested_64_deep_are_skipped_on_any_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decoder: str, recursion_limit: int | None
) -> None:
    """The reader's own limit, as the native decoder's: 63 levels are read, 64 skipped with a
    warning; 5000 too, which msgspec decodes where the interpreter allows deeper recursion (its
    limit follows sys.getrecursionlimit() on 3.11, the C stack budget on 3.12)."""
    monkeypatch.setenv("TRACEADVISOR_NATIVE", decoder)
    body = ", ".join([_op("a"), _op("deep63", _nested(63)), _op("deep64", _nested(64)), _op("deep5000", _nested(5000))])
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [' + body + "]}")
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(recursion_limit or before)
    try:
        trace = load_file(path)
    finally:
        sys.setrecursionlimit(before)
    assert sorted(set(trace.host["name"].astype(str))) == ["a", "deep63"]
    assert [w for w in trace.meta.warnings if "skipped 2 events nested 64 levels deep" in w]
    assert reader._nesting(b"[" + _op("x", _nested(64)).encode() + b"]") == 1 + 64  # the array around it
    assert reader._nesting(b'["[[[", {"a": "\\\\"}, "\\"[["]') == 2  # brackets in strings do not count


def _with_big_event(size: int) -> bytes:
    """train_step with a kernel of exactly ``size`` bytes after its 100th event (a long name with
    escapes, brackets and a false boundary), one event a line."""
    doc = json.loads(gzip.decompress(TRAIN.read_bytes()))
    head = '{"ph": "X", "cat": "kernel", "name": "'
    tail = '", "pid": 0, "tid": 7, "ts": 5.5, "dur": 1, "args": {"stream": 7, "correlation": 1}}'
    unit = "x" * 4000 + r"\"y\\[{"  # JSON text: escaped quotes and backslashes, brackets
    fill = size - len(head) - len(tail)
    name = (unit * (fill // len(unit) + 1))[:fill]
    name = name[: fill // 3] + "}, {" + name[fill // 3 + 4 :]  # a false event boundary, too
    while (len(name) - len(name.rstrip("\\"))) % 2:  # an escape cut in two at the end
        name = name[:-1] + "x"
    big = head + name + tail
    assert len(big.encode()) == size
    events = [json.dumps(e) for e in doc["traceEvents"]]
    events.insert(100, big)
    return ('{"traceEvents": [\n  ' + ",\n  ".join(events) + '\n], "traceName": "t"}').encode()


@pytest.mark.parametrize("decoder", ["1", "0"])
def test_an_event_over_16_mib_is_skipped_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decoder: str
) -> None:
    """Exactly at the limit it is read; one byte more and it is skipped, by both decoders alike
    (the native one refuses it; the Python path skips it without holding it)."""
    monkeypatch.setenv("TRACEADVISOR_NATIVE", decoder)
    want = len(load_file(TRAIN).kernels)
    for size, kept in ((reader.MAX_EVENT_BYTES, 1), (reader.MAX_EVENT_BYTES + 1, 0)):
        data = _with_big_event(size)
        for path in (tmp_path / "big.json", tmp_path / "big.json.gz"):
            path.write_bytes(gzip.compress(data, 1) if path.suffix == ".gz" else data)
            trace = load_file(path)
            assert len(trace.kernels) == want + kept, (size, path.name)
            skipped = [w for w in trace.meta.warnings if "larger than 16 MiB" in w]
            assert trace.meta.warnings == ([] if kept else skipped) and len(skipped) == 1 - kept
            assert trace.meta.top_keys == ["traceName"]  # the tail after the events is still read


@pytest.mark.parametrize("decoder", ["1", "0"])
@pytest.mark.parametrize("reads", ["one read", "many reads"])
@pytest.mark.parametrize("damage", ["crc", "length", "no trailer"])
def test_a_damaged_gzip_trailer_keeps_every_event_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decoder: str, reads: str, damage: str
) -> None:
    """The trailer (CRC-32, length) comes after all the data: every event was inflated and read,
    only the check failed; on a file read at once (a small trace) and in many reads (a large one)."""
    monkeypatch.setenv("TRACEADVISOR_NATIVE", decoder)
    if reads == "many reads":
        monkeypatch.setattr(reader, "_READ_BYTES", 4096)
    data = bytearray(TRAIN.read_bytes())
    if damage == "no trailer":
        data = data[:-8]
    else:
        data[-8 if damage == "crc" else -1] ^= 0x5A
    path = tmp_path / "t.json.gz"
    path.write_bytes(bytes(data))
    want, got = load_file(TRAIN), load_file(path)
    assert len(got.kernels) == len(want.kernels) and len(got.host) == len(want.host)
    assert not got.meta.truncated
    inflated = len(gzip.decompress(TRAIN.read_bytes()))
    assert len(got.meta.warnings) == 1, got.meta.warnings
    warning = got.meta.warnings[0]
    assert f"all {inflated} inflated bytes were read and analysed" in warning
    assert ("could not be checked" if damage == "no trailer" else "only the check failed") in warning


@pytest.mark.parametrize("decoder", ["1", "0"])
def test_deflate_data_that_stops_inflating_keeps_the_events_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decoder: str
) -> None:
    """Unlike a bad checksum, damage zlib stops at ("invalid block type" here) loses the rest:
    the events inflated before it are analysed, and the warning says the trace was cut there."""
    monkeypatch.setenv("TRACEADVISOR_NATIVE", decoder)
    data = TRAIN.read_bytes()
    at = int(len(data) * 0.7)
    path = tmp_path / "t.json.gz"
    path.write_bytes(data[:at] + b"\xff" * 16 + data[at + 16 :])
    trace = load_file(path)
    full = load_file(TRAIN)
    assert trace.meta.truncated and 0 < len(trace.host) and len(trace.gpu) < len(full.gpu)
    assert "gzip stream is corrupt after" in trace.meta.warnings[0]
    assert "analysed the events before it" in trace.meta.warnings[0]


def test_ill_typed_values_are_counted_in_both_halves_of_a_split_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python path's second process reads half the file: its dropped values reach the warnings."""
    from traceadvisor.trace.parallel import _read_serial, _read_split

    doc = json.loads(gzip.decompress(TRAIN.read_bytes()))
    events = doc["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    for e in (kernels[0], kernels[-1]):  # one in each half
        e["args"]["stream"] = [7]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    serial = _read_serial(path, 1 << 30)[1].warnings
    split = _read_split(path, 1 << 30, None)
    assert split is not None
    assert serial == split[1].warnings == ["ill-typed 'stream' in 2 kernel events (a list): read as missing"]
