"""The pairs on an H200 (fixtures/pairs12_runs/run_20, run_21 and run_22, 2026-12-02): a GPU kind
nothing was fitted on (every earlier run was an H100), each pair's rounds timed with the GPU's SM
clock and power read after every round (``capture_pairs.py`` ``gpu_state``). Run 22, the validation
pairs alone, was captured after the day's model changes (the calibration's kernel speed, the
replay's stream order, the pinned scenario's sync), to check them on data none of them saw."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from traceadvisor.roofline.gpus import match
from traceadvisor.trace.load import load_file
from traceadvisor.whatif.savings import scenario_saving

RUNS = Path(__file__).resolve().parent.parent / "fixtures" / "pairs12_runs"
H200_RUNS = ("run_20", "run_21", "run_22")
# the runs with the fit half too (run 22 holds the validation pairs alone)
FULL_RUNS = ("run_20", "run_21")
# The validation pairs whose fix is one scenario (the compile pairs combine three): nothing in their
# prediction was fitted on them, and no constant was fitted on an H200.
ONE_SCENARIO_VALIDATION = ("decode", "pinned", "gpt_pad_vocab")


@cache
def pairs(run: str) -> dict[str, Any]:
    return dict(json.loads((RUNS / run / "pairs12.json").read_text()))


@pytest.mark.parametrize("run", H200_RUNS)
def test_every_pair_with_its_captures_and_the_gpu_state_of_every_round(run: str) -> None:
    doc = pairs(run)
    assert doc["env"]["gpu_name"] == "NVIDIA H200"
    assert len(doc["pairs"]) == (20 if run in FULL_RUNS else 10)
    assert run in FULL_RUNS or {p["split"] for p in doc["pairs"].values()} == {"validation"}
    for name, p in doc["pairs"].items():
        assert p["status"] == "ok", name
        captures = 3 if p["split"] == "fit" else 5
        assert len(p["captures"]) == captures and p["traces"] == p["captures"][0], name
        for c in p["captures"]:
            assert all((RUNS / run / "traces" / rec["file"]).is_file() for rec in c.values())
            assert all(set(rec["gpu_state"]) == {"before_window", "after_window"} for rec in c.values())
        for side in ("before", "after"):
            assert len(p["gpu_state"][side]) == len(p[f"{side}_step_us"]["repeats"]) == 15, name


@pytest.mark.parametrize("run", H200_RUNS)
def test_the_traces_match_the_h200_sxm_datasheet(run: str) -> None:
    rec = pairs(run)["pairs"]["gpt_pad_vocab"]["traces"]["before_stack"]
    got = match(load_file(RUNS / run / "traces" / rec["file"]).device_properties())
    assert got.spec is not None and got.spec.key == "h200-sxm", got.reason


@pytest.mark.parametrize("run", H200_RUNS)
@pytest.mark.parametrize("pair", ONE_SCENARIO_VALIDATION)
def test_validation_savings_come_true_on_a_gpu_nothing_was_fitted_on(run: str, pair: str) -> None:
    p = pairs(run)["pairs"][pair]
    assert p["split"] == "validation"
    trace = load_file(RUNS / run / "traces" / p["traces"]["before_stack"]["file"])
    saving = scenario_saving(trace, str(p["scenario"]))
    assert saving.refused is None
    measured = p["measured_saving_pct"]
    assert measured > 20.0
    assert abs(saving.share_pct - measured) <= 0.2 * measured, (saving.share_pct, measured)


@pytest.mark.parametrize("run", FULL_RUNS)
def test_the_dense_bf16_loop_runs_at_the_power_limit_below_the_top_clock(run: str) -> None:
    """item_gpu's rounds (5 x Linear(4096) bf16 at batch 8192, back to back) draw within 3% of the
    H200's 700 W limit (nvidia_smi.txt beside the run) with the SM clock held below its 1,980 MHz
    maximum; the storm's CUDA-graph replay (small kernels) runs at the top clock far below it."""
    smi = (RUNS / run / "nvidia_smi.txt").read_text()
    assert "Current Power Limit                            : 700.00 W" in smi
    assert "Max Clocks" in smi and "SM                                             : 1980 MHz" in smi
    gs = pairs(run)["pairs"]["item_gpu"]["gpu_state"]["after"]
    power = sorted(s["power_w"] for s in gs)[len(gs) // 2]
    clock = sorted(s["sm_clock_mhz"] for s in gs)[len(gs) // 2]
    assert power >= 0.97 * 700.0 and clock < 0.9 * 1980.0
    storm = pairs(run)["pairs"]["storm"]["gpu_state"]["after"]
    assert all(s["sm_clock_mhz"] == 1980.0 and s["power_w"] < 300.0 for s in storm)


PHASES = Path(__file__).resolve().parent.parent / "fixtures" / "item_gpu_phases"


@pytest.mark.parametrize("steps", (40, 160))
def test_the_unprofiled_loop_is_slower_in_its_kernels_not_between_them(steps: int) -> None:
    """fixtures/item_gpu_phases/ (item_gpu's no-sync loop on the H200, CUDA events between each
    step's forward, backward and optimizer): unprofiled, the phases add up to the step (no gap
    between kernels worth 0.5%), and the GEMM phases run longer than in the profiled window of the
    same round, more so over longer rounds (the GPU's clock under sustained load)."""
    rounds = json.loads((PHASES / f"item_gpu_phases_{steps}.json").read_text())["rounds"]
    for r in rounds:
        u = r["unprofiled"]
        assert abs(u["step"] - (u["forward"] + u["backward"] + u["optimizer"])) < 0.005 * u["step"]
    slower = sorted(r["unprofiled"]["backward"] / r["window"]["backward"] for r in rounds)
    assert slower[len(slower) // 2] > 1.02
    if steps == 160:
        assert slower[0] > 1.02
