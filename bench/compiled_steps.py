"""The compile pairs' compiled traces against the steps timed around their captures: the
profiler's cost in Inductor's wrapper taken out by its gaps (the tool) or by per-frame costs alone.

    python bench/compiled_steps.py

For each clean run with stack traces (14, 16-21) and each compile pair's compiled side (the fit
pairs mlp_compile, tfm_compile, mlp_infer_compile; the validation pairs gpt_compile, storm_compile,
tfm_infer_compile; elementwise's short wrapper, a fit pair of the other costs), the predicted
unprofiled step's error against the median of the unprofiled rounds timed right around the capture
(``adjacent_unprofiled_us``), uncalibrated: ``gaps`` as the tool predicts it
(``profiler_cost.wrapper_gaps``: inside a wrapper of ``WRAPPER_MIN_CALLS`` calls or more, the gaps
between its calls beyond a line's bytecode are the profiler's cost and its frames cost nothing),
``per-frame`` with the long wrappers' frames costed as any Python frame (the tool before it).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.whatif import profiler_cost as pc  # noqa: E402
from traceadvisor.whatif.replay import replay  # noqa: E402
from traceadvisor.whatif.scenarios import step_time_ns  # noqa: E402

RUNS = (14, 16, 17, 18, 19, 20, 21)
FIT = ("mlp_compile", "tfm_compile", "mlp_infer_compile")
VALIDATION = ("gpt_compile", "storm_compile", "tfm_infer_compile")
SHORT = ("elementwise",)


def predicted_ns(path: Path, gaps: bool) -> float:
    trace = load_file(path)
    return float(step_time_ns(replay(trace, pc.unprofiled_overrides(trace, read_wrapper_gaps=gaps))))


def main() -> int:
    print(f"{'pair':18s} {'split':10s} {'run':>3s} {'calls':>6s} {'gaps':>6s} {'per-frame':>9s}")
    errs: dict[tuple[str, str], list[float]] = {}
    for run in RUNS:
        doc = json.loads((ROOT / f"fixtures/pairs12_runs/run_{run}/pairs12.json").read_text())
        for name in FIT + VALIDATION + SHORT:
            p = doc["pairs"].get(name)
            if p is None or p.get("status") != "ok":
                continue
            rec = p["traces"]["after_stack"]
            path = ROOT / f"fixtures/pairs12_runs/run_{run}/traces" / rec["file"]
            measured = float(rec["adjacent_unprofiled_us"]["median"]) * 1e3
            g = pc.wrapper_gaps(load_file(path))
            calls = len(g.call_ts) / len(g.thread) if g is not None else 0.0
            row = [(predicted_ns(path, gaps) - measured) / measured * 100.0 for gaps in (True, False)]
            split = "fit" if name in FIT else "validation" if name in VALIDATION else "short"
            for label, e in zip(("gaps", "per-frame"), row, strict=True):
                errs.setdefault((split, label), []).append(e)
            print(f"{name:18s} {split:10s} {run:3d} {calls:6.0f} {row[0]:+5.0f}% {row[1]:+8.0f}%")
    for (split, label), e in sorted(errs.items()):
        within = sum(abs(x) <= 10.0 for x in e)
        print(
            f"{split:10s} {label:9s}: {within} of {len(e)} within 10%, median |error| "
            f"{statistics.median(abs(x) for x in e):.1f}%, {min(e):+.0f}% to {max(e):+.0f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
