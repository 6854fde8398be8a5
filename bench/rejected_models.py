"""Profiler-cost models that were tried and not kept, reproduced: what they did to the pairs.

    python bench/rejected_models.py host-speed

``host-speed``: the bundled profiler costs scaled, for a trace without steps timed outside the
profiler, by its host's speed at capture, read off the trace as its median kernel-launch call over
the fit traces' (a capture on a faster host records every call shorter: docs/whatif.md, "The host's
speed"). The costs are refitted that way on the fit half (``bench/fit_profiler_cost.py``'s fit, each
fit trace scaled by its own factor), then the five H100 runs' pairs are replayed as
``bench/pairs_validation.py`` does, with and without the model, and the independent pairs of
``fixtures/pairs.json`` (captured earlier, one on an H200) are checked as ``tests/test_rules_real.py``
checks them (the rule's saving within 30% of the measured one). Nothing here changes the tool: the
model is patched in for the run, then the figures are printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import fit_profiler_cost as fpc  # noqa: E402
import pairs_validation as pv  # noqa: E402
from test_rules_real import PAIR_RULE  # noqa: E402  (the independent pairs and their rules, as the test checks them)

from traceadvisor.testing import find_rule, run_case  # noqa: E402
from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.trace.model import Trace  # noqa: E402
from traceadvisor.whatif import profiler_cost as pc  # noqa: E402

RUNS = ["fixtures/pairs12.json"] + [f"fixtures/pairs12_runs/run_{n}/pairs12.json" for n in (3, 4, 6, 8)]
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


def median_launch_ns(trace: Trace) -> float | None:
    rt = trace.runtime
    if not len(rt):
        return None
    launch = rt["name"].astype(str).isin(LAUNCH_CALLS).to_numpy()
    if int(launch.sum()) < 100:
        return None
    return float(np.median((rt["end_ns"] - rt["ts_ns"]).to_numpy()[launch]))


def speed(trace: Trace, reference: float) -> float:
    here = median_launch_ns(trace)
    return 1.0 if here is None else float(np.clip(here / reference, 0.5, 2.0))


def summary(label: str) -> dict[str, Any]:
    """Per run, on the validation half: traces within 10% and savings right, as pairs_validation counts."""
    out: dict[str, Any] = {}
    for run in RUNS:
        path = ROOT / run
        rows = pv.validate(json.loads(path.read_text()), "stack", path.parent / "traces")
        val = [r for r in rows if r["split"] == "validation"]
        errs = [abs(r[f"{s}_error_pct"]) for r in val for s in ("before", "after") if f"{s}_error_pct" in r]
        right = [r["right"] for r in val if r["right"] is not None]
        out[run] = (sum(e <= 10 for e in errs), len(errs), sum(right), len(right))
        steps, n_steps, right_n, n_right = out[run]
        print(f"  {label:13s} {run:45s} steps within 10%: {steps}/{n_steps}, savings right {right_n}/{n_right}")
    return out


def independent(label: str) -> None:
    pairs = json.loads((ROOT / "fixtures" / "pairs.json").read_text())
    for pair, rule in sorted(PAIR_RULE.items()):
        rec = pairs[pair]
        before = ROOT / "fixtures" / "traces" / Path(rec["before_trace"]).name
        found = run_case(find_rule(rule), {"trace": str(before)}).findings
        measured = rec["measured_saving_us"]["mean"]
        if len(found) != 1 or found[0].impact is None:
            print(f"  {label:13s} {pair:34s} no finding (measured {measured:.0f} µs)")
            continue
        est = found[0].impact.time_us / len(load_file(before).steps)
        ok = abs(est - measured) <= 0.3 * measured
        err = (est - measured) / measured * 100
        verdict = "ok" if ok else "OUTSIDE 30%"
        print(f"  {label:13s} {pair:34s} {est:8.0f} µs vs {measured:8.0f} measured ({err:+.0f}%) {verdict}")


def host_speed() -> None:
    pairs = json.loads((ROOT / "fixtures" / "pairs12.json").read_text())
    rows = fpc.traces_of(pairs, "fit")
    reference = float(np.median([m for _, _, t, _ in rows if (m := median_launch_ns(t)) is not None]))
    print(f"reference: median kernel-launch call {reference:.0f} ns over {len(rows)} fit traces\n")
    print("bundled costs (the tool as it is):")
    summary("bundled")
    independent("bundled")

    def predict(trace: Trace, ns: dict[str, float]) -> float:
        factor = speed(trace, reference)
        cost = pc.ProfilerCost({k: v * factor for k, v in fpc.tied(ns).items()}, {})
        return fpc.step_time_ns(fpc.replay(trace, pc.unprofiled_overrides(trace, cost)))

    fpc.predict = predict
    base = fpc.microbench_costs(ROOT / "fixtures" / "profiler_cost_bench.json")
    ns, _ = fpc.fit(rows, fixed={k: base[k] for k in fpc.FROM_MICROBENCH})
    print("\nrefitted with each trace scaled by its host's speed: " + ", ".join(f"{k} {v:.0f}" for k, v in ns.items()))
    refit = pc.ProfilerCost(ns, {})
    original = pc.calibration

    def calibration(trace: Trace) -> float:
        # the bisection of a trace with timed steps, unchanged; the host's speed for one without
        if pc.measured_unprofiled_ns(trace) is not None:
            return float(original(trace))
        return speed(trace, reference)

    pc.ProfilerCost.bundled = classmethod(lambda cls: refit)  # type: ignore[method-assign,assignment]
    pc.calibration = calibration  # type: ignore[assignment]
    print("host-speed model:")
    summary("host speed")
    independent("host speed")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", choices=["host-speed"])
    ap.parse_args()
    host_speed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
