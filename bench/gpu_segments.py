"""The no-sync saving of the GPU-bound `.item()` loops, segment by segment (fixtures/gpu_segment_probe/),
against what the replay predicts from the same programs' stack traces (fixtures/host_phase_probe/).

    python bench/gpu_segments.py

Per pair: the before side's idle (its tail, from the optimizer's last kernel to the next step's
top, and its lead-in, the first Linear's segment, less the after side's), the time its body
segments ran faster than the after side's (the kernels' speed when the GPU idles: the power limit
gives part of the idle back), the measured saving (the sum of every segment's difference) and the
replay's predicted idle and no-sync saving per step.
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.whatif.profiler_cost import unprofiled_replay  # noqa: E402
from traceadvisor.whatif.savings import scenario_saving  # noqa: E402

SEGMENTS = ROOT / "fixtures" / "gpu_segment_probe" / "run_a" / "segments.json"
TRACES = ROOT / "fixtures" / "host_phase_probe" / "run_a" / "traces.tar"
HEAD = ("top", "linear0")
# less idle than this per step on the before side: both sides wait for the host
HOST_BOUND_IDLE_US = 10.0  # the tail up to the step's top, and the lead-in to the first Linear's end


def decompose(summary: dict[str, dict[str, float]]) -> dict[str, float]:
    """The before side's idle (head segments' difference), the body's give-back (the other
    segments' difference, negative where the before side's kernels ran faster) and the saving."""
    diff = {seg: s["difference_us"] for seg, s in summary.items()}
    idle = sum(diff[s] for s in HEAD)
    body = sum(v for seg, v in diff.items() if seg not in HEAD)
    body_after = sum(s["after_us"] for seg, s in summary.items() if seg not in HEAD)
    step_before = sum(s["before_us"] for s in summary.values())
    return {
        "idle_us": idle,
        "give_back_us": -body,
        "give_back_share": -body / idle if idle > 0 else float("nan"),
        "kernel_speedup_pct": -body / body_after * 100.0 if body_after > 0 else float("nan"),
        "saving_us": idle + body,
        "saving_pct": (idle + body) / step_before * 100.0 if step_before > 0 else float("nan"),
        "before_step_us": step_before,
    }


def replayed_idle_us(trace_path: Path) -> tuple[float, float, float]:
    """The unprofiled replay's GPU idle per step (gaps over 1 µs between the merged records), its
    step and the no-sync scenario's saving per step (µs)."""
    t = load_file(trace_path)
    r = unprofiled_replay(t)
    s, e = r.gpu_start_ns, r.gpu_end_ns
    ok = (s >= 0) & (e > s)
    order = np.argsort(s[ok], kind="stable")
    starts, ends = s[ok][order], np.maximum.accumulate(e[ok][order])
    gaps = starts[1:] - ends[:-1]
    n_steps = max(len(r.steps), 1)
    idle = float(gaps[gaps > 1000].sum()) / n_steps
    saving = scenario_saving(t, "no-sync")
    return idle / 1e3, saving.before_ns / 1e3, saving.saving_ns / 1e3


def main() -> int:
    doc = json.loads(SEGMENTS.read_text())
    print(
        f"{'pair':14s} {'idle µs':>8s} {'give-back µs':>12s} {'share':>6s} {'kernels faster':>14s} "
        f"{'saving µs':>9s} {'saving %':>8s} | {'replay idle':>11s} {'replay saving':>13s} {'%':>5s}"
    )
    with tarfile.open(TRACES) as tar, tempfile.TemporaryDirectory() as tmp:
        for name, p in doc["pairs"].items():
            d = decompose(p["summary"])
            cells = f"{'-':>11s} {'-':>13s} {'-':>5s}"
            try:
                member = tar.extractfile(f"{name}_stack.json.gz")
            except KeyError:
                member = None
            if member is not None and name != "item_host":
                path = Path(tmp) / f"{name}_stack.json.gz"
                path.write_bytes(member.read())
                idle, step, saving = replayed_idle_us(path)
                cells = f"{idle:11.1f} {saving:13.1f} {saving / step * 100:5.2f}"
            # a host-bound loop idles on neither side: its body's difference is the host's, not the kernels'
            bound = d["idle_us"] >= HOST_BOUND_IDLE_US
            share = f"{d['give_back_share']:6.2f}" if bound else f"{'-':>6s}"
            faster = f"{d['kernel_speedup_pct']:13.2f}%" if bound else f"{'(host-bound)':>14s}"
            print(
                f"{name:14s} {d['idle_us']:8.1f} {d['give_back_us']:12.1f} {share} "
                f"{faster} {d['saving_us']:9.1f} {d['saving_pct']:8.2f} | {cells}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
