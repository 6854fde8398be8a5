"""The power-limit give-back line (traceadvisor/whatif/power_limit.py) against the GPU probes.

The segment probe (fixtures/gpu_segment_probe/, H200, no profiler) measured, per loop, the share of
the idle a `.item()` per step leaves that comes back as faster kernels; the pairs runs' rounds
(fixtures/pairs12_runs/run_27, run_28) recorded the SM clock the loops ran at and whether the power
cap held. The line is fitted on the two fit loops alone; these tests recompute it from the data
and check it where it was not fitted.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

from traceadvisor.whatif import power_limit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import power_give_back  # noqa: E402


def test_the_bundled_line_is_what_the_fit_loops_give() -> None:
    f = power_give_back.fit()
    assert f["top_clock_mhz"] == 1980.0  # the H200's top SM clock (nvidia_smi.txt of run 28)
    assert power_limit.GIVE_BACK_SLOPE == pytest.approx(f["slope"], abs=0.005)
    assert power_limit.GIVE_BACK_ONSET == pytest.approx(f["onset"], abs=0.0005)
    assert power_limit.GIVE_BACK_SPREAD == pytest.approx(f["spread"], abs=0.0005)
    assert power_limit.REPLAY_SAVING_FACTOR == pytest.approx(power_give_back.replay_factor(f), abs=0.005)


def test_the_share_given_back_grows_as_the_clock_falls_below_its_top() -> None:
    """Measured: loops at 1,860-1,980 MHz give back at most 15%, loops at 1,650-1,725 at least 28%;
    ordered by clock, the shares fall (within one loop's spread between calls)."""
    rows = []
    for run in ("run_a", "run_b"):
        for name, share in power_give_back.probe_shares(run).items():
            same = power_give_back.SAME_MACHINE.get(run)
            clock = (power_give_back.busy_clock(same, name) if same else None) or power_give_back.clock_over_runs(name)
            if clock is not None:
                rows.append((clock[0], share, name))
    near_top = [s for c, s, _ in rows if c >= 1850]
    far_below = [s for c, s, _ in rows if c <= 1750]
    assert len(near_top) == 3 and max(near_top) < 0.15
    assert len(far_below) == 4 and min(far_below) > 0.25
    rows.sort()
    for (_, s1, n1), (_, s2, n2) in itertools.pairwise(rows):
        assert s2 <= s1 + 2 * power_limit.GIVE_BACK_SPREAD, (n1, s1, n2, s2)


@pytest.mark.parametrize(
    ("run", "loop", "inside"),
    [
        ("run_a", "item_gpu_deep", True),
        ("run_b", "item_gpu_short_deep", True),
        ("run_b", "item_gpu_short_wide", True),
        ("run_a", "item_gpu", False),  # 0.56 measured, 0.42 +- 0.06: the known miss (docs/whatif.md)
        # run_c (2026-12-03, run 29's machine, after the fit): the same loops gave back more there
        ("run_c", "item_gpu", False),  # 0.96 against 0.41
        ("run_c", "item_gpu_deep", False),  # 0.40 against 0.18
        ("run_c", "item_gpu_short_deep", False),  # 0.10 against 0.00
        ("run_c", "item_gpu_short_wide", True),  # not capped: 0.01
    ],
)
def test_the_validation_loops_against_the_line(run: str, loop: str, inside: bool) -> None:
    measured = power_give_back.probe_shares(run)[loop]
    same = power_give_back.SAME_MACHINE.get(run)
    clock = (power_give_back.busy_clock(same, loop) if same else None) or power_give_back.clock_over_runs(loop)
    assert clock is not None
    mhz, capped = clock
    given = power_limit.at_clock(mhz if capped else 1980.0, 1980.0)  # below the limit: nothing back
    assert (given.low - 1e-9 <= measured <= given.high + 1e-9) is inside, (loop, mhz, capped, measured, given)


def test_give_back_reads_only_the_unprofiled_reading() -> None:
    """The window's own reading never places a loop on the line (its clock is the profiled loop's);
    an unprofiled reading without the top clock, or below the limit, gives none either."""
    capped = {"power_capped": True, "sm_clock_mhz": 1680.0, "max_sm_clock_mhz": 1980.0}
    assert power_limit.give_back({**capped}) is None
    given = power_limit.give_back({"power_capped": True, "unprofiled": capped})
    assert given is not None
    assert given.share == pytest.approx(power_limit.GIVE_BACK_SLOPE * (1 - 1680 / 1980 - power_limit.GIVE_BACK_ONSET))
    lo, hi = given.expected_ns(1000.0)
    assert lo == pytest.approx((1 - given.high) * 1000.0 / power_limit.REPLAY_SAVING_FACTOR)
    assert hi == pytest.approx((1 - given.low) * 1000.0 * power_limit.REPLAY_SAVING_FACTOR)
    assert power_limit.give_back({"unprofiled": {**capped, "max_sm_clock_mhz": None}}) is None
    assert power_limit.give_back({"unprofiled": {**capped, "power_capped": False}}) is None
    assert power_limit.unprofiled_capped({"unprofiled": {**capped, "power_capped": False}}) is False
    assert power_limit.unprofiled_capped({"power_capped": True}) is None
    top = power_limit.give_back({"unprofiled": {**capped, "sm_clock_mhz": 1965.0}})
    assert top is not None and top.share == 0.0


def test_the_stated_saving_is_closer_than_the_replayed_idle_where_the_model_gives_back() -> None:
    """The replayed idle less the model's share, against the segment probe's measured saving on the
    validation loops at the limit, is closer than the replayed idle on 3 of the 4 where the model
    gives something back (run_a item_gpu, run_c item_gpu and item_gpu_deep; not run_a item_gpu_deep,
    whose replay is already short), even where the share's band misses (run_c). On the pairs it is
    not (runs 27-31: 14 of 26 validation savings within 20% with it taken off, 17 without), so a
    finding states the replayed idle and gives this as the low end of its range
    (whatif/savings.power_limited)."""
    f = power_give_back.fit()
    closer = []
    for run in power_give_back.PROBE_RUNS:
        measured = power_give_back.probe_savings(run)
        for name in measured:
            if name in power_give_back.FIT or name == "item_host":
                continue
            same = power_give_back.SAME_MACHINE.get(run)
            clock = power_give_back.busy_clock(same, name) if same else power_give_back.clock_over_runs(name)
            replayed = power_give_back.replayed_saving_us(run, name)
            if clock is None or replayed is None or not clock[1]:
                continue
            share = power_limit.at_clock(clock[0], f["top_clock_mhz"]).share
            if share > 0 and replayed > 0:
                m = measured[name]
                closer.append((run, name, abs(replayed * (1 - share) - m) < abs(replayed - m)))
    assert sorted(closer) == [
        ("run_a", "item_gpu", True),
        ("run_a", "item_gpu_deep", False),
        ("run_c", "item_gpu", True),
        ("run_c", "item_gpu_deep", True),
    ]
