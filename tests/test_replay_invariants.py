"""Invariants of the replay and of every finding, over every real trace (issue 12, "Must show").

For each trace of ``fixtures/traces/`` and ``fixtures/external/``, analysed once (``_report``), and
for the replay alone, each trace of the GPU pairs' other runs (``fixtures/pairs12_runs/run_N/traces/``):

* the replay of the unchanged trace reproduces each step's measured span within 2%
  (``traces[].replay_error_pct``), except the known exceptions below, each asserted as one;
* no finding claims more than the step: a replayed saving is at most the predicted unprofiled step,
  every share is at most 100%, and an idle claim is at most the idle the predicted unprofiled steps
  leave (steps x (step - GPU busy per step));
* the predicted unprofiled step is positive and never longer than the profiled one (taking the
  profiler's host cost out never slows a step).
"""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from fixture_paths import FIXTURE_TRACES, HTA, external_traces

from traceadvisor.pipeline import analyze
from traceadvisor.report.model import Report
from traceadvisor.trace.load import load_file
from traceadvisor.whatif.batch import scaled_durations
from traceadvisor.whatif.host_time import HostTimeMap, Region, process_key
from traceadvisor.whatif.replay import replay, replay_error_pct
from traceadvisor.whatif.savings import scenario_saving

MAX_REPLAY_ERROR_PCT = 2.0
# The predicted unprofiled step may exceed the profiled one by the replay's own error at most.
STEP_SLACK = 1.0 + MAX_REPLAY_ERROR_PCT / 100.0
IDLE_RULES = ("idle-gap", "data-loader-bound")

TRACES = sorted(FIXTURE_TRACES.glob("*.json.gz")) + external_traces()
IDS = [str(p.relative_to(p.parents[1])) for p in TRACES]

# Traces whose replay misses a step by more than MAX_REPLAY_ERROR_PCT, with the measured reason.
KNOWN_REPLAY_ERRORS: dict[str, str] = {}


@functools.cache
def _report(path: Path) -> Report:
    """One analysis per trace, shared by the tests of this module."""
    return analyze([path])


@pytest.mark.parametrize("path", TRACES, ids=IDS)
def test_replay_error_within_two_percent(path: Path) -> None:
    key = str(path.relative_to(path.parents[1]))
    err = _report(path).traces[0].replay_error_pct
    if key in KNOWN_REPLAY_ERRORS:
        # asserted as an exception: a fix of the replay makes this fail, and the entry goes
        assert err is not None and err > MAX_REPLAY_ERROR_PCT, f"{key} now replays within 2%: drop its exception"
        pytest.xfail(KNOWN_REPLAY_ERRORS[key])
    assert err is None or err <= MAX_REPLAY_ERROR_PCT, f"{key}: replay error {err:.2f}%"


# The GPU pairs' other runs (fixtures/pairs12_runs/run_N/traces/) and the post-sync windows of the
# no-sync pairs' loops (fixtures/post_sync/traces/): the replay alone (a whole analysis
# of each of the 150-odd would add minutes to the suite for findings the main fixture's traces
# already cover). fixtures/wrapper_length/'s traces have no steps (two forwards, no schedule).
RUN_TRACES = sorted((FIXTURE_TRACES.parent / "pairs12_runs").glob("run_*/traces/*.json.gz")) + sorted(
    (FIXTURE_TRACES.parent / "post_sync" / "traces").glob("*.json.gz")
)


@pytest.mark.parametrize("path", RUN_TRACES, ids=[str(p.relative_to(p.parents[2])) for p in RUN_TRACES])
def test_other_runs_replay_within_two_percent(path: Path) -> None:
    err = replay_error_pct(load_file(path))
    assert err is not None, "a GPU pair's trace has steps"
    assert err <= MAX_REPLAY_ERROR_PCT, f"replay error {err:.2f}%"


