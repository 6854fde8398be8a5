"""Collectives across ranks (issue 13 items 2-3): extraction, matching, waits and bus bandwidth.

Expected values are computed here from the raw JSON events (json.load of the gz), never from the
functions under test: the kernels' ``ts``/``dur`` and their ``Collective name``, ``In/Out msg
nelems``, ``dtype`` and ``Group size`` args, with nccl-tests' factors written out by hand.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fixture_paths import FIXTURE_TRACES, HTA, external_traces

from traceadvisor.analyses.communication import communication_kernels
from traceadvisor.ranks.collectives import COLUMNS, normalise_op, parse_ranks, rank_collectives
from traceadvisor.ranks.match import match_collectives
from traceadvisor.ranks.metrics import collective_metrics
from traceadvisor.ranks.summary import __doc__ as SUMMARY_DOC
from traceadvisor.trace.load import load_file

NCCL_DATA = HTA / "nccl_data.json.gz"
SAMPLED = (HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz")
MULTIRANK = FIXTURE_TRACES / "multirank"


def _raw(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        events: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return events


def _ns(us: Any) -> int:
    """Kineto's µs with three decimals (format doc §1.4) as exact ns."""
    whole, _, frac = f"{us}".partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


def _ranked(paths: tuple[Path, ...]) -> pd.DataFrame:
    frames = []
    for p in paths:
        t = load_file(p)
        c = rank_collectives(t)
        assert t.rank is not None
        c["rank"] = t.rank
        frames.append(c)
    return pd.concat(frames, ignore_index=True)


def test_columns_are_the_summary_contract() -> None:
    """summary.py's docstring lists the collectives table's columns: the table has exactly those."""
    assert SUMMARY_DOC is not None
    section = SUMMARY_DOC.split("``collectives``")[1].split("``steps``")[0]
    named = re.findall(r"``(\w+)``", section)
    listed = [c for c in named if c in COLUMNS or c.endswith("_ns") or c in ("op", "ordinal", "step")]
    assert set(listed) - {"profiler_ns"} == set(COLUMNS)  # build.py adds profiler_ns to the summary's table
    table = rank_collectives(load_file(NCCL_DATA))
    assert tuple(table.columns) == COLUMNS
    assert table["start_ns"].dtype == np.int64 and table["end_ns"].dtype == np.int64


def test_busbw_on_nccl_data_equals_hand_computation() -> None:
    """Every NCCL kernel of HTA's nccl_data: S = max(In, Out) nelems x dtype size, busbw = S / dur x
    F(n) in GB/s (1e9), from the kernel's own args; a single-rank trace, so T = its own dur."""
    size = {"Float": 4, "Long": 8}

    def factor(op: str, n: int) -> float:  # nccl-tests: all-reduce 2(n-1)/n, broadcast 1
        return {"allreduce": 2 * (n - 1) / n, "broadcast": 1.0}[op]

    expected = {}
    for e in _raw(NCCL_DATA):
        a = e.get("args", {})
        if e.get("cat") == "kernel" and "Collective name" in a:
            s = max(int(a["In msg nelems"]), int(a["Out msg nelems"])) * size[a["dtype"]]
            dur = _ns(e["dur"])
            expected[_ns(e["ts"])] = (s, s / dur * factor(a["Collective name"], int(a["Group size"])))
    assert len(expected) == 21  # 15 all-reduces, 6 broadcasts

    colls = rank_collectives(load_file(NCCL_DATA))
    colls["rank"] = 0
    m = collective_metrics(colls, match_collectives(colls))
    assert set(colls["op_source"]) == {"args"}
    got = m.per_rank.merge(m.instances[["instance", "busbw_transfer_gbps"]], on="instance")
    assert sorted(got["start_ns"]) == sorted(expected)
    for start, s, busbw in zip(got["start_ns"], got["bytes"], got["busbw_transfer_gbps"], strict=True):
        assert s == expected[start][0]
        assert busbw == pytest.approx(expected[start][1], rel=1e-12)
    # a 31.5 MB all-reduce over 2 ranks in 2.42 ms: 13.0 GB/s (hand: 31502336 / 2424415 ns)
    big = got[got["start_ns"] == 4458676534511611]
    assert float(big["busbw_transfer_gbps"].iloc[0]) == pytest.approx(31502336 / 2424415, rel=1e-12)


