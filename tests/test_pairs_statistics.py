"""How bench/pairs_validation.py judges a predicted saving against the GPU pairs' measurement:
each interleaved round's own saving, and the distribution-free confidence interval of its median."""

from __future__ import annotations

import json
import math

import pytest
from fixture_paths import REPO, bench_module

pv = bench_module("pairs_validation")
PAIRS = json.loads((REPO / "fixtures" / "pairs12.json").read_text())["pairs"]


def _coverage(n: int, j: int) -> float:
    """P(the j-th smallest <= median <= the j-th largest) for n samples of a continuous variable."""
    tail = sum(math.comb(n, k) for k in range(j)) / 2.0**n
    return 1.0 - 2.0 * tail


def test_median_interval_is_the_narrowest_order_statistics_with_95_pct_coverage() -> None:
    for n, j in ((11, 2), (15, 4), (25, 8), (31, 10)):
        values = [float(v) for v in range(n, 0, -1)]  # unsorted on purpose
        lo, hi = pv.median_ci(values)
        assert (lo, hi) == (float(j), float(n + 1 - j))
        assert _coverage(n, j) >= 0.95 > _coverage(n, j + 1)


def test_paired_savings_follow_the_rounds_and_the_batch() -> None:
    """One saving per interleaved round, from that round's two sides; a batch change per sample."""
    rec = PAIRS["tf32"]
    b, a = rec["before_step_us"]["repeats"], rec["after_step_us"]["repeats"]
    got = pv.paired_savings(rec)
    assert got == [(x - y) / x * 100.0 for x, y in zip(b, a, strict=True)]
    batch = PAIRS["gpt_batch"]
    per = batch["samples_per_step"]
    first = (
        (batch["before_step_us"]["repeats"][0] / per["before"] - batch["after_step_us"]["repeats"][0] / per["after"])
        / (batch["before_step_us"]["repeats"][0] / per["before"])
        * 100.0
    )
    assert math.isclose(pv.paired_savings(batch)[0], first)


def test_the_host_drift_cancels_within_a_round() -> None:
    """storm's rounds drifted by hundreds of µs on the before side; each round's own saving barely moves."""
    rec = PAIRS["storm"]
    lo, hi = pv.median_ci(pv.paired_savings(rec))
    b = rec["before_step_us"]
    unpaired_spread = (b["q3"] - b["q1"]) / b["median"] * 100.0
    assert lo <= rec["measured_saving_pct"] <= hi
    assert hi - lo < unpaired_spread / 3


def test_a_saving_is_right_within_20_pct_or_inside_the_interval() -> None:
    row = {"measured_saving_pct": 10.0, "measured_ci_pct": (6.0, 15.0)}
    assert pv.right(dict(row, predicted_saving_pct=11.9))  # within 20%
    assert pv.right(dict(row, predicted_saving_pct=14.5))  # 45% off, inside the interval
    assert not pv.right(dict(row, predicted_saving_pct=15.5))
    assert not pv.right(dict(row, predicted_saving_pct=5.0))
    slower = {"measured_saving_pct": -4.0, "measured_ci_pct": (-9.0, 2.0)}
    assert pv.right(dict(slower, predicted_saving_pct=0.0))
    assert pv.right(dict(slower, predicted_saving_pct=2.0))
    assert not pv.right(dict(slower, predicted_saving_pct=3.0))
    assert pv.right(row) is None


RUN_32 = REPO / "fixtures" / "pairs12_runs" / "run_32"


def test_captures_leave_out_a_capture_without_traces_and_flag_a_point_outside_its_interval(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Run 32's storm_compile: the ratio of the sides' medians (42.5%) lies outside the interval of
    the rounds' own savings (29.5-34.8%; the host changed mode after round 9), which the table marks.
    A capture whose traces did not come back (run 33's 8-step half) is left out and named, not a crash."""
    doc = json.loads((RUN_32 / "pairs12.json").read_text())
    storm = doc["pairs"]["storm_compile"]
    lo, hi = pv.median_ci(pv.paired_savings(storm))
    assert not lo <= storm["measured_saving_pct"] <= hi
    lost = dict(storm["captures"][1])
    lost["before_stack"] = dict(lost["before_stack"], file="p12_storm_compile_before_stack_lost.json.gz")
    storm["captures"][1] = lost
    assert pv.captures({"pairs": {"storm_compile": storm}}, "stack", RUN_32 / "traces", False) == 0
    out, err = capsys.readouterr()
    assert "storm_compile: capture 1 left out" in err and "p12_storm_compile_before_stack_lost.json.gz" in err
    row = next(line for line in out.splitlines() if line.startswith("storm_compile"))
    assert "|! 42.5 [ 29.5, 34.8] |" in row
    assert len(row.split("|")[2].split()) == 2  # two captures' predictions, not three
    assert "! 1 measured saving(s) outside their own 95% CI" in out
