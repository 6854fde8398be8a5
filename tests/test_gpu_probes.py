"""The unprofiled replay against the GPU probes of the `.item()` loops (H200, 2026-12-03).

fixtures/host_phase_probe/ timed the host's phases after each `.item()` with and without the
profiler and kept the stack traces; fixtures/gpu_segment_probe/ timed each step segment's GPU time
by CUDA events on both sides of the no-sync fix, without the profiler. Together they say where the
replay's no-sync prediction stands: the idle it predicts per step against the idle measured, and
the part of that idle the GPU gives back as faster kernels (docs/whatif.md, *Next on the GPU*).
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from traceadvisor.trace.load import load_file
from traceadvisor.whatif.host_time import thread_key
from traceadvisor.whatif.profiler_cost import unprofiled_overrides

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import gpu_segments  # noqa: E402
import sync_host_phases  # noqa: E402

PROBE = ROOT / "fixtures" / "host_phase_probe" / "run_a"
SEGMENTS = ROOT / "fixtures" / "gpu_segment_probe" / "run_a" / "segments.json"
LOOPS = ("item_gpu_wide", "item_host", "item_gpu", "item_gpu_deep")
GPU_BOUND = ("item_gpu_wide", "item_gpu", "item_gpu_deep")


@pytest.fixture(scope="module")
def stack_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("host_phase_probe")
    paths = {}
    with tarfile.open(PROBE / "traces.tar") as tar:
        for name in LOOPS:
            member = tar.extractfile(f"{name}_stack.json.gz")
            assert member is not None
            paths[name] = out / f"{name}_stack.json.gz"
            paths[name].write_bytes(member.read())
    return paths


@pytest.mark.parametrize("name", LOOPS)
def test_every_active_step_has_its_five_clock_reads(stack_traces: dict[str, Path], name: str) -> None:
    """The probe's marks are found in its stack traces: one step per active step of the window
    (10 active, the last one's prof.step() ends the window) and in the order they were read."""
    steps = sync_host_phases.marks_of(json.loads(gzip.decompress(stack_traces[name].read_bytes())))
    assert len(steps) >= 9
    for s in steps:
        assert s["top"] < s["first"] < s["item"] < s["ret"] < s["stepped"]


@pytest.mark.parametrize("name", LOOPS)
def test_prof_step_is_taken_out_whole(stack_traces: dict[str, Path], name: str) -> None:
    """A loop without the profiler never calls prof.step(): the probe's unprofiled loop spends 0 µs
    there, the stack trace holds 66-130 µs of it after every `.item()`, and the unprofiled replay
    keeps at most a few µs (the clock reads around it)."""
    trace = load_file(stack_traces[name])
    steps = sync_host_phases.marks_of(json.loads(gzip.decompress(stack_traces[name].read_bytes())))
    f = trace.frames
    mine = f[f["name"].astype(str) == sync_host_phases.MARK]
    thread = int(thread_key(mine["pid"].to_numpy()[:1], mine["tid"].to_numpy()[:1])[0])
    removed = unprofiled_overrides(trace).host_removed
    profiled, left = [], []
    for s in steps:
        a, b = s["ret"], s["stepped"]
        gone = removed.removed(thread, np.array([a, b], dtype=np.int64))
        profiled.append((b - a) / 1e3)
        left.append((b - a - int(gone[1] - gone[0])) / 1e3)
    assert statistics.median(profiled) > 50.0
    assert statistics.median(left) < 5.0


@pytest.mark.parametrize("name", GPU_BOUND)
def test_replayed_idle_is_the_measured_idle(stack_traces: dict[str, Path], name: str) -> None:
    """The unprofiled replay's GPU idle per step (the sync's tail and the step's lead-in) is within
    15% of the idle the same program showed without the profiler (the head segments' before-minus-
    after difference: 240, 350 and 474 µs; replayed 270, 400 and 445)."""
    measured = gpu_segments.decompose(json.loads(SEGMENTS.read_text())["pairs"][name]["summary"])["idle_us"]
    replayed, _, _ = gpu_segments.replayed_idle_us(stack_traces[name])
    assert abs(replayed - measured) <= 0.15 * measured, (replayed, measured)


def test_the_idling_side_runs_its_kernels_faster() -> None:
    """What the replay does not model: on each GPU-bound loop (all at the H200's power limit) the
    before side's body segments ran 1.3-2.7% faster than the after side's, giving back 28-56% of
    the idle, so the measured saving (idle less give-back) is under the idle; the host-bound loop's
    idle is nil (its segments wait for the host on both sides)."""
    pairs = json.loads(SEGMENTS.read_text())["pairs"]
    for name in GPU_BOUND:
        d = gpu_segments.decompose(pairs[name]["summary"])
        assert 0.2 < d["give_back_share"] < 0.7, (name, d)
        assert 0.0 < d["saving_us"] < d["idle_us"]
        assert 1.0 < d["kernel_speedup_pct"] < 3.5
    host = gpu_segments.decompose(pairs["item_host"]["summary"])
    assert abs(host["idle_us"]) < 10.0