def test_sampled_pair_matched_waits_and_transfer() -> None:
    """HTA's sampled 2-of-128 pair (2023, no process-group args): the op comes from the nccl:<op>
    label around each SendRecv kernel, rows match by stream order, waits are >= 0 and the
    transfer is the shorter of the two raw kernel durations."""
    durs: dict[int, dict[int, int]] = {}
    ops: dict[int, dict[str, int]] = {}
    for rank, path in enumerate(SAMPLED):
        raw = _raw(path)
        durs[rank] = {_ns(e["ts"]): _ns(e["dur"]) for e in raw if e.get("cat") == "kernel" and "nccl" in e["name"]}
        ops[rank] = {}
        for e in raw:
            if e.get("cat") == "user_annotation" and e["name"].startswith("nccl:"):
                op = {"nccl:all_reduce": "all_reduce", "nccl:all_to_all": "all_to_all"}.get(e["name"], "all_gather")
                ops[rank][op] = ops[rank].get(op, 0) + 1
    colls = _ranked(SAMPLED)
    for rank in (0, 1):
        mine = colls[colls["rank"] == rank]
        assert len(mine) == len(durs[rank]) == 10
        assert mine["op"].value_counts().to_dict() == ops[rank]
        assert set(mine["op_source"]) == {"host op name"}  # not "SendRecv" from the kernel name
    m = match_collectives(colls)
    assert m.key_kind == "stream order"
    assert m.rows == 20 and m.coverage == m.matched_rows / m.rows == 1.0
    # the sampled kernels are not the same collectives on both ranks: reported, not hidden
    assert set(m.mismatches["kind"]) <= {"size", "dtype"} and len(m.mismatches) > 0
    cm = collective_metrics(colls, m)
    assert (cm.per_rank["wait_ns"] >= 0).all() and (cm.per_rank["arrival_wait_ns"] >= 0).all()
    for inst, rows in cm.per_rank.groupby("instance"):
        raw_min = min(durs[int(r)][int(s)] for r, s in zip(rows["rank"], rows["start_ns"], strict=True))
        assert int(cm.instances.set_index("instance").at[inst, "transfer_ns"]) == raw_min


def test_missing_and_dtype_mismatches() -> None:
    """nccl_data as ranks 0 and 1 (its process group is [0, 1]): everything matches; a collective
    dropped on rank 1 becomes a `missing` mismatch naming rank 1, a changed dtype a `dtype` one."""
    one = rank_collectives(load_file(NCCL_DATA))
    colls = pd.concat([one.assign(rank=0), one.assign(rank=1)], ignore_index=True)
    m = match_collectives(colls)
    assert m.key_kind == "ordinal" and m.coverage == 1.0 and m.mismatches.empty
    assert (m.instances["state"] == "fully_matched").all() and len(m.instances) == 21

    dropped = colls.drop(index=len(one) + 5).reset_index(drop=True)
    m = match_collectives(dropped)
    assert list(m.mismatches["kind"]) == ["missing"]
    assert m.mismatches["ranks"].iloc[0] == (1,) and m.mismatches["key"].iloc[0] == 5
    assert m.coverage == pytest.approx(40 / 41)
    # rank 0's row has no peer left: unmatched (-1), not an instance of one
    assert m.instance[5] == -1 and len(m.instances) == 20 and m.mismatches["instance"].iloc[0] == -1

    changed = colls.copy()
    changed.loc[len(one) + 3, "dtype"] = "BFloat16"
    m = match_collectives(changed)
    assert list(m.mismatches["kind"]) == ["dtype"]
    assert m.mismatches["key"].iloc[0] == 3 and "BFloat16: ranks [1]" in m.mismatches["detail"].iloc[0]


def test_op_names_normalised() -> None:
    """The op spellings found in the real traces (record_param_comms and kernel args, c10d ops,
    nccl:/gloo: labels, symmetric-memory ops) and the rest of c10d's."""
    cases = {
        "allreduce": "all_reduce",
        "_allgather_base": "all_gather",
        "all_gather_into_tensor_coalesced": "all_gather",
        "reduce_scatter_tensor_coalesced": "reduce_scatter",
        "_reduce_scatter_base": "reduce_scatter",
        "all_to_allv": "all_to_allv",
        "alltoall_base": "all_to_all",
        "c10d::alltoall_base_": "all_to_all",
        "nccl:_all_gather_base": "all_gather",
        "gloo:all_reduce": "all_reduce",
        "symm_mem::multimem_all_reduce_": "all_reduce",
        "broadcast": "broadcast",
        "reduce": "reduce",
        "gather": "gather",
        "scatter": "scatter",
        "send": "send",
        "recv": "recv",
        "c10d::recv_": "recv",
        "barrier": "barrier",
        "SendRecv": "unknown",
    }
    assert {k: normalise_op(k) for k in cases} == cases


def test_parse_ranks() -> None:
    assert parse_ranks("[0, 1]") == [0, 1]
    assert parse_ranks("[0, 8, 16, ...]", 4) == [0, 8, 16, 24]  # PARAM's _parse_ranks: by stride
    assert parse_ranks("[]") is None and parse_ranks("") is None


def _all_traces() -> list[Path]:
    return sorted(FIXTURE_TRACES.rglob("*.json.gz")) + external_traces()


