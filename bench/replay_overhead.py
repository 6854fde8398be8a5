#!/usr/bin/env python3
"""What the replay (``traceadvisor/whatif/replay.py``) adds to ``analyze``: issue 12's target is at
most 25 % on the 100 MB benchmark trace.

Every replay ``analyze`` runs counts: the unchanged trace (``traces[].replay_error_pct``), the
trace without the profiler (``traces[].step_time``) and each rule's what-if scenarios (savings as
replay differences). In one process, ``--repeat`` times each, interleaved:
``traceadvisor.pipeline.analyze([TRACE])`` as it is, against the same call with the replay's two
stages replaced by the measured times (``_simulate``: the event loop, a no-op; ``_steps``: each
step as measured). Everything else runs in both (loading, the scenarios' graph changes, the rules,
the report), so the difference is the replays' own time; with the replays the savings are real,
without them every saving is 0, which only makes the rules' work after it cheaper. Each call
loads a fresh trace, so nothing carries over. Printed: the times, the medians, the overhead
(with - without) / without, the time spent inside the replays during one analyze (and how many),
and one replay of the unchanged loaded trace alone. Exit status 1 above ``--max-overhead``.

    .venv/bin/python bench/replay_overhead.py
    .venv/bin/python bench/replay_overhead.py --trace fixtures/traces/planted_launch_storm.json.gz
    .venv/bin/python bench/replay_overhead.py --trace bench/.cache/nccl_data.1000MB.json --repeat 3 --json OUT

``make bench`` (bench/run.py) runs it on the 100 MB and 1 GB traces and adds its figures to the table.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import traceadvisor.whatif.replay as replay_module  # noqa: E402
from traceadvisor.pipeline import analyze  # noqa: E402
from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.trace.model import Trace  # noqa: E402
from traceadvisor.whatif.replay import StepReplay  # noqa: E402


def _timed_analyze(trace: Path) -> float:
    gc.collect()
    t0 = time.perf_counter()
    analyze([trace])
    return time.perf_counter() - t0


def _measured_steps(
    trace: Trace, start: Any, end: Any, shifts: Any, removed: Any, external: Any = None
) -> tuple[StepReplay, ...]:
    """Each step as measured (the stand-in for ``replay._steps``, whatever it is passed)."""
    t = trace.steps.table
    out = []
    for step, cs, ce, ge in zip(t["step"], t["cpu_start_ns"], t["cpu_end_ns"], t["gpu_end_ns"], strict=True):
        m_end = max(int(ce), int(ge))
        out.append(StepReplay(int(step), ce - cs, ce - cs, m_end - cs, m_end - cs, m_end, m_end))
    return tuple(out)


class Stages:
    """The replay's two stages, real or replaced by the measured times, timed while real."""

    def __init__(self) -> None:
        self.real = (replay_module._simulate, replay_module._steps)
        self.seconds = 0.0
        self.replays = 0

    def timed(self, fn: Callable[..., Any], count: bool) -> Callable[..., Any]:
        def run(*a: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a)
            finally:
                self.seconds += time.perf_counter() - t0
                self.replays += count

        return run

    def use_real(self) -> None:
        replay_module._simulate = self.timed(self.real[0], False)
        replay_module._steps = self.timed(self.real[1], True)  # once per replay, with or without GPU work

    def use_measured(self) -> None:
        replay_module._simulate = lambda *a: None
        replay_module._steps = _measured_steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=ROOT / "bench" / ".cache" / "nccl_data.100MB.json")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--max-overhead", type=float, default=0.25)
    ap.add_argument("--json", type=Path, help="also write the figures (seconds, medians, overhead) to this file")
    args = ap.parse_args()
    stages = Stages()
    with_replay: list[float] = []
    without: list[float] = []
    for _ in range(args.repeat):
        stages.use_measured()
        without.append(_timed_analyze(args.trace))
        stages.use_real()
        stages.seconds, stages.replays = 0.0, 0
        with_replay.append(_timed_analyze(args.trace))
    inside_s, inside_n = stages.seconds, stages.replays  # during the last analyze with the replays
    trace = load_file(args.trace, max_bytes=1 << 40)
    t0 = time.perf_counter()
    err = replay_module.replay(trace).error_pct
    alone = time.perf_counter() - t0
    overhead = statistics.median(with_replay) / statistics.median(without) - 1
    print(f"analyze without replay: {[round(x, 3) for x in without]} s")
    print(f"analyze with replay:    {[round(x, 3) for x in with_replay]} s")
    print(f"replay alone: {alone:.3f} s ({len(trace.gpu)} GPU records), replay error {err}")
    print(f"inside analyze: {inside_n} replays, {inside_s:.3f} s")
    print(f"overhead (medians): {overhead * 100:.1f}%")
    if args.json:
        figures = {
            "trace": args.trace.name,
            "gpu_records": len(trace.gpu),
            "without_s": without,
            "with_s": with_replay,
            "median_without_s": statistics.median(without),
            "median_with_s": statistics.median(with_replay),
            "replay_alone_s": alone,
            "replays_in_analyze": inside_n,
            "replays_in_analyze_s": inside_s,
            "overhead_pct": overhead * 100,
        }
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 1 if overhead > args.max_overhead else 0


if __name__ == "__main__":
    raise SystemExit(main())
