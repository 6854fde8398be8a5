"""The likely range of a replayed saving (whatif/saving_range.py): its arithmetic, how it is fitted
(bench/pairs_validation.py's ``fit_band``), that every replayed finding and what-if scenario carries
one around its saving, and how often it holds the measured savings of fresh runs' validation
captures: run 32 at least as often as it was fitted to, run 36 (captured after the fit) less, asserted
as a known shortfall."""

from __future__ import annotations

import json

import pytest
from fixture_paths import REPO, bench_module

from traceadvisor.whatif.saving_range import (
    RANGE_COVERAGE,
    RANGE_RELATIVE,
    RANGE_STEP_PCT,
    TRACE_ALONE_RELATIVE,
    TRACE_ALONE_STEP_PCT,
    band,
    likely_saving_range_ns,
    likely_share_range,
)

pv = bench_module("pairs_validation")


def test_the_range_widens_the_share_by_both_parts_and_stays_inside_the_step() -> None:
    lo, hi = likely_share_range(40.0)
    half = RANGE_RELATIVE * 40.0 + RANGE_STEP_PCT
    assert (lo, hi) == pytest.approx((40.0 - half, 40.0 + half))
    assert likely_share_range(1.0)[0] == 0.0  # never below no saving
    assert likely_share_range(99.0)[1] == 100.0  # never more than the step
    assert likely_share_range(0.0) == pytest.approx((0.0, RANGE_STEP_PCT))
    for share in (10.0, 20.0, 40.0):  # unclipped: both parts on each side
        lo, hi = likely_share_range(share)
        assert hi - lo == pytest.approx(2.0 * (RANGE_RELATIVE * share + RANGE_STEP_PCT))
    assert likely_share_range(30.0, relative=0.5, step_pct=1.0) == pytest.approx((14.0, 46.0))


def test_the_range_in_time_is_the_share_range_of_the_step() -> None:
    lo, hi = likely_saving_range_ns(2_000.0, 10_000.0)
    share_lo, share_hi = likely_share_range(20.0)
    assert (lo, hi) == pytest.approx((share_lo * 100.0, share_hi * 100.0))
    lo, hi = likely_saving_range_ns(2_000.0, 10_000.0, (), calibrated=False)
    share_lo, share_hi = likely_share_range(20.0, (), *band(False))
    assert (lo, hi) == pytest.approx((share_lo * 100.0, share_hi * 100.0))
    assert likely_saving_range_ns(5.0, 0.0) == (0.0, 0.0)


def _row(pred: float, meas: float) -> dict[str, float]:
    return {"predicted_saving_pct": pred, "measured_saving_pct": meas}


def test_a_measured_saving_is_inside_when_the_range_holds_it_and_no_gain_when_it_reaches_zero() -> None:
    assert pv.inside_range(_row(10.0, 13.0), 0.0, 3.0)
    assert not pv.inside_range(_row(10.0, 13.5), 0.0, 3.0)
    assert pv.inside_range(_row(10.0, 13.5), 0.05, 3.0)
    assert pv.inside_range(_row(2.0, -4.0), 0.0, 2.0)  # measured slower: the range reaches no saving
    assert not pv.inside_range(_row(6.0, -4.0), 0.0, 2.0)


def test_the_fitted_band_is_the_narrowest_on_the_grid_that_holds_the_share_asked() -> None:
    # ten savings: eight within 1 point of the prediction, two off by 4 points
    rows = [_row(20.0, 20.0 + d) for d in (0.5, -0.5, 1.0, -1.0, 0.25, -0.25, 0.75, -0.75)]
    rows += [_row(20.0, 24.0), _row(20.0, 16.0)]
    rel, step = pv.fit_band(rows, coverage=0.8)
    assert (rel, step) == (0.0, 1.0)
    rel, step = pv.fit_band(rows, coverage=1.0)
    assert sum(pv.inside_range(r, rel, step) for r in rows) == 10
    assert pv.band_width(rows, rel, step) == pytest.approx(8.0)  # ±4 points, whichever split of them


def test_the_oracle_is_each_pairs_median_measured_saving() -> None:
    per_run = {
        "a": {1: {**_row(10.0, 10.0), "split": "validation"}, 2: {**_row(10.0, 20.0), "split": "validation"}},
        "b": {1: {**_row(5.0, 5.0), "split": "validation"}, 3: {**_row(9.0, 5.5), "split": "fit"}},
    }
    # a's median is 15: neither 10 nor 20 is within 20% of it; b's validation run is its own median
    oracle, replay, n = pv.oracle_within(per_run, "validation")
    assert (oracle, replay, n) == (1, 2, 3)


