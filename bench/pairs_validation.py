"""Predicted against measured, on the GPU pairs: unprofiled step times and each fix's saving.

    python bench/pairs_validation.py [--pairs fixtures/pairs12.json] [--variant stack] [--json OUT]

For every pair of ``fixtures/pairs12.json`` (captured by ``fixtures/capture_pairs.py``):

* the predicted unprofiled step of the before and after traces (the trace replayed without the
  profiler's host cost, ``traceadvisor.whatif.profiler_cost``) against the measured one: the pair's
  interleaved median, and the rounds measured right around that capture (``adjacent``);
* the predicted saving of the pair's scenario, replayed on the BEFORE trace alone
  (``traceadvisor.whatif.savings.scenario_saving``), against the measured saving (medians). A batch
  change compares time per sample.

Pairs are marked ``fit`` (the profiler cost may be fitted on them) or ``validation`` (never used to fit
anything); the summary lines give each half separately.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.whatif.savings import predicted_step_ns, scenario_saving  # noqa: E402
from traceadvisor.whatif.scenarios import SCENARIOS  # noqa: E402


def err_pct(pred: float, meas: float) -> float:
    return (pred - meas) / meas * 100.0 if meas else math.nan


def validate(pairs: dict[str, Any], variant: str) -> list[dict[str, Any]]:
    out = []
    for name, p in pairs["pairs"].items():
        if p.get("status") != "ok":
            continue
        row: dict[str, Any] = {"pair": name, "split": p["split"], "scenario": p.get("scenario")}
        per = p.get("samples_per_step")
        for side in ("before", "after"):
            rec = p["traces"].get(f"{side}_{variant}")
            if rec is None:
                continue
            trace = load_file(ROOT / "fixtures" / "traces" / rec["file"])
            pred = predicted_step_ns(trace) / 1e3
            row[f"{side}_measured_us"] = p[f"{side}_step_us"]["median"]
            row[f"{side}_adjacent_us"] = rec.get("adjacent_unprofiled_us", {}).get("median")
            row[f"{side}_predicted_us"] = pred
            row[f"{side}_error_pct"] = err_pct(pred, row[f"{side}_measured_us"])
            if row[f"{side}_adjacent_us"]:
                row[f"{side}_adjacent_error_pct"] = err_pct(pred, row[f"{side}_adjacent_us"])
            if side == "before" and p.get("scenario") in SCENARIOS:
                s = scenario_saving(trace, p["scenario"])
                row["refused"] = s.refused
                b, a = s.before_ns / 1e3, (s.before_ns - s.saving_ns) / 1e3
                if per:  # time per sample: the after side runs per["after"] samples in a step
                    ratio = per["after"] / per["before"]
                    a = s.after_ns / 1e3  # a larger batch lengthens the step: saving_ns (>= 0) would read 0
                    row["predicted_saving_pct"] = (b - a / ratio) / b * 100.0 if b else math.nan
                else:
                    row["predicted_saving_pct"] = s.share_pct
        row["measured_saving_pct"] = p["measured_saving_pct"]
        if "predicted_saving_pct" in row:
            row["saving_error_pct"] = err_pct(row["predicted_saving_pct"], row["measured_saving_pct"])
        out.append(row)
    return out


def fmt(v: Any, w: int = 9, d: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return " " * (w - 1) + "-"
    return f"{v:{w}.{d}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=Path, default=ROOT / "fixtures" / "pairs12.json")
    ap.add_argument("--variant", default="stack")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = validate(json.loads(args.pairs.read_text()), args.variant)
    print(
        f"{'pair':12s} {'split':10s} {'scenario':20s} | {'before µs meas/adj/pred':>30s} {'err%':>6s} | "
        f"{'after µs meas/adj/pred':>30s} {'err%':>6s} | {'saving % meas/pred':>18s} {'err%':>6s}"
    )
    for r in rows:
        print(
            f"{r['pair']:12s} {r['split']:10s} {r['scenario']!s:20s} | "
            f"{fmt(r.get('before_measured_us'))} {fmt(r.get('before_adjacent_us'))} {fmt(r.get('before_predicted_us'))}"
            f" {fmt(r.get('before_error_pct'), 6)} | "
            f"{fmt(r.get('after_measured_us'))} {fmt(r.get('after_adjacent_us'))} {fmt(r.get('after_predicted_us'))}"
            f" {fmt(r.get('after_error_pct'), 6)} | "
            f"{fmt(r.get('measured_saving_pct'))} {fmt(r.get('predicted_saving_pct'))}"
            f" {fmt(r.get('saving_error_pct'), 6)}" + (f"  refused: {r['refused']}" if r.get("refused") else "")
        )
    for split in ("fit", "validation"):
        errs = [
            abs(r[f"{s}_error_pct"])
            for r in rows
            if r["split"] == split
            for s in ("before", "after")
            if f"{s}_error_pct" in r
        ]
        sav = [abs(r["saving_error_pct"]) for r in rows if r["split"] == split and "saving_error_pct" in r]
        if errs:
            errs.sort()
            print(
                f"{split}: unprofiled step |error| median {errs[len(errs) // 2]:.1f}%, max {errs[-1]:.1f}% "
                f"({sum(e <= 10 for e in errs)}/{len(errs)} within 10%)"
                + (f"; saving |error| within 20%: {sum(e <= 20 for e in sav)}/{len(sav)}" if sav else "")
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
