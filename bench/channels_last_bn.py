"""The channels-last scenario's batch-norm kernel speeds, refitted, and the model checked on every pair.

    python bench/channels_last_bn.py

``whatif.precision.NCHW_BATCH_NORM`` replaces each NCHW training batch-norm kernel by the
channels_last kernels that do its work, each taking, per byte of its passes over the op's input,
``memory`` x the trace's elementwise streaming time per byte plus ``sm_ns_per_byte`` (scaled by the
trace's SM count). Both terms are fitted by least squares (non-negative) over the captures of the
fit pairs (``FIT``) on two GPUs: cuDNN's persistent kernels on conv_cl_gpu (run 23, H200; run 37,
H100; one pair of terms for forward and backward), ATen's channels_last kernels on conv_bf16_cl_gpu
(run 25, H200; run 37, H100; bf16 autocast). The streaming rate comes from the paired before trace
(the trace a user analyses). Then, for each channels-last pair of each run, the model's total
channels_last batch-norm time (from the before trace's NCHW kernels) against the after trace's
measured total: the fit pairs and the validation pairs (conv_cl, resnet50_cl, resnet50_bf16_cl).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.trace.model import Trace  # noqa: E402
from traceadvisor.whatif import precision  # noqa: E402
from traceadvisor.whatif.fusion import first_input  # noqa: E402

RUNS = ROOT / "fixtures" / "pairs12_runs"
CAPTURES = ("", "_c1", "_c2")
CUDNN = ("batchnorm_fwtr_nhwc", "batchnorm_bwtr_nhwc")
# the fit pair of each group of channels_last kernels (capture_pairs.SPLIT_FIT), on an H200 and an H100
FIT = {
    CUDNN: (("run_23", "conv_cl_gpu"), ("run_37", "conv_cl_gpu")),
    None: (("run_25", "conv_bf16_cl_gpu"), ("run_37", "conv_bf16_cl_gpu")),
}
PAIRS = {"conv_cl": "validation", "conv_cl_gpu": "fit", "resnet50_cl": "validation",
         "conv_bf16_cl_gpu": "fit", "resnet50_bf16_cl": "validation"}  # fmt: skip
KERNELS = {c.name: c for cs in precision.NCHW_BATCH_NORM.values() for c in cs}


def traces(run: str, pair: str, capture: str) -> tuple[Trace, Trace]:
    base = RUNS / run / "traces" / f"p12_{pair}_before_stack{capture}.json.gz"
    return load_file(base), load_file(Path(str(base).replace("_before_", "_after_")))


def channels_last_kernels(after: Trace, rate: float, sms: int) -> dict[str, tuple[float, float, float]]:
    """Per channels_last batch-norm kernel name: (measured ns, the passes' bytes over ``rate`` in ns
    (the memory term at 1), the passes' bytes scaled to ``FIT_SMS`` (the SM term's bytes))."""
    k, host = after.kernels, after.host
    names = host["name"].astype(str).to_numpy()
    dims, types = host["input_dims"].to_numpy(), host["input_types"].to_numpy()
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    ops = k["op"].to_numpy().tolist()
    for n, o, d in zip(k["name"].astype(str).tolist(), ops, k["dur_ns"].to_numpy().tolist(), strict=True):
        kind = next((c for c in KERNELS if c in n), None)
        if kind is None or o < 0 or names[o] not in precision.BN_OPS:
            continue
        numel, size = first_input(dims[o], types[o])
        if numel > 0:
            nbytes = KERNELS[kind].passes * numel * size
            out[kind][0] += float(d)
            out[kind][1] += nbytes / rate * 1e9
            out[kind][2] += nbytes * precision.FIT_SMS / sms
    return {n: (m, x, y) for n, (m, x, y) in out.items()}


def measured_total(before: Trace, after: Trace) -> float:
    """The after trace's channels_last batch-norm kernel time, ns."""
    rate, sms = precision.streaming_bandwidth(before), precision.trace_sms(before)
    return sum(m for m, _, _ in channels_last_kernels(after, rate, sms).values())


def nonnegative_fit(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(a, b) >= 0 minimising the squared error of m = a x + b y over ``rows`` of (m, x, y)."""
    m, x, y = (np.array(c, dtype=np.float64) for c in zip(*rows, strict=True))
    (a, b), *_ = np.linalg.lstsq(np.column_stack([x, y]), m, rcond=None)
    if a >= 0 and b >= 0:
        return float(a), float(b)
    only_x, only_y = float(m @ x / (x @ x)), float(m @ y / (y @ y))
    err_x, err_y = float(np.sum((m - only_x * x) ** 2)), float(np.sum((m - only_y * y) ** 2))
    return (only_x, 0.0) if err_x <= err_y else (0.0, only_y)


def fitted_terms() -> dict[str, tuple[float, float]]:
    """Each channels_last kernel's (memory, sm_ns_per_byte) from its fit pairs' captures, one row a
    capture (cuDNN's two kernels share one pair of terms: their rows summed per capture)."""

    def key(name: str) -> str:
        return "cudnn" if name in CUDNN else name

    rows: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for group, fits in FIT.items():
        for run, pair in fits:
            for capture in CAPTURES:
                before, after = traces(run, pair, capture)
                rate, sms = precision.streaming_bandwidth(before), precision.trace_sms(before)
                summed: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
                for name, got in channels_last_kernels(after, rate, sms).items():
                    if (group is None) == (name not in CUDNN):  # each kernel from its own fit pair only
                        summed[key(name)] = [a + b for a, b in zip(summed[key(name)], got, strict=True)]
                for k, (m, x, y) in summed.items():
                    rows[k].append((m, x, y))
    terms = {k: nonnegative_fit(r) for k, r in rows.items()}
    return {name: terms[key(name)] for name in KERNELS if key(name) in terms}


def main() -> None:
    fitted = fitted_terms()
    print("each channels_last kernel's memory term and SM ns per byte: fitted on its fit pairs / in the code")
    for name, (a, b) in fitted.items():
        c = KERNELS[name]
        print(f"  {name:45s} {a:6.3f} {b:.3e} / {c.memory:.3f} {c.sm_ns_per_byte:.3e}")
    print(f"{'run':8s} {'pair':17s} {'split':10s} {'NCHW ms':>8s} {'NHWC ms':>8s} {'model ms':>8s} {'err%':>6s}")
    for run_dir in sorted(RUNS.glob("run_*"), key=lambda p: int(p.name.split("_")[1])):
        for pair, split in PAIRS.items():
            path = run_dir / "traces" / f"p12_{pair}_before_stack.json.gz"
            if not path.exists() or not Path(str(path).replace("_before_", "_after_")).exists():
                continue
            before, after = traces(run_dir.name, pair, "")
            model = precision.nhwc_batch_norm_ns(before)
            measured = measured_total(before, after)
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
