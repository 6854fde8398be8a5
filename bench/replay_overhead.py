#!/usr/bin/env python3
"""What the replay (``traceadvisor/whatif/replay.py``) adds to ``analyze``: issue 12's target is at
most 25 % on the 100 MB benchmark trace.

In one process, ``--repeat`` times each, interleaved: ``traceadvisor.pipeline.analyze([TRACE])``
(load, summary with ``traces[].replay_error_pct``, rules, report) against the same call with the
pipeline's replay replaced by a function that returns None. Each call loads a fresh trace, so nothing
carries over. Printed: the times, the medians and the overhead (with - without) / without; also the
replay alone on one loaded trace. Exit status 1 above ``--max-overhead`` (default 0.25).

    .venv/bin/python bench/replay_overhead.py
    .venv/bin/python bench/replay_overhead.py --trace fixtures/traces/planted_launch_storm.json.gz
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import traceadvisor.whatif.replay as replay_module  # noqa: E402
from traceadvisor.pipeline import analyze  # noqa: E402
from traceadvisor.trace.load import load_file  # noqa: E402


def _timed_analyze(trace: Path) -> float:
    gc.collect()
    t0 = time.perf_counter()
    analyze([trace])
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=ROOT / "bench" / ".cache" / "nccl_data.100MB.json")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--max-overhead", type=float, default=0.25)
    args = ap.parse_args()
    real = replay_module.replay_error_pct
    with_replay: list[float] = []
    without: list[float] = []
    for _ in range(args.repeat):
        replay_module.replay_error_pct = lambda trace: None  # the pipeline imports it at each call
        without.append(_timed_analyze(args.trace))
        replay_module.replay_error_pct = real
        with_replay.append(_timed_analyze(args.trace))
    trace = load_file(args.trace, max_bytes=1 << 40)
    t0 = time.perf_counter()
    err = replay_module.replay(trace).error_pct
    alone = time.perf_counter() - t0
    overhead = statistics.median(with_replay) / statistics.median(without) - 1
    print(f"analyze without replay: {[round(x, 3) for x in without]} s")
    print(f"analyze with replay:    {[round(x, 3) for x in with_replay]} s")
    print(f"replay alone: {alone:.3f} s ({len(trace.gpu)} GPU records), replay error {err}")
    print(f"overhead (medians): {overhead * 100:.1f}%")
    return 1 if overhead > args.max_overhead else 0


if __name__ == "__main__":
    raise SystemExit(main())
