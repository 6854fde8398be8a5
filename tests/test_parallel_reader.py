"""The two-process reader (trace/parallel.py) gives exactly what the one-process reader gives.

Every test reads the same real trace both ways (the split forced with ``min_bytes=1``) and compares
every table column by column, the names, the metadata events, the top-level keys and the warnings.
"""

from __future__ import annotations

import gzip
import os
import threading
from pathlib import Path

import pandas as pd
import pytest
from fixture_paths import EXTERNAL

from traceadvisor.trace.parallel import _can_split, _find_split, _read_split, _receive, read_columns
from traceadvisor.trace.reader import DEFAULT_MAX_INFLATED_BYTES

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "traces"
SERIAL = 1 << 62  # a min_bytes no file reaches: one process


@pytest.fixture(autouse=True)
def _python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the Python path's two-process split: the native decoder, which reads
    first where it is built, stays out of the way (tests/test_native.py covers it)."""
    monkeypatch.setenv("TRACEADVISOR_NATIVE", "0")


def _plain(src: Path, tmp_path: Path) -> Path:
    """An uncompressed copy (the split is for uncompressed files)."""
    out = tmp_path / src.name.removesuffix(".gz")
    data = gzip.decompress(src.read_bytes()) if src.name.endswith(".gz") else src.read_bytes()
    out.write_bytes(data)
    return out


def _both(path: Path) -> tuple[dict[str, pd.DataFrame], dict[str, pd.DataFrame], object, object]:
    one, r1 = read_columns(path, DEFAULT_MAX_INFLATED_BYTES, min_bytes=SERIAL)
    # The split itself, whatever else runs in this process (read_columns would fall back to one
    # process if an earlier test left a thread running).
    split = _read_split(path, DEFAULT_MAX_INFLATED_BYTES, None)
    assert split is not None, "no proven split point"
    two, r2 = split
    t1 = {f: one.table(f) for f in list(one.parts)}
    t2 = {f: two.table(f) for f in list(two.parts)}
    assert len(one.metadata) == len(two.metadata)
    assert one.other_categories == two.other_categories
    return t1, t2, r1, r2


def _largest(pattern: str, n: int) -> list[Path]:
    files = sorted(EXTERNAL.rglob(pattern), key=lambda p: p.stat().st_size, reverse=True)
    assert len(files) >= n, f"fewer than {n} traces under {EXTERNAL}"
    return files[:n]


CASES = [
    FIXTURES / "train_step.json.gz",
    FIXTURES / "planted_launch_storm.json.gz",
    *_largest("*.json*", 3),
]


@pytest.mark.parametrize("src", CASES, ids=[p.name for p in CASES])
def test_split_read_equals_serial_read(src: Path, tmp_path: Path) -> None:
    path = _plain(src, tmp_path)
    assert _find_split(path, path.stat().st_size // 2, 0, path.stat().st_size) is not None
    t1, t2, r1, r2 = _both(path)
    assert sorted(t1) == sorted(t2)
    for family in t1:
        pd.testing.assert_frame_equal(t1[family], t2[family], check_categorical=False, obj=family)
        if "name" in t1[family]:  # the child's names were re-coded into the parent's name table
            assert t1[family]["name"].astype(str).tolist() == t2[family]["name"].astype(str).tolist()
    assert r1.top == r2.top  # head keys from the parent, tail keys from the child
    assert r1.warnings == r2.warnings
    assert r1.truncated == r2.truncated is False


def test_damage_in_the_second_half_is_reported_as_in_one_process(tmp_path: Path) -> None:
    path = _plain(FIXTURES / "planted_launch_storm.json.gz", tmp_path)
    data = path.read_bytes()
    cut = data[: int(len(data) * 0.8)]  # a crashed writer: the child's half is cut off mid-event
    q = len(data) * 3 // 4
    at = data.index(b'"ts": ', q)  # an event in the child's half gets a NaN time (kineto's non-finite doubles)
    nan = data[:at] + b'"ts": NaN, "was_ts": ' + data[at + len(b'"ts": ') :]
    for name, content in (("cut.json", cut), ("nan.json", nan)):
        p = tmp_path / name
        p.write_bytes(content)
        t1, t2, r1, r2 = _both(p)
        assert r1.warnings == r2.warnings and r1.warnings
        assert r1.truncated == r2.truncated
        assert {f: len(t) for f, t in t1.items()} == {f: len(t) for f, t in t2.items()}


def test_no_split_for_gzip_small_files_or_with_threads(tmp_path: Path) -> None:
    gz = FIXTURES / "train_step.json.gz"
    plain = _plain(gz, tmp_path)
    assert not _can_split(gz, 1)  # gzip: one inflater, read by one process
    assert not _can_split(plain, plain.stat().st_size + 1)
    alone = threading.active_count() == 1  # an earlier test may have left a thread running
    assert _can_split(plain, 1) == (len(os.sched_getaffinity(0)) >= 2 and alone)
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        assert not _can_split(plain, 1)  # fork would copy only this thread
    finally:
        stop.set()
        worker.join()


def test_a_child_that_dies_mid_message_is_detected(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"\x10\x00\x00")  # part of a header, then the pipe closes
    os.close(write_fd)
    try:
        assert _receive(read_fd) is None
    finally:
        os.close(read_fd)


def test_no_boundary_means_no_split(tmp_path: Path) -> None:
    p = tmp_path / "one.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "' + b"a" * 4_000_000 + b'", "ts": 1, "dur": 1}]}')
    assert _find_split(p, 2_000_000, 17, p.stat().st_size) is None
    (s1, r1), (s2, r2) = (read_columns(p, 1 << 30, min_bytes=m) for m in (SERIAL, 1))
    assert r1.warnings == r2.warnings
    assert sorted(s1.parts) == sorted(s2.parts)
