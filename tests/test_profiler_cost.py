"""The profiler cost model's event kinds (traceadvisor/whatif/profiler_cost.py) on real GPU traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from fixture_paths import FIXTURE_TRACES, REPO

from traceadvisor.trace.load import load_file
from traceadvisor.whatif.profiler_cost import ProfilerCost, event_counts, unprofiled_overrides
from traceadvisor.whatif.replay import replay
from traceadvisor.whatif.scenarios import step_time_ns

COMPILED = FIXTURE_TRACES / "p12_gpt_compile_after_nostack.json.gz"


def _raw(path: Path) -> list[dict[str, object]]:
    with gzip.open(path, "rt") as f:
        events: list[dict[str, object]] = json.load(f)["traceEvents"]
    return events


def test_inductor_launch_records_and_compiled_regions_are_their_own_kinds() -> None:
    """Inductor names each Triton launch's host record after the kernel; with record_shapes it
    carries the arguments' shapes. Counted here from the raw events."""
    raw = _raw(COMPILED)
    launches = [e for e in raw if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("triton_")]
    with_shapes = [e for e in launches if "Input Dims" in e.get("args", {})]  # type: ignore[operator]
    regions = [
        e
        for e in raw
        if e.get("ph") == "X"
        and e.get("cat") in ("cpu_op", "user_annotation")
        and str(e.get("name", "")).startswith(("Torch-Compiled Region", "## Call CompiledFxGraph"))
    ]
    counts = event_counts(load_file(COMPILED))
    assert len(launches) > 100
    assert counts["inductor_launch_shapes"] == len(with_shapes)
    assert counts["inductor_launch"] == len(launches) - len(with_shapes)
    assert counts["compiled_region"] == len(regions)


def test_costing_inductor_launches_as_their_own_kind_moves_the_prediction_toward_the_measured_step() -> None:
    """The compiled GPT trainer's profiled step (22.5 ms) against its step measured without the
    profiler right around the capture: costing the launch records as plain ops left most of the
    profiler's cost in the predicted step; their measured cost takes it out."""
    trace = load_file(COMPILED)
    pairs = json.loads((REPO / "fixtures" / "pairs12.json").read_text())
    measured = pairs["pairs"]["gpt_compile"]["traces"]["after_nostack"]["adjacent_unprofiled_us"]["median"] * 1e3
    bundled = ProfilerCost.bundled()
    as_ops = dict(bundled.ns, inductor_launch=bundled.ns["op"], inductor_launch_shapes=bundled.ns["op_shapes"])
    with_kind = step_time_ns(replay(trace, unprofiled_overrides(trace, bundled)))
    without = step_time_ns(replay(trace, unprofiled_overrides(trace, ProfilerCost(as_ops, bundled.fitted))))
    assert abs(with_kind - measured) < abs(without - measured)
    assert bundled.ns["inductor_launch_shapes"] > 3 * bundled.ns["op_shapes"]
