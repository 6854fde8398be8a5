"""The rule-author helpers (traceadvisor/rule_helpers.py) on real traces (fixtures/traces, fixtures/external).

Each helper is checked against an independent computation (a plain loop over the trace's rows, or
figures read off the fixture), so a helper that drifted from what the rules computed inline fails.
"""

from __future__ import annotations

import json
from fractions import Fraction
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
from fixture_paths import FIXTURE_TRACES, HTA, REPO

from traceadvisor import load_file
from traceadvisor.analyses.idle import IdleCause, idle_attribution, recoverable_ns
from traceadvisor.report.finding import Location
from traceadvisor.rule_helpers import (
    PROFILER_EVENT_US,
    ClaimedIdle,
    at_source,
    busy_in_windows,
    category_mask,
    distinct_signatures,
    event_location,
    evidence_of,
    fmt_ms,
    fmt_us,
    idle_of,
    in_steps,
    launch_location,
    names_at,
    op_location,
    pct,
    plural,
    profiler_ns_per_gap,
    recoverable_per_gap,
    share_of_steps,
    signature_codes,
    step_positions,
    steps_on_gpu,
    us,
    worth_reporting,
)
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.profiler_cost import unprofiled_overrides

SYNC = FIXTURE_TRACES / "planted_sync_in_loop.json.gz"  # 3 steps, with_stack, record_shapes, syncs in the loop
STORM = FIXTURE_TRACES / "planted_launch_storm.json.gz"  # 2 steps, many small launches
NO_STEPS = HTA / "benchmark_result_2869224_1695835535_trace.json.gz"  # no ProfilerStep, no Python stack


@cache
def _trace(path: Path) -> Trace:
    return load_file(path)


def _in_any(ts: int, starts: list[int], ends: list[int]) -> bool:
    return any(s <= ts < e for s, e in zip(starts, ends, strict=True))


# -- time and shares ---------------------------------------------------------------------------
def test_time_formatting_keeps_nanoseconds_and_rounds_only_text() -> None:
    ns = _trace(SYNC).analysed_ns
    assert ns == 34_557_452
    assert us(ns) == 34557.452 and type(us(np.int64(ns))) is float
    assert fmt_us(ns) == "34557.5 µs" and fmt_us(ns, 3) == "34557.452 µs"
    assert fmt_ms(ns) == "34.56 ms"
    assert pct(ns / 4, ns) == 25.0 and pct(5, 0) == 0.0
    assert plural(0, "chain") == "0 chains" and plural(1, "chain") == "1 chain" and plural(3, "chain") == "3 chains"


def test_worth_reporting_is_a_share_of_the_analysed_steps() -> None:
    t = _trace(SYNC)
    two_pct = t.analysed_ns * 0.02
    assert share_of_steps(t, t.analysed_ns / 4) == 25.0
    assert worth_reporting(t, two_pct, 2.0)
    assert not worth_reporting(t, two_pct - 1, 2.0)


def test_nothing_is_worth_reporting_in_a_trace_without_analysed_time(tmp_path: Path) -> None:
    path = tmp_path / "one_op.json"
    path.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 0}]}'
    )
    t = load_file(path)
    assert t.analysed_ns == 0
    assert share_of_steps(t, 1e9) == 0.0
    assert not worth_reporting(t, 1e9, 0.0)


# -- steps -------------------------------------------------------------------------------------
def test_in_steps_keeps_exactly_the_rows_inside_a_step_cpu_window() -> None:
    t = _trace(SYNC)
    steps = t.steps.table
    starts, ends = steps["cpu_start_ns"].tolist(), steps["cpu_end_ns"].tolist()
    rt = t.runtime
    kept = in_steps(t, rt)
    inside = [i for i, ts in zip(rt.index, rt["ts_ns"].tolist(), strict=True) if _in_any(ts, starts, ends)]
    assert kept.index.tolist() == inside
    assert 0 < len(kept) < len(rt)  # the profiler's calls after the last step are left out


