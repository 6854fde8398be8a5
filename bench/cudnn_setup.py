"""cuDNN's host set-up of each layout transpose: the figures behind ``precision.launch_preparation_ns``.

    python bench/cudnn_setup.py

1. The gaps before the transposes' launches in conv_cl's before traces (run 26) and conv_cl_gpu's
   (run 23): the median in-op gap (the cap), the share of gaps that reach back out of their op and
   their range, the share of in-op gaps over 19 µs.
2. What the channels_last side lost: over run 26's three captures a side, the host time of the
   convolution ops (``aten::cudnn_convolution``, ``aten::convolution_backward``) before minus after,
   the transposes' launch calls, the rest per transpose, and the set-up the model takes out.
3. conv_cl's predicted saving on each clean run's first capture (and run 31's three), the launch
   calls alone (``channels_last(with_set_up=False)``, the model before 2026-12-04) against the set-up
   taken out too, uncalibrated and calibrated to the steps timed around each capture (as
   ``bench/pairs_validation.py --calibrated`` does), and the medians.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.trace.model import Trace  # noqa: E402
from traceadvisor.whatif import precision  # noqa: E402
from traceadvisor.whatif.savings import saving_of, scenario_saving  # noqa: E402

RUNS = ROOT / "fixtures" / "pairs12_runs"
CONV_OPS = ("aten::cudnn_convolution", "aten::convolution_backward")


def trace_of(run: str, pair: str, side: str, capture: str = "") -> Trace:
    return load_file(RUNS / run / "traces" / f"p12_{pair}_{side}_stack{capture}.json.gz")


def transpose_calls(trace: Trace) -> np.ndarray:
    return np.unique(precision.layout_transposes(trace)["launch"].to_numpy())


def gaps(trace: Trace) -> None:
    """The gap before each transpose launch, and whether the call before it is in the same op."""
    rt = trace.runtime
    calls = transpose_calls(trace)
    op = trace.innermost_op_at(rt["pid"].to_numpy(), rt["tid"].to_numpy(), rt["ts_ns"].to_numpy())
    gap, in_op = [], []
    for _, g in rt.assign(op=op).groupby(["pid", "tid"]):
        g = g.sort_values("ts_ns", kind="stable")
        rows, t0, t1, ops = g.index.to_numpy(), g["ts_ns"].to_numpy(), g["end_ns"].to_numpy(), g["op"].to_numpy()
        for i in np.nonzero(np.isin(rows, calls))[0]:
            if i == 0:
                continue
            gap.append(max(0, int(t0[i] - t1[i - 1])) / 1e3)
            in_op.append(bool(ops[i] >= 0 and ops[i] == ops[i - 1]))
    g_us, inside = np.array(gap), np.array(in_op)
    out = g_us[~inside]
    print(
        f"  {len(g_us)} transposes: median in-op gap {np.median(g_us[inside]):.2f} µs (the cap); "
        f"{(~inside).mean() * 100:.0f}% reach out of their op "
        f"({np.percentile(out, 10):.0f}-{np.percentile(out, 90):.0f} µs, 10th-90th percentile); "
        f"{(g_us[inside] > 19).mean() * 100:.0f}% of the in-op gaps exceed 19 µs"
    )


def conv_host_ns(trace: Trace) -> int:
    ops = trace.ops
    return int(ops["dur_ns"][ops["name"].astype(str).isin(CONV_OPS).to_numpy()].sum())


def lost(run: str) -> None:
    total = launches = modelled = n = 0
    for c in ("", "_c1", "_c2"):
        before, after = trace_of(run, "conv_cl", "before", c), trace_of(run, "conv_cl", "after", c)
        calls = transpose_calls(before)
        rt = before.runtime
        n += len(calls)
        launches += int((rt["end_ns"].to_numpy()[calls] - rt["ts_ns"].to_numpy()[calls]).sum())
        total += conv_host_ns(before) - conv_host_ns(after)
        modelled += int(precision.launch_preparation_ns(before, calls).sum())
    print(
        f"  {run}, 3 captures a side: convolution ops' host time {total / 1e6:.1f} ms less on the NHWC side; "
        f"the {n} transposes' launch calls {launches / 1e6:.1f} ms; the rest {(total - launches) / n / 1e3:.2f} µs "
        f"a transpose; the set-up taken out {modelled / n / 1e3:.2f} µs a transpose "
        f"({modelled / (total - launches):.2f} of the rest)"
    )


def predicted(run: str, rec: dict[str, Any], calibrated: bool) -> tuple[float, float]:
    """(launch calls only, with the set-up) saving % of one before capture (its record ``rec``), on a
    freshly loaded trace (savings are memoised per trace)."""
    trace = load_file(RUNS / run / "traces" / rec["file"])
    if calibrated:
        trace.meta.traceadvisor = {"unprofiled_step_us": rec["adjacent_unprofiled_us"]["repeats"]}
    bare = saving_of(trace, "launch calls only", precision.channels_last(trace, with_set_up=False))
    return bare.share_pct, scenario_saving(trace, "channels-last").share_pct


def over_runs() -> None:
    rows = []
    for run in sorted(RUNS.iterdir(), key=lambda p: (len(p.name), p.name)):
        path = run / "pairs12.json"
        if not path.exists():
            continue
        doc = json.loads(path.read_text())
        record = doc["pairs"].get("conv_cl")
        if (
            not doc.get("teardown_cupti")
            or not record
            or not (run / "traces" / "p12_conv_cl_before_stack.json.gz").exists()
        ):
            continue
        # run 31, the out-of-sample check, with each of its three captures; the others' first capture
        recs = (
            [c["before_stack"] for c in record["captures"]]
            if run.name == "run_31"
            else [record["traces"]["before_stack"]]
        )
        for i, rec in enumerate(recs):
            rows.append(
                (f"{run.name}{f'_c{i}' if i else ''}", float(record["measured_saving_pct"]),
                 *predicted(run.name, rec, False), *predicted(run.name, rec, True))
            )  # fmt: skip
    print(f"  {'run':<10} {'measured':>8} | {'uncalibrated: launches':>22} {'with set-up':>11} | "
          f"{'calibrated: launches':>20} {'with set-up':>11}")  # fmt: skip
    for r in rows:
        print(f"  {r[0]:<10} {r[1]:8.1f} | {r[2]:22.1f} {r[3]:11.1f} | {r[4]:20.1f} {r[5]:11.1f}")
    first = np.array([r[1:] for r in rows if not r[0].startswith("run_31")])
    med = np.median(first, axis=0)

    def err(x: float) -> str:
        return f"{x:.1f} ({(x - med[0]) / med[0] * 100:+.0f}%)"

    def within(col: int) -> int:
        return int((np.abs(first[:, col] - first[:, 0]) <= 0.2 * first[:, 0]).sum())

    print(
        f"  runs 14-26 ({len(first)}), medians: measured {med[0]:.1f}; uncalibrated {err(med[1])} -> {err(med[2])}; "
        f"calibrated {err(med[3])} -> {err(med[4])}"
    )
    print(
        f"  per run within 20%: uncalibrated {within(1)} -> {within(2)} of {len(first)}; "
        f"calibrated {within(3)} -> {within(4)}"
    )


def main() -> int:
    print("1. the gaps before the transposes' launches")
    for run, pair in (("run_26", "conv_cl"), ("run_23", "conv_cl_gpu")):
        print(f" {run} {pair}:")
        gaps(trace_of(run, pair, "before"))
    print("2. what the NHWC side lost beyond the launches")
    lost("run_26")
    print("3. conv_cl's saving %, launch calls only -> with the set-up")
    over_runs()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
