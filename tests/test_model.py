"""The trace model on real traces: links, nesting, steps, busy intervals, graph, idle attribution."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd
import pytest
from fixture_paths import HTA, TRACELENS

from traceadvisor import load, load_file
from traceadvisor.analyses import graph, idle
from traceadvisor.engine.registry import claims_of, discover
from traceadvisor.pipeline import summarize
from traceadvisor.trace import intervals
from traceadvisor.trace.cuda_api import BLOCKING_CALLS
from traceadvisor.trace.model import Trace

NCCL = HTA / "nccl_data.json.gz"
ALEXNET = HTA / "benchmark_result_2869224_1695835535_trace.json.gz"
SAMPLED0 = HTA / "sampled_rank-0.json.gz"
MI250 = HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
QWEN = TRACELENS / "h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


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
    # sampled traces were trimmed by Meta: no GPU annotations, so no annotation fallback either.
    t = load_file(SAMPLED0)
    assert not len(t.gpu_annotations)
    steps = t.steps.table
    assert (steps["gpu_basis"] == "launches").all()
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
    cp = graph.step_critical_path(nccl, step)
    assert cp is not None and cp.nodes
    r = nccl.steps.table.iloc[0]
    # The path ends at the step's last GPU work and its pieces add up to its length.
    assert cp.length_ns == sum(cp.time_by_kind_ns.values())
    assert cp.length_ns <= int(max(r["cpu_end_ns"], r["gpu_end_ns"]) - r["cpu_start_ns"])
    g = graph.dependency_graph(load_file(ALEXNET))
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
    g = graph.dependency_graph(t)
    fan = [g.g.out_degree(n) for n in g.g if n[0] == "runtime"]
    assert max(fan) >= 1
    launches = g.edges_of_kind("launch")
    assert len(launches) == int((t.gpu["launch"] >= 0).sum())


# -- idle attribution (traceadvisor/analyses/idle.py) ------------------------------------------------
FIXTURE_TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
ATTRIBUTED = [
    "planted_sync_in_loop",
    "planted_per_param_optimizer",
    "planted_dataloader_bound",
    "planted_launch_storm",
    "pair_pinned_before",
    "clean_cuda_graph",
    "train_step",
]


def _innermost(spans: pd.DataFrame, t: int) -> int:
    """Row of the innermost span holding ``t`` (latest start, then shortest), -1 if none."""
    c = spans[(spans["ts_ns"] <= t) & (spans["end_ns"] > t)]
    if not len(c):
        return -1
    return int(c.assign(neg=-c["dur_ns"]).sort_values(["ts_ns", "neg"], kind="stable").index[-1])


def _roots(ops: pd.DataFrame) -> pd.DataFrame:
    """Ops not inside an earlier op of the same thread, found one op at a time."""
    ops = ops.assign(neg=-ops["dur_ns"]).sort_values(["ts_ns", "neg"], kind="stable")
    keep, reach = [], -(2**62)
    for row, ts, end in zip(ops.index, ops["ts_ns"], ops["end_ns"], strict=True):
        if ts >= reach:
            keep.append(row)
        reach = max(reach, end)
    return ops.loc[keep]


def _reference_cause(t: Trace, gs: int, ge: int) -> tuple[str, str, int, int, int]:
    """One gap's (cause, detail, host_row, blocking_row, host_events) by idle.py's rules, the slow way."""
    if ge - gs <= idle.LAUNCH_LATENCY_NS:
        return ("launch_latency", "", -1, -1, 0)
    g = t.gpu[(t.gpu["device"] == t.device_ids[0]) & (t.gpu["ts_ns"] >= ge)].sort_values("ts_ns", kind="stable")
    launch = int(g["launch"].iloc[0]) if len(g) else -1
    if launch < 0:
        return ("unknown", "next work has no launch record", -1, -1, 0)
    call = t.runtime.loc[launch]
    graph = str(call["name"]) in idle.GRAPH_LAUNCHES
    if not (call["ts_ns"] > gs or (call["end_ns"] > gs and not graph)):
        return ("unknown", "next work already queued (GPU-side wait)", -1, -1, 0)
    host = t.host[(t.host["pid"] == call["pid"]) & (t.host["tid"] == call["tid"])]
    frames = t.frames[(t.frames["pid"] == call["pid"]) & (t.frames["tid"] == call["tid"])]
    events = int(((host["ts_ns"] >= gs) & (host["ts_ns"] < ge)).sum())
    events += int(((frames["ts_ns"] >= gs) & (frames["ts_ns"] < ge)).sum())
    a, b = gs, max(int(call["ts_ns"]), gs)
    mid = a + (b - a) // 2
    names = host["name"].astype(str)
    ann = host[host["is_annotation"]]
    ops = host[~host["is_annotation"]]

    def name(row: int) -> str:
        return str(t.host.at[row, "name"])

    row = _innermost(ann[names[ann.index].str.contains(idle.DATA_LOADER_MARK)], mid)
    if row >= 0:
        return ("data_loading", name(row), row, -1, events)
    rt = t.runtime
    calls = rt[(rt["pid"] == call["pid"]) & (rt["tid"] == call["tid"]) & rt["name"].astype(str).isin(BLOCKING_CALLS)]
    hit = calls[(calls["end_ns"] > a) & (calls["ts_ns"] < max(b, a + 1))]
    if len(hit):
        first = hit.sort_values("end_ns").index[0]
        return ("sync", str(rt.at[first, "name"]), -1, int(first), events)
    roots = _roots(ops)
    root = _innermost(roots, a)
    if root >= 0:
        inside = calls[(calls["ts_ns"] >= roots.at[root, "ts_ns"]) & (calls["ts_ns"] < a)]
        if len(inside):
            return ("sync", name(root), root, int(inside.sort_values("ts_ns").index[-1]), events)
    row = _innermost(ann[names[ann.index].str.startswith(idle.OPTIMIZER_MARK)], mid)
    if row >= 0:
        span = t.host.loc[row]
        multi = ops[names[ops.index].str.contains("_foreach_|_fused_")]
        if not ((multi["ts_ns"] >= span["ts_ns"]) & (multi["ts_ns"] < span["end_ns"])).any():
            return ("optimizer", name(row), row, -1, events)
    if b - a > idle.HOST_STALL_NS:
        root = _innermost(roots, mid)
        if root >= 0:
            cover = min(int(roots.at[root, "end_ns"]), b) - max(int(roots.at[root, "ts_ns"]), a)
            if 2 * cover >= b - a:
                return ("cpu_op", name(root), root, -1, events)
        region = _innermost(ann[~names[ann.index].str.startswith("ProfilerStep#")], mid)
        if region >= 0:
            return ("cpu_op", name(region), region, -1, events)
        return ("cpu_op", "several short CPU ops" if root >= 0 else idle.OUTSIDE_OPS, -1, -1, events)
    op = int(call["op"])
    return ("launch_bound", name(op) if op >= 0 else idle.OUTSIDE_OPS, op, -1, events)


@pytest.mark.parametrize("name", ATTRIBUTED)
def test_idle_attribution_matches_a_gap_by_gap_reference(name: str) -> None:
    """The vectorised attribution gives every gap the cause the documented rules give it one at a time."""
    t = load_file(FIXTURE_TRACES / f"{name}.json.gz")
    got = idle.idle_attribution(t)
    rng = np.random.default_rng(3)
    picks: list[int] = []
    for _, grp in got.groupby("cause"):  # up to 25 gaps of every cause, the longest and a random few
        picks += grp.nlargest(10, "dur_ns").index.tolist()
        picks += rng.choice(grp.index.to_numpy(), size=min(15, len(grp)), replace=False).tolist()
    for i in sorted(set(picks)):
        r = got.loc[i]
        want = _reference_cause(t, int(r["start_ns"]), int(r["end_ns"]))
        assert (r["cause"], r["detail"], r["host_row"], r["blocking_row"], r["host_events"]) == want, (name, i)


@pytest.fixture(scope="module")
def builtin_claims() -> dict[str, str | None]:
    """Idle cause → the built-in rule that claims it, as the engine computes it from the rules' ``claims``."""
    return claims_of(discover(include_entry_points=False))