@pytest.mark.parametrize("path", TRACES, ids=IDS)
def test_no_finding_claims_more_than_the_step(path: Path) -> None:
    rep = _report(path)
    summary = rep.traces[0]
    predicted = summary.unprofiled_step_us
    for f in rep.findings:
        if f.impact is None:
            continue
        assert f.impact.share_pct <= 100.0, f"{f.rule}: share {f.impact.share_pct:.1f}%"
        if f.impact.saving_per_step_us is not None:
            # without steps there is no step to save from: a replayed saving there can only be 0
            # (sync-point on HTA's step-less benchmark trace reports one; its owner is told)
            limit = predicted if predicted is not None else 0.0
            if predicted is None and summary.platform == "cpu" and summary.measured_unprofiled_step_us is not None:
                # a CPU-only trace is not replayed (no GPU timeline): its measured unprofiled step bounds it
                limit = summary.measured_unprofiled_step_us.median_us
            assert 0.0 <= f.impact.saving_per_step_us <= limit, f"{f.rule}: {f.impact.saving_per_step_us} µs"
        if f.rule in IDLE_RULES and summary.step_time is not None and predicted is not None:
            steps = sum(1 for s in summary.steps if s.gpu_start_us is not None)
            cap = steps * max(0.0, predicted - summary.step_time.gpu_busy_per_step_us)
            assert f.impact.time_us <= cap + 0.01, f"{f.rule}: {f.impact.time_us} µs of idle, at most {cap}"


@pytest.mark.parametrize("path", TRACES, ids=IDS)
def test_predicted_unprofiled_step_is_positive_and_not_longer(path: Path) -> None:
    st = _report(path).traces[0].step_time
    if st is None:
        assert not _report(path).traces[0].steps or _report(path).traces[0].device is None
        return
    assert st.unprofiled_step_us is not None
    assert 0.0 < st.unprofiled_step_us <= st.profiled_step_us * STEP_SLACK


def test_event_wait_on_work_queued_before_the_window() -> None:
    """HTA's rank0: the first fbgemm kernel on side stream 27 waits (cudaStreamWaitEvent, no stream
    named) for ~150 ms of default-stream work queued before the profiler's window. The inferred
    wait paired it with a later launch (which started after it), was dropped, and the kernel
    replayed 136.7 ms early; it now waits for the pre-window work and starts when measured."""
    trace = load_file(HTA / "rank0.json.gz")
    g = trace.gpu
    pre_window_end = int(g[(g["stream"] == 7) & (g["launch"] < 0)]["end_ns"].max())
    side = g[(g["stream"] == 27) & (g["launch"] >= 0) & (g["ts_ns"] >= pre_window_end)]
    first = int(side["ts_ns"].idxmin())
    assert int(g.at[first, "ts_ns"]) - pre_window_end < 20_000  # it ran right after that work
    launched = int(trace.runtime.at[int(g.at[first, "launch"]), "end_ns"])
    assert pre_window_end - launched > 100_000_000  # launched 138 ms before it could run
    r = replay(trace)
    assert abs(int(r.gpu_start_ns[first]) - int(g.at[first, "ts_ns"])) < 1_000


def test_idle_claim_capped_by_the_unprofiled_step() -> None:
    """p12_decode_after_stack (a CUDA-graph decode loop with stacks on): idle-gap claimed 9.9 ms of
    idle over 2 steps whose predicted unprofiled step was 6.3 ms with 5.4 ms of GPU work each: more
    idle than the steps can hold. The claim is at most 2 x (predicted step - GPU work). Since a
    graph's nodes run closer together without the profiler (scenarios.GRAPH_NODE_PROFILER_NS) the
    predicted step is 5.78 ms, 1.7% under the 5.88 ms measured, and the cap under 1 ms."""
    rep = _report(FIXTURE_TRACES / "p12_decode_after_stack.json.gz")
    st = rep.traces[0].step_time
    assert st is not None and st.unprofiled_step_us is not None
    measured = json.loads((FIXTURE_TRACES.parent / "pairs12.json").read_text())["pairs"]["decode"]["after_step_us"]
    assert abs(st.unprofiled_step_us - measured["median"]) <= 0.03 * measured["median"]
    cap = 2 * (st.unprofiled_step_us - st.gpu_busy_per_step_us)
    idle = [f for f in rep.findings if f.rule == "idle-gap"]
    assert all(f.impact is not None and f.impact.time_us <= cap + 0.01 for f in idle)  # µs rounded to the ns
    assert 300 < cap < 1_500


