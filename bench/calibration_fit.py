"""Where the calibration's two spreads come from, how it splits the runs' traces, and the saving
band that was tried beside it (docs/whatif.md, "The profiler taken out").

    python bench/calibration_fit.py spread    # HOST_COST_SIGMA, KERNEL_SCALE_SIGMA: the fit half, runs 14-21
    python bench/calibration_fit.py choices   # how every stack trace of runs 14-21 is calibrated
    python bench/calibration_fit.py band      # the validation captures' savings at the host factor's q10/q90

Every trace is given the unprofiled steps timed right around its capture (``adjacent_unprofiled_us``),
as ``traceadvisor capture`` stores them. ``spread`` reads the fit half only: on host-bound sides (GPU
busy under 80% of the replayed step) the host-only factor that meets the measured step, without the
tolerance; on GPU-bound ones (over 95%) the measured over the replayed step.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pairs_validation import median_ci, paired_savings  # noqa: E402

from traceadvisor.rules_api import busy_in_windows, steps_on_gpu  # noqa: E402
from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.trace.model import Trace  # noqa: E402
from traceadvisor.whatif import profiler_cost as pc  # noqa: E402
from traceadvisor.whatif.refused import Refused  # noqa: E402
from traceadvisor.whatif.replay import replay  # noqa: E402
from traceadvisor.whatif.scenarios import SCENARIOS, combine, step_time_ns  # noqa: E402

RUNS = (14, 16, 17, 18, 19, 20, 21)


def _path(run: int, rec: dict[str, Any]) -> Path:
    p = ROOT / "fixtures" / "pairs12_runs" / f"run_{run}" / "traces" / rec["file"]
    return p if p.exists() else ROOT / "fixtures" / "traces" / rec["file"]


def _sides(split: str | None) -> Iterator[tuple[int, str, int, str, dict[str, Any], dict[str, Any]]]:
    """(run, pair, capture, side, the side's trace record, the pair) of every stack trace with adjacent steps."""
    for run in RUNS:
        doc = json.loads((ROOT / "fixtures" / "pairs12_runs" / f"run_{run}" / "pairs12.json").read_text())
        for name, p in doc["pairs"].items():
            if p.get("status") != "ok" or (split is not None and p["split"] != split):
                continue
            for i, c in enumerate(p.get("captures") or [p["traces"]]):
                for side in ("before", "after"):
                    rec = c.get(f"{side}_stack")
                    if rec and rec.get("adjacent_unprofiled_us"):
                        yield run, name, i, side, rec, p


def _measured(trace: Trace, rec: dict[str, Any]) -> Trace:
    trace.meta.traceadvisor = {"unprofiled_step_us": rec["adjacent_unprofiled_us"]["repeats"]}
    return trace


def spread() -> int:
    host, kernel = [], []
    tolerance = pc.CALIBRATION_TOLERANCE
    pc.CALIBRATION_TOLERANCE = 0.0  # every difference fitted: the spread, not the tolerance, is measured
    try:
        for run, _, _, _, rec, _ in _sides("fit"):
            trace = load_file(_path(run, rec))
            steps = steps_on_gpu(trace)
            if not len(steps):
                continue
            dev = trace.device_ids[0]
            busy = float(
                busy_in_windows(trace, dev, steps["gpu_start_ns"].to_numpy(), steps["gpu_end_ns"].to_numpy()).mean()
            )
            base = pc.ProfilerCost.bundled().for_trace(trace)
            pred = step_time_ns(replay(trace, pc.unprofiled_overrides(trace, base)))
            if busy >= 0.95 * pred:
                kernel.append(math.log(rec["adjacent_unprofiled_us"]["median"] * 1e3 / pred))
            elif busy < 0.8 * pred:
                # the host-only fit (the kernel scale held at 1), as the calibration's host path
                factor = _host_only_factor(_measured(trace, rec), base)
                if 0.0 < factor < pc.HOST_COST_RANGE[1]:
                    host.append(math.log(factor))
    finally:
        pc.CALIBRATION_TOLERANCE = tolerance
    for label, values in (("host cost factor (host-bound sides)", host), ("kernel scale (GPU-bound sides)", kernel)):
        v = np.array(values)
        print(
            f"{label}: {len(v)} traces, ln sd {v.std():.3f}, median {np.median(v):+.4f}, q10/q90 "
            f"{np.quantile(v, 0.1):+.3f}/{np.quantile(v, 0.9):+.3f}"
        )
    print(f"bundled: HOST_COST_SIGMA {pc.HOST_COST_SIGMA}, KERNEL_SCALE_SIGMA {pc.KERNEL_SCALE_SIGMA}")
    return 0


def _host_only_factor(trace: Trace, base: pc.ProfilerCost) -> float:
    target = pc.measured_unprofiled_ns(trace)
    assert target is not None

    def step(f: float) -> float:
        return step_time_ns(replay(trace, pc.unprofiled_overrides(trace, base.scaled(f))))

    lo, hi = pc.HOST_COST_RANGE
    if step(lo) <= target:
        return 1.0
    if step(hi) >= target:
        return hi
    return pc._bisect(step, target, lo, hi, rising=False)


def choices() -> int:
    count: collections.Counter[str] = collections.Counter()
    for run, name, i, side, rec, p in _sides(None):
        fit = pc.fitted_calibration(_measured(load_file(_path(run, rec)), rec))
        if fit.kernel_scale != 1.0:
            kind = "kernel speed"
        elif fit.host_cost == pc.HOST_COST_RANGE[1]:
            kind = "neither (host factor at its bound)"
        elif fit.host_cost != 1.0:
            kind = "host cost"
        else:
            kind = "none needed (or none reaches)"
        count[kind] += 1
        if kind.startswith(("kernel", "neither")):
            print(
                f"run {run} {name} capture {i} {side} ({p['split']}): {kind}, "
                f"host {fit.host_cost:.3f}, kernels {fit.kernel_scale:.3f}"
            )
    for kind, n in count.most_common():
        print(f"{kind}: {n}")
    return 0


def band() -> int:
    """Each validation capture's saving with the bundled costs scaled by the fit half's q10 and q90
    host factors (0.878, 1.341: ``spread`` with the tolerance kept), against the measured saving."""
    lo_s, hi_s = 0.878, 1.341
    rows = []
    for run, _name, _, side, rec, p in _sides("validation"):
        scenario = p.get("scenario")
        if side != "before" or scenario not in SCENARIOS:
            continue
        trace = load_file(_path(run, rec))
        try:
            ov = SCENARIOS[scenario].build(trace)
        except Refused:
            continue
        base = pc.ProfilerCost.bundled().for_trace(trace)
        per = p.get("samples_per_step")
        vals = []
        for s in (lo_s, 1.0, hi_s):
            u = pc.unprofiled_overrides(trace, base.scaled(s))
            b, a = step_time_ns(replay(trace, u)), step_time_ns(replay(trace, combine([u, ov])))
            vals.append((b - a * per["before"] / per["after"]) / b * 100 if per else max(0.0, (b - a) / b * 100))
        lo, hi = median_ci(paired_savings(p))
        rows.append((p["measured_saving_pct"], lo, hi, vals))

    def right(m: float, lo: float, hi: float, pred: float) -> bool:
        return pred <= max(hi, 0.0) if m <= 0 else abs(pred - m) <= 0.2 * m or lo <= pred <= hi

    for label, pick in (("point (bundled costs)", lambda v: v[1]), ("low end of the band", min)):
        print(f"{label}: right {sum(right(m, lo, hi, pick(v)) for m, lo, hi, v in rows)} of {len(rows)}")
    covered = sum(
        (min(v) * 0.8 <= m <= max(v) * 1.2) or (m <= 0 and min(v) <= 0.0) or (lo <= max(v) and min(v) <= hi)
        for m, lo, hi, v in rows
    )
    print(f"band covers the measured saving (widened 20%, or overlapping its CI): {covered} of {len(rows)}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("spread", "choices", "band"))
    return {"spread": spread, "choices": choices, "band": band}[ap.parse_args().what]()


if __name__ == "__main__":
    sys.exit(main())
