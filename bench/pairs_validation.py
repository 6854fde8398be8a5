"""Predicted against measured, on the GPU pairs: unprofiled step times and each fix's saving.

    python bench/pairs_validation.py [--pairs FILE] [--variant stack] [--json OUT] [--calibrated]
    python bench/pairs_validation.py --all-runs [--calibrated]
    python bench/pairs_validation.py --across-runs [--calibrated]
    python bench/pairs_validation.py --fit-range [--calibrated]   (the likely range of a saving, fitted on the fit half)
    python bench/pairs_validation.py --fit-host-spread   (the profiler-cost factor's plausible range, from the fit half)
    python bench/pairs_validation.py --given [--pairs FILE]   (as --step-time: each side's measured median)
    python bench/pairs_validation.py --intervals [--pairs FILE]   (each pair's saving per step interval)
    python bench/pairs_validation.py --captures [--pairs FILE]   (run 19: the median prediction over N captures)

For every pair of a pairs file (captured by ``fixtures/capture_pairs.py``; by default run 14,
``fixtures/pairs12_runs/run_14/pairs12.json``: every pair, stack traces, and the first run whose
unprofiled steps were timed with CUPTI detached after each capture, as the programs run without the
profiler; ``--pairs fixtures/pairs12_runs/run_15/pairs12.json --variant nostack`` for its nostack
traces):

* the predicted unprofiled step of the before and after traces (the trace replayed without the
  profiler's host cost, ``traceadvisor.whatif.profiler_cost``) against the measured one: the pair's
  interleaved median, and the rounds measured right around that capture (``adjacent``);
* the predicted saving of the pair's scenario, replayed on the BEFORE trace alone
  (``traceadvisor.whatif.savings.scenario_saving``), against the measured saving (medians). A batch
  change compares time per sample.

Pairs are marked ``fit`` (the profiler cost may be fitted on them) or ``validation`` (never used to fit
anything); the summary lines give each half separately. ``--all-runs``: those counts for the main
fixture and each run of ``fixtures/pairs12_runs/`` (their own traces; a run's pair merged into the
main fixture is counted there once), and their totals apart for the runs timed with CUPTI detached
(``teardown_cupti`` in the pairs file) and those timed with it left attached (the main fixture and runs
up to 13: each pair after a run's first was timed with CUPTI's callbacks on every CUDA call, slower
than it runs; fixtures/traces/PROVENANCE.md).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor.capture.gpu_power import POWER_REASONS, interpret  # noqa: E402
from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.whatif.power_limit import CAPPED_SHARE  # noqa: E402
from traceadvisor.whatif.profiler_cost import (  # noqa: E402
    HOST_COST_PLAUSIBLE,
    fitted_calibration,
    give_step_time,
    unprofiled_replay,
)
from traceadvisor.whatif.refused import Refused  # noqa: E402
from traceadvisor.whatif.replay import replay  # noqa: E402
from traceadvisor.whatif.saving_range import (  # noqa: E402
    RANGE_COVERAGE,
    band,
    likely_share_range,
)
from traceadvisor.whatif.savings import (  # noqa: E402
    predicted_step_ns,
    saving_of,
    scenario_saving,
    with_profiler_removed,
)
from traceadvisor.whatif.scenarios import SCENARIOS, combine  # noqa: E402

DEFAULT_PAIRS = ROOT / "fixtures" / "pairs12_runs" / "run_14" / "pairs12.json"
# The run captured with ``capture_pairs.py --captures 5``: five captures of each side of the eight
# validation pairs below, spread over 15 interleaved rounds (fixtures/traces/PROVENANCE.md, run 19).
CAPTURES_RUN = ROOT / "fixtures" / "pairs12_runs" / "run_19" / "pairs12.json"

# A pair whose fix is several graph changes at once (none now: torch.compile is the ``compile``
# scenario, traceadvisor.whatif.scenarios.compiled).
COMBINED: dict[str, tuple[str, ...]] = {}


def paired_savings(p: dict[str, Any]) -> list[float]:
    """Each interleaved round's saving (%): the round timed both sides back to back (in alternating
    order), so the host's drift, which moves a round's two sides alike, cancels in it; the spreads of
    each side's rounds taken apart do not cancel it. A batch change compares time per sample."""
    b = [float(x) for x in p["before_step_us"]["repeats"]]
    a = [float(x) for x in p["after_step_us"]["repeats"]]
    per = p.get("samples_per_step")
    if per:
        b = [x / per["before"] for x in b]
        a = [x / per["after"] for x in a]
    return [(x - y) / x * 100.0 for x, y in zip(b, a, strict=True) if x]


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval of the median: the j-th smallest and j-th largest
    value, j the largest with P(Binomial(n, 1/2) <= j - 1) <= (1 - level) / 2 (coverage >= level;
    11 rounds: the 2nd and 10th of 11, 98.8%)."""
    xs = sorted(values)
    n = len(xs)
    tail, j = 0.0, 0
    while j < n // 2:
        tail += math.comb(n, j) / 2.0**n  # P(X <= j)
        if tail > (1.0 - level) / 2.0:
            break
        j += 1
    if j == 0:
        return xs[0], xs[-1]
    return xs[j - 1], xs[n - j]


def right(row: dict[str, Any]) -> bool | None:
    """Whether a predicted saving came true: within 20% of the measured one, or inside the 95%
    confidence interval of the measured saving (``median_ci`` of ``paired_savings``); a fix that
    measured no gain is right when it predicts no more than that interval's upper end (or none).
    None without a prediction."""
    if "predicted_saving_pct" not in row:
        return None
    meas, pred = row["measured_saving_pct"], row["predicted_saving_pct"]
    lo, hi = row["measured_ci_pct"]
    if meas <= 0:
        return bool(pred <= max(hi, 0.0))
    return bool(abs(pred - meas) <= 0.2 * meas or lo <= pred <= hi)


def err_pct(pred: float, meas: float) -> float:
    return (pred - meas) / meas * 100.0 if meas else math.nan


# --give-back-off: calibrated, with the power-limit model's give-back taken off each saving that
# carries one, as findings did on 2026-12-03 (the comparison that put it back beside the saving:
# whatif/savings.py, ``power_limited``)
TAKE_OFF_GIVE_BACK = False
# --fit-range --captures: fit and check the range on every capture of every clean run, not the first
PER_CAPTURE = False


def top_sm_clock_mhz(run: Path) -> float | None:
    """The GPU's top SM clock from the run's ``nvidia-smi -q`` (its *Max Clocks* section), None
    without it."""
    path = run / "nvidia_smi.txt"
    if not path.exists():
        return None
    m = re.search(r"Max Clocks\s*\n(?:\s+\w+\s*:.*\n)*?\s+SM\s*:\s*(\d+) MHz", path.read_text())
    return float(m.group(1)) if m else None


def capture_power(rec: dict[str, Any], rounds: list[Any], top_mhz: float | None) -> dict[str, Any] | None:
    """The ``gpu_power`` record traceadvisor capture writes (capture/gpu_power.py), from
    capture_pairs' NVML readings: the record itself from ``after_window`` (read as the window
    ended), and the ``unprofiled`` reading from the side's interleaved rounds (read after each
    round, unprofiled): their median clock and power, capped where most rounds were, as capture's
    median of NVML's clock samples over the unprofiled steps before the window. One reading at the
    window's start (``before_window``) is too noisy for the give-back model: the limiter swings the
    clock by 150-250 MHz within a loop (item_gpu_short 1,740-1,860 MHz before its three windows,
    its rounds' median 1,860). None where the readings lack a field (runs before 27 recorded no
    limit or clock event reasons)."""
    state = rec.get("gpu_state") or {}
    after = state.get("after_window")
    fields = ("power_w", "power_limit_w", "sm_clock_mhz", "clock_event_reasons")
    rounds = [r for r in rounds if isinstance(r, dict) and all(k in r for k in fields)]
    if not isinstance(after, dict) or not all(k in after for k in fields) or not rounds or top_mhz is None:
        return None

    def record(r: dict[str, Any], capped: bool | None = None) -> dict[str, Any]:
        out = interpret(
            power_w=float(r["power_w"]),
            power_limit_w=float(r["power_limit_w"]),
            sm_clock_mhz=float(r["sm_clock_mhz"]),
            reasons=int(r["clock_event_reasons"]),
            max_sm_clock_mhz=top_mhz,
        )
        return out if capped is None else {**out, "power_capped": capped}

    median = {k: float(np.median([float(r[k]) for r in rounds])) for k in fields}
    # from run 30 on each round also holds the clock polled over it and the share the limit held it
    polled = [float(r["sm_clock_mhz_median"]) for r in rounds if r.get("sm_clock_mhz_median")]
    if polled:
        median["sm_clock_mhz"] = float(np.median(polled))
    shares = [float(r["power_capped_share"]) for r in rounds if isinstance(r.get("power_capped_share"), float)]
    if shares:
        capped = float(np.median(shares)) >= CAPPED_SHARE
    else:
        capped = sum(bool(int(r["clock_event_reasons"]) & POWER_REASONS) for r in rounds) * 2 > len(rounds)
    return {**record(after), "unprofiled": record(median, capped)}


def capture_key(rec: dict[str, Any], p: dict[str, Any], side: str, run: Path) -> dict[str, Any]:
    """The trace's ``"traceadvisor"`` key as ``traceadvisor capture`` stores it: the step times
    measured with the profiler off in the same process right around the window (capture_pairs'
    adjacent rounds), and NVML's readings as the window started and ended (from run 20 on)."""
    key: dict[str, Any] = {"unprofiled_step_us": rec["adjacent_unprofiled_us"]["repeats"]}
    power = capture_power(rec, p.get("gpu_state", {}).get(side) or [], top_sm_clock_mhz(run))
    if power is not None:
        key["gpu_power"] = power
    return key