def test_every_replayed_finding_and_scenario_carries_a_range_around_its_saving() -> None:
    from traceadvisor.pipeline import analyze
    from traceadvisor.trace.load import load_file
    from traceadvisor.whatif.savings import whatif

    path = REPO / "fixtures" / "traces" / "train_step.json.gz"
    report = analyze([path])
    replayed = [f for f in report.findings if f.impact is not None and f.impact.scenario is not None]
    assert replayed
    for f in replayed:
        assert f.impact is not None and f.impact.saving_per_step_us is not None
        low, high = f.impact.likely_low_per_step_us, f.impact.likely_high_per_step_us
        assert low is not None and high is not None
        assert low <= f.impact.saving_per_step_us <= high
        assert high - low > 0
    assert report.verdict is not None
    for fix in report.verdict.fixes:
        assert fix.likely_low_per_step_us is not None and fix.likely_high_per_step_us is not None
        assert fix.likely_low_per_step_us <= fix.saving_per_step_us <= fix.likely_high_per_step_us
    outcomes = whatif(load_file(path), ["cuda-graphs", "no-sync"])
    graphs, no_sync = outcomes[0].saving, outcomes[1].saving
    lo, hi = graphs.likely_share_pct
    assert lo < graphs.share_pct < hi
    assert no_sync.changed == 0 and no_sync.likely_share_pct == (0.0, 0.0)  # nothing to change, nothing to gain


RUNS = REPO / "fixtures" / "pairs12_runs"
# Runs of every validation pair, captured three times a side on a fresh machine, none used to fit the
# range. Runs 36 and 37 were captured after the fit to check it (fixtures/capture_run36.sh, 37.sh).
# Run 36 held 28 of 45 under the first fit, 32 under ± 8 points, and 28 under the band in use (± 5.5
# points beside the savings at the ends of the host's plausible speed): below the coverage asked,
# asserted as such so that a mend of the model it exposed (docs/whatif.md, "Run 36") makes this fail
# and the entry goes.
KNOWN_SHORT = {
    "run_36": "out of sample the range held 28 of 45 captures (gpt_compile's compiled host time, gpt_loss at the "
    "host/GPU balance, conv_cl and storm_compile measured outside their own CI): docs/whatif.md, 'Run 36'",
}


@pytest.mark.parametrize("run", ["run_32", "run_36", "run_37", "run_38"])
def test_the_range_holds_a_fresh_runs_validation_captures_as_often_as_it_was_fitted_to(run: str) -> None:
    """Each validation pair's measured saving against the range of the saving the replay predicts from
    each of its captures, calibrated as ``traceadvisor capture`` stores it (``pairs_validation.py
    --captures``). Run 37 also holds two fit pairs (the batch-norm kernels' H100 fit), left out here."""
    doc = json.loads((RUNS / run / "pairs12.json").read_text())
    validation = {name: p for name, p in doc["pairs"].items() if p["split"] == "validation"}
    assert len(validation) == 15
    rows = []
    for name, p in validation.items():
        for got in p["captures"]:
            one = {"pairs": {name: dict(p, traces=got)}}
            rows += [r for r in pv.validate(one, "stack", RUNS / run / "traces", True) if "predicted_saving_pct" in r]
    assert len(rows) == 3 * len(validation)
    held = sum(pv.inside_range(r, RANGE_RELATIVE, RANGE_STEP_PCT) for r in rows)
    if run in KNOWN_SHORT:
        assert held < RANGE_COVERAGE * len(rows), f"{run} now holds {held} of {len(rows)}: drop its exception"
        pytest.xfail(KNOWN_SHORT[run])
    assert held >= RANGE_COVERAGE * len(rows), f"{held} of {len(rows)}"


def test_the_range_spans_the_savings_at_the_ends_of_the_hosts_plausible_speed() -> None:
    assert likely_share_range(20.0, (12.0, 30.0), relative=0.0, step_pct=2.0) == pytest.approx((10.0, 32.0))
    assert likely_share_range(20.0, (25.0,), relative=0.1, step_pct=0.0) == pytest.approx((18.0, 27.5))
    assert likely_share_range(20.0, (), relative=0.0, step_pct=2.0) == likely_share_range(
        20.0, relative=0.0, step_pct=2.0
    )
    row = {**_row(20.0, 13.0), "host_shares_pct": [14.0, 22.0]}
    assert pv.inside_range(row, 0.0, 1.0) and not pv.inside_range(_row(20.0, 13.0), 0.0, 1.0)
    assert pv.band_width([row], 0.0, 1.0) == pytest.approx(10.0)  # 14-22 plus a point each side


def _calibrated_capture(run: str, pair: str, capture: int = 0) -> object:
    from traceadvisor.trace.load import load_file

    doc = json.loads((RUNS / run / "pairs12.json").read_text())
    rec = doc["pairs"][pair]["captures"][capture]["before_stack"]
    trace = load_file(RUNS / run / "traces" / rec["file"])
    trace.meta.traceadvisor = {"unprofiled_step_us": rec["adjacent_unprofiled_us"]["repeats"]}
    return trace


