"""How far the median of a few kernel-launch calls strays from a trace's own median: the basis of
``profiler_cost.MIN_LAUNCHES`` (the host's speed is read from at least that many launches).

    python bench/launch_sample_error.py

For each trace: its launch calls' spread (IQR over the median) and the bootstrap standard error
of the median of n launches drawn from its own (2,000 draws, seed 0), relative to its median.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.whatif.profiler_cost import LAUNCH_CALLS, MIN_LAUNCHES  # noqa: E402

RUNS = ROOT / "fixtures" / "pairs12_runs"
TRACES = (
    RUNS / "run_14" / "traces" / "p12_storm_before_stack.json.gz",
    RUNS / "run_16" / "traces" / "p12_sdpa_before_stack.json.gz",
    RUNS / "run_28" / "traces" / "p12_item_gpu_short_before_stack.json.gz",
    RUNS / "run_28" / "traces" / "p12_item_gpu_short_wide_after_stack.json.gz",
)


def main() -> int:
    rng = np.random.default_rng(0)
    sizes = (MIN_LAUNCHES, 100)
    print(f"{'trace':48s} {'launches':>8s} {'IQR/median':>10s} " + " ".join(f"{f'SE n={n}':>9s}" for n in sizes))
    for path in TRACES:
        rt = load_file(path).runtime
        mask = rt["name"].astype(str).isin(LAUNCH_CALLS).to_numpy()
        d = (rt["end_ns"] - rt["ts_ns"]).to_numpy()[mask].astype(float)
        med = float(np.median(d))
        q75, q25 = np.percentile(d, [75, 25])
        se = [float(np.std([np.median(rng.choice(d, n)) for _ in range(2000)])) / med for n in sizes]
        print(f"{path.name:48s} {len(d):8d} {(q75 - q25) / med:10.2f} " + " ".join(f"{x:9.3f}" for x in se))
    return 0


if __name__ == "__main__":
    sys.exit(main())
