"""The native decoder (trace/_kineto.c via trace/native.py) gives exactly what the Python path gives.

Every real trace (fixtures and the shared external traces) is read both ways and compared table by
table, column by column, names included. What the native decoder must refuse (damage, odd types)
is checked to come back as None, so that the Python path reads it, and the loaded trace is the
same with and without the native decoder. ``make test`` builds the extension and sets
``TRACEADVISOR_REQUIRE_NATIVE=1``, so these tests fail instead of skipping when it is missing.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fixture_paths import external_traces

from traceadvisor.errors import TraceError
from traceadvisor.trace import native
from traceadvisor.trace.columns import ColumnSink
from traceadvisor.trace.load import load_file
from traceadvisor.trace.parallel import _read_serial
from traceadvisor.trace.reader import DEFAULT_MAX_INFLATED_BYTES, ReadResult

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures" / "traces").glob("*.json.gz"))
EXTERNAL = external_traces()
MAX = DEFAULT_MAX_INFLATED_BYTES

if not native.available():
    if os.environ.get("TRACEADVISOR_REQUIRE_NATIVE") == "1":
        raise RuntimeError("the native decoder is not built (traceadvisor/trace/_kineto.c); see hatch_build.py")
    pytestmark = pytest.mark.skip(reason="native decoder not built on this machine")


def _tables(sink: ColumnSink) -> dict[str, pd.DataFrame]:
    return {family: sink.table(family) for family in list(sink.parts)}


def _same_column(a: pd.Series, b: pd.Series, where: str) -> None:
    if isinstance(a.dtype, pd.CategoricalDtype):
        assert list(a.cat.categories) == list(b.cat.categories), where
        assert np.array_equal(a.cat.codes.to_numpy(), b.cat.codes.to_numpy()), where
        return
    x, y = a.to_numpy(), b.to_numpy()
    assert x.dtype == y.dtype, where
    if x.dtype == object:
        same = [u == v or (u is None and v is None) or (u != u and v != v) for u, v in zip(x, y, strict=True)]
        assert all(same), f"{where}: first difference at row {same.index(False)}"
    elif x.dtype.kind == "f":
        assert np.array_equal(x, y, equal_nan=True), where
    else:
        diff = np.flatnonzero(x != y)
        if where.endswith("_ns") and diff.size:
            # Times: the native decoder reads a three-decimal time exactly from its digits; the Python
            # path goes through a float64, which is off by up to half an ulp of the µs value (a few ns
            # above 2^33 µs). Only that rounding may differ.
            us = np.abs(y[diff].astype(np.float64)) / 1000.0
            allowed = 1000.0 * np.spacing(us) + 1.0
            off = np.abs(x[diff].astype(np.float64) - y[diff].astype(np.float64))
            assert (off <= allowed).all(), f"{where}: {x[diff[0]]} vs {y[diff[0]]} beyond float64 rounding"
            assert (us >= 2.0**32).all(), f"{where}: {x[diff[0]]} vs {y[diff[0]]} differ below 2^32 µs"
            return
        assert diff.size == 0, f"{where}: {diff.size} rows differ, first {x[diff[0]]} vs {y[diff[0]]}"


def assert_same(got: tuple[ColumnSink, ReadResult], want: tuple[ColumnSink, ReadResult]) -> dict[str, pd.DataFrame]:
    """Assert both reads are the same; returns the tables of ``got`` (building a table consumes it)."""
    (s1, r1), (s2, r2) = got, want
    assert r1.top == r2.top
    assert r1.warnings == r2.warnings
    assert r1.truncated == r2.truncated
    assert [(e.ph, e.name) for e in s1.metadata] == [(e.ph, e.name) for e in s2.metadata]
    assert s1.other_categories == s2.other_categories
    t1, t2 = _tables(s1), _tables(s2)
    assert sorted(t1) == sorted(t2)
    assert s1.warnings() == s2.warnings()  # times dropped or clamped, per table
    for family in t1:
        a, b = t1[family], t2[family]
        assert list(a.columns) == list(b.columns), family
        assert len(a) == len(b), family
        for col in a.columns:
            _same_column(a[col], b[col], f"{family}.{col}")
    return t1


@pytest.mark.parametrize("path", FIXTURES + EXTERNAL, ids=lambda p: p.name)
def test_real_traces_read_the_same_natively(path: Path) -> None:
    got = native.read_native(path, MAX)
    assert got is not None, "the native decoder refused a real trace"
    assert_same(got, _read_serial(path, MAX))


def _plain(src: Path, dst: Path, copies: int = 1) -> Path:
    """An uncompressed copy of ``src``; ``copies`` > 1 repeats its events (a larger file)."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["traceEvents"] = doc["traceEvents"] * copies
    dst.write_text(json.dumps(doc, indent=None))
    return dst