# -- batch-size: the scenario and the rule on the GPT pair ----------------------------------------
# Run 14: timed with CUPTI detached after each capture (the main fixture's gpt_batch, timed with it
# left attached, measured 47.1% a sample: every launch of the small batch's step paid its callbacks).
CLEAN_RUN = FIXTURE_TRACES.parent / "pairs12_runs" / "run_14"
GPT_BEFORE = CLEAN_RUN / "traces" / "p12_gpt_batch_before_stack.json.gz"
GPT_PAIR = json.loads((CLEAN_RUN / "pairs12.json").read_text())["pairs"]["gpt_batch"]


def test_doubled_batch_gpu_time_matches_the_captured_batch() -> None:
    """The scenario's GPU time at twice the batch, from the batch-16 trace alone, against the
    batch-32 capture's (validation: nothing was fitted on this pair): 39.75 vs 40.25 ms. The main
    fixture's pair: kernel durations do not depend on CUPTI, and both of its windows hold the same
    steps' GPU work (run 14's batch-32 step is GPU-bound, so its window also holds the backlog)."""
    before = load_file(FIXTURE_TRACES / "p12_gpt_batch_before_stack.json.gz")
    after = load_file(FIXTURE_TRACES / "p12_gpt_batch_after_stack.json.gz")
    rows, new = scaled_durations(before)
    dur = (before.gpu["end_ns"] - before.gpu["ts_ns"]).to_numpy()
    predicted = float(dur.sum() - dur[rows].sum() + new.sum())
    measured = float((after.gpu["end_ns"] - after.gpu["ts_ns"]).sum())
    assert abs(predicted - measured) / measured < 0.05
    # the optimizer's fused AdamW kernels do not grow; every grown record at most doubles
    names = before.gpu["name"].astype(str).to_numpy()
    assert not any("adamw" in n.lower() for n in names[rows])
    assert np.all(new >= dur[rows]) and np.all(new <= 2 * dur[rows])


def test_doubled_batch_time_per_sample_on_the_gpt_pair() -> None:
    """gpt_batch (run 14, validation): 16 -> 32 sequences measured 10.2% less time per sample; the
    replay predicts it within 20%, and the step at batch 32 within 10% of the one measured."""
    s = scenario_saving(load_file(GPT_BEFORE), "batch-size")
    assert s.refused is None
    per_sample_pct = (s.before_ns - s.after_ns / 2) / s.before_ns * 100
    measured = GPT_PAIR["measured_saving_pct"]
    assert abs(per_sample_pct - measured) / measured < 0.2, (per_sample_pct, measured)
    assert s.after_ns / 1e3 == pytest.approx(GPT_PAIR["after_step_us"]["median"], rel=0.10)


def test_batch_size_rule_fires_on_the_gpt_trainer() -> None:
    rep = _report(GPT_BEFORE)
    found = [f for f in rep.findings if f.rule == "batch-size"]
    assert len(found) == 1
    f = found[0]
    assert f.impact is None  # not a saving on the same work: not ranked against the fixes
    measured = GPT_PAIR["measured_saving_pct"]
    assert f.data["scenario"] == "batch-size" and abs(f.data["per_sample_gain_pct"] - measured) < 0.2 * measured
    assert f.data["peak_pct"] < 30.0
    assert "twice the batch" in f.message and "memory" in f.message.lower()


@pytest.mark.parametrize("name", ["benchmark_result_2869224_1695835535_trace.json.gz", "eager_trace.json.gz"])
def test_batch_size_rule_silent_without_steps(name: str) -> None:
    path = next(p for p in TRACES if p.name == name)
    assert not _report(path).traces[0].steps
    assert not [f for f in _report(path).findings if f.rule == "batch-size"]


def test_batch_size_rule_silent_on_a_cpu_trace(tmp_path: Path) -> None:
    """A trace with steps but no GPU: the scenario refuses (nothing grows with the batch)."""
    step = {"ph": "X", "cat": "user_annotation", "dur": 900, "pid": 1, "tid": 1}
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 500, "pid": 1, "tid": 1}
    events = [{**step, "name": f"ProfilerStep#{i}", "ts": 1000 * i} for i in range(3)]
    events += [{**op, "ts": 1000 * i + 10} for i in range(3)]
    path = tmp_path / "cpu.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    rep = analyze([path])
    assert rep.traces[0].steps
    assert not [f for f in rep.findings if f.rule == "batch-size"]
    assert scenario_saving(load_file(path), "batch-size").refused is not None


