"""The replay's unprofiled host gap after each sync of the GPU-bound .item() loops' before traces.

    python bench/sync_gap.py

For every clean run's item_gpu / item_gpu_wide / item_gpu_deep before trace (stacks on, first
capture): each ``cudaStreamSynchronize``'s end to the next kernel launch on the host, profiled,
and what the unprofiled replay's profiler-cost removal leaves of it (``unprofiled_overrides``),
with the recorded events it holds by kind. fixtures/sync_gap_probe/ measured the real GPU idle
after the sync without the profiler (docs/whatif.md, *Next on the GPU*).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.whatif.host_time import thread_key  # noqa: E402
from traceadvisor.whatif.profiler_cost import KINDS, recorded_events, unprofiled_overrides  # noqa: E402

PAIRS = ("item_gpu", "item_gpu_wide", "item_gpu_deep")


def main() -> int:
    print(f"{'run':8s} {'pair':14s} {'profiled µs':>12s} {'left µs':>8s}  events")
    for run in sorted((ROOT / "fixtures" / "pairs12_runs").glob("run_*")):
        for pair in PAIRS:
            path = run / "traces" / f"p12_{pair}_before_stack.json.gz"
            if not path.exists():
                continue
            t = load_file(path)
            rt = t.runtime
            names = rt["name"].astype(str)
            syncs = rt[(names == "cudaStreamSynchronize").to_numpy()]
            ends = syncs["end_ns"].to_numpy()
            threads = thread_key(syncs["pid"].to_numpy(), syncs["tid"].to_numpy())
            launches = np.sort(rt["ts_ns"].to_numpy()[names.str.contains("LaunchKernel").to_numpy()])
            _, ts, kinds, _ = recorded_events(t)
            removed = unprofiled_overrides(t).host_removed
            for end, thread in zip(ends.tolist(), threads.tolist(), strict=True):
                k = int(np.searchsorted(launches, end, side="right"))
                if k >= len(launches):
                    continue
                nxt = int(launches[k])
                gone = removed.removed(int(thread), np.array([end, nxt], dtype=np.int64))
                held = Counter(KINDS[i] for i in kinds[(ts >= end) & (ts < nxt)])
                left = (nxt - end - int(gone[1] - gone[0])) / 1e3
                print(f"{run.name:8s} {pair:14s} {(nxt - end) / 1e3:12.1f} {left:8.1f}  {dict(held)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
