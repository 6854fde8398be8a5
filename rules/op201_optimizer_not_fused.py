"""OP201: the optimizer updates parameters one tensor at a time (foreach and fused off)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import prod

from traceadvisor import Finding, Rule, Severity, Trace
from traceadvisor.rules_api import Capability, Evidence, location_of, parse_raw

# HBM bandwidth (bytes/s) from NVIDIA datasheets, by device name; fallback by compute capability.
BANDWIDTH = {"H100": 3.35e12, "H200": 4.8e12, "H800": 3.35e12, "A100": 2.0e12, "A10": 0.6e12, "L40S": 0.864e12}
BANDWIDTH_BY_MAJOR = {7: 0.9e12, 8: 1.5e12, 9: 3.35e12}
_DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2}
# fp32 Adam reads param, grad, exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq.
ACCESSES_PER_ELEMENT = 7


@dataclass(frozen=True)
class Options:
    min_kernels: int = 32  # optimizer steps with fewer kernels are not worth fusing
    min_kernels_per_param: float = 3.0  # kernels per parameter tensor that mark a per-tensor loop
    eager_op_us: float = 10.0  # host cost of one eager op without the profiler (dispatch + launch)
    bandwidth_efficiency: float = 0.7  # share of the HBM bandwidth a fused optimizer kernel reaches


def _bandwidth(trace: Trace) -> float:
    props = trace.device_properties() or {}
    name = str(props.get("name", ""))
    for key in sorted(BANDWIDTH, key=len, reverse=True):
        if key in name:
            return BANDWIDTH[key]
    return BANDWIDTH_BY_MAJOR.get(int(props.get("computeMajor", 0) or 0), 1.0e12)


class OptimizerNotFused(Rule):
    """The optimizer step launches a few small kernels per parameter instead of a fused update.

    ## Why it matters
    With `foreach=False` (or an optimizer without a foreach/fused path) `optimizer.step()` loops
    over the parameters in Python and runs 5–10 eager ops per tensor. Each op costs host time to
    dispatch and launch (about 5–15 µs without the profiler) while its kernel runs for a few
    microseconds, so the step is bound by the host and grows with the number of parameter tensors.
    The fused (`fused=True`) or multi-tensor (`foreach=True`) implementations update all
    parameters in a handful of kernels.

    ## How it shows up in a trace
    Inside an `Optimizer.step#…` annotation: no `_foreach_`/`_fused_` ops, at least
    `min_kernels` kernels, and at least `min_kernels_per_param` kernels per parameter tensor (the
    parameter count is the count of the most repeated op, e.g. `aten::addcdiv_`); Python frames
    named `_single_tensor_*` (with_stack) are shown when present. The saving per step is the
    unfused cost, min(GPU window of the step, kernels × `eager_op_us`), minus the fused estimate:
    the bytes the update moves (7 accesses per element for Adam, from the input dims) at
    `bandwidth_efficiency` of the HBM bandwidth, or the kernels' GPU time / 4 without shapes.
    The per-op host cost stands in for the profiled one because the profiler inflates it.

    ## How to fix
    Construct the optimizer with `fused=True` (Adam, AdamW, SGD, Adagrad on CUDA), e.g.
    `torch.optim.AdamW(params, lr=..., fused=True)`, or `foreach=True`; remove an explicit
    `foreach=False`. Compiling the step (`torch.compile(opt.step)`) also fuses it.

    ## Options
    - `min_kernels`: optimizer steps with fewer kernels are not reported.
    - `min_kernels_per_param`: kernels per parameter tensor that mark a per-tensor loop.
    - `eager_op_us`: host cost of one eager op without the profiler (default 10 µs).
    - `bandwidth_efficiency`: share of the HBM bandwidth a fused update reaches (default 0.7).

    ## References
    - https://pytorch.org/docs/stable/optim.html#algorithms (foreach and fused implementations)
    - https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html
    """

    code = "OP201"
    name = "optimizer-not-fused"
    severity = Severity.medium
    requires = frozenset({Capability.gpu})
    Options = Options

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts: Options = self.options
        ann = trace.annotations
        ann = ann[ann["name"].astype(str).str.startswith("Optimizer.step#")]
        k = trace.kernels
        if not len(ann) or not len(k):
            return
        k = k[k["op"] >= 0]
        launch = trace.host.loc[k["op"].to_numpy()]
        l_tid, l_ts = launch["tid"].to_numpy(), launch["ts_ns"].to_numpy()
        ops = trace.ops
        frames = trace.frames
        bw = _bandwidth(trace)
        total_saving = 0.0
        steps = 0
        kernels_seen = 0
        params_seen = 0
        single_frames = False
        optimizer = ""
        first_ann = None
        evidence: list[Evidence] = []
        for a in ann.itertuples():
            inside = (l_tid == a.tid) & (l_ts >= a.ts_ns) & (l_ts <= a.end_ns)
            kk = k[inside]
            a_ops = ops[(ops["tid"] == a.tid) & (ops["ts_ns"] >= a.ts_ns) & (ops["end_ns"] <= a.end_ns)]
            names = a_ops["name"].astype(str)
            if names.str.contains("_foreach_|_fused_").any() or len(kk) < opts.min_kernels:
                continue
            launching = trace.host.loc[kk["op"].unique()]
            counts = launching["name"].astype(str).value_counts()
            params = int(counts.iloc[0])
            if params <= 0 or len(kk) / params < opts.min_kernels_per_param:
                continue
            if len(frames):
                fr = frames[(frames["tid"] == a.tid) & (frames["ts_ns"] >= a.ts_ns) & (frames["ts_ns"] <= a.end_ns)]
                single_frames = single_frames or bool(fr["name"].astype(str).str.contains("_single_tensor_").any())
            window = float(kk["end_ns"].max() - kk["ts_ns"].min())
            gpu_ns = float(kk["dur_ns"].sum())
            unfused = min(window, len(kk) * opts.eager_op_us * 1000.0)
            top_op = str(counts.index[0])
            moved = 0.0
            for dims_raw, types_raw in zip(
                launching.loc[launching["name"].astype(str) == top_op, "input_dims"],
                launching.loc[launching["name"].astype(str) == top_op, "input_types"],
                strict=True,
            ):
                dims, types = parse_raw(dims_raw), parse_raw(types_raw)
                if dims and dims[0]:
                    size = _DTYPE_BYTES.get(str(types[0]) if types else "float", 4)
                    moved += prod(dims[0]) * size * ACCESSES_PER_ELEMENT
            fused = moved / (opts.bandwidth_efficiency * bw) * 1e9 if moved else gpu_ns / 4.0
            total_saving += max(0.0, unfused - fused)
            steps += 1
            kernels_seen += len(kk)
            params_seen = max(params_seen, params)
            optimizer = str(a.name).split("#", 1)[1].split(".")[0]
            if first_ann is None:
                first_ann = a
            if len(evidence) < 5:
                evidence.append(
                    Evidence(
                        name=f"{a.name}: {len(kk)} kernels for ~{params} tensors",
                        ts_us=int(a.ts_ns) / 1000.0,
                        dur_us=int(a.dur_ns) / 1000.0,
                    )
                )
        if not steps or first_ann is None:
            return
        location = location_of(trace, int(first_ann.pid), int(first_ann.tid), int(first_ann.ts_ns))
        frames_txt = "; _single_tensor_ frames seen" if single_frames else ""
        yield self.finding(
            trace,
            message=(
                f"{optimizer}.step runs per parameter: {kernels_seen / steps:.0f} kernels per step for "
                f"~{params_seen} parameter tensors ({kernels_seen / steps / params_seen:.1f} per tensor), "
                f"no foreach/fused ops{frames_txt}."
            ),
            recommendation=(
                f"Construct the optimizer with fused=True, e.g. torch.optim.{optimizer or 'AdamW'}(params, fused=True) "
                "(or foreach=True); remove foreach=False."
            ),
            impact_ns=total_saving,
            basis=(
                f"per step: min(GPU window, kernels × {opts.eager_op_us:g} µs eager op cost) minus a fused update "
                f"moving the optimizer state at {opts.bandwidth_efficiency:.0%} of {bw / 1e12:.2f} TB/s"
            ),
            evidence=evidence,
            location=location,
            data={
                "steps": steps,
                "kernels_per_step": kernels_seen / steps,
                "params": params_seen,
                "single_tensor_frames": single_frames,
            },
        )