def test_in_steps_counts_step_zero_as_a_step(tmp_path: Path) -> None:
    # The bundled traces' schedules start at step 2; a trace profiled from its first iteration has
    # ProfilerStep#0, whose number must not read as "outside every step".
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 200, "dur": 5},
    ]
    path = tmp_path / "step0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = load_file(path)
    assert t.steps.table["step"].tolist() == [0]
    assert in_steps(t, t.ops)["name"].astype(str).tolist() == ["aten::add"]


def test_in_steps_keeps_every_row_of_a_trace_without_steps() -> None:
    t = _trace(NO_STEPS)
    assert len(t.steps) == 0 and len(t.runtime) > 0
    assert in_steps(t, t.runtime).index.equals(t.runtime.index)


def test_step_positions_are_positions_in_the_given_steps() -> None:
    t = _trace(STORM)
    steps = steps_on_gpu(t)
    assert isinstance(steps.index, pd.RangeIndex) and (steps["gpu_start_ns"] >= 0).all()
    later = steps.iloc[1:].reset_index(drop=True)  # a subset: times in the first step fall outside it
    ts = t.runtime["ts_ns"].to_numpy()
    pos = step_positions(t, later, ts)
    starts, ends = later["cpu_start_ns"].tolist(), later["cpu_end_ns"].tolist()
    expected = [next((i for i, (s, e) in enumerate(zip(starts, ends, strict=True)) if s <= x < e), -1) for x in ts]
    assert pos.tolist() == expected
    assert (pos == 0).any() and (pos == -1).any()
    in_first = (ts >= steps.at[0, "cpu_start_ns"]) & (ts < steps.at[0, "cpu_end_ns"])
    assert in_first.any() and (pos[in_first] == -1).all()


def test_busy_in_windows_is_the_union_of_gpu_work_inside_each_window() -> None:
    t = _trace(SYNC)
    dev = t.device_ids[0]
    steps = steps_on_gpu(t)
    lo, hi = steps["gpu_start_ns"].to_numpy(), steps["gpu_end_ns"].to_numpy()
    got = busy_in_windows(t, dev, lo, hi)
    g = t.gpu[t.gpu["device"] == dev]
    for i in range(len(steps)):
        # Brute force: clip every GPU op to the window, then merge in Python.
        spans = sorted(
            (max(s, int(lo[i])), min(e, int(hi[i])))
            for s, e in zip(g["ts_ns"].tolist(), g["end_ns"].tolist(), strict=True)
            if s < hi[i] and e > lo[i]
        )
        total, cur_s, cur_e = 0, None, None
        for s, e in spans:
            if cur_e is None or s > cur_e:
                total += 0 if cur_e is None else cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        total += 0 if cur_e is None else cur_e - cur_s
        assert int(got[i]) == total > 0


# -- idle claimed by a rule --------------------------------------------------------------------
def test_idle_of_selects_the_causes_in_time_order() -> None:
    t = _trace(SYNC)
    gaps = idle_attribution(t)
    sync = idle_of(t, IdleCause.sync)
    both = idle_of(t, IdleCause.sync, IdleCause.launch_bound)
    assert len(sync) == int((gaps["cause"] == "sync").sum()) == 173
    assert set(sync["cause"]) == {"sync"}
    assert len(both) == len(sync) + int((gaps["cause"] == "launch_bound").sum())
    assert both["start_ns"].is_monotonic_increasing
    assert len(idle_of(t, IdleCause.data_loading)) == 0


def test_recoverable_idle_subtracts_the_profiler_cost_per_recorded_event() -> None:
    t = _trace(SYNC)
    gaps = idle_of(t, IdleCause.sync)
    per_gap = recoverable_per_gap(gaps, PROFILER_EVENT_US)
    for dur, events, got in zip(gaps["dur_ns"].tolist(), gaps["host_events"].tolist(), per_gap.tolist(), strict=True):
        assert got == max(dur - events * 3000, 0)
    assert (per_gap < gaps["dur_ns"].to_numpy()).any()  # some gaps do hold recorded events
    assert recoverable_per_gap(gaps, 0.0).tolist() == gaps["dur_ns"].astype(float).tolist()
    claimed = ClaimedIdle.of(gaps, PROFILER_EVENT_US)
    assert claimed.raw_ns == 8_974_686 and claimed.recoverable_ns == 6_133_686.0
    assert claimed.recoverable_ns == recoverable_ns(gaps, 3000)
    assert ClaimedIdle.of(idle_of(t, IdleCause.data_loading), 3.0).recoverable_ns == 0.0


