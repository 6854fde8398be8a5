"""Scale-out of the multi-rank analysis (issue 13): rank summaries cached beside the traces
(``ranks/summary_io.py``) and built in a process pool or on Dask (``ranks/executor.py``).

Every summary here is built from a real trace by ``build_small`` (a small real builder: the lead's
``ranks/build.py`` replaces it) from copies of the fixtures in ``tmp_path`` (the cache files are
written beside the traces, never into ``fixtures/``). Expected values come from the raw JSON.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixture_paths import HTA
from small_rank_summary import build_small

from traceadvisor.errors import UsageError
from traceadvisor.ranks.executor import summaries
from traceadvisor.ranks.summary import SUMMARY_VERSION, RankSummary, TraceKey
from traceadvisor.ranks.summary_io import (
    beside_path,
    encode_summary,
    fallback_path,
    read_summary,
    summary_path,
    trace_key,
    write_summary,
)

NCCL = HTA / "nccl_data.json.gz"  # 48 collectives with args (27 record_param_comms, 21 NCCL kernels)
PAIR = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]

# How many times ``counting_build`` ran in this process (jobs=1 builds here, not in a worker).
BUILDS: list[str] = []


def counting_build(path: str) -> RankSummary:
    BUILDS.append(path)
    return build_small(path)


def _copy(tmp_path: Path, *traces: Path) -> list[str]:
    out = []
    for t in traces:
        dst = tmp_path / t.name
        shutil.copyfile(t, dst)
        out.append(str(dst))
    return out


def _raw_collectives(path: Path) -> list[tuple[int, int, float, bool]]:
    """(start ns, end ns, in nelems, on GPU) of every event carrying ``Collective name``, from the
    JSON text (Decimal: the µs timestamps have 3 decimals, ns exact)."""
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh, parse_float=Decimal)
    rows = []
    for e in doc["traceEvents"]:
        args = e.get("args")
        if isinstance(args, dict) and "Collective name" in args:
            start = int(Decimal(e["ts"]) * 1000)
            rows.append(
                (start, start + int(Decimal(e["dur"]) * 1000), float(args["In msg nelems"]), e["cat"] == "kernel")
            )
    return sorted(rows)


def _assert_same(a: RankSummary, b: RankSummary) -> None:
    assert a.key == b.key
    assert (a.rank, a.rank_source, a.world_size, a.host, a.device, a.base_time_ns) == (
        b.rank,
        b.rank_source,
        b.world_size,
        b.host,
        b.device,
        b.base_time_ns,
    )
    assert list(a.tables) == list(b.tables)
    for name in a.tables:
        x, y = a.tables[name], b.tables[name]
        assert list(x.columns) == list(y.columns), name
        assert [str(d) for d in x.dtypes] == [str(d) for d in y.dtypes], name
        pd.testing.assert_frame_equal(x, y, check_exact=True)
    assert a.report == b.report
    assert a.warnings == b.warnings


# -- the file: exact round trip ------------------------------------------------------------------


def test_round_trip_keeps_values_and_dtypes_exactly(tmp_path: Path) -> None:
    (trace,) = _copy(tmp_path, NCCL)
    built = summaries([trace], build_small, jobs=1, use_cache=False).summaries[0]
    target = tmp_path / "x.tasummary"
    write_summary(built, target)
    back = read_summary(target, trace_key(trace))
    assert back is not None
    _assert_same(built, back)
    # The ns columns against the raw JSON, not against the builder: 48 events, ns exact.
    coll = back.tables["collectives"]
    got = sorted(
        zip(coll.start_ns.tolist(), coll.end_ns.tolist(), coll.in_nelems.tolist(), coll.on_gpu.tolist(), strict=True)
    )
    assert got == _raw_collectives(NCCL)
    assert len(got) == 48 and sum(g[3] for g in got) == 21
    assert coll.start_ns.dtype == np.int64 and coll.on_gpu.dtype == np.bool_ and coll.op.dtype == "str"


def test_round_trip_of_edge_values(tmp_path: Path) -> None:
    """Values a float64 would round (2**62 + 1 ns), NaN, missing text, empty tables, every dtype."""
    big = 2**62 + 1
    table = pd.DataFrame(
        {
            "i64": np.array([big, -1, np.iinfo(np.int64).min], dtype=np.int64),
            "i32": np.array([1, -2, 3], dtype=np.int32),
            "u8": np.array([0, 255, 7], dtype=np.uint8),
            "f64": np.array([np.nan, 1e-300, -0.0], dtype=np.float64),
            "b": np.array([True, False, True]),
            "s": pd.Series(["all_reduce", None, "é ünïcode"], dtype="str"),
            "o": pd.Series(["a", None, ""], dtype="object"),
        }
    )
    empty = pd.DataFrame({"coll": np.zeros(0, np.int64), "name": pd.Series([], dtype="str")})
    s = RankSummary(
        key=TraceKey("/nowhere/t.json", 10, 20),
        rank=3,
        rank_source="file name",
        world_size=None,
        host="node-7",
        device=None,
        base_time_ns=big,
        tables={"t": table, "empty": empty, "no_columns": pd.DataFrame()},
        report={"findings": [{"code": "RS101", "saving_us": 48000.5}]},
        warnings=("w1",),
    )
    path = tmp_path / "edge.tasummary"
    write_summary(s, path)
    back = read_summary(path, TraceKey("/nowhere/t.json", 10, 20))
    assert back is not None
    _assert_same(s, back)
    assert int(back.tables["t"]["i64"].iloc[0]) == big
    assert np.isnan(back.tables["t"]["f64"].iloc[0]) and np.signbit(back.tables["t"]["f64"].iloc[2])
    assert back.tables["t"]["o"].iloc[1] is None


def test_a_column_the_format_does_not_carry_is_refused(tmp_path: Path) -> None:
    s = RankSummary(
        key=TraceKey("/t", 1, 1),
        rank=0,
        rank_source="unknown",
        world_size=None,
        host=None,
        device=None,
        base_time_ns=None,
        tables={"t": pd.DataFrame({"when": pd.to_datetime(["2024-01-01"])})},
        report={},
    )
    with pytest.raises(TypeError, match=r"t\.when: dtype datetime64"):
        write_summary(s, tmp_path / "bad.tasummary")
    assert not (tmp_path / "bad.tasummary").exists()


# -- the cache: hits and misses ------------------------------------------------------------------


def test_cache_hit_and_miss_on_path_size_mtime(tmp_path: Path) -> None:
    (trace,) = _copy(tmp_path, NCCL)
    BUILDS.clear()
    first = summaries([trace], counting_build, jobs=1)
    assert (first.cached, BUILDS) == (0, [trace])
    assert beside_path(trace) == Path(trace + ".tasummary") and beside_path(trace).is_file()
    again = summaries([trace], counting_build, jobs=1)
    assert (again.cached, len(BUILDS)) == (1, 1)
    _assert_same(first.summaries[0], again.summaries[0])

    st = Path(trace).stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # mtime only
    assert read_summary(beside_path(trace), trace_key(trace)) is None
    assert summaries([trace], counting_build, jobs=1).cached == 0 and len(BUILDS) == 2
    assert summaries([trace], counting_build, jobs=1).cached == 1

    st = Path(trace).stat()
    with Path(trace).open("ab") as fh:  # size only: the mtime put back
        fh.write(b"\0")
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert read_summary(beside_path(trace), trace_key(trace)) is None

    # Another path (a copy, same size and mtime) with the first one's summary beside it: a miss.
    other = tmp_path / "copy.json.gz"
    shutil.copy2(trace, other)
    shutil.copyfile(beside_path(trace), beside_path(other))
    assert trace_key(other).size == trace_key(trace).size and trace_key(other).mtime_ns == trace_key(trace).mtime_ns
    assert read_summary(beside_path(other), trace_key(other)) is None


def test_cache_miss_on_another_version(tmp_path: Path) -> None:
    (trace,) = _copy(tmp_path, NCCL)
    built = summaries([trace], build_small, jobs=1, use_cache=False).summaries[0]
    old = RankSummary(**{**built.__dict__, "key": TraceKey(**{**built.key.__dict__, "version": "0"})})
    write_summary(old, beside_path(trace))
    assert SUMMARY_VERSION != "0"
    assert read_summary(beside_path(trace), trace_key(trace)) is None
    BUILDS.clear()
    assert summaries([trace], counting_build, jobs=1).cached == 0 and BUILDS == [trace]
    assert read_summary(beside_path(trace), trace_key(trace)) is not None  # rebuilt at this version


def test_use_cache_false_neither_reads_nor_writes(tmp_path: Path) -> None:
    (trace,) = _copy(tmp_path, NCCL)
    BUILDS.clear()
    summaries([trace], counting_build, jobs=1, use_cache=False)
    assert not beside_path(trace).exists() and BUILDS == [trace]


@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"\x00garbage\xff" * 10,
        b"\x1f\x8b\x08\x00not gzip at all",
        b"\x93\x01\x02\x03",  # valid msgpack of the wrong shape: [1, 2, 3]
    ],
    ids=["empty", "garbage", "gzip-magic", "wrong-shape"],
)
def test_a_corrupt_summary_is_rebuilt(tmp_path: Path, damage: bytes) -> None:
    (trace,) = _copy(tmp_path, NCCL)
    beside_path(trace).write_bytes(damage)
    assert read_summary(beside_path(trace), trace_key(trace)) is None
    BUILDS.clear()
    out = summaries([trace], counting_build, jobs=1)
    assert (out.cached, BUILDS, out.errors) == (0, [trace], [])
    assert read_summary(beside_path(trace), trace_key(trace)) is not None


def test_a_truncated_or_inconsistent_summary_is_missing(tmp_path: Path) -> None:
    import msgspec

    (trace,) = _copy(tmp_path, NCCL)
    summaries([trace], build_small, jobs=1)
    data = beside_path(trace).read_bytes()
    key = trace_key(trace)
    assert read_summary(beside_path(trace), key) is not None
    for cut in (1, len(data) // 2, len(data) - 1):
        beside_path(trace).write_bytes(data[:cut])
        assert read_summary(beside_path(trace), key) is None
    doc = msgspec.msgpack.decode(data)
    # An int64 buffer one byte short, then one row short of its table's other columns.
    column = doc["tables"]["collectives"]["columns"]["start_ns"]
    whole = column["values"]
    for values in (whole[:-1], whole[:-8]):
        column["values"] = values
        beside_path(trace).write_bytes(msgspec.msgpack.encode(doc))
        assert read_summary(beside_path(trace), key) is None
    # An object dtype on a raw buffer (pointers): refused, never handed to numpy.
    column["values"], column["dtype"] = whole, "object"
    beside_path(trace).write_bytes(msgspec.msgpack.encode(doc))
    assert read_summary(beside_path(trace), key) is None


def test_a_gzipped_summary_is_not_read(tmp_path: Path) -> None:
    """Never decompressed (a gzip bomb beside a trace would exhaust memory): rebuilt instead."""
    (trace,) = _copy(tmp_path, NCCL)
    summaries([trace], build_small, jobs=1)
    data = beside_path(trace).read_bytes()
    beside_path(trace).write_bytes(gzip.compress(data))
    assert read_summary(beside_path(trace), trace_key(trace)) is None
    beside_path(trace).write_bytes(data)
    assert read_summary(beside_path(trace), trace_key(trace)) is not None


def build_with_a_datetime(path: str) -> RankSummary:
    s = build_small(path)
    return RankSummary(**{**s.__dict__, "tables": {"steps": pd.DataFrame({"t": pd.to_datetime(["2024-01-01"])})}})


def test_a_summary_the_file_cannot_hold_is_that_traces_error(tmp_path: Path) -> None:
    traces = _copy(tmp_path, *PAIR)
    out = summaries(traces, build_with_a_datetime, jobs=1)
    assert out.summaries == []
    assert [e.path for e in out.errors] == traces
    assert out.errors[0].message.startswith("summary not storable: summary column steps.t: dtype datetime64")


def test_summary_path_falls_back_to_the_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    fb = fallback_path("/data/run/rank-0.json.gz")
    assert fb.parent == tmp_path / "cache" / "traceadvisor" / "summaries"
    assert re.fullmatch(r"[0-9a-f]{64}\.tasummary", fb.name)
    assert summary_path(tmp_path / "t.json") == tmp_path / "t.json.tasummary"
    if os.geteuid() == 0:
        pytest.skip("running as root: every folder is writable, the fallback cannot be reached")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    assert summary_path(ro / "t.json") == fallback_path(ro / "t.json")


# -- the executors give the same summaries -------------------------------------------------------


def test_jobs_1_and_jobs_2_give_identical_summaries(tmp_path: Path) -> None:
    traces = _copy(tmp_path, NCCL, *PAIR)
    one = summaries(traces, build_small, jobs=1, use_cache=False)
    two = summaries(traces, build_small, jobs=2, use_cache=False)
    assert one.errors == [] and two.errors == []
    assert [s.key.path for s in two.summaries] == [str(Path(t).absolute()) for t in traces]
    for a, b in zip(one.summaries, two.summaries, strict=True):
        _assert_same(a, b)
        assert encode_summary(a) == encode_summary(b)
    # The ranks from distributedInfo, by hand from the files' headers.
    assert [s.rank for s in two.summaries] == [_raw_rank(t) for t in traces]


def _raw_rank(path: str) -> int:
    with gzip.open(path, "rt") as fh:
        return int(json.load(fh)["distributedInfo"]["rank"])


def test_a_bad_trace_is_its_own_error(tmp_path: Path) -> None:
    traces = _copy(tmp_path, *PAIR)
    bad = tmp_path / "rank-2.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [}'))
    missing = str(tmp_path / "rank-3.json.gz")
    out = summaries([traces[0], str(bad), traces[1], missing], build_small, jobs=2)
    assert [s.key.path for s in out.summaries] == traces
    assert [e.path for e in out.errors] == [str(bad), missing]
    assert all("\n" not in e.message and e.message for e in out.errors)
    assert "rank-3.json.gz" in out.errors[1].message
    assert not beside_path(bad).exists()


def test_unknown_executor_is_a_usage_error(tmp_path: Path) -> None:
    traces = _copy(tmp_path, *PAIR)
    with pytest.raises(UsageError, match="expected 'dask' or a Dask scheduler address"):
        summaries(traces, build_small, jobs=2, executor="ray")
    with pytest.raises(UsageError, match="at least 1"):
        summaries(traces, build_small, jobs=0)


def test_missing_dask_is_one_line(tmp_path: Path) -> None:
    """Where dask is not installed (an import of it fails: ``sys.modules`` entry None, in a fresh
    interpreter), ``--executor dask`` is a UsageError naming the extra."""
    traces = _copy(tmp_path, *PAIR)
    code = (
        "import sys; sys.modules['distributed'] = None\n"
        "from traceadvisor.errors import UsageError\n"
        "from traceadvisor.ranks.executor import summaries\n"
        "from test_ranks_scaleout import build_small\n"
        f"try:\n    summaries({traces!r}, build_small, jobs=2, executor='dask')\n"
        "except UsageError as e:\n    print('USAGE', e)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("USAGE the Dask executor needs dask.distributed")
    assert "pip install 'traceadvisor[dask]'" in out.stdout


def _distributed() -> object:
    return pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install '.[dask]')")


def test_dask_local_cluster_gives_identical_summaries(tmp_path: Path) -> None:
    _distributed()
    traces = _copy(tmp_path, NCCL, *PAIR)
    one = summaries(traces, build_small, jobs=1, use_cache=False)
    dask = summaries(traces, build_small, jobs=2, executor="dask")
    assert dask.errors == [] and dask.cached == 0
    for a, b in zip(one.summaries, dask.summaries, strict=True):
        _assert_same(a, b)
    # The workers wrote the summaries beside the traces: the next run reads them.
    assert all(beside_path(t).is_file() for t in traces)
    assert summaries(traces, build_small, jobs=1).cached == 3


def test_dask_scheduler_address_gives_identical_summaries(tmp_path: Path) -> None:
    distributed = _distributed()
    traces = _copy(tmp_path, NCCL, *PAIR)
    one = summaries(traces, build_small, jobs=1, use_cache=False)
    with distributed.LocalCluster(  # type: ignore[attr-defined]
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        out = summaries(traces, build_small, executor=cluster.scheduler_address, use_cache=False)
    assert out.errors == []
    for a, b in zip(one.summaries, out.summaries, strict=True):
        _assert_same(a, b)