@pytest.mark.parametrize("name", ATTRIBUTED)
def test_idle_breakdown_counts_every_idle_ns_once(name: str, builtin_claims: dict[str, str | None]) -> None:
    t = load_file(FIXTURE_TRACES / f"{name}.json.gz")
    summary = summarize(t, builtin_claims)
    gaps = idle.idle_attribution(t)
    assert set(gaps["cause"]) <= set(idle.CAUSES)
    assert (gaps["end_ns"].to_numpy()[:-1] <= gaps["start_ns"].to_numpy()[1:]).all()  # disjoint, in order
    rows = summary.idle_breakdown
    assert sum(round(b.idle_us * 1000) for b in rows) == round(summary.gpu_idle_us * 1000)
    assert sum(b.gaps for b in rows) == len(gaps)
    assert [b.idle_us for b in rows] == sorted((b.idle_us for b in rows), reverse=True)
    for b in rows:
        assert b.claimed_by == builtin_claims[b.cause]
        mine = gaps[(gaps["cause"] == b.cause) & (gaps["detail"] == b.top_detail)]
        assert round(b.top_detail_us * 1000) == int(mine["dur_ns"].sum())


def test_idle_breakdown_names_the_owner_from_the_claim_map_it_is_given() -> None:
    """The analyses know no rule names: a user rule claiming a cause shows in the breakdown."""
    gaps = idle.idle_attribution(load_file(FIXTURE_TRACES / "planted_sync_in_loop.json.gz"))
    mine = {"sync": "my-sync-rule"}
    rows = {b.cause: b.claimed_by for b in idle.breakdown(gaps, mine)}
    assert rows["sync"] == "my-sync-rule"
    assert all(owner is None for cause, owner in rows.items() if cause != "sync")
    assert not hasattr(idle, "CLAIMED_BY")


