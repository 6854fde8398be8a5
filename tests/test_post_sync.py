"""The GPU's idle after a blocking ``.item()``, measured without the profiler, against the replay.

fixtures/post_sync/ (``fixtures/post_sync_bench.py`` on an H100): the no-sync pairs' loops
(capture_pairs.pair_item_host, fit; pair_item_gpu, validation) timed with two CUDA events a step,
one recorded right before ``loss.item()`` and one in the next step right before ``model(x)``, in
unprofiled rounds and in profiled windows exported as traces. The no-sync scenario's saving in a
GPU-bound loop is that idle; item_gpu's is predicted at 2.6-4.2% against 0.2-3.2% measured
(fixtures/pairs12_runs/), so whether the replay keeps too much host time after the sync is measured
here rather than fitted.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from fixture_paths import REPO

from traceadvisor.trace.load import load_file
from traceadvisor.whatif.profiler_cost import unprofiled_replay

POST_SYNC = REPO / "fixtures" / "post_sync"
MEASURED = json.loads((POST_SYNC / "post_sync.json").read_text())


def _replayed_post_sync_idle_us(path: Path) -> list[float]:
    """Per ``cudaStreamSynchronize`` of the trace: the replayed (unprofiled) GPU idle from the last
    record that ended before the sync returned to the first one that started after it (µs)."""
    trace = load_file(path)
    r = unprofiled_replay(trace)
    start, end = np.asarray(r.gpu_start_ns), np.asarray(r.gpu_end_ns)
    gpu = trace.gpu
    out = []
    for sync_end in trace.syncs.loc[trace.syncs["name"] == "Stream Sync", "end_ns"].tolist():
        before = gpu["end_ns"].to_numpy() <= sync_end
        after = gpu["ts_ns"].to_numpy() > sync_end
        if before.any() and after.any():
            out.append(float(start[after].min() - end[before].max()) / 1e3)
    return out


@pytest.mark.parametrize("program", ["item_host", "item_gpu"])
def test_the_replay_keeps_about_the_idle_the_unprofiled_loop_has_after_each_sync(program: str) -> None:
    """The unprofiled window from the sync's work to the next ``model(x)`` call measured 138 µs
    (item_gpu) and 145 µs (item_host) on the GPU clock; with the profiler 352 and 306 µs. The replay
    of the profiled windows keeps a median of 139 and 184 µs up to the next kernel, which starts a
    little after the model call: it does not keep the profiler's share of the window. item_gpu's
    over-predicted saving is not that window (docs/whatif.md, *Run 19*)."""
    rec = MEASURED["programs"][program]
    unprofiled = rec["median"]["unprofiled"]["gap_us"]
    profiled = rec["median"]["profiled"]["gap_us"]
    idle = [
        x for r in rec["rounds"]["profiled"] for x in _replayed_post_sync_idle_us(POST_SYNC / "traces" / r["trace"])
    ]
    assert len(idle) >= 2 * len(rec["rounds"]["profiled"])
    replayed = float(np.median(idle))
    assert profiled > 1.8 * unprofiled  # the profiler's part of the window is most of it
    assert 0.75 * unprofiled <= replayed <= 1.4 * unprofiled, (replayed, unprofiled)


def _capture_pairs() -> ModuleType:
    pytest.importorskip("torch")
    path = REPO / "fixtures" / "capture_pairs.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("capture_pairs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_captures_are_spread_over_the_interleaved_rounds() -> None:
    rounds = _capture_pairs().capture_rounds
    assert rounds(15, 5) == {2, 5, 8, 11, 14}
    assert rounds(15, 1) == {14}
    assert rounds(4, 2) == {1, 3}
    assert rounds(15, 0) == set()


def test_run_19_holds_every_capture_of_every_pair() -> None:
    """Run 19 (``capture_pairs.py --captures 5``): each pair's five captures of both sides, taken
    after rounds 2, 5, 8, 11 and 14 of its 15, the first also the pair's trace."""
    run = REPO / "fixtures" / "pairs12_runs" / "run_19"
    doc = json.loads((run / "pairs12.json").read_text())
    assert doc["captures"] == 5 and len(doc["pairs"]) == 8
    for name, p in doc["pairs"].items():
        assert p["status"] == "ok", name
        assert [c["before_stack"]["after_round"] for c in p["captures"]] == [2, 5, 8, 11, 14]
        assert p["traces"] == p["captures"][0]
        for c in p["captures"]:
            assert set(c) == {"before_stack", "after_stack"}
            assert all((run / "traces" / rec["file"]).is_file() for rec in c.values())