def test_the_fitted_per_kind_costs_take_the_profiler_out_of_each_gap() -> None:
    """ClaimedIdle without a flat cost: each gap less what the unprofiled replay removes inside it
    (every recorded event at its kind's fitted cost, the profiler's work at each prof.step()). A
    Python frame costs the profiler far less than an op (docs/whatif.md), so in the storm's eager
    loop with stacks, where the gaps are full of frames, the flat 3 µs per event explains many gaps
    away entirely that the fitted costs keep."""
    t = load_file(FIXTURE_TRACES / "p12_storm_before_stack.json.gz")
    gaps = idle_attribution(t)
    gaps = gaps[gaps["dur_ns"] >= 5000]
    cost = profiler_ns_per_gap(t, gaps)
    dur = gaps["dur_ns"].to_numpy().astype(float)
    assert (cost >= 0).all() and (cost > 0).any()
    removed = unprofiled_overrides(t).host_removed
    assert cost.sum() <= sum(int(v[1][-1]) for v in removed.points.values()) + sum(
        r.end_ns - r.start_ns for r in removed.regions
    )
    flat = gaps["host_events"].to_numpy() * 3000.0
    assert int((flat >= dur).sum()) > 2 * int((cost >= dur).sum())
    claimed = ClaimedIdle.of(gaps, None, t)
    assert claimed.recoverable_ns == float(np.maximum(dur - cost, 0.0).sum())
    assert claimed.recoverable_ns > ClaimedIdle.of(gaps, PROFILER_EVENT_US).recoverable_ns


# -- evidence and source locations -------------------------------------------------------------
def test_evidence_of_names_rows_and_converts_their_times_to_us() -> None:
    k = _trace(STORM).kernels
    top = k.nlargest(5, "dur_ns")
    ev = evidence_of(top, (f"kernel {n}" for n in top["name"].astype(str)))
    assert [e.name for e in ev] == [f"kernel {n}" for n in top["name"].astype(str)]
    assert [e.ts_us for e in ev] == [ts / 1000 for ts in top["ts_ns"].tolist()]
    assert [e.dur_us for e in ev] == [d / 1000 for d in top["dur_ns"].tolist()]
    assert all(e.stream is None for e in ev)
    assert [e.stream for e in evidence_of(top, ["x"] * 5, stream=True)] == top["stream"].tolist()
    gaps = idle_of(_trace(SYNC), IdleCause.sync).head(2)
    assert [e.ts_us for e in evidence_of(gaps, ["a", "b"], start="start_ns")] == [
        s / 1000 for s in gaps["start_ns"].tolist()
    ]


def test_evidence_times_round_once_on_an_epoch_clock() -> None:
    # HTA's rank0 trace counts nanoseconds since 1970: beyond 2**53, where a float holds no odd integer.
    gaps = idle_attribution(_trace(HTA / "rank0.json.gz")).nlargest(50, "dur_ns")
    starts = gaps["start_ns"].tolist()
    assert min(starts) > 2**53
    ev = evidence_of(gaps, ["gap"] * len(gaps), start="start_ns")
    assert [e.ts_us for e in ev] == [float(Fraction(s, 1000)) for s in starts]  # the exact quotient, rounded once
    assert any(e.ts_us != float(s) / 1000 for e, s in zip(ev, starts, strict=True))


def test_locations_point_at_the_user_line_of_the_event() -> None:
    t = _trace(SYNC)
    syncs = in_steps(t, t.runtime[t.runtime["name"].astype(str) == "cudaStreamSynchronize"])
    first = syncs.iloc[0]
    loc = event_location(t, first)
    # Line 505 is `def step():`: the profiler names a frame by its function's first line.
    assert loc == Location(file="capture_gpu.py", line=505, function="step", line_kind="function_start")
    assert launch_location(t, int(syncs.index[0])) == loc
    assert at_source(loc) == " in step (defined at capture_gpu.py:505)" and at_source(None) == ""
    # Before the trace's first event no Python frame is active: no line.
    assert event_location(t, first, at_ns=int(t.frames["ts_ns"].min()) - 1) is None
    k = t.kernels[t.kernels["op"] >= 0].iloc[0]
    op_loc = op_location(t, int(k["op"]))
    assert op_loc is not None and op_loc.file == "capture_gpu.py"
    assert op_location(t, -1) is None and launch_location(t, -1) is None
    no_stack = _trace(NO_STEPS)
    assert event_location(no_stack, no_stack.runtime.iloc[0]) is None


