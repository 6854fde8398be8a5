"""The multi-rank CPU fixtures (gloo, fixtures/capture_multirank.py) agree with their ground truth file.

``fixtures/multirank.json`` describes five real multi-process DDP runs (one injected straggler each,
except the baseline) and their unprofiled ON/OFF timings; ``fixtures/traces/multirank/<run>/rank<r>.json.gz``
are the per-rank traces. Every expected value here is read from the raw trace JSON or recomputed from
the recorded round values, never taken from traceadvisor's analysis.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.fixture_paths import REPO

FIXTURES = REPO / "fixtures"
INDEX = FIXTURES / "multirank.json"
RUNS = ["baseline_2r", "input_delay_2r", "host_straggler_2r", "uneven_work_2r", "input_delay_4r"]
DATALOADER_NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@cache
def _index() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(INDEX.read_text())
    return data


@cache
def _trace(path: str) -> dict[str, Any]:
    with gzip.open(FIXTURES / path, "rt") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def _events(path: str, name: str) -> list[dict[str, Any]]:
    return [e for e in _trace(path)["traceEvents"] if e.get("ph") == "X" and e.get("name") == name]


def _durs_us(path: str, name: str) -> list[float]:
    return [float(e["dur"]) for e in _events(path, name)]


def test_the_five_runs_are_there() -> None:
    assert sorted(_index()) == sorted(RUNS)
    for name, run in _index().items():
        assert name == f"{run['scenario']}_{run['ranks']}r"


@pytest.mark.parametrize("run", RUNS)
def test_every_rank_has_a_trace_whose_distributed_info_names_it(run: str) -> None:
    entry = _index()[run]
    traces = entry["traces"]
    assert len(traces) == entry["ranks"]
    for path in traces:
        rank = int(re.fullmatch(r"rank(\d+)\.json\.gz", Path(path).name).group(1))  # type: ignore[union-attr]
        assert (FIXTURES / path).stat().st_size < 1.5e6
        info = _trace(path)["distributedInfo"]
        assert info["rank"] == rank
        assert info["world_size"] == entry["ranks"]
        assert info["backend"] == "gloo"
        assert info["pg_config"][0]["ranks"] == list(range(entry["ranks"]))
    ranks = sorted(int(Path(p).name[4:-8]) for p in traces)
    assert ranks == list(range(entry["ranks"]))


@pytest.mark.parametrize("run", RUNS)
def test_each_trace_holds_the_three_active_steps_and_gloo_all_reduces(run: str) -> None:
    for path in _index()[run]["traces"]:
        steps = [e["name"] for e in _trace(path)["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
        assert len(steps) == 3  # schedule(wait=1, warmup=1, active=3)
        assert _events(path, "c10d::allreduce_")  # DDP's bucket all-reduces, enqueued on the main thread
        assert _events(path, "gloo:all_reduce")  # and run on gloo's worker threads


def test_baseline_has_no_straggler() -> None:
    entry = _index()["baseline_2r"]
    assert entry["straggler_rank"] is None
    assert entry["class"] is None
    assert entry["injected_ms"] is None
    measured = entry["measured"]
    assert "measured_saving_us" not in measured
    assert len(measured["blocks_us"]) >= 14  # >= 7 rounds of two blocks
    assert measured["step_us"] == pytest.approx(statistics.median(measured["blocks_us"]))


@pytest.mark.parametrize("run", [r for r in RUNS if r != "baseline_2r"])
def test_the_saving_is_the_difference_of_the_round_medians_and_positive(run: str) -> None:
    entry = _index()[run]
    assert entry["straggler_rank"] == (2 if entry["ranks"] == 4 else 1)
    m = entry["measured"]
    assert len(m["rounds_on_us"]) == len(m["rounds_off_us"]) >= 7
    saving = statistics.median(m["rounds_on_us"]) - statistics.median(m["rounds_off_us"])
    assert m["measured_saving_us"] == pytest.approx(saving)
    assert saving > 0
    # Every round: ON slower than OFF (the injection is not lost in the noise of one round).
    assert min(m["rounds_on_us"]) > statistics.median(m["rounds_off_us"])


@pytest.mark.parametrize("run", ["input_delay_2r", "host_straggler_2r", "input_delay_4r"])
def test_the_saving_is_close_to_the_injected_delay(run: str) -> None:
    entry = _index()[run]
    injected_us = entry["injected_ms"] * 1e3
    assert entry["injected_ms"] == 50.0
    assert entry["measured"]["injection_alone_us"] == pytest.approx(injected_us, rel=0.05)
    assert entry["measured"]["measured_saving_us"] == pytest.approx(injected_us, rel=0.40)


@pytest.mark.parametrize("run", ["input_delay_2r", "input_delay_4r"])
def test_the_input_delay_sits_in_the_stragglers_dataloader_next(run: str) -> None:
    entry = _index()[run]
    s = entry["straggler_rank"]
    straggler = _durs_us(entry["traces"][s], DATALOADER_NEXT)
    assert len(straggler) == 3
    assert min(straggler) >= 50_000  # the collate function's 50 ms sleep runs inside __next__
    for r, path in enumerate(entry["traces"]):
        if r != s:
            assert max(_durs_us(path, DATALOADER_NEXT)) < 20_000


def test_the_host_straggler_runs_its_named_function_outside_any_op() -> None:
    entry = _index()["host_straggler_2r"]
    s = entry["straggler_rank"]
    name_re = re.compile(r"capture_multirank\.py\(\d+\): slow_host_preprocessing")
    for r, path in enumerate(entry["traces"]):
        calls = [
            e
            for e in _trace(path)["traceEvents"]
            if e.get("cat") == "python_function" and name_re.fullmatch(str(e.get("name")))
        ]
        if r != s:
            assert calls == []
            continue
        assert len(calls) == 3
        assert all(e["dur"] >= 50_000 for e in calls)
        # no cpu_op overlaps the function on its thread: the time is host Python, not an op
        ops = [e for e in _trace(path)["traceEvents"] if e.get("cat") == "cpu_op" and e.get("tid") == calls[0]["tid"]]
        for c in calls:
            inside = [o for o in ops if o["ts"] < c["ts"] + c["dur"] and o["ts"] + o["dur"] > c["ts"]]
            assert inside == []


def test_uneven_work_gives_the_straggler_the_larger_batch() -> None:
    entry = _index()["uneven_work_2r"]
    batch = entry["config"]["batch"]
    factor = entry["config"]["uneven_factor"]
    for r, path in enumerate(entry["traces"]):
        rows = {e["args"]["Input Dims"][1][0] for e in _events(path, "aten::addmm")}  # addmm(bias, x, W^T)
        assert rows == ({batch * factor} if r == entry["straggler_rank"] else {batch})