def test_a_gpu_bound_capture_leaves_the_host_free_and_its_compile_saving_spans_both_ends() -> None:
    """Run 36 met a fast host: the GPT trainer's eager step was GPU-bound at its measured step, so the
    measured step says only that the host took less; torch.compile's saving (host-bound after) then
    depends on how much less. Measured: 26% (the compiled program host-bound at 8.5 ms)."""
    from traceadvisor.whatif.profiler_cost import HOST_COST_PLAUSIBLE, fitted_calibration, host_cost_interval
    from traceadvisor.whatif.savings import scenario_saving

    trace = _calibrated_capture("run_36", "gpt_compile")
    assert not fitted_calibration(trace).host_pinned
    assert host_cost_interval(trace) == pytest.approx(HOST_COST_PLAUSIBLE)
    s = scenario_saving(trace, "compile")
    assert len(s.host_alternatives) == 2
    low_end, high_end = s.host_shares_pct
    # a slower host (less of the recorded time taken out as the profiler's) leaves compile less to take
    assert low_end < 0.75 * s.share_pct
    assert high_end >= s.share_pct - 0.5
    lo, hi = s.likely_share_pct
    assert lo == pytest.approx(max(0.0, low_end - RANGE_STEP_PCT - RANGE_RELATIVE * low_end))
    assert hi >= s.share_pct + RANGE_STEP_PCT
    doc = json.loads((RUNS / "run_36" / "pairs12.json").read_text())
    assert lo <= doc["pairs"]["gpt_compile"]["measured_saving_pct"] + 0.5  # without the host's ends: 41%


def test_a_host_bound_capture_whose_step_fixed_the_factor_has_no_host_alternatives() -> None:
    from traceadvisor.whatif.profiler_cost import fitted_calibration, host_cost_interval
    from traceadvisor.whatif.savings import scenario_saving

    trace = _calibrated_capture("run_36", "gpt_batch")
    assert fitted_calibration(trace).host_pinned
    assert host_cost_interval(trace) is None
    assert scenario_saving(trace, "batch-size").host_alternatives == ()


def test_the_hosts_plausible_range_stops_where_the_replay_leaves_the_measured_step() -> None:
    """storm_compile's eager step is host-bound and met by the bundled costs within the tolerance: the
    factor is free only as far as the replay stays within it of the measured step."""
    from traceadvisor.whatif.profiler_cost import (
        BALANCE_STEPS,
        CALIBRATION_TOLERANCE,
        HOST_COST_PLAUSIBLE,
        host_cost_interval,
        measured_unprofiled_ns,
        unprofiled_overrides_at,
    )
    from traceadvisor.whatif.replay import replay
    from traceadvisor.whatif.scenarios import step_time_ns

    trace = _calibrated_capture("run_36", "storm_compile")
    interval = host_cost_interval(trace)
    assert interval is not None
    lo, hi = interval
    assert HOST_COST_PLAUSIBLE[0] < lo < 1.0 and hi < HOST_COST_PLAUSIBLE[1]
    target = measured_unprofiled_ns(trace)
    assert target is not None

    def step(f: float) -> float:
        return step_time_ns(replay(trace, unprofiled_overrides_at(trace, f)))

    grain = (1.0 - HOST_COST_PLAUSIBLE[0]) / 2**BALANCE_STEPS
    assert step(lo) <= (1 + CALIBRATION_TOLERANCE) * target < step(lo - grain)


def test_a_trace_without_measured_steps_keeps_the_fitted_band_alone() -> None:
    from traceadvisor.trace.load import load_file
    from traceadvisor.whatif.profiler_cost import host_cost_interval
    from traceadvisor.whatif.savings import scenario_saving

    trace = load_file(REPO / "fixtures" / "traces" / "train_step.json.gz")
    assert host_cost_interval(trace) is None
    s = scenario_saving(trace, "cuda-graphs")
    assert s.host_alternatives == () and not s.calibrated
    # the band fitted from the traces alone: wider than the calibrated one, by a share of the saving
    lo, hi = s.likely_share_pct
    half = TRACE_ALONE_RELATIVE * s.share_pct + TRACE_ALONE_STEP_PCT
    assert (lo, hi) == pytest.approx((max(0.0, s.share_pct - half), min(100.0, s.share_pct + half)))
    assert band(False) == (TRACE_ALONE_RELATIVE, TRACE_ALONE_STEP_PCT) != band(True)
    assert hi - lo > likely_share_range(s.share_pct)[1] - likely_share_range(s.share_pct)[0]


@pytest.mark.slow
def test_the_plausible_host_factors_are_the_fit_halfs_pinned_percentiles() -> None:
    """``HOST_COST_PLAUSIBLE`` is what ``pairs_validation.py --fit-host-spread`` gives: the 10th and
    90th percentiles of the factor over the fit half's traces whose measured step fixed it (~3 min)."""
    import numpy as np

    from traceadvisor.whatif.profiler_cost import HOST_COST_PLAUSIBLE

    lo, hi = HOST_COST_PLAUSIBLE
    assert 0.5 < lo < 1.0 < hi < 2.0
    factors = pv.pinned_host_factors("fit")
    assert len(factors) >= 100
    assert np.percentile(factors, 10) == pytest.approx(lo, abs=5e-4)
    assert np.percentile(factors, 90) == pytest.approx(hi, abs=5e-4)
