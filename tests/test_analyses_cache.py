"""The trace as a data model, and the analyses beside it: each computed once per trace, whoever asks.

Rules get the engine's read-only view of a trace, report sections get the trace itself; an
analysis (idle attribution, the roofline, ...) must run once for both, on the trace, and the GPU
configuration is given when the trace is built, never assigned afterwards.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traceadvisor import load_file, roofline
from traceadvisor.analyses import graph, idle, queues
from traceadvisor.analyses.cache import memoised
from traceadvisor.engine.isolation import read_only
from traceadvisor.pipeline import analyze_traces
from traceadvisor.trace.device import GpuConfig
from traceadvisor.trace.model import Trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
SYNC = FIXTURES / "planted_sync_in_loop.json.gz"
MATMUL = FIXTURES / "planted_fp32_matmul.json.gz"


@pytest.fixture(scope="module")
def trace() -> Trace:
    return load_file(SYNC)


def test_an_analysis_runs_once_for_the_trace_and_for_a_rules_view_of_it(trace: Trace) -> None:
    calls: list[object] = []

    @memoised
    def starts(t: Trace) -> pd.DataFrame:
        calls.append(t)
        return t.kernels[["ts_ns"]]

    view = read_only(trace)
    first = starts(trace)
    through_view = starts(view)
    again = starts(trace)
    assert len(calls) == 1 and calls[0] is trace  # computed once, on the trace (never on a view)
    assert again is first
    # The rule gets its read-only copy of that one result: same memory, not the same object.
    assert through_view is not first
    assert np.shares_memory(through_view["ts_ns"].to_numpy(), first["ts_ns"].to_numpy())
    other = load_file(MATMUL)
    starts(other)
    assert len(calls) == 2 and calls[1] is other  # per trace: another trace gets its own


def test_arguments_are_part_of_the_key(trace: Trace) -> None:
    step = int(trace.steps.table["step"].iloc[0])
    last = int(trace.steps.table["step"].iloc[-1])
    assert graph.step_critical_path(trace, step) is graph.step_critical_path(trace, step)
    assert graph.step_critical_path(trace, step) is not graph.step_critical_path(trace, last)
    dev = trace.device_ids[0]
    q = queues.stream_queues(trace, dev)
    assert q is queues.stream_queues(trace, dev)
    assert len(q) == int(((trace.gpu["device"] == dev) & (trace.gpu["launch"] >= 0)).sum())
    assert (q["queue_delay_ns"] == q["start_ns"] - q["launch_end_ns"]).all()


def test_the_roofline_through_a_view_is_the_traces_own(trace: Trace) -> None:
    mine = roofline.of(trace)
    seen = roofline.of(read_only(trace))
    assert object.__getattribute__(seen, "_target") is mine
    assert roofline.of(trace) is mine


def test_a_whole_analysis_attributes_idle_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's idle section and the five rules that read the idle attribution share one run."""
    runs: list[Trace] = []
    real = idle.attribute

    def counted(t: Trace, device: int, lo: int, hi: int) -> pd.DataFrame:
        runs.append(t)
        return real(t, device, lo, hi)

    monkeypatch.setattr(idle, "attribute", counted)
    t = load_file(SYNC)
    report = analyze_traces([t])
    assert runs == [t]
    assert {f.rule for f in report.findings} >= {"sync-point"}  # a rule that reads the attribution ran


def test_the_gpu_configuration_is_given_at_load_and_cannot_be_reassigned() -> None:
    named = load_file(MATMUL, gpu=GpuConfig(name="a100-sxm-80gb", search_profiles=False))
    assert named.gpu_config is not None and named.gpu_config.name == "a100-sxm-80gb"
    peaks = roofline.of(named).peaks
    assert peaks is not None and peaks.model is not None and "A100" in peaks.model
    plain = load_file(MATMUL)
    assert plain.gpu_config is None
    plain_peaks = roofline.of(plain).peaks
    assert plain_peaks is not None and plain_peaks.model is not None and "H100" in plain_peaks.model
    with pytest.raises(AttributeError):
        plain.gpu_config = GpuConfig(name="a100-sxm-80gb")  # type: ignore[misc]


def test_tables_must_have_a_range_index(trace: Trace) -> None:
    """Link columns are row positions: a table indexed otherwise would link to the wrong rows."""
    tables = {"host": trace.host, "runtime": trace.runtime, "gpu": trace.gpu.iloc[1:]}  # index starts at 1
    with pytest.raises(ValueError, match="'gpu' must have a RangeIndex"):
        Trace(trace.meta, tables, [])
    ok = Trace(trace.meta, {"host": trace.host, "runtime": trace.runtime, "gpu": trace.gpu}, [])
    assert (ok.gpu["launch"].to_numpy() == trace.gpu["launch"].to_numpy()).all()


def test_links_are_columns_when_the_trace_is_built() -> None:
    t = load_file(SYNC)
    assert {"launch", "op"} <= set(t.gpu.columns) and "op" in t.runtime.columns
    launched = t.gpu[t.gpu["launch"] >= 0]
    assert len(launched) > 0
    # ``launch`` is a position in the runtime table: the call it names has the GPU record's correlation id.
    same = t.runtime["correlation"].to_numpy()[launched["launch"].to_numpy()]
    assert (same == launched["correlation"].to_numpy()).all()


def test_the_model_imports_neither_the_analyses_nor_the_roofline() -> None:
    code = (
        "import sys, traceadvisor.trace.model;"
        "bad = sorted(m for m in sys.modules if m.startswith(('traceadvisor.analyses', 'traceadvisor.roofline')));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
