"""A torch.compile'd trainer captured on an H200 with ``traceadvisor capture`` (fixtures/compiled_trainer/,
2026-12-02): a program none of the profiler's costs was fitted on, whose trace carries the steps capture
timed without the profiler in the same process (the ``"traceadvisor"`` key)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from traceadvisor.trace.load import load_file
from traceadvisor.whatif import profiler_cost
from traceadvisor.whatif.replay import replay, replay_error_pct
from traceadvisor.whatif.scenarios import step_time_ns

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "compiled_trainer"
TRACE = HERE / "h200_compiled_trainer.json.gz"


def _uncalibrated_us(gaps: bool) -> float:
    trace = load_file(TRACE)
    trace.meta.traceadvisor = None  # the bundled costs alone: no measured step to calibrate to
    # gaps=False: the per-frame costs, as before the wrapper's gaps were read
    overrides = profiler_cost.unprofiled_overrides(trace, read_wrapper_gaps=gaps)
    return float(step_time_ns(replay(trace, overrides))) / 1e3


def test_the_trace_carries_the_steps_timed_without_the_profiler() -> None:
    trace = load_file(TRACE)
    key = trace.meta.traceadvisor
    assert key is not None and key["source"] == "capture" and key["profiled_steps"] == [32, 33, 34]
    assert len(key["unprofiled_step_us"]) == 29 and key["cupti_attached_steps"] == []
    run = json.loads((HERE / "run.json").read_text())
    assert run["exit"]["status"] == "ok" and run["versions"]["torch"].startswith("2.11")
    assert run["unprofiled_steps"]["unprofiled_step_us"][: len(key["unprofiled_step_us"])] == key["unprofiled_step_us"]


def test_the_compiled_step_is_predicted_from_the_wrapper_gaps() -> None:
    """Uncalibrated, against the median of the 29 steps timed before the window: the profiler's cost
    in Inductor's wrappers (6 of 443 calls each) read from their gaps lands within 10%; costing their
    frames as any Python frame takes out far too much."""
    trace = load_file(TRACE)
    g = profiler_cost.wrapper_gaps(trace)
    assert g is not None and len(g.call_ts) / len(g.thread) >= profiler_cost.WRAPPER_MIN_CALLS
    measured = statistics.median(trace.meta.traceadvisor["unprofiled_step_us"])
    with_gaps, per_frame = _uncalibrated_us(True), _uncalibrated_us(False)
    assert abs(with_gaps - measured) <= 0.10 * measured, (with_gaps, measured)
    assert abs(per_frame - measured) > 0.15 * measured, (per_frame, measured)


def test_the_replay_reproduces_the_captured_steps() -> None:
    err = replay_error_pct(load_file(TRACE))
    assert err is not None and err <= 2.0