@pytest.fixture
def byte_source() -> str:
    """The one way an uncompressed file is read: pread (never a memory map, which dies of SIGBUS
    when another process truncates the file; see native._Pread)."""
    return "pread"


def test_uncompressed_trace_split_between_two_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, byte_source: str
) -> None:
    path = _plain(ROOT / "fixtures" / "traces" / "planted_launch_storm.json.gz", tmp_path / "t.json", copies=3)
    seen: list[int] = []
    candidate = native._candidate

    def spy(source: Any, target: int) -> int | None:
        at = candidate(source, target)
        seen.append(-1 if at is None else at)
        return at

    monkeypatch.setattr(native, "SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(native, "SLICE_BYTES", 1 << 16)  # many slices, events cut between them
    monkeypatch.setattr(native, "_candidate", spy)
    got = native.read_native(path, MAX)
    assert seen and seen[0] > 0, "the file was not split"
    assert got is not None
    assert_same(got, _read_serial(path, MAX))


def test_split_candidate_inside_a_string_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, byte_source: str
) -> None:
    """A ``}, {`` inside a name looks like an event boundary: the first thread must read past it."""
    fake = '}, {"cat": "kernel", "name": "bogus", "ts": 1, "dur": 1'
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10.0 * i, "dur": 5.0}
        for i in range(200)
    ]
    events[100]["name"] = fake
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    text = path.read_bytes()
    inside = text.index(b'{\\"cat\\"') if b'{\\"cat\\"' in text else text.index(b'{"cat": "kernel"')
    monkeypatch.setattr(native, "SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(native, "_candidate", lambda source, target: inside)
    got = native.read_native(path, MAX)
    assert got is not None
    sink, _ = got
    host = sink.table("host")
    assert len(host) == 200 and "gpu" not in sink.parts
    assert fake in set(host["name"].astype(str))


def _trace(tmp_path: Path, body: str, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text('{"traceEvents": [' + body + "]}")
    return path


GOOD = '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2, "args": {"stream": 7}}'

REFUSED = {
    "bool ts": GOOD + ', {"ph": "X", "cat": "cpu_op", "name": "a", "ts": true, "dur": 1}',
    "NaN literal": GOOD + ', {"ph": "X", "cat": "cpu_op", "name": "a", "ts": NaN, "dur": 1}',
    "lone surrogate": GOOD + ', {"ph": "X", "cat": "cpu_op", "name": "a\\ud800", "ts": 1, "dur": 1}',
    "args not an object": GOOD + ', {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "args": [1]}',
    "escaped key": GOOD + ', {"ph": "X", "c\\u0061t": "cpu_op", "name": "a", "ts": 1}',
    "control character": GOOD + ', {"ph": "X", "cat": "cpu_op", "name": "a\tb", "ts": 1}',
    "unterminated": GOOD + ', {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1',
    "number out of range": GOOD + ', {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1e400}',
    "deep": GOOD + ', {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "args": {"x": ' + "[" * 80 + "]" * 80 + "}}",
    "list as name": GOOD + ', {"ph": "X", "cat": "cpu_op", "name": ["a"], "ts": 1}',
    # values of a type schema.py does not allow for their key: the Python path drops them with a warning
    "id beyond int64": GOOD
    + ', {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "args": {"correlation": 9223372036854775808}}',
    "float id beyond int64": GOOD + ', {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1e300, "ts": 1}',
    "grid of four": GOOD + ', {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "args": {"grid": [1, 2, 3, 4]}}',
    "grid of a list": GOOD + ', {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "args": {"block": [1, [2], 3]}}',
    "number as finished": GOOD + ', {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "args": {"finished": 0}}',
    "list as a sync's pid": GOOD + ', {"ph": "X", "cat": "cuda_sync", "name": "s", "pid": [0, 1], "ts": 1}',
    "object in an arrow": GOOD + ', {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": {"a": 1}, "ts": 1}',
    "bool in a repeated key": GOOD.replace('"stream": 7', '"stream": true, "stream": 7'),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_the_native_decoder_refuses_is_read_by_the_python_path(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _trace(tmp_path, REFUSED[case])
    assert native.read_native(path, MAX) is None
    with_native = load_file(path)
    monkeypatch.setenv("TRACEADVISOR_NATIVE", "0")
    without = load_file(path)
    assert with_native.meta.warnings == without.meta.warnings
    for family in ("host", "gpu", "runtime", "flows", "other"):
        pd.testing.assert_frame_equal(getattr(with_native, family), getattr(without, family))


def test_depth_and_size_limits_are_the_python_readers(tmp_path: Path) -> None:
    """The native decoder refuses exactly the events the Python path skips (so that it reads the
    file and warns): nested 64 levels deep (the event is level 1), or over MAX_EVENT_BYTES."""
    from traceadvisor.trace import _kineto, reader

    assert (_kineto.MAX_DEPTH, _kineto.MAX_EVENT_BYTES) == (reader.MAX_DEPTH, reader.MAX_EVENT_BYTES)

    def deep(levels: int) -> str:
        nest = "[" * (levels - 2) + "]" * (levels - 2)
        return GOOD + ', {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "args": {"x": ' + nest + "}}"

    def sized(size: int) -> str:
        event = '{"ph": "X", "cat": "cpu_op", "name": "", "ts": 1}'
        return GOOD + ", " + event.replace('""', '"' + "n" * (size - len(event)) + '"')

    for body, refused in ((deep(63), False), (deep(64), True), (sized(_kineto.MAX_EVENT_BYTES), False)):
        assert (native.read_native(_trace(tmp_path, body), MAX) is None) == refused
    assert native.read_native(_trace(tmp_path, sized(_kineto.MAX_EVENT_BYTES + 1)), MAX) is None


def test_invalid_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [' + GOOD.encode() + b', {"cat": "cpu_op", "name": "a\xff", "ts": 1}]}')
    assert native.read_native(path, MAX) is None


def test_three_decimal_times_are_exact_beyond_float_precision(tmp_path: Path) -> None:
    """1.7e15 µs (an absolute epoch timestamp, torch < 2.4) has 0.25 µs float64 spacing: the
    digits, not a double, give the nanoseconds."""
    body = (
        '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1700000000000000.123, "dur": 0.001},'
        '{"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": -2.5, "dur": 7}'
    )
    got = native.read_native(_trace(tmp_path, body), MAX)
    assert got is not None
    host = got[0].table("host")
    assert host["ts_ns"].tolist() == [1_700_000_000_000_000_123, -2_500]
    assert host["dur_ns"].tolist() == [1, 7_000]


def test_values_coerced_like_the_python_path(tmp_path: Path) -> None:
    """Numbers in strings (ROCm's hex streams, "128" sizes), missing and null fields, ids beyond
    int64, names written with and without escapes, negative durations."""
    events = [
        '{"ph": "X", "cat": "kernel", "name": "caf\\u00e9", "pid": 0, "tid": "0x7", "ts": "12.5", "dur": -3,'
        ' "args": {"stream": "0x0", "correlation": "99999999999999999999", "grid": [1, 2, 3],'
        ' "block": "(1, 1, 1)", "bytes": null, "size": "2560", "registers per thread": "N/A"}}',
        '{"ph": "X", "cat": "kernel", "name": "café", "pid": 0, "tid": 7, "ts": 20, "dur": 1.0005,'
        ' "args": {"device": 3, "External id": null, "external id": 12, "grid": [1.5, "2", null]}}',
        '{"ph": "X", "cat": "Operator", "name": null, "pid": "1", "tid": 2, "ts": 1, "dur": 1,'
        ' "args": {"Input Dims": [[2, 3]], "Input type": null, "finished": false,'
        ' "Collective name": "allreduce", "Process Group ID": "7", "dtype": "Float"}}',
        '{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "gpu"}}',
        '{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": 1, "ts": 0, "dur": 9}',
        '{"ph": "s", "cat": "fwdbwd", "id": "0x1f", "pid": 1, "tid": 2, "ts": 3}',
    ]
    path = _trace(tmp_path, ",".join(events))
    got = native.read_native(path, MAX)
    assert got is not None
    tables = assert_same(got, _read_serial(path, MAX))
    sink, _ = got
    gpu = tables["gpu"]
    assert list(gpu["name"].cat.categories) == ["café"]  # both spellings are one name
    assert gpu["stream"].tolist() == [0, 7] and gpu["device"].tolist() == [0, 3]
    assert gpu["correlation"].tolist() == [-1, -1] and gpu["ext_id"].tolist() == [-1, 12]
    assert gpu[["grid_x", "grid_y", "grid_z"]].to_numpy().tolist() == [[1, 2, 3], [1, 2, -1]]
    assert gpu["bytes"].iloc[0] == 2560.0 and np.isnan(gpu["bytes"].iloc[1])
    assert gpu["ts_ns"].tolist() == [12_500, 20_000] and gpu["dur_ns"].tolist() == [0, 1_000]
    assert sink.negative_durations == {"gpu": 1}
    host = tables["host"]
    assert host["unfinished"].tolist() == [True] and host["input_dims"].tolist() == [b"[[2, 3]]"]
    assert host["input_types"].tolist() == [b"null"] and host["is_annotation"].tolist() == [False]
    coll = tables["collectives"]
    assert coll["pg_name"].tolist() == ["7"] and coll["collective"].tolist() == ["allreduce"]
    assert tables["flows"]["flow_id"].tolist() == [0x1F]
    assert len(sink.metadata) == 1 and sink.other_categories == {"Trace": 1}


def test_gzip_and_plain_give_the_same_trace(tmp_path: Path, byte_source: str) -> None:
    src = ROOT / "fixtures" / "traces" / "train_step.json.gz"
    plain = _plain(src, tmp_path / "train_step.json")
    a, b = native.read_native(src, MAX), native.read_native(plain, MAX)
    assert a is not None and b is not None
    assert_same(a, b)


def test_meanwhile_runs_once_even_when_the_python_path_takes_over(tmp_path: Path) -> None:
    from traceadvisor.trace.parallel import read_columns

    calls: list[int] = []
    path = _trace(tmp_path, REFUSED["bool ts"])
    sink, _ = read_columns(path, MAX, meanwhile=lambda: calls.append(1))
    assert calls == [1]
    assert len(sink.table("gpu")) == 1


def test_cut_off_file_falls_back_with_the_python_paths_warning(tmp_path: Path) -> None:
    src = gzip.decompress((ROOT / "fixtures" / "traces" / "train_step.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(src[: len(src) // 2])
    assert native.read_native(path, MAX) is None
    trace = load_file(path)
    assert trace.meta.truncated and any("cut off" in w for w in trace.meta.warnings)


def _mutations(data: bytes, n: int, seed: int) -> list[bytes]:
    """Damaged copies of ``data``: a byte flipped, a byte dropped or doubled, a cut, a span of
    JSON punctuation or an escape written over text (deterministic)."""
    import random

    rng = random.Random(seed)
    junk = [b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b"\\u", b"\\ud83d", b"\xff", b"\x00", b"-", b"e9", b"null"]
    out = []
    for _ in range(n):
        at = rng.randrange(len(data))
        kind = rng.randrange(5)
        if kind == 0:
            mutated = data[:at] + bytes([rng.randrange(256)]) + data[at + 1 :]
        elif kind == 1:
            mutated = data[:at] + data[at + 1 :]
        elif kind == 2:
            mutated = data[:at] + data[at : at + 1] * 2 + data[at + 1 :]
        elif kind == 3:
            mutated = data[:at]
        else:
            mutated = data[:at] + rng.choice(junk) + data[at:]
        out.append(mutated)
    return out


# More cases for a longer hunt: TRACEADVISOR_FUZZ_CASES=1000 pytest tests/test_native.py -k damaged
FUZZ_CASES = int(os.environ.get("TRACEADVISOR_FUZZ_CASES", "50"))
FUZZ_TRACES = ["planted_pageable_copies", "clean_overlapped_copies", "workload_attention_flash"]


@pytest.mark.parametrize("name", FUZZ_TRACES)
def test_damaged_traces_are_refused_or_read_exactly_like_the_python_path(tmp_path: Path, name: str) -> None:
    """Hostile input for the C code: whatever the damage, the native decoder either refuses (the
    Python path then reads the file) or gives exactly what the Python path gives; it never crashes."""
    data = gzip.decompress((ROOT / "fixtures" / "traces" / f"{name}.json.gz").read_bytes())
    refused = read = 0
    for i, mutated in enumerate(_mutations(data, FUZZ_CASES, seed=FUZZ_TRACES.index(name) + 7)):
        path = tmp_path / f"m{i}.json"
        path.write_bytes(mutated)
        try:
            got = native.read_native(path, MAX)
        except TraceError as exc:  # damage before the events: the same error as the Python path's
            with pytest.raises(TraceError) as python:
                _read_serial(path, MAX)
            assert str(python.value) == str(exc)
            refused += 1
            continue
        if got is None:
            refused += 1
            continue
        read += 1
        assert_same(got, _read_serial(path, MAX))
    assert refused and read  # both outcomes were exercised


def test_a_file_that_shrinks_while_read_is_left_to_the_python_path(tmp_path: Path) -> None:
    """pread sees a short read when another process truncates the file: it refuses, instead of
    dying of SIGBUS as a memory map would."""
    path = _plain(ROOT / "fixtures" / "traces" / "train_step.json.gz", tmp_path / "t.json")
    size = path.stat().st_size
    with path.open("rb") as fh:
        source = native._Pread(fh.fileno(), size)
        source.read(0, 1024)
        with path.open("r+b") as writer:
            writer.truncate(size // 2)
        with pytest.raises(native._Refused):
            source.read(size // 2 - 10, 1024)
    assert native.read_native(path, MAX) is None  # the cut file: refused, the Python path warns
    trace = load_file(path)
    assert trace.meta.truncated