def validate(pairs: dict[str, Any], variant: str, traces: Path, calibrated: bool | str = False) -> list[dict[str, Any]]:
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
            path = traces / rec["file"]
            if not path.exists():  # a later run's pairs merged into fixtures/ keep their traces there only
                path = ROOT / "fixtures" / "traces" / rec["file"]
            trace = load_file(path)
            if calibrated == "given":
                # what a user gives with --step-time: the program's step time from their own
                # timing (here the pair's interleaved median, timed apart from the capture)
                give_step_time(trace, p[f"{side}_step_us"]["median"])
            elif calibrated and rec.get("adjacent_unprofiled_us"):
                # what traceadvisor capture stores: the step times measured with the profiler off
                # in the same process right around the window (capture_pairs' adjacent rounds), and
                # NVML's readings as the window started and ended (from run 20 on)
                trace.meta.traceadvisor = capture_key(rec, p, side, traces.parent)
            pred = predicted_step_ns(trace) / 1e3
            row[f"{side}_measured_us"] = p[f"{side}_step_us"]["median"]
            row[f"{side}_adjacent_us"] = rec.get("adjacent_unprofiled_us", {}).get("median")
            row[f"{side}_predicted_us"] = pred
            row[f"{side}_error_pct"] = err_pct(pred, row[f"{side}_measured_us"])
            if row[f"{side}_adjacent_us"]:
                row[f"{side}_adjacent_error_pct"] = err_pct(pred, row[f"{side}_adjacent_us"])
            names = COMBINED.get(str(p.get("scenario")), (str(p.get("scenario")),))
            if side == "before" and all(n in SCENARIOS for n in names):
                if len(names) == 1:
                    s = scenario_saving(trace, names[0])
                else:
                    built = [SCENARIOS[n].build(trace) for n in names if scenario_saving(trace, n).refused is None]
                    s = saving_of(trace, str(p["scenario"]), combine(built))
                if TAKE_OFF_GIVE_BACK and s.power_give_back_ns > 0:
                    s = replace(s, after_ns=s.after_ns + s.power_give_back_ns)
                row["refused"] = s.refused
                b, a = s.before_ns / 1e3, (s.before_ns - s.saving_ns) / 1e3
                if per:  # time per sample: the after side runs per["after"] samples in a step
                    ratio = per["after"] / per["before"]
                    a = s.after_ns / 1e3  # a larger batch lengthens the step: saving_ns (>= 0) would read 0
                    row["predicted_saving_pct"] = (b - a / ratio) / b * 100.0 if b else math.nan
                    row["host_shares_pct"] = [(hb - ha / ratio) / hb * 100.0 for hb, ha in s.host_alternatives if hb]
                else:
                    row["predicted_saving_pct"] = s.share_pct
                    row["host_shares_pct"] = list(s.host_shares_pct)
        row["measured_saving_pct"] = p["measured_saving_pct"]
        row["measured_ci_pct"] = median_ci(paired_savings(p))
        if "predicted_saving_pct" in row:
            row["saving_error_pct"] = err_pct(row["predicted_saving_pct"], row["measured_saving_pct"])
        row["right"] = right(row)
        out.append(row)
    return out


