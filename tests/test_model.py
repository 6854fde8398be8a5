"""The trace model on real traces: links, nesting, steps, busy intervals, graph."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from traceadvisor import load_file
from traceadvisor.trace import intervals
from traceadvisor.trace.model import Trace

EXTERNAL = Path(__file__).resolve().parents[1].parent / "shared" / "external-traces"
NCCL = EXTERNAL / "hta" / "nccl_data.json.gz"
ALEXNET = EXTERNAL / "hta" / "benchmark_result_2869224_1695835535_trace.json.gz"
SAMPLED0 = EXTERNAL / "hta" / "sampled_rank-0.json.gz"
MI250 = EXTERNAL / "hta" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
QWEN = EXTERNAL / "tracelens" / "h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@pytest.fixture(scope="module")
def nccl() -> Trace:
    return load_file(NCCL)


def test_merge_and_covered_against_brute_force() -> None:
    rng = np.random.default_rng(7)
    starts = rng.integers(0, 10_000, 300)
    ends = starts + rng.integers(0, 200, 300)
    s, e = intervals.merge(starts, ends)
    grid = np.zeros(10_300, dtype=bool)
    for a, b in zip(starts, ends, strict=True):
        grid[a:b] = True
    assert int((e - s).sum()) == int(grid.sum())
    assert np.all(s[1:] > e[:-1])  # disjoint and not touching
    for lo, hi in [(0, 10_300), (500, 700), (1234, 1235), (9_000, 20_000)]:
        assert int(intervals.covered(s, e, lo, hi)[0]) == int(grid[lo:hi].sum())
    gs, ge = intervals.gaps(s, e, 500, 5_000)
    assert int((ge - gs).sum()) == 4_500 - int(grid[500:5_000].sum())


def test_runtime_gpu_links_by_correlation(nccl: Trace) -> None:
    k = nccl.kernels
    linked = k[k["launch"] >= 0]
    assert len(linked) == len(k)  # every kernel of this trace has its launch in the window
    rt = nccl.runtime.loc[linked["launch"]]
    assert (rt["correlation"].to_numpy() == linked["correlation"].to_numpy()).all()
    # A launch happens before its kernel starts.
    assert (rt["ts_ns"].to_numpy() <= linked["ts_ns"].to_numpy()).all()


def test_external_id_trust_follows_trace_era(nccl: Trace) -> None:
    # 2024 trace: External id names the op. 2023 AlexNet: External id == correlation (kineto#873).
    assert nccl.external_ids_trustworthy
    old = load_file(ALEXNET)
    assert not old.external_ids_trustworthy
    # Old traces still get their launches tied to ops by time nesting on the thread.
    rt = old.runtime[old.runtime["op"] >= 0]
    ops = old.host.loc[rt["op"]]
    assert len(rt) > 0
    assert (ops["ts_ns"].to_numpy() <= rt["ts_ns"].to_numpy()).all()
    assert (ops["end_ns"].to_numpy() >= rt["ts_ns"].to_numpy()).all()
    assert (ops["tid"].to_numpy() == rt["tid"].to_numpy()).all()


def test_launching_op_contains_the_launch(nccl: Trace) -> None:
    rt = nccl.runtime[nccl.runtime["op"] >= 0]
    ops = nccl.host.loc[rt["op"]]
    inside = (ops["ts_ns"].to_numpy() <= rt["ts_ns"].to_numpy()) & (ops["end_ns"].to_numpy() >= rt["end_ns"].to_numpy())
    assert inside.mean() > 0.99
    assert not ops["is_annotation"].any()


def test_nesting_parents_contain_children(nccl: Trace) -> None:
    nest = nccl.nesting
    child = nest[nest["parent"] >= 0]
    c = nccl.host.loc[child.index]
    p = nccl.host.loc[child["parent"]]
    assert (p["ts_ns"].to_numpy() <= c["ts_ns"].to_numpy()).all()
    assert (p["tid"].to_numpy() == c["tid"].to_numpy()).all()
    assert (nest.loc[child.index, "depth"].to_numpy() >= 1).all()


def test_steps_have_cpu_and_gpu_windows(nccl: Trace) -> None:
    t = nccl.steps.table
    assert list(t["step"]) == [4, 5, 6]
    # This trace mirrors DDP annotations on the GPU but not ProfilerStep: windows come from the
    # GPU work launched inside each CPU step.
    ga = nccl.gpu_annotations["name"].astype(str)
    assert not ga.str.startswith("ProfilerStep").any()
    assert (t["gpu_basis"] == "launches").all()
    assert (t["gpu_end_ns"] > t["gpu_start_ns"]).all()
    # The GPU work of a step runs after the step's CPU side began.
    assert (t["gpu_start_ns"] >= t["cpu_start_ns"]).all()


def test_gpu_window_from_launches_when_no_gpu_annotation() -> None:
    # sampled traces were trimmed by Meta; drop GPU annotations to force the fallback.
    t = load_file(SAMPLED0)
    t.gpu_annotations = t.gpu_annotations.iloc[0:0]
    steps = t.steps.table
    assert (steps["gpu_basis"] == "launches").all()
    t.links  # noqa: B018
    dev = t.device_ids[0]
    for row in steps.itertuples():
        g = t.gpu[(t.gpu["device"] == dev) & (t.gpu["launch"] >= 0)]
        launch_ts = t.runtime.loc[g["launch"], "ts_ns"].to_numpy()
        mine = g[(launch_ts >= row.cpu_start_ns) & (launch_ts < row.cpu_end_ns)]
        assert row.gpu_start_ns == mine["ts_ns"].min()
        assert row.gpu_end_ns == mine["end_ns"].max()


def test_rocm_trace_is_recognised() -> None:
    t = load_file(MI250)
    assert t.platform == "rocm"
    assert len(t.kernels) == 14


def test_graph_links_and_is_acyclic(nccl: Trace) -> None:
    step = int(nccl.steps.table["step"].iloc[0])
    cp = nccl.step_critical_path(step)
    assert cp is not None and cp.nodes
    r = nccl.steps.table.iloc[0]
    # The path ends at the step's last GPU work and its pieces add up to its length.
    assert cp.length_ns == sum(cp.time_by_kind_ns.values())
    assert cp.length_ns <= int(max(r["cpu_end_ns"], r["gpu_end_ns"]) - r["cpu_start_ns"])
    g = load_file(ALEXNET).graph
    assert nx.is_directed_acyclic_graph(g.g)
    kinds = {k for _, _, k in g.g.edges(data="kind")}
    assert {"nesting", "launch", "stream_order", "sync", "host_order"} <= kinds
    # sync edges go from GPU work to a blocking runtime call that ended after that work
    for u, v in g.edges_of_kind("sync"):
        assert u[0] == "gpu" and v[0] == "runtime"
        assert g.g.nodes[v]["end"] >= g.g.nodes[u]["end"]


def test_graph_launch_of_cuda_graph_has_many_kernels() -> None:
    # Qwen's trace has no graph launches; build one: all GPU work sharing a correlation hangs
    # off one runtime node.
    t = load_file(QWEN)
    g = t.graph
    fan = [g.g.out_degree(n) for n in g.g if n[0] == "runtime"]
    assert max(fan) >= 1
    launches = g.edges_of_kind("launch")
    assert len(launches) == int((t.gpu["launch"] >= 0).sum())
