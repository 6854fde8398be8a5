"""The channels-last scenario's batch-norm constant, refitted, and the model checked on every pair.

    python bench/channels_last_bn.py

``whatif.precision.NHWC_BN_EFFICIENCY`` is the time cuDNN's persistent NHWC batch-norm kernels take
over the time the two-pass batch norm's bytes take at the trace's elementwise streaming rate. It is
fitted on the after traces of one fit pair only (``FIT``: conv_cl_gpu of run 23, three captures) as
the sum of their NHWC kernels' times over the sum of the model's times at efficiency 1; the rate
comes from the paired before trace (the trace a user analyses). Then, for each channels-last pair of
each run (the fit pair and the validation pairs conv_cl and resnet50_cl), the model's total NHWC
batch-norm time (from the before trace's NCHW kernels) against the after trace's measured total.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.trace.model import Trace  # noqa: E402
from traceadvisor.whatif import precision  # noqa: E402
from traceadvisor.whatif.fusion import first_input  # noqa: E402

RUNS = ROOT / "fixtures" / "pairs12_runs"
FIT = [("run_23", "conv_cl_gpu", c) for c in ("", "_c1", "_c2")]
NHWC_BN_KERNEL = "batchnorm_fwtr_nhwc|batchnorm_bwtr_nhwc"


def traces(run: str, pair: str, capture: str) -> tuple[Trace, Trace]:
    base = RUNS / run / "traces" / f"p12_{pair}_before_stack{capture}.json.gz"
    return load_file(base), load_file(Path(str(base).replace("_before_", "_after_")))


def nhwc_kernels(after: Trace, rate: float) -> tuple[float, float]:
    """(measured ns, model ns at efficiency 1) over the after trace's NHWC batch-norm kernels."""
    k, host = after.kernels, after.host
    names = host["name"].astype(str).to_numpy()
    dims, types = host["input_dims"].to_numpy(), host["input_types"].to_numpy()
    mask = k["name"].astype(str).str.contains(NHWC_BN_KERNEL).to_numpy() & (k["op"].to_numpy() >= 0)
    measured = model = 0.0
    for o, d in zip(k["op"].to_numpy()[mask].tolist(), k["dur_ns"].to_numpy()[mask].tolist(), strict=True):
        numel, size = first_input(dims[o], types[o])
        if names[o] not in precision.BN_OPS or numel <= 0:
            continue
        passes = precision.BN_PASSES_BACKWARD if names[o].endswith("_backward") else precision.BN_PASSES_FORWARD
        measured += float(d)
        model += passes * numel * size / rate * 1e9
    return measured, model


def fitted_efficiency() -> float:
    measured = model = 0.0
    for run, pair, capture in FIT:
        before, after = traces(run, pair, capture)
        m, x = nhwc_kernels(after, precision.streaming_bandwidth(before))
        measured, model = measured + m, model + x
    return measured / model


def main() -> None:
    print(f"fitted on {len(FIT)} after traces of {FIT[0][1]} ({FIT[0][0]}): NHWC_BN_EFFICIENCY = "
          f"{fitted_efficiency():.3f} (the code uses {precision.NHWC_BN_EFFICIENCY})")
    print(f"{'run':8s} {'pair':12s} {'split':10s} {'NCHW ms':>8s} {'NHWC ms':>8s} {'model ms':>8s} {'err%':>6s}")
    for run_dir in sorted(RUNS.glob("run_*"), key=lambda p: int(p.name.split("_")[1])):
        for pair in ("conv_cl", "conv_cl_gpu", "resnet50_cl"):
            path = run_dir / "traces" / f"p12_{pair}_before_stack.json.gz"
            if not path.exists() or not Path(str(path).replace("_before_", "_after_")).exists():
                continue
            before, after = traces(run_dir.name, pair, "")
            model = precision.nhwc_batch_norm_ns(before)
            nchw = float(before.kernels.loc[list(model), "dur_ns"].sum())
            measured, _ = nhwc_kernels(after, precision.streaming_bandwidth(before))
            if not model or measured <= 0:
                continue
            pred = float(sum(model.values()))
            split = "fit" if pair == "conv_cl_gpu" else "validation"
            print(f"{run_dir.name:8s} {pair:12s} {split:10s} {nchw / 1e6:8.3f} {measured / 1e6:8.3f} "
                  f"{pred / 1e6:8.3f} {100 * (pred / measured - 1):6.1f}")


if __name__ == "__main__":
    main()