@pytest.mark.parametrize("path", _all_traces(), ids=lambda p: p.name)
def test_no_communication_kernel_taken_for_compute(path: Path) -> None:
    """Every kernel that is communication by its name (nccl/rccl) or by its collective args in the
    raw JSON is a row of the collectives table and of communication_kernels (which every compute
    rule excludes); and no other kernel is."""
    comm = re.compile(r"nccl|rccl", re.IGNORECASE)
    raw_comm = {
        _ns(e["ts"])
        for e in _raw(path)
        if e.get("cat") == "kernel" and (comm.search(e.get("name", "")) or "Collective name" in e.get("args", {}))
    }
    t = load_file(path)
    colls = rank_collectives(t)
    gpu_rows = set(colls.loc[colls["on_gpu"], "start_ns"].tolist())
    comm_kernels = set(t.gpu.loc[communication_kernels(t), "ts_ns"].tolist())
    assert raw_comm <= gpu_rows
    assert gpu_rows == comm_kernels
    assert len(colls[colls["on_gpu"]]) == len(communication_kernels(t))


GLOO_RUNS = sorted(d for d in MULTIRANK.glob("*") if (d / "rank0.json.gz").exists()) if MULTIRANK.exists() else []


@pytest.mark.skipif(not GLOO_RUNS, reason="fixtures/traces/multirank/ not there yet")
@pytest.mark.parametrize("run", GLOO_RUNS, ids=lambda p: p.name)
def test_gloo_rows_are_the_worker_annotations(run: Path) -> None:
    """On the CPU (gloo) runs, a row is a gloo:<op> worker-thread annotation, with its span, and
    the two ranks' rows match one to one."""
    paths = tuple(sorted(run.glob("rank*.json.gz")))
    expected: dict[int, list[tuple[str, int, int]]] = {}
    for rank, p in enumerate(paths):
        expected[rank] = sorted(
            (e["name"].split(":")[1], _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
            for e in _raw(p)
            if e.get("cat") == "user_annotation" and e["name"].startswith("gloo:")
        )
    colls = _ranked(paths)
    for rank in expected:
        mine = colls[colls["rank"] == rank]
        got = sorted(zip(mine["op"], mine["start_ns"], mine["end_ns"], strict=True))
        assert got == expected[rank]
        assert set(mine["pg"]) == {"0"} and set(mine["group_size"]) == {len(paths)}
    m = match_collectives(colls)
    assert m.key_kind == "ordinal"
    cm = collective_metrics(colls, m)
    assert (cm.per_rank["wait_ns"] >= 0).all()


def test_point_to_point_waits_need_both_ends() -> None:
    """A send pairs with its peer's recv (no type mismatch, waits known); two sends with no recv
    in the frame say nothing about waiting: no waits, still a transfer."""
    one = rank_collectives(load_file(NCCL_DATA)).iloc[:3]
    pair = pd.concat([one.assign(rank=0, op="send"), one.assign(rank=1, op="recv")], ignore_index=True)
    m = match_collectives(pair)
    assert m.mismatches.empty
    cm = collective_metrics(pair, m)
    assert cm.per_rank["wait_ns"].notna().all() and (cm.instances["factor"] == 1.0).all()
    alone = pd.concat([one.assign(rank=0, op="send"), one.assign(rank=1, op="send")], ignore_index=True)
    cm = collective_metrics(alone, match_collectives(alone))
    assert cm.per_rank["wait_ns"].isna().all() and cm.per_rank["arrival_wait_ns"].isna().all()
    assert (cm.instances["transfer_ns"] == (one["end_ns"] - one["start_ns"]).to_numpy()).all()


def test_seq_key_when_every_row_has_it() -> None:
    """With Kineto's ``Seq`` on every row of a group the key is (pg, Seq), so a rank whose window
    began one collective later still pairs correctly; one row without it and the group falls back
    to the ordinal, which then pairs the shifted rows wrongly (and says so)."""
    one = rank_collectives(load_file(NCCL_DATA)).assign(seq=lambda f: f["ordinal"] + 100)
    late = one.iloc[1:].assign(ordinal=lambda f: f["ordinal"] - 1)  # rank 1 missed the first one
    colls = pd.concat([one.assign(rank=0), late.assign(rank=1)], ignore_index=True)
    m = match_collectives(colls)
    assert m.key_kind == "seq"
    assert list(m.mismatches["kind"]) == ["missing"] and m.mismatches["key"].iloc[0] == 100
    assert m.coverage == pytest.approx(40 / 41)
    colls.loc[len(one) + 2, "seq"] = -1
    m = match_collectives(colls)
    assert m.key_kind == "ordinal" and {"dtype", "size"} <= set(m.mismatches["kind"])
