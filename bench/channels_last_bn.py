"""The channels-last scenario's batch-norm efficiencies, refitted, and the model checked on every pair.

    python bench/channels_last_bn.py

``whatif.precision.NCHW_BATCH_NORM`` replaces each NCHW training batch-norm kernel by the
channels_last kernels that do its work, each taking ``efficiency`` x the time its passes over the
op's input take at the trace's elementwise streaming rate. Each efficiency is the time its
channels_last kernels take over the model's time at efficiency 1, summed over the after traces of
one fit pair (``FIT``): cuDNN's persistent kernels on conv_cl_gpu (run 23; one constant for forward
and backward), ATen's channels_last kernels on conv_bf16_cl_gpu (run 25, bf16 autocast). The rate
comes from the paired before trace (the trace a user analyses). Then, for each channels-last pair
of each run, the model's total channels_last batch-norm time (from the before trace's NCHW kernels)
against the after trace's measured total: the fit pairs and the validation pairs (conv_cl,
resnet50_cl, resnet50_bf16_cl).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.trace.model import Trace  # noqa: E402
from traceadvisor.whatif import precision  # noqa: E402
from traceadvisor.whatif.fusion import first_input  # noqa: E402

RUNS = ROOT / "fixtures" / "pairs12_runs"
CAPTURES = ("", "_c1", "_c2")
CUDNN = ("batchnorm_fwtr_nhwc", "batchnorm_bwtr_nhwc")
# the fit pair of each group of channels_last kernels (capture_pairs.SPLIT_FIT)
FIT = {CUDNN: ("run_23", "conv_cl_gpu"), None: ("run_25", "conv_bf16_cl_gpu")}
PAIRS = {"conv_cl": "validation", "conv_cl_gpu": "fit", "resnet50_cl": "validation",
         "conv_bf16_cl_gpu": "fit", "resnet50_bf16_cl": "validation"}  # fmt: skip
KERNELS = {c.name: c for cs in precision.NCHW_BATCH_NORM.values() for c in cs}


def traces(run: str, pair: str, capture: str) -> tuple[Trace, Trace]:
    base = RUNS / run / "traces" / f"p12_{pair}_before_stack{capture}.json.gz"
    return load_file(base), load_file(Path(str(base).replace("_before_", "_after_")))


def channels_last_kernels(after: Trace, rate: float) -> dict[str, tuple[float, float]]:
    """Per channels_last batch-norm kernel name: (measured ns, model ns at efficiency 1)."""
    k, host = after.kernels, after.host
    names = host["name"].astype(str).to_numpy()
    dims, types = host["input_dims"].to_numpy(), host["input_types"].to_numpy()
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    ops = k["op"].to_numpy().tolist()
    for n, o, d in zip(k["name"].astype(str).tolist(), ops, k["dur_ns"].to_numpy().tolist(), strict=True):
        kind = next((c for c in KERNELS if c in n), None)
        if kind is None or o < 0 or names[o] not in precision.BN_OPS:
            continue
        numel, size = first_input(dims[o], types[o])
        if numel > 0:
            out[kind][0] += float(d)
            out[kind][1] += KERNELS[kind].passes * numel * size / rate * 1e9
    return {n: (m, x) for n, (m, x) in out.items()}


def fitted_efficiencies() -> dict[str, float]:
    """Each channels_last kernel's efficiency from its fit pair (cuDNN's two share one)."""

    def key(name: str) -> str:
        return "cudnn" if name in CUDNN else name

    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for group, (run, pair) in FIT.items():
        for capture in CAPTURES:
            before, after = traces(run, pair, capture)
            for name, (m, x) in channels_last_kernels(after, precision.streaming_bandwidth(before)).items():
                if (group is None) == (name not in CUDNN):  # each kernel from its own fit pair only
                    sums[key(name)][0] += m
                    sums[key(name)][1] += x
    eff = {k: m / x for k, (m, x) in sums.items()}
    return {name: eff[key(name)] for name in KERNELS if key(name) in eff}


def main() -> None:
    fitted = fitted_efficiencies()
    print("efficiency of each channels_last kernel: fitted on its fit pair / in the code")
    for name, e in fitted.items():
        print(f"  {name:45s} {e:6.3f} / {KERNELS[name].efficiency:.2f}")
    print(f"{'run':8s} {'pair':17s} {'split':10s} {'NCHW ms':>8s} {'NHWC ms':>8s} {'model ms':>8s} {'err%':>6s}")
    for run_dir in sorted(RUNS.glob("run_*"), key=lambda p: int(p.name.split("_")[1])):
        for pair, split in PAIRS.items():
            path = run_dir / "traces" / f"p12_{pair}_before_stack.json.gz"
            if not path.exists() or not Path(str(path).replace("_before_", "_after_")).exists():
                continue
            before, after = traces(run_dir.name, pair, "")
            model = precision.nhwc_batch_norm_ns(before)
            measured = sum(m for m, _ in channels_last_kernels(after, precision.streaming_bandwidth(before)).values())
            if not model or measured <= 0:
                continue
            nchw = float(before.kernels.loc[list(model), "dur_ns"].sum())
            pred = float(sum(model.values()))
            print(
                f"{run_dir.name:8s} {pair:17s} {split:10s} {nchw / 1e6:8.3f} {measured / 1e6:8.3f} "
                f"{pred / 1e6:8.3f} {100 * (pred / measured - 1):6.1f}"
            )


if __name__ == "__main__":
    main()