# -- host time removal: the regions' lookup ---------------------------------------------------------
def _removed_one_region_at_a_time(m: HostTimeMap, thread: int, t: np.ndarray) -> np.ndarray:
    """The definition: point costs, then each region's removed time clipped to how far ``t`` is past
    its compressed start (what HostTimeMap.removed computed with a loop over regions)."""
    out = HostTimeMap(m.points).removed(thread, t)
    compressed = t - out
    for r in m.regions:
        if process_key(r.thread) != process_key(thread):
            continue
        ends = np.array([r.start_ns, r.end_ns], dtype=np.int64)
        c0, c1 = (ends - HostTimeMap(m.points).removed(thread, ends)).tolist()
        out = out + np.clip(compressed - c0, 0, max(0, c1 - c0 - r.keep_ns))
    return out


@pytest.mark.parametrize("overlapping", [False, True])
def test_region_lookup_equals_the_sum_over_regions(overlapping: bool) -> None:
    """Disjoint regions (one scenario's) take two lookups instead of a loop over regions (6,330 in
    the channels-last replay of the 100 MB trace: 1.99 s of analyze's 2.19 s of replays); regions
    that overlap (scenarios combined) are summed one by one. Both equal the definition."""
    rng = np.random.default_rng(12)
    proc = 7 << 32
    for _ in range(100):
        ts = np.sort(rng.integers(0, 20_000, int(rng.integers(0, 60)))).astype(np.int64)
        points = {proc: (ts, np.cumsum(rng.integers(0, 30, len(ts))).astype(np.int64))} if len(ts) else {}
        regions, t0 = [], 0
        for _ in range(int(rng.integers(1, 15))):
            a = int(rng.integers(0, 20_000)) if overlapping else t0 + int(rng.integers(0, 900))
            t0 = a + int(rng.integers(0, 1_200))
            regions.append(Region(proc + int(rng.integers(0, 3)), a, t0, int(rng.integers(0, 400))))
        m = HostTimeMap(points, tuple(regions))
        t = rng.integers(-500, 25_000, 300).astype(np.int64)
        assert np.array_equal(m.removed(proc + 1, t), _removed_one_region_at_a_time(m, proc + 1, t))


BEFORE_TRACES = sorted(FIXTURE_TRACES.glob("p12_*_before_stack.json.gz")) + sorted(
    FIXTURE_TRACES.glob("pair_*_before.json.gz")
)


@pytest.mark.parametrize("path", BEFORE_TRACES, ids=[p.name for p in BEFORE_TRACES])
def test_every_scenario_keeps_each_stream_in_order(path: Path) -> None:
    """A CUDA stream runs its work in order: in every scenario's replay no record starts before the
    one ahead of it on its stream has ended. A negative release delay (a launch call that returned
    after its record had started: a launch queue full, a pageable copy's staging) once started
    records up to 5.3 ms early (p12_gpt_pad_vocab_before's unprofiled replay) and let the pinned
    scenario run a step's copies at once."""
    from traceadvisor.whatif.refused import Refused
    from traceadvisor.whatif.savings import with_profiler_removed
    from traceadvisor.whatif.scenarios import SCENARIOS

    trace = load_file(path)
    if not len(trace.steps.table):
        pytest.skip("no steps: no scenario applies")
    gpu = trace.gpu
    launched = np.flatnonzero(gpu["launch"].to_numpy() >= 0)
    streams = gpu.iloc[launched].groupby(["device", "stream"]).indices
    replayed = 0
    for name, scenario in SCENARIOS.items():
        try:
            ov = scenario.build(trace)
        except Refused:
            continue
        r = replay(trace, with_profiler_removed(trace, ov))
        replayed += 1
        for key, idx in streams.items():
            rows = launched[idx]
            order = np.argsort(r.gpu_start_ns[rows], kind="stable")
            starts, ends = r.gpu_start_ns[rows][order], r.gpu_end_ns[rows][order]
            if len(rows) > 1:
                early = np.maximum.accumulate(ends[:-1]) - starts[1:]
                assert int(early.max()) <= 0, (name, key, int(early.max()))
    assert replayed >= 1
