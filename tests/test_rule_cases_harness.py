"""The YAML case harness (traceadvisor/testing.py) rejects what it does not know and repeats a
block of events inside one step (issue 11). Cases run through the real loader and rule."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from traceadvisor.testing import CaseError, check_case, expand_case, find_rule, load_case_file, write_case_trace
from traceadvisor.trace.load import load_file

CASES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "rules"


def gk102_storm() -> dict[str, Any]:
    return copy.deepcopy(load_case_file(CASES_DIR / "GK102.yaml").cases["tiny_kernel_storm"])


def test_misspelt_expectation_key_fails_naming_it() -> None:
    """Before issue 11 ``mesage_contains`` was ignored and this case passed."""
    case = gk102_storm()
    case["expect"] = [{"severity": "high", "mesage_contains": "no such words"}]
    with pytest.raises(CaseError, match=r"expect\[0\]: unknown key 'mesage_contains' \(allowed: .*message_contains"):
        check_case(find_rule("GK102"), case)


def test_misspelt_keys_in_a_case_file_fail_naming_file_case_and_key(tmp_path: Path) -> None:
    doc = {"rule": "GK102", "cases": {"storm": {**gk102_storm(), "gpu_step": True}}}
    path = tmp_path / "XX.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(CaseError, match=r"XX.yaml: case storm: unknown key 'gpu_step'"):
        load_case_file(path)
    path.write_text(yaml.safe_dump({**doc, "option": {}}))
    with pytest.raises(CaseError, match=r"unknown key 'option'"):
        load_case_file(path)


def test_misspelt_event_key_fails_naming_the_event() -> None:
    case = gk102_storm()
    case["events"][2]["durr"] = 3
    with pytest.raises(CaseError, match=r"events\[2\]: unknown key 'durr'"):
        expand_case(case)


def test_every_bundled_case_file_uses_only_known_keys() -> None:
    for path in sorted(CASES_DIR.glob("*.yaml")):
        cf = load_case_file(path)
        for case in cf.cases.values():
            if "trace" not in case:
                expand_case(case)


STORM_BLOCK = [
    {"cat": "op", "name": "aten::add", "ts": 5.0, "dur": 9, "ext": 1},
    {"cat": "launch", "name": "cudaLaunchKernel", "ts": 5.5, "dur": 8, "corr": 1, "ext": 1},
    {"cat": "kernel", "name": "tiny", "ts": 12.5, "dur": 2, "corr": 1, "ext": 1},
]


def test_a_block_writes_the_same_trace_as_the_events_spelled_out() -> None:
    """GK102's storm case spells out its repeated op → launch → kernel triple; a block says it once."""
    spelled = gk102_storm()
    count = len(spelled["events"]) // 3
    assert spelled["events"][:3] == STORM_BLOCK
    block = {**spelled, "events": [{"each": {"count": count, "period_us": 9.5}, "events": STORM_BLOCK}]}
    assert expand_case(block) == expand_case(spelled)
    check_case(find_rule("GK102"), block)  # and the rule's expectation holds on it


def test_block_copies_get_distinct_ids_and_shifted_times(tmp_path: Path) -> None:
    two_ids = [
        {"cat": "launch", "name": "cudaLaunchKernel", "ts": 1, "dur": 2, "corr": 1, "ext": 1},
        {"cat": "kernel", "name": "a", "ts": 4, "dur": 1, "corr": 1, "ext": 1},
        {"cat": "launch", "name": "cudaLaunchKernel", "ts": 6, "dur": 2, "corr": 2, "ext": 2},
        {"cat": "kernel", "name": "b", "ts": 9, "dur": 1, "corr": 2, "ext": 2},
    ]
    case = {
        "steps": [[0, 200]],
        "events": [{"each": {"count": 3, "period_us": 20}, "events": two_ids}],
        "repeat": {"count": 2, "period_us": 200},
    }
    doc = expand_case(case)
    kernels = [e for e in doc["traceEvents"] if e["cat"] == "kernel"]
    assert [e["args"]["correlation"] for e in kernels] == [*range(1, 7), *range(100_001, 100_007)]
    assert [e["ts"] for e in kernels][:6] == [4, 9, 24, 29, 44, 49]
    assert [e["ts"] for e in kernels][6:] == [204, 209, 224, 229, 244, 249]
    # each kernel is linked to its own launch by the production loader
    trace = load_file(write_case_trace(case, tmp_path))
    assert len(trace.gpu) == 12 and (trace.gpu["launch"] >= 0).all()
    with gzip.open(tmp_path / "case.json.gz", "rt") as fh:
        assert len(json.load(fh)["traceEvents"]) == len(doc["traceEvents"])


def test_a_block_checks_its_own_keys() -> None:
    bad = {"steps": [[0, 10]], "events": [{"each": {"count": 2, "period": 5}, "events": STORM_BLOCK}]}
    with pytest.raises(CaseError, match=r"events\[0\]: each: unknown key 'period'"):
        expand_case(bad)
