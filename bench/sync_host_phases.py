"""The unprofiled replay's host time after each `.item()`, phase by phase, against the same phases
timed without the profiler (fixtures/host_phase_probe/).

    python bench/sync_host_phases.py [--probe fixtures/host_phase_probe/run_a]

The probe's loops read ``time.perf_counter_ns()`` at five points of each step (``top``, ``first``,
``item``, ``ret``, ``stepped``: fixtures/host_phase_probe.py); in its stack traces each read is a
built-in frame, so each phase's profiled span is in the trace, and so is what the unprofiled replay
leaves of it (the span less the profiler time ``unprofiled_overrides`` takes out inside it). Printed
per pair and phase: the median unprofiled time (mode ``none``, every round), the profiled time the
probe timed in the ``stack`` mode, the span in the exported stack trace and the replay's leftover.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.whatif.host_time import thread_key  # noqa: E402
from traceadvisor.whatif.profiler_cost import unprofiled_overrides  # noqa: E402

PHASES = ("exit", "prof_step", "head", "post_sync")
MARK = "<built-in function perf_counter_ns>"


def marks_of(doc: dict[str, Any]) -> list[dict[str, int]]:
    """Each active step's clock reads (ns) in a stack trace, named by the frame that made them: the
    step function's two (``top``, ``item``), the hook's (``first``), the loop's two (``ret``,
    ``stepped``)."""
    frames = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "python_function"]
    by_id = {e["args"].get("Python id"): e for e in frames}
    steps: list[dict[str, int]] = []
    loop_reads = 0
    for e in sorted((e for e in frames if e["name"] == MARK), key=lambda e: e["ts"]):
        parent = by_id.get(e["args"].get("Python parent id"), {}).get("name", "")
        t = round(float(e["ts"]) * 1e3)
        if parent.endswith("): before"):
            if not steps or "item" in steps[-1]:
                steps.append({"top": t})
                loop_reads = 0
            else:
                steps[-1]["item"] = t
        elif "<lambda>" in parent and steps:
            steps[-1]["first"] = t
        elif parent.endswith("): run_mode") and steps:
            steps[-1]["ret" if loop_reads == 0 else "stepped"] = t
            loop_reads += 1
    return [s for s in steps if len(s) == 5]


def spans(steps: list[dict[str, int]]) -> dict[str, list[tuple[int, int, int, int]]]:
    """Each phase as up to two (start, end) pieces per step (``head`` has two: the loop's turn and
    the forward's Python before the first Linear)."""
    out: dict[str, list[tuple[int, int, int, int]]] = {p: [] for p in PHASES}
    for m, n in itertools.pairwise(steps):
        out["exit"].append((m["item"], m["ret"], 0, 0))
        out["prof_step"].append((m["ret"], m["stepped"], 0, 0))
        out["head"].append((m["stepped"], n["top"], n["top"], n["first"]))
        out["post_sync"].append((m["item"], n["first"], 0, 0))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe", type=Path, default=ROOT / "fixtures" / "host_phase_probe" / "run_a")
    args = ap.parse_args()
    doc = json.loads((args.probe / "host_phases.json").read_text())
    print(f"{'pair':14s} {'phase':10s} {'unprofiled':>10s} {'stack timed':>11s} {'in trace':>9s} {'replay':>8s}  µs")
    with tarfile.open(args.probe / "traces.tar") as tar, tempfile.TemporaryDirectory() as tmp:
        for name, p in doc["pairs"].items():
            try:
                raw = tar.extractfile(f"{name}_stack.json.gz")
            except KeyError:
                continue
            assert raw is not None
            data = raw.read()
            trace_doc = json.loads(gzip.decompress(data))
            path = Path(tmp) / f"{name}_stack.json.gz"
            path.write_bytes(data)
            trace = load_file(path)
            steps = marks_of(trace_doc)
            f = trace.frames
            mine = f[f["name"].astype(str) == MARK]
            thread = int(thread_key(mine["pid"].to_numpy()[:1], mine["tid"].to_numpy()[:1])[0])
            removed = unprofiled_overrides(trace).host_removed
            for phase, pieces in spans(steps).items():
                profiled, left = [], []
                for a, b, c, d in pieces:
                    pts = np.array([a, b, c, d], dtype=np.int64)
                    gone = removed.removed(thread, pts)
                    span = (b - a) + (d - c)
                    profiled.append(span / 1e3)
                    left.append((span - int(gone[1] - gone[0]) - int(gone[3] - gone[2])) / 1e3)
                real = p["summary"]["none"].get(phase)
                timed = p["summary"]["stack"].get(phase)
                print(
                    f"{name:14s} {phase:10s} {real or 0:10.1f} {timed or 0:11.1f} "
                    f"{statistics.median(profiled):9.1f} {statistics.median(left):8.1f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
