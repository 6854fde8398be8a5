"""The figures docs/whatif.md quotes about the pairs' profiled windows (*Run 19*, *Next on the GPU*).

    python bench/window_figures.py gpu-bound          each clean run's GPU-bound sides: window against rounds
    python bench/window_figures.py steps PAIR         run 19: each capture's replayed steps and saving
    python bench/window_figures.py idle [PAIR]        run 19: GPU idle per step interval, before and with the fix
    python bench/window_figures.py kernels [PAIR]     each clean run: kernel time per step, before and after
    python bench/window_figures.py clocks [PAIR]      runs 20-21 (H200): SM clock and power in rounds and windows

``gpu-bound``: every side of the clean runs (14-19, stack traces) whose predicted unprofiled step is
no shorter than 98% of its profiled one (the profiler does not stretch it: the GPU sets it), with
its profiled step (the spacing of step ends), the GPU kernel time per step in the window, and the
unprofiled medians timed right around the capture (``adjacent``) and over the interleaved rounds.
``steps``: for each of run 19's captures of PAIR's before side, every step's replayed CPU window
and span without the profiler, the predicted step and the pair's scenario saving (per sample for a
batch change), and the saving with only its GPU-side changes or only its host-side ones.
``clocks``: for each side of the runs that read the GPU's state (``gpu_state``: runs 20 and 21, an
H200), GPU-bound sides (as ``gpu-bound`` picks them) and item_gpu's: the kernel time per profiled
step (median over the captures) against the interleaved median, and the SM clock and power over
the rounds (medians) and right before and after each window (medians over the captures).
``idle``: for each capture of PAIR (default item_gpu), the device's busy time and idle per step
interval in the unprofiled replay and with the scenario applied, and the host's CPU window per step
with it.
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

from traceadvisor.trace import intervals  # noqa: E402
from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.trace.model import Trace  # noqa: E402
from traceadvisor.whatif.profiler_cost import unprofiled_replay  # noqa: E402
from traceadvisor.whatif.replay import Overrides, Replay, measured_replay, replay  # noqa: E402
from traceadvisor.whatif.savings import predicted_step_ns, with_profiler_removed  # noqa: E402
from traceadvisor.whatif.scenarios import SCENARIOS, step_time_ns  # noqa: E402

RUNS = ROOT / "fixtures" / "pairs12_runs"
CLEAN_RUNS = (14, 16, 17, 18, 19, 20, 21)
STATE_RUNS = (20, 21)  # the runs whose pairs12.json holds gpu_state (capture_pairs.py reads NVML)


def run_doc(n: int) -> dict[str, Any]:
    return dict(json.loads((RUNS / f"run_{n}" / "pairs12.json").read_text()))


def trace_of(n: int, rec: dict[str, Any]) -> Trace:
    return load_file(RUNS / f"run_{n}" / "traces" / rec["file"])


def kernel_us_per_step(trace: Trace) -> float:
    """GPU records launched in the window (their durations summed), per profiled step (µs)."""
    g = trace.gpu
    dur = (g["end_ns"] - g["ts_ns"]).to_numpy()[g["launch"].to_numpy() >= 0]
    return float(dur.sum()) / 1e3 / len(trace.steps.table)


def gpu_bound() -> int:
    head = f"{'run':>3s} {'pair':18s} {'side':6s} {'profiled':>9s} {'kernels':>9s}"
    print(f"{head} {'adjacent':>17s} {'interleaved':>17s}")
    for n in CLEAN_RUNS:
        for name, p in run_doc(n)["pairs"].items():
            if p.get("status") != "ok":
                continue
            for side in ("before", "after"):
                rec = p["traces"].get(f"{side}_stack")
                if rec is None:
                    continue
                trace = trace_of(n, rec)
                profiled = step_time_ns(measured_replay(trace), measured=True) / 1e3
                if predicted_step_ns(trace) / 1e3 < 0.98 * profiled:
                    continue  # the profiler's host cost stretches it: not set by the GPU alone
                adj, inter = rec["adjacent_unprofiled_us"]["median"], p[f"{side}_step_us"]["median"]
                print(
                    f"{n:3d} {name:18s} {side:6s} {profiled:9.0f} {kernel_us_per_step(trace):9.0f} "
                    f"{adj:9.0f} ({adj / profiled - 1:+6.1%}) {inter:9.0f} ({inter / profiled - 1:+6.1%})"
                )
    return 0


def _cpu_end(s: Any) -> int:
    return int(s.replayed_end_ns - s.replayed_span_ns + s.replayed_cpu_ns)


def _share(trace: Trace, ov: Overrides, samples_ratio: float) -> float:
    """The saving of ``ov`` over the predicted step, %; per sample where the fix changes the batch
    (``samples_ratio``: samples a step after over before), as bench/pairs_validation.py counts it."""
    before = predicted_step_ns(trace)
    after = step_time_ns(replay(trace, with_profiler_removed(trace, ov))) / samples_ratio
    return (before - after) / before * 100.0


def steps(pair: str) -> int:
    p = run_doc(19)["pairs"][pair]
    scenario = str(p["scenario"])
    per = p.get("samples_per_step")
    ratio = per["after"] / per["before"] if per else 1.0
    print(f"{pair} ({scenario}); per step: (CPU window, span) ms of the unprofiled replay")
    for c in p["captures"]:
        rec = c["before_stack"]
        trace = trace_of(19, rec)
        r = unprofiled_replay(trace)
        shown = ", ".join(f"({s.replayed_cpu_ns / 1e6:.1f}, {s.replayed_span_ns / 1e6:.1f})" for s in r.steps)
        ov = SCENARIOS[scenario].build(trace)
        gpu_side = Overrides(gpu_dur_ns=ov.gpu_dur_ns, gpu_delay_ns=ov.gpu_delay_ns)
        host_side = Overrides(host_removed=ov.host_removed, host_dur_ns=ov.host_dur_ns, no_wait=ov.no_wait)
        # a batch change is no graph edit of either side alone: its saving is not split
        split = (
            ""
            if per
            else f" (GPU side only {_share(trace, gpu_side, 1.0):5.1f}%,"
            f" host side only {_share(trace, host_side, 1.0):5.1f}%)"
        )
        print(
            f"after round {rec['after_round']:2d}: steps {shown}; predicted {predicted_step_ns(trace) / 1e3:8.1f} µs; "
            f"saving {_share(trace, ov, ratio):5.1f}%{split}"
        )
    return 0


def kernels(pair: str) -> int:
    """Each clean run's capture (and run 19's five) of PAIR: the GPU kernel time per step in the
    before and after windows, and the measured unprofiled medians."""
    print(f"{pair}: kernel time per profiled step, before / after (µs); measured unprofiled medians")
    for n in CLEAN_RUNS:
        p = run_doc(n)["pairs"].get(pair)
        if p is None or p.get("status") != "ok":
            continue
        for c in p.get("captures") or [p["traces"]]:
            k = [kernel_us_per_step(trace_of(n, c[f"{side}_stack"])) for side in ("before", "after")]
            meas = [p[f"{side}_step_us"]["median"] for side in ("before", "after")]
            print(
                f"run {n}: {k[0]:8.1f} / {k[1]:8.1f} (after - before {k[1] - k[0]:+6.1f}); "
                f"measured {meas[0]:.0f} / {meas[1]:.0f}"
            )
    return 0


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")


def clocks(only: str | None) -> int:
    print(
        f"{'run':>3s} {'pair':18s} {'side':6s} {'kernels':>8s} {'rounds':>8s} {'':>7s} "
        f"{'round MHz':>9s} {'W':>4s} {'window MHz before -> after':>27s}"
    )
    for n in STATE_RUNS:
        for name, p in run_doc(n)["pairs"].items():
            if p.get("status") != "ok" or (only and name != only):
                continue
            for side in ("before", "after"):
                rec = p["traces"][f"{side}_stack"]
                trace = trace_of(n, rec)
                profiled = step_time_ns(measured_replay(trace), measured=True) / 1e3
                if not only and name != "item_gpu" and predicted_step_ns(trace) / 1e3 < 0.98 * profiled:
                    continue  # the profiler's host cost stretches it: its kernels do not set the step
                caps = [c[f"{side}_stack"] for c in p.get("captures") or [p["traces"]]]
                kern = _median([kernel_us_per_step(trace_of(n, c)) for c in caps])
                rounds = p[f"{side}_step_us"]["median"]
                state = p["gpu_state"][side]
                win = [
                    _median([c["gpu_state"][w]["sm_clock_mhz"] for c in caps])
                    for w in ("before_window", "after_window")
                ]
                print(
                    f"{n:3d} {name:18s} {side:6s} {kern:8.0f} {rounds:8.0f} {rounds / kern - 1:+7.1%} "
                    f"{_median([s['sm_clock_mhz'] for s in state]):9.0f} {_median([s['power_w'] for s in state]):4.0f} "
                    f"{win[0]:16.0f} -> {win[1]:6.0f}"
                )
    return 0


def _interval_busy_us(trace: Trace, r: Replay) -> tuple[float, float]:
    """The device's busy time and the length of the step intervals (first step's end to the last's),
    per interval (µs)."""
    rows = np.flatnonzero(trace.gpu["device"].to_numpy() == trace.device_ids[0])
    s, e = intervals.merge(np.asarray(r.gpu_start_ns)[rows], np.asarray(r.gpu_end_ns)[rows])
    lo, hi, n = r.steps[0].replayed_end_ns, r.steps[-1].replayed_end_ns, len(r.steps) - 1
    return float(intervals.covered(s, e, lo, hi)[0]) / 1e3 / n, (hi - lo) / 1e3 / n


def idle(pair: str) -> int:
    p = run_doc(19)["pairs"][pair]
    scenario = str(p["scenario"])
    print(f"{pair} ({scenario}), per step interval of the unprofiled replay: GPU busy / idle µs, before and with it")
    for c in p["captures"]:
        rec = c["before_stack"]
        trace = trace_of(19, rec)
        base = unprofiled_replay(trace)
        fixed = replay(trace, with_profiler_removed(trace, SCENARIOS[scenario].build(trace)))
        row = []
        for r in (base, fixed):
            busy, span = _interval_busy_us(trace, r)
            row.append(f"{busy:8.1f} / {span - busy:6.1f}")
        cpu = np.mean([s.replayed_cpu_ns for s in fixed.steps]) / 1e3
        print(f"after round {rec['after_round']:2d}: {row[0]}  ->  {row[1]}  (CPU window with it {cpu:7.1f} µs)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("gpu-bound")
    sub.add_parser("steps").add_argument("pair")
    sub.add_parser("idle").add_argument("pair", nargs="?", default="item_gpu")
    sub.add_parser("kernels").add_argument("pair", nargs="?", default="item_gpu")
    sub.add_parser("clocks").add_argument("pair", nargs="?", default=None)
    args = ap.parse_args()
    if args.what == "gpu-bound":
        return gpu_bound()
    if args.what == "steps":
        return steps(args.pair)
    if args.what == "kernels":
        return kernels(args.pair)
    if args.what == "clocks":
        return clocks(args.pair)
    return idle(args.pair)


if __name__ == "__main__":
    sys.exit(main())