def fmt(v: Any, w: int = 9, d: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return " " * (w - 1) + "-"
    return f"{v:{w}.{d}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=Path, default=DEFAULT_PAIRS)
    ap.add_argument("--variant", default="stack")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--calibrated",
        action="store_true",
        help="give each trace the unprofiled steps measured around its capture, as traceadvisor capture does",
    )
    ap.add_argument(
        "--given",
        action="store_true",
        help="give each trace its side's measured median step, as a user does with --step-time",
    )
    ap.add_argument("--all-runs", action="store_true", help="the summary counts of every run, and their totals")
    ap.add_argument(
        "--across-runs",
        action="store_true",
        help="each pair over every clean run (CUPTI detached) with the variant's traces: the measured savings' "
        "spread between runs, and the medians of measured and predicted",
    )
    ap.add_argument(
        "--captures",
        action="store_true",
        help="a run captured with capture_pairs.py --captures N (default: run 19): each pair's prediction from "
        "every capture, spread over its interleaved rounds, and their median against the measured median",
    )
    ap.add_argument(
        "--intervals",
        action="store_true",
        help="each pair's predicted saving on each interval between two step ends of its before trace",
    )
    ap.add_argument(
        "--fit-range",
        action="store_true",
        help="fit the likely range of a saving (whatif/saving_range.py) on the fit half of every clean run, "
        "and how often it holds on each half",
    )
    ap.add_argument(
        "--fit-host-spread",
        action="store_true",
        help="the plausible range of the profiler-cost factor where a trace cannot fix it "
        "(whatif/profiler_cost.py HOST_COST_PLAUSIBLE), from the fit half's calibrated traces",
    )
    ap.add_argument(
        "--give-back-off",
        action="store_true",
        help="with --calibrated: take the power-limit model's give-back off each saving (as on 2026-12-03)",
    )
    args = ap.parse_args()
    global TAKE_OFF_GIVE_BACK, PER_CAPTURE
    TAKE_OFF_GIVE_BACK = args.give_back_off
    PER_CAPTURE = args.captures and args.fit_range
    calibrated: bool | str = "given" if args.given else args.calibrated
    if args.captures and not args.fit_range:
        pairs_file = args.pairs if args.pairs != DEFAULT_PAIRS else CAPTURES_RUN
        return captures(json.loads(pairs_file.read_text()), args.variant, pairs_file.parent / "traces", calibrated)
    if args.intervals:
        return intervals(json.loads(args.pairs.read_text()), args.variant, args.pairs.parent / "traces")
    if args.all_runs:
        return all_runs(args.variant, calibrated)
    if args.across_runs:
        return across_runs(args.variant, calibrated)
    if args.fit_range:
        return fit_range(args.variant, calibrated)
    if args.fit_host_spread:
        return fit_host_spread()
    rows = validate(json.loads(args.pairs.read_text()), args.variant, args.pairs.parent / "traces", calibrated)
    print(
        f"{'pair':12s} {'split':10s} {'scenario':20s} | {'before µs meas/adj/pred':>30s} {'err%':>6s} | "
        f"{'after µs meas/adj/pred':>30s} {'err%':>6s} | {'saving % meas/pred':>18s} {'err%':>6s} 95% CI"
    )
    for r in rows:
        print(
            f"{r['pair']:12s} {r['split']:10s} {r['scenario']!s:20s} | "
            f"{fmt(r.get('before_measured_us'))} {fmt(r.get('before_adjacent_us'))} {fmt(r.get('before_predicted_us'))}"
            f" {fmt(r.get('before_error_pct'), 6)} | "
            f"{fmt(r.get('after_measured_us'))} {fmt(r.get('after_adjacent_us'))} {fmt(r.get('after_predicted_us'))}"
            f" {fmt(r.get('after_error_pct'), 6)} | "
            f"{fmt(r.get('measured_saving_pct'))} {fmt(r.get('predicted_saving_pct'))}"
            f" {fmt(r.get('saving_error_pct'), 6)} [{r['measured_ci_pct'][0]:5.1f},{r['measured_ci_pct'][1]:5.1f}] "
            + {True: "ok", False: "MISS", None: "-"}[r["right"]]
            + (f"  refused: {r['refused']}" if r.get("refused") else "")
        )
    for split in ("fit", "validation"):
        errs = [
            abs(r[f"{s}_error_pct"])
            for r in rows
            if r["split"] == split
            for s in ("before", "after")
            if f"{s}_error_pct" in r
        ]
        judged = [r for r in rows if r["split"] == split and r["right"] is not None]
        verdicts = [r["right"] for r in judged]
        if errs:
            errs.sort()
            print(
                f"{split}: unprofiled step |error| median {errs[len(errs) // 2]:.1f}%, max {errs[-1]:.1f}% "
                f"({sum(e <= 10 for e in errs)}/{len(errs)} within 10%)"
                + (
                    f"; savings within 20%: {sum(map(strictly, judged))}/{len(judged)}, right (within 20% or the "
                    f"95% CI): {sum(verdicts)}/{len(verdicts)}"
                    if verdicts
                    else ""
                )
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def strictly(row: dict[str, Any]) -> bool:
    """Within 20% of the measured saving (a fix that measured no gain: none predicted)."""
    meas, pred = row["measured_saving_pct"], row["predicted_saving_pct"]
    return bool(pred <= 0.5) if meas <= 0 else bool(abs(pred - meas) <= 0.2 * meas)


def counts(name: str, split: str, c: list[int]) -> str:
    return f"{name:42s} {split:10s} {c[0]:>8d} of {c[1]:<5d} {c[2]:>10d} of {c[4]:<5d} {c[3]:>5d} of {c[4]:<5d}"


def all_runs(variant: str, calibrated: bool | str) -> int:
    """Per run and in total, per half: unprofiled steps within 10%, savings strictly within 20%, savings right."""
    runs = sorted((ROOT / "fixtures" / "pairs12_runs").glob("run_*/pairs12.json"))
    files = [ROOT / "fixtures" / "pairs12.json", *runs]
    totals: dict[str, list[int]] = {}
    outside: dict[str, list[int]] = {}
    print(f"{'run':42s} {'half':10s} {'steps within 10%':>17s} {'savings within 20%':>19s} {'savings right':>14s}")
    main = json.loads(files[0].read_text())["pairs"]
    for path in files:
        doc = json.loads(path.read_text())
        if path != files[0]:
            # a run whose pairs were merged into the main fixture holds the same capture: counted there
            doc["pairs"] = {
                name: p
                for name, p in doc["pairs"].items()
                if p.get("status") != "ok" or main.get(name, {}).get("before_step_us") != p["before_step_us"]
            }
        rows = validate(doc, variant, path.parent / "traces", calibrated)
        group = "detached" if doc.get("teardown_cupti") == "1" else "attached"
        for r in rows:  # the measured point (ratio of the sides' medians) outside its paired interval
            tally = outside.setdefault(group, [0, 0])
            tally[0] += not r["measured_ci_pct"][0] <= r["measured_saving_pct"] <= r["measured_ci_pct"][1]
            tally[1] += 1
        for split in ("fit", "validation"):
            mine = [r for r in rows if r["split"] == split]
            errs = [abs(r[f"{s}_error_pct"]) for r in mine for s in ("before", "after") if f"{s}_error_pct" in r]
            judged = [r for r in mine if r["right"] is not None]
            if not errs and not judged:
                continue
            got = [
                sum(e <= 10 for e in errs),
                len(errs),
                sum(map(strictly, judged)),
                sum(r["right"] for r in judged),
                len(judged),
            ]
            key = f"{group} {split}"
            totals[key] = [a + b for a, b in zip(totals.get(key, [0] * 5), got, strict=True)]
            name = str(path.parent.relative_to(ROOT)) if path.parent.name.startswith("run_") else "fixtures (main)"
            print(counts(f"{name} ({group})", split, got))
    for key, t in sorted(totals.items()):
        group, split = key.split()
        print(counts(f"total, CUPTI {group}", split, t))
    for group, (n_out, n) in sorted(outside.items()):
        print(f"CUPTI {group}: {n_out} of {n} pairs' measured saving outside its own paired 95% CI")
    return 0


def intervals(pairs: dict[str, Any], variant: str, traces: Path) -> int:
    """Each pair's predicted saving (%) on each interval between two consecutive step ends of its
    before trace, against the whole trace's: a trace's step time is the mean spacing of its step
    ends (``scenarios.step_time_ns``), so with two active steps it rests on one interval, and this
    shows how much one interval would have said alone. A batch change compares time per sample."""
    print(f"{'pair':18s} {'measured':>8s} {'all':>6s} | predicted saving per step interval")
    for name, p in pairs["pairs"].items():
        rec = p.get("traces", {}).get(f"before_{variant}")
        if p.get("status") != "ok" or rec is None or p.get("scenario") not in SCENARIOS:
            continue
        trace = load_file(traces / rec["file"])
        try:
            ov = SCENARIOS[p["scenario"]].build(trace)
        except Refused as exc:
            print(f"{name:18s} refused: {exc}")
            continue
        ends_before = np.array([s.replayed_end_ns for s in unprofiled_replay(trace).steps], dtype=np.float64)
        ends_after = np.array(
            [s.replayed_end_ns for s in replay(trace, with_profiler_removed(trace, ov)).steps], dtype=np.float64
        )
        per = p.get("samples_per_step")
        ratio = per["after"] / per["before"] if per else 1.0
        before, after = np.diff(ends_before), np.diff(ends_after) / ratio
        whole = (ends_before[-1] - ends_before[0], (ends_after[-1] - ends_after[0]) / ratio)
        saving = (before - after) / before * 100.0
        overall = (whole[0] - whole[1]) / whole[0] * 100.0
        if not per:  # a fix predicted to slow the step saves nothing (Saving.saving_ns)
            saving, overall = np.maximum(saving, 0.0), max(overall, 0.0)
        print(f"{name:18s} {p['measured_saving_pct']:8.1f} {overall:6.1f} | " + " ".join(f"{x:6.1f}" for x in saving))
    return 0


def per_run_rows(variant: str, calibrated: bool | str) -> dict[str, dict[int, dict[str, Any]]]:
    """``validate``'s rows with a prediction, per pair and clean run (``teardown_cupti``) holding the
    variant's traces."""
    per_run: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted((ROOT / "fixtures" / "pairs12_runs").glob("run_*/pairs12.json")):
        doc = json.loads(path.read_text())
        if doc.get("teardown_cupti") != "1":
            continue
        n = int(path.parent.name.removeprefix("run_"))
        for r in validate(doc, variant, path.parent / "traces", calibrated):
            if "predicted_saving_pct" in r:
                per_run.setdefault(r["pair"], {})[n] = r
    return per_run


def per_capture_rows(variant: str, calibrated: bool | str) -> list[dict[str, Any]]:
    """``validate``'s rows with a prediction from every capture (``capture_pairs.py --captures N``)
    of every pair of the clean runs (``teardown_cupti``): the population a saving's range is read
    on, one capture each, against the measured median of the rounds the captures were spread over."""
    out = []
    for path in sorted((ROOT / "fixtures" / "pairs12_runs").glob("run_*/pairs12.json")):
        doc = json.loads(path.read_text())
        if doc.get("teardown_cupti") != "1":
            continue
        for name, p in doc["pairs"].items():
            for got in p.get("captures") or [p.get("traces", {})]:
                files = [r["file"] for k, r in got.items() if k.endswith(f"_{variant}")]
                if not files or not all(
                    (path.parent / "traces" / f).exists() or (ROOT / "fixtures" / "traces" / f).exists() for f in files
                ):
                    continue
                rows = validate({"pairs": {name: dict(p, traces=got)}}, variant, path.parent / "traces", calibrated)
                out.extend(r for r in rows if "predicted_saving_pct" in r)
    return out


def oracle_within(per_run: dict[str, dict[int, dict[str, Any]]], split: str) -> tuple[int, int, int]:
    """(oracle, replay, n) over ``split``'s per-run savings: how many are within 20% (``strictly``)
    of their pair's median measured saving over all runs (the best any one number per pair could
    do, known only afterwards), how many of the replay's own per-run prediction, and how many there
    are. The measured saving moves between runs by more than 20% on most pairs: this is the ceiling
    a point prediction is held to."""
    oracle = replay = n = 0
    for rows in per_run.values():
        mine = [r for r in rows.values() if r["split"] == split]
        if not mine:
            continue
        median = float(np.median([r["measured_saving_pct"] for r in mine]))
        for r in mine:
            oracle += strictly({"measured_saving_pct": r["measured_saving_pct"], "predicted_saving_pct": median})
            replay += strictly(r)
            n += 1
    return oracle, replay, n


def inside_range(row: dict[str, Any], relative: float, step_pct: float) -> bool:
    """Whether the measured saving fell inside the predicted saving's likely range
    (``saving_range.likely_share_range``); a fix that measured no gain: the range reaches 0."""
    host = tuple(row.get("host_shares_pct", ()))
    lo, hi = likely_share_range(row["predicted_saving_pct"], host, relative, step_pct)
    meas = row["measured_saving_pct"]
    return lo <= 0.0 if meas <= 0 else lo <= meas <= hi


def band_width(rows: list[dict[str, Any]], relative: float, step_pct: float) -> float:
    """The median width of the likely range over ``rows``' predictions (unclipped), points of the step."""

    def width(r: dict[str, Any]) -> float:
        shares = (r["predicted_saving_pct"], *r.get("host_shares_pct", ()))
        low, high = min(shares), max(shares)
        return high - low + relative * (max(low, 0.0) + max(high, 0.0)) + 2.0 * step_pct

    return float(np.median([width(r) for r in rows]))


def fit_band(rows: list[dict[str, Any]], coverage: float = RANGE_COVERAGE) -> tuple[float, float]:
    """(relative, step points) of the narrowest likely range (``band_width``; ties: the smaller
    relative part) that holds at least ``coverage`` of ``rows``' measured savings, on a grid of 5%
    relative and 0.25-point steps."""
    best: tuple[float, float, float] | None = None
    for rel in np.arange(0.0, 2.0001, 0.05):
        for step in np.arange(0.0, 10.0001, 0.25):
            if sum(inside_range(r, float(rel), float(step)) for r in rows) < coverage * len(rows):
                continue
            width = band_width(rows, float(rel), float(step))
            if best is None or width < best[0] - 1e-9:
                best = (width, round(float(rel), 2), round(float(step), 2))
    if best is None:
        raise ValueError("no band on the grid holds that share of the savings")
    return best[1], best[2]


def fit_range(variant: str, calibrated: bool | str) -> int:
    """The likely range's two constants (``saving_range``) fitted on the fit half's per-run savings
    (``fit_band``), then how often that band, and the one in use, holds on each half."""
    if PER_CAPTURE:
        every = per_capture_rows(variant, calibrated)
        halves = {split: [r for r in every if r["split"] == split] for split in ("fit", "validation")}
    else:
        per_run = per_run_rows(variant, calibrated)
        halves = {
            split: [r for rows in per_run.values() for r in rows.values() if r["split"] == split]
            for split in ("fit", "validation")
        }
    print(f"fit half: {len(halves['fit'])} per-run savings; coverage asked {RANGE_COVERAGE:.0%}")
    bands = {"fitted": fit_band(halves["fit"]), "in use": band(bool(calibrated))}
    for label, (rel, step) in bands.items():
        print(f"{label}: share ± ({rel:.2f} × share + {step:.2f} points of the step)")
        for split, rows in halves.items():
            held = sum(inside_range(r, rel, step) for r in rows)
            width = band_width(rows, rel, step)
            print(f"  {split}: {held} of {len(rows)} inside ({held / len(rows):.0%}), median width {width:.1f} points")
    for split, rows in halves.items():
        missed = [r for r in rows if not inside_range(r, *bands["in use"])]
        print(
            f"{split} outside the range in use (predicted/measured): "
            + ", ".join(f"{r['pair']} {r['predicted_saving_pct']:.1f}/{r['measured_saving_pct']:.1f}" for r in missed)
        )
    return 0


def pinned_host_factors(split: str) -> list[float]:
    """The profiler-cost factor of every trace of ``split``'s pairs (every capture, both sides, both
    variants) of the clean runs (``teardown_cupti``) whose steps timed around its capture fixed it
    (``Calibration.host_pinned``: a host-bound step the bisection met)."""
    out = []
    for path in sorted((ROOT / "fixtures" / "pairs12_runs").glob("run_*/pairs12.json")):
        doc = json.loads(path.read_text())
        if doc.get("teardown_cupti") != "1":
            continue
        for p in doc["pairs"].values():
            if p.get("status") != "ok" or p.get("split") != split:
                continue
            for got in p.get("captures") or [p["traces"]]:
                for key, rec in got.items():
                    trace_path = path.parent / "traces" / rec["file"]
                    if not trace_path.exists():
                        trace_path = ROOT / "fixtures" / "traces" / rec["file"]
                    if not rec.get("adjacent_unprofiled_us") or not trace_path.exists():
                        continue
                    trace = load_file(trace_path)
                    side = key.split("_")[0]
                    trace.meta.traceadvisor = capture_key(rec, p, side, path.parent)
                    fit = fitted_calibration(trace)
                    if fit.host_pinned:
                        out.append(fit.host_cost)
    return out


def fit_host_spread() -> int:
    """``HOST_COST_PLAUSIBLE``: the 10th and 90th percentiles of the pinned profiler-cost factors
    (``pinned_host_factors``) of the fit half, and what share of the validation half's lies between."""
    fit, val = pinned_host_factors("fit"), pinned_host_factors("validation")
    lo, mid, hi = (float(np.percentile(fit, q)) for q in (10, 50, 90))
    inside = sum(lo <= f <= hi for f in val)
    print(
        f"fit half: {len(fit)} traces whose measured step fixed the factor; 10th/50th/90th percentiles "
        f"{lo:.3f} / {mid:.3f} / {hi:.3f} (in use: {HOST_COST_PLAUSIBLE[0]:.3f} - {HOST_COST_PLAUSIBLE[1]:.3f})"
    )
    print(f"validation half: {inside} of {len(val)} factors inside ({inside / max(1, len(val)):.0%})")
    return 0


def across_runs(variant: str, calibrated: bool | str) -> int:
    """Each pair over the clean runs (``teardown_cupti``) holding the variant's traces: what each run
    measured and predicted, the medians over runs, and the spread of the measured savings. The same
    program's measured saving moves between H100 machines and minutes on one (mlp_compile: 6.0% in
    run 14, 16.7% in run 17), by more than a 20% band around any one run; a saving is only as
    reproducible as that spread, and a prediction from one trace is compared with it here."""
    per_run = per_run_rows(variant, calibrated)
    runs = sorted({n for rows in per_run.values() for n in rows})
    print(f"clean runs with {variant} traces: {', '.join(map(str, runs))}; saving % measured/predicted")
    print(
        f"{'pair':18s} {'half':4s} | "
        + " | ".join(f"{'run ' + str(n):>13s}" for n in runs)
        + f" | {'median meas/pred':>16s} {'err%':>6s} | measured spread"
    )
    summary: dict[str, list[int]] = {}
    for pair, rows in per_run.items():
        meas = [rows[n]["measured_saving_pct"] for n in runs if n in rows]
        pred = [rows[n]["predicted_saving_pct"] for n in runs if n in rows]
        m, p = float(np.median(meas)), float(np.median(pred))
        split = next(iter(rows.values()))["split"]
        pooled = strictly({"measured_saving_pct": m, "predicted_saving_pct": p})
        # reproducible: every run's measured saving within 20% of their median (a pair that measured
        # no gain: none above 1 point)
        steady = all(abs(x - m) <= 0.2 * abs(m) for x in meas) if m > 1 else max(meas) <= 1.0
        inside = sum(min(meas) - 0.2 * abs(m) <= x <= max(meas) + 0.2 * abs(m) for x in pred)
        cells = " | ".join(
            f"{rows[n]['measured_saving_pct']:6.1f}/{rows[n]['predicted_saving_pct']:6.1f}" if n in rows else " " * 13
            for n in runs
        )
        print(
            f"{pair:18s} {split[:4]:4s} | {cells} | {m:7.1f}/{p:7.1f} {fmt(err_pct(p, m), 6, 0)} | "
            f"{min(meas):.1f} to {max(meas):.1f}" + ("" if steady else " (not within 20% between runs)")
        )
        c = summary.setdefault(split, [0, 0, 0, 0, 0, 0])
        for i, v in enumerate((pooled, steady, inside, len(pred), 1, pooled and steady)):
            c[i] += int(v)
    for split, c in summary.items():
        print(
            f"{split}: medians over runs within 20%: {c[0]}/{c[4]}; pairs whose measured saving held within 20% "
            f"across runs: {c[1]}/{c[4]}, their medians within 20%: {c[5]}/{c[1]}; per-run predictions inside the "
            f"runs' measured range (widened by 20% of the median): {c[2]}/{c[3]}"
        )
        oracle, ours, n = oracle_within(per_run, split)
        print(
            f"{split}: per-run savings within 20% of each pair's median measured saving over the runs (the "
            f"best one number per pair, known only afterwards): {oracle}/{n}; of the replay's prediction: {ours}/{n}"
        )
    return 0


def captures(pairs: dict[str, Any], variant: str, traces: Path, calibrated: bool | str) -> int:
    """Each pair's prediction from every one of its captures (``capture_pairs.py --captures N``: N
    captures of each side spread over the interleaved rounds), against the measured median of those
    rounds. A single capture meets the host in one state (its speed drifts 1.5-2.5x over minutes on the
    capture machine), while the measured median spans every round: the median prediction over the
    captures is the one comparable with it, and the captures' spread is how far one capture's
    prediction can move with the host alone."""
    per_pair: dict[str, list[dict[str, Any]]] = {}
    for name, p in pairs["pairs"].items():
        for i, got in enumerate(p.get("captures", [])):
            missing = [
                r["file"]
                for k, r in got.items()
                if k.endswith(f"_{variant}")
                and not (traces / r["file"]).exists()
                and not (ROOT / "fixtures" / "traces" / r["file"]).exists()
            ]
            if missing:  # a capture whose traces the device did not return (run 33's 8-step half)
                print(f"{name}: capture {i} left out, its traces are missing: {', '.join(missing)}", file=sys.stderr)
                continue
            one = {"pairs": {name: dict(p, traces=got)}}
            per_pair.setdefault(name, []).extend(validate(one, variant, traces, calibrated))
    if not per_pair:
        print("no pair of this file was captured more than once (capture_pairs.py --captures N)", file=sys.stderr)
        return 2
    n = max(len(rows) for rows in per_pair.values())
    print(f"{n} captures per pair, spread over the interleaved rounds; saving % (and steps µs)")
    print(
        f"{'pair':18s} {'half':4s} | {'measured [95% CI]':>20s} | {'each capture':>{7 * n}s} | "
        f"{'median':>6s} {'err%':>6s} | {'steps µs before meas/pred':>25s} {'after meas/pred':>17s}"
    )
    c = {"median_20": 0, "median_right": 0, "each_20": 0, "each": 0, "pairs": 0, "steps_10": 0, "steps": 0}
    in_range: dict[str, list[int]] = {}  # per half: captures inside, captures, medians inside, pairs
    for name, rows in per_pair.items():
        rows = [r for r in rows if "predicted_saving_pct" in r]
        if not rows:
            continue
        r0 = rows[0]
        preds = [r["predicted_saving_pct"] for r in rows]
        med = float(np.median(preds))
        # the captures' host-speed ends (``host_shares_pct``), their lows' and highs' medians
        ends = [(r["predicted_saving_pct"], *r.get("host_shares_pct", ())) for r in rows]
        host = [float(np.median([min(e) for e in ends])), float(np.median([max(e) for e in ends]))]
        row = dict(r0, predicted_saving_pct=med, host_shares_pct=host)
        steps = {
            side: float(np.median([r[f"{side}_predicted_us"] for r in rows if f"{side}_predicted_us" in r]))
            for side in ("before", "after")
        }
        c["pairs"] += 1
        c["median_20"] += strictly(row)
        c["median_right"] += bool(right(row))
        c["each_20"] += sum(strictly(r) for r in rows)
        c["each"] += len(rows)
        tally = in_range.setdefault(r0["split"], [0, 0, 0, 0])
        tally[0] += sum(inside_range(r, *band(bool(calibrated))) for r in rows)
        tally[1] += len(rows)
        tally[2] += inside_range(row, *band(bool(calibrated)))
        tally[3] += 1
        for side in ("before", "after"):
            c["steps"] += 1
            c["steps_10"] += abs(err_pct(steps[side], r0[f"{side}_measured_us"])) <= 10.0
        lo, hi = r0["measured_ci_pct"]
        # the measured saving is the ratio of the two sides' medians; the interval comes from each
        # round's own saving. When the host changes mode part-way (run 32's storm_compile), the two
        # disagree: the point falls outside its interval, and the pair's "within 20%" is read with that.
        outside = not lo <= r0["measured_saving_pct"] <= hi
        c["outside"] = c.get("outside", 0) + outside
        print(
            f"{name:18s} {r0['split'][:4]:4s} |{'!' if outside else ' '}{r0['measured_saving_pct']:5.1f} "
            f"[{lo:5.1f},{hi:5.1f}] | "
            + " ".join(f"{x:6.1f}" for x in preds).rjust(7 * n)
            + f" | {med:6.1f} {fmt(err_pct(med, r0['measured_saving_pct']), 6, 0)} | "
            f"{r0['before_measured_us']:9.1f}/{steps['before']:9.1f}     "
            f"{r0['after_measured_us']:8.1f}/{steps['after']:8.1f}"
        )
    print(
        f"median over captures within 20% of the measured saving: {c['median_20']}/{c['pairs']}, right (within 20% "
        f"or the 95% CI): {c['median_right']}/{c['pairs']}; single captures within 20%: {c['each_20']}/{c['each']}; "
        f"median predicted steps within 10%: {c['steps_10']}/{c['steps']}"
    )
    for split, (each, n, med, pairs) in sorted(in_range.items()):
        print(
            f"{split}: measured saving inside the likely range (whatif/saving_range.py): of each capture's "
            f"prediction {each}/{n}, of the median over captures {med}/{pairs}"
        )
    if c.get("outside"):
        print(
            f"! {c['outside']} measured saving(s) outside their own 95% CI (ratio of the sides' medians against the "
            "rounds' paired savings: the host changed mode between rounds)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
