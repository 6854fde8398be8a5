"""The JSON report writes times in µs to the nanosecond (3 decimals) and only when it is written
(issue 14); the README's schema example has the fields the report emits."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from fixture_paths import REPO

from traceadvisor.pipeline import analyze
from traceadvisor.report import render
from traceadvisor.report.render_json import round_times

TRACE = REPO / "fixtures" / "traces" / "train_step.json.gz"


def test_round_times_rounds_time_floats_only() -> None:
    doc = {
        "window_us": 12.000000000001,
        "share_pct": 1.23456789,
        "offsets_us": {"host-b": 2000.0000004},
        "measured_unprofiled_step_us": {"median_us": 1.2345678, "count": 3, "source": "capture"},
        "step_variation": {"min_us": 4.369666666666667, "ratio": 1.1639619446061316},
        "evidence": [{"ts_us": np.float64(1.0004), "dur_us": 7, "stream": None}],
        "kernel_count": 5,
        "nan_us": float("nan"),
    }
    out = round_times(doc)
    assert out["window_us"] == 12.0 and out["share_pct"] == 1.23456789
    assert out["offsets_us"] == {"host-b": 2000.0}
    assert out["measured_unprofiled_step_us"] == {"median_us": 1.235, "count": 3, "source": "capture"}
    assert out["step_variation"] == {"min_us": 4.37, "ratio": 1.1639619446061316}
    assert (
        out["evidence"] == [{"ts_us": 1.0, "dur_us": 7, "stream": None}] and type(out["evidence"][0]["dur_us"]) is int
    )
    assert out["kernel_count"] == 5 and out["nan_us"] != out["nan_us"]
    assert doc["window_us"] == 12.000000000001  # the input is not changed


def _time_floats(value: Any, key: str = "", inside: bool = False) -> list[tuple[str, float]]:
    is_time = key.endswith("_us") or (inside and not (key.endswith("_pct") or key == "ratio"))
    if isinstance(value, float):
        return [(key, value)] if is_time else []
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _time_floats(v, str(k), is_time)]
    if isinstance(value, list):
        return [x for v in value for x in _time_floats(v, key, is_time)]
    return []


def test_json_report_times_have_at_most_three_decimals_and_the_data_keeps_its_own() -> None:
    report = analyze([TRACE])
    raw = report.findings[0].impact.time_us if report.findings[0].impact else 0.0
    text = render(report, "json").decode()
    doc = json.loads(text)
    times = _time_floats(doc)
    assert len(times) > 100
    for key, value in times:
        shown = repr(value)
        assert "e" in shown or len(shown.partition(".")[2]) <= 3, (key, value)
    # every time is the unrounded one to the nanosecond
    assert doc["findings"][0]["impact"]["time_us"] == round(raw, 3)
    assert report.findings[0].impact is not None and report.findings[0].impact.time_us == raw  # data unrounded


def test_readme_json_schema_has_every_field_the_report_emits() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## JSON report (schema_version 1)") :]
    block = section[section.index("```json") + 7 :]
    example = json.loads(block[: block.index("```")])
    emitted = json.loads(render(analyze([TRACE]), "json"))

    def keys(d: Any, pre: str = "") -> set[str]:
        if isinstance(d, dict):
            maps = ("tflops", "sources", "bases", "data", "capture", "offsets_us")
            return {f"{pre}.{k}" for k in d} | {x for k, v in d.items() if k not in maps for x in keys(v, f"{pre}.{k}")}
        if isinstance(d, list):
            return {x for v in d for x in keys(v, f"{pre}[]")}
        return set()

    missing = keys(emitted) - keys(example)
    assert not missing, sorted(missing)
    assert example["traces"][0]["rank"] is None and emitted["traces"][0]["rank"] is None  # a single file
    assert emitted["ranks"] is None