# -- names and signatures ----------------------------------------------------------------------
def test_category_mask_tests_each_name_once_and_rows_without_a_name_are_false() -> None:
    k = _trace(STORM).kernels
    names = k["name"]
    assert isinstance(names.dtype, pd.CategoricalDtype)
    mask = category_mask(names, lambda n: n.str.contains("elementwise", regex=False))
    assert mask.tolist() == ["elementwise" in str(n) for n in names]
    assert 0 < mask.sum() < len(k)
    unnamed = pd.Series(pd.Categorical([names.iloc[0], None], categories=names.cat.categories))
    assert category_mask(unnamed, lambda n: n.str.len() > 0).tolist() == [True, False]
    assert category_mask(names.astype(str), lambda n: n.str.contains("elementwise", regex=False)).tolist() == (
        mask.tolist()
    )


def test_names_at_reads_the_names_of_positions() -> None:
    host = _trace(SYNC).host
    pos = np.array([0, 5, len(host) - 1], dtype=np.intp)
    assert names_at(host, pos) == [str(host["name"].iloc[p]) for p in pos]
    unnamed = pd.DataFrame({"name": pd.Categorical(["aten::mm", None])})
    assert names_at(unnamed, np.array([1, 0], dtype=np.intp)) == ["", "aten::mm"]


def test_distinct_signatures_number_name_and_shapes_in_order_of_first_appearance() -> None:
    host = _trace(SYNC).host
    pos = np.flatnonzero(host["input_dims"].notna().to_numpy())
    sig, first = distinct_signatures(host, pos, ("input_dims",))
    assert np.array_equal(sig, signature_codes(host, pos, ("input_dims",)))
    keys = [(str(host["name"].iloc[p]), str(host["input_dims"].iloc[p])) for p in pos]
    order: dict[tuple[str, str], int] = {}
    for key in keys:
        order.setdefault(key, len(order))
    assert sig.tolist() == [order[key] for key in keys]
    assert 1 < len(first) < len(pos)  # a loop repeats its shapes
    assert first.tolist() == [pos[keys.index(key)] for key in order]


def test_sync_point_idle_takes_out_the_fitted_costs_and_comes_nearer_the_measured_saving() -> None:
    """sync-point's recoverable idle (the idle figure beside its replayed saving) takes the fitted
    per-kind costs out of each gap, as idle-gap does: on item_gpu's trace with stacks (an H100
    capture of fixtures/pairs12.json) that is nearer what removing the `.item()` saved when timed
    (before minus after step) than the flat 3 µs a recorded event, and never above the raw idle."""
    from traceadvisor.config import Config
    from traceadvisor.pipeline import analyze

    pair = json.loads((REPO / "fixtures" / "pairs12.json").read_text())["pairs"]["item_gpu"]
    measured = pair["before_step_us"]["median"] - pair["after_step_us"]["median"]
    trace = FIXTURE_TRACES / pair["traces"]["before_stack"]["file"]

    def sync_point(options: dict[str, float]) -> dict[str, float]:
        config = Config(select=["SY101"], rule_options={"SY101": options})
        found = [f for f in analyze([trace], config).findings if f.code == "SY101"]
        assert len(found) == 1
        return found[0].data

    fitted, flat = sync_point({}), sync_point({"profiler_event_us": PROFILER_EVENT_US})
    assert fitted["idle_us"] == flat["idle_us"]  # the same gaps
    assert flat["recoverable_us"] < fitted["recoverable_us"] < fitted["idle_us"]
    steps = len(load_file(trace).steps.table)
    assert abs(fitted["recoverable_us"] / steps - measured) < abs(flat["recoverable_us"] / steps - measured)