@pytest.mark.parametrize("name", sorted(p.name.removesuffix(".json.gz") for p in FIXTURE_TRACES.glob("clean_*")))
def test_clean_traces_idle_only_between_queued_work(name: str) -> None:
    """A well-fed GPU always has its next work queued: no idle is the host's (sync, loader, CPU, launches)."""
    causes = set(idle.idle_attribution(load_file(FIXTURE_TRACES / f"{name}.json.gz"))["cause"])
    assert causes <= {"launch_latency", "unknown"}, causes


@pytest.mark.parametrize(
    ("name", "cause", "share"),
    [
        ("planted_launch_storm", "launch_bound", 0.8),
        ("planted_per_param_optimizer", "optimizer", 0.5),
        ("planted_dataloader_bound", "data_loading", 0.9),
        ("planted_sync_in_loop", "sync", 0.3),
    ],
)
def test_planted_problem_gets_its_idle(name: str, cause: str, share: float) -> None:
    gaps = idle.idle_attribution(load_file(FIXTURE_TRACES / f"{name}.json.gz"))
    by_cause = gaps.groupby("cause")["dur_ns"].sum()
    assert by_cause[cause] >= share * by_cause.sum(), by_cause.to_dict()


def test_recoverable_idle_subtracts_the_profilers_events() -> None:
    gaps = pd.DataFrame({"dur_ns": [10_000, 2_000, 50_000], "host_events": [2, 1, 0]})
    assert idle.recoverable_ns(gaps, 3_000) == 4_000 + 0 + 50_000
    assert idle.recoverable_ns(gaps.iloc[:0]) == 0.0


# -- steps and ranks from damaged or odd files -----------------------------------------------------
PINNED = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "pair_pinned_after.json.gz"


def _pinned(tmp_path: Path, edit: Any, name: str = "steps.json") -> Path:
    """pair_pinned_after (CPU steps ProfilerStep#2, #3, #4) with its events edited by ``edit``."""
    doc = json.loads(gzip.decompress(PINNED.read_bytes()))
    edit(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _rename_cpu_step(old: str, new: str) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        for e in doc["traceEvents"]:
            if e.get("cat") == "user_annotation" and e.get("name") == old:
                e["name"] = new

    return edit


def test_step_number_beyond_int64_is_kept_with_a_warning(tmp_path: Path) -> None:
    huge = f"ProfilerStep#{2**70}"
    trace = load_file(_pinned(tmp_path, _rename_cpu_step("ProfilerStep#4", huge)))
    t = trace.steps.table
    assert t["name"].tolist() == ["ProfilerStep#2", "ProfilerStep#3", huge]
    assert t["step"].tolist() == [2, 3, 2**63 - 1]  # int64 for step_of; the name keeps the digits
    assert [w for w in trace.meta.warnings if "beyond int64" in w and huge in w]
    assert [s.name for s in summarize(trace, {}).steps] == t["name"].tolist()


def test_repeated_step_numbers_are_kept_apart_with_a_warning(tmp_path: Path) -> None:
    """Two ProfilerStep#2 at different times are two steps, not one spanning both; the same step
    recorded on two threads at once (overlapping) is still one."""
    want = load_file(PINNED).steps.table
    again = _rename_cpu_step("ProfilerStep#4", "ProfilerStep#2")

    def edit(doc: dict[str, Any]) -> None:
        again(doc)
        step3 = next(
            e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e["name"] == "ProfilerStep#3"
        )
        doc["traceEvents"].append({**step3, "tid": 999, "ts": step3["ts"] + 1, "dur": step3["dur"] + 5})

    trace = load_file(_pinned(tmp_path, edit))
    t = trace.steps.table
    assert t["name"].tolist() == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#2"]
    assert t["cpu_start_ns"].tolist() == want["cpu_start_ns"].tolist()
    ends = want["cpu_end_ns"].tolist()
    assert t["cpu_end_ns"].tolist() == [ends[0], ends[1] + 6_000, ends[2]]  # the copy on tid 999 ends 6 µs later
    assert [w for w in trace.meta.warnings if "step numbers repeat" in w and "ProfilerStep#2" in w]
    assert not [w for w in load_file(PINNED).meta.warnings if "repeat" in w]


def test_files_claiming_the_same_rank_are_warned_about(tmp_path: Path) -> None:
    def rank(n: int) -> Any:
        return lambda doc: doc.update(distributedInfo={"rank": n, "world_size": 8})

    a = _pinned(tmp_path, rank(3), "a.json")
    b = _pinned(tmp_path, rank(3), "b.json")
    c = _pinned(tmp_path, rank(4), "c.json")
    by_path = {t.meta.path: t for t in load([tmp_path])}
    assert [w for w in by_path[str(a)].meta.warnings if "rank 3" in w and str(b) in w]
    assert [w for w in by_path[str(b)].meta.warnings if "rank 3" in w and str(a) in w]
    assert not [w for w in by_path[str(c)].meta.warnings if "rank" in w]
