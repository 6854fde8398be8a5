"""What the host's plausible speed (the replays at its two ends) adds to ``analyze`` on captured traces.

    python bench/host_ends_overhead.py [--repeat 5]

Where a trace carries the unprofiled steps measured around its capture but its GPU-bound step does
not fix the profiler-cost factor, every finding's likely range also replays its fix at both ends of
the host's plausible speed (``whatif.profiler_cost.host_cost_interval``, ``savings.host_alternatives``).
Traces without measured steps get none of those replays, so ``bench/replay_overhead.py``'s large
traces do not show them. This times ``pipeline.analyze`` on run 36's captures (each given the steps
timed around it, as ``traceadvisor capture`` stores them) with the interval on and off, interleaved
in one process, and prints the ratio.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor import pipeline  # noqa: E402
from traceadvisor.whatif import savings  # noqa: E402

RUN = ROOT / "fixtures" / "pairs12_runs" / "run_36"
PAIRS = ("gpt_compile", "resnet50_bf16_cl", "item_gpu_deep")


def calibrated_copy(pair: str, out: Path) -> Path:
    rec = json.loads((RUN / "pairs12.json").read_text())["pairs"][pair]["traces"]["before_stack"]
    doc = json.loads(gzip.decompress((RUN / "traces" / rec["file"]).read_bytes()))
    doc["traceadvisor"] = {"unprofiled_step_us": rec["adjacent_unprofiled_us"]["repeats"]}
    path = out / f"{pair}.json"
    path.write_text(json.dumps(doc))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    interval = savings.host_cost_interval
    print(f"{'trace':18s} {'host ends off s':>15s} {'on s':>8s} {'ratio':>7s}")
    with tempfile.TemporaryDirectory() as tmp:
        for pair in PAIRS:
            path = calibrated_copy(pair, Path(tmp))
            times: dict[bool, list[float]] = {False: [], True: []}
            pipeline.analyze([path])  # warm the loader and imports
            for _ in range(args.repeat):
                for on in (False, True):
                    savings.host_cost_interval = interval if on else (lambda trace: None)  # type: ignore[assignment]
                    try:
                        t = time.perf_counter()
                        pipeline.analyze([path])
                        times[on].append(time.perf_counter() - t)
                    finally:
                        savings.host_cost_interval = interval  # type: ignore[assignment]
            off, on_ = statistics.median(times[False]), statistics.median(times[True])
            print(f"{pair:18s} {off:15.3f} {on_:8.3f} {on_ / off:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
