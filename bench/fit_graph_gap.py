"""``scenarios.GRAPH_NODE_PROFILER_NS`` refitted: how much closer a CUDA graph's nodes run without the profiler.

    python bench/fit_graph_gap.py

For each clean run (CUPTI detached) holding the fit pair storm (its after side: the tiny-layer
storm replayed from one CUDA graph of 300 kernels a step), the cut of each gap between a graph's
nodes (``Overrides.graph_gap_cut_ns``) at which the trace's unprofiled replay meets the side's
measured median step (a bisection: the step falls as the cut grows); the constant is the median
over those traces. Then, with it, each validation graph side (decode after: a Llama-style decode
step of 3,420 graph kernels) predicted against its measured step, with and without the cut.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.trace.model import Trace  # noqa: E402
from traceadvisor.whatif import scenarios  # noqa: E402
from traceadvisor.whatif.profiler_cost import ProfilerCost, unprofiled_overrides  # noqa: E402
from traceadvisor.whatif.replay import replay  # noqa: E402

RUNS = ROOT / "fixtures" / "pairs12_runs"
FIT, VALIDATION = "storm", "decode"


def step_us(trace: Trace, cut: float) -> float:
    base = unprofiled_overrides(trace, ProfilerCost.bundled().for_trace(trace))
    return scenarios.step_time_ns(replay(trace, replace(base, graph_gap_cut_ns=round(cut)))) / 1e3


def fitted_cut(trace: Trace, target_us: float, lo: float = 0.0, hi: float = 256.0) -> float | None:
    """The cut (ns) whose replay meets ``target_us``; None when the range cannot reach it."""
    if not step_us(trace, hi) <= target_us <= step_us(trace, lo):
        return None
    for _ in range(24):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if step_us(trace, mid) > target_us else (lo, mid)
    return (lo + hi) / 2


def sides(pair: str) -> list[tuple[str, Path, float]]:
    out = []
    for path in sorted(RUNS.glob("run_*/pairs12.json"), key=lambda p: int(p.parent.name.split("_")[1])):
        doc = json.loads(path.read_text())
        p = doc["pairs"].get(pair, {})
        if doc.get("teardown_cupti") != "1" or p.get("status") != "ok" or "after_stack" not in p["traces"]:
            continue
        trace = path.parent / "traces" / p["traces"]["after_stack"]["file"]
        out.append((path.parent.name, trace, p["after_step_us"]["median"]))
    return out


def main() -> int:
    cuts = []
    print(f"fit: {FIT} after, the cut that meets the measured step")
    for run, path, meas in sides(FIT):
        t = load_file(path)
        c = fitted_cut(t, meas)
        got = "-" if c is None else f"{c:.1f} ns"
        print(f"  {run:7s} measured {meas:9.1f} µs  uncut {step_us(t, 0):9.1f}  cut {got}")
        if c is not None:
            cuts.append(c)
    fit = statistics.median(cuts)
    print(f"median cut: {fit:.1f} ns over {len(cuts)} traces (the tool: {scenarios.GRAPH_NODE_PROFILER_NS} ns)")
    print(f"validation: {VALIDATION} after, predicted at the tool's cut against measured")
    for run, path, meas in sides(VALIDATION):
        t = load_file(path)
        a, b = step_us(t, 0), step_us(t, scenarios.GRAPH_NODE_PROFILER_NS)
        print(f"  {run:7s} measured {meas:9.1f} µs  uncut {a:9.1f} ({(a - meas) / meas * 100:+.1f}%)"
              f"  cut {b:9.1f} ({(b - meas) / meas * 100:+.1f}%)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
