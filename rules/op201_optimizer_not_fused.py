"""OP201: the optimizer updates parameters one tensor at a time (foreach and fused off)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import prod

import numpy as np
import pandas as pd

from traceadvisor.rules_api import (
    MULTI_TENSOR_MARKS,
    PROFILER_EVENT_COST_NS,
    Capability,
    Evidence,
    Finding,
    IdleCause,
    Rule,
    Severity,
    Trace,
    idle_attribution,
    location_of,
    parse_raw,
)

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
    bandwidth_efficiency: float = 0.7  # share of the HBM bandwidth a fused optimizer kernel reaches
    profiler_event_us: float = PROFILER_EVENT_COST_NS / 1000  # the profiler's host cost per recorded event


def _bandwidth(trace: Trace) -> float:
    props = trace.device_properties() or {}
    name = str(props.get("name", ""))
    for key in sorted(BANDWIDTH, key=len, reverse=True):
        if key in name:
            return BANDWIDTH[key]
    return BANDWIDTH_BY_MAJOR.get(int(props.get("computeMajor", 0) or 0), 1.0e12)


class OptimizerNotFused(Rule[Options]):
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
    named `_single_tensor_*` (with_stack) are shown when present. The rule claims the idle gaps
    the attribution gives to the per-tensor optimizer step (the host was in its Python loop when
    the GPU ran dry). The saving per step is the larger of that idle, less the profiler's own
    host cost of the events recorded in it (`profiler_event_us` each), and the GPU time of the
    step's kernels beyond a fused update: the bytes the update moves (7 accesses per element for
    Adam, from the input dims) at `bandwidth_efficiency` of the HBM bandwidth, or a quarter of the
    kernels' GPU time without shapes.

    ## How to fix
    Construct the optimizer with `fused=True` (Adam, AdamW, SGD, Adagrad on CUDA), e.g.
    `torch.optim.AdamW(params, lr=..., fused=True)`, or `foreach=True`; remove an explicit
    `foreach=False`. Compiling the step (`torch.compile(opt.step)`) also fuses it.

    ## Options
    - `min_kernels`: optimizer steps with fewer kernels are not reported.
    - `min_kernels_per_param`: kernels per parameter tensor that mark a per-tensor loop.
    - `bandwidth_efficiency`: share of the HBM bandwidth a fused update reaches (default 0.7).
    - `profiler_event_us`: the profiler's host cost per recorded op, annotation or Python frame
      (default 3 µs, measured on the fixtures' before/after pairs with record_shapes and with_stack).

    ## References
    - https://pytorch.org/docs/stable/optim.html#algorithms (foreach and fused implementations)
    - https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html
    """

    code = "OP201"
    name = "optimizer-not-fused"
    severity = Severity.medium
    requires = frozenset({Capability.gpu})
    claims = frozenset({IdleCause.optimizer})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts: Options = self.options
        host = trace.host
        ann = trace.annotations
        ann = ann[ann["name"].astype(str).str.startswith("Optimizer.step#").to_numpy()]
        k = trace.kernels
        k = k[k["op"] >= 0]
        if not len(ann) or not len(k):
            return
        # Each kernel's optimizer step: the annotation on its launching op's thread holding that op.
        launching = k["op"].to_numpy()
        at = host.index.get_indexer(launching)
        k_ann = _holding(ann, host["pid"].to_numpy()[at], host["tid"].to_numpy()[at], host["ts_ns"].to_numpy()[at])
        # Multi-tensor ops, read from host columns (a copy of the op table costs more than this rule).
        names = host["name"]  # categorical: test each distinct name once
        multi_name = np.asarray(names.cat.categories.astype(str).str.contains("|".join(MULTI_TENSOR_MARKS)))
        codes = names.cat.codes.to_numpy()
        multi = np.flatnonzero(~host["is_annotation"].to_numpy() & (codes >= 0) & multi_name[np.maximum(codes, 0)])
        in_step = _holding(ann, *(host[c].to_numpy()[multi] for c in ("pid", "tid", "ts_ns")))
        has_multi = np.bincount(in_step + 1, minlength=len(ann) + 1)[1:] > 0
        inside = k_ann >= 0
        kk = pd.DataFrame(
            {
                "ann": k_ann[inside],
                "op": launching[inside],
                "code": host["name"].cat.codes.to_numpy()[at[inside]],
                "dur": k["dur_ns"].to_numpy()[inside],
            }
        )
        n_kernels = np.bincount(kk["ann"], minlength=len(ann))
        gpu_ns = np.bincount(kk["ann"], weights=kk["dur"], minlength=len(ann))
        # Launching ops per step by name; the most repeated one counts the parameter tensors.
        ops = kk.drop_duplicates(["ann", "op"])
        counts = ops.groupby(["ann", "code"]).size().sort_values(ascending=False, kind="stable")
        counts = counts[~counts.index.get_level_values("ann").duplicated()]
        params = np.zeros(len(ann), dtype=np.int64)
        top_code = np.full(len(ann), -2, dtype=np.int64)
        params[counts.index.get_level_values("ann")] = counts.to_numpy()
        top_code[counts.index.get_level_values("ann")] = counts.index.get_level_values("code")
        with np.errstate(divide="ignore", invalid="ignore"):
            per_param = np.where(params > 0, n_kernels / np.maximum(params, 1), 0.0)
        flagged = (
            ~has_multi & (n_kernels >= opts.min_kernels) & (params > 0) & (per_param >= opts.min_kernels_per_param)
        )
        if not flagged.any():
            return
        rows = ann.index.to_numpy()
        # Bytes a fused update moves, from the input dims of each flagged step's most repeated op.
        top_rows = ops[flagged[ops["ann"].to_numpy()] & (ops["code"].to_numpy() == top_code[ops["ann"].to_numpy()])]
        moved = np.bincount(
            top_rows["ann"].to_numpy(),
            weights=_bytes_moved(host.loc[top_rows["op"].to_numpy(), ["input_dims", "input_types"]]),
            minlength=len(ann),
        )
        bw = _bandwidth(trace)
        fused = np.where(moved > 0, moved / (opts.bandwidth_efficiency * bw) * 1e9, gpu_ns / 4.0)
        gaps = idle_attribution(trace)
        gaps = gaps[gaps["cause"] == "optimizer"]
        gap_ann = pd.Index(rows).get_indexer(gaps["host_row"].to_numpy())  # the optimizer step of each gap
        recoverable = np.maximum(
            gaps["dur_ns"].to_numpy() - gaps["host_events"].to_numpy() * opts.profiler_event_us * 1000, 0.0
        )
        idle = np.bincount(gap_ann[gap_ann >= 0], weights=recoverable[gap_ann >= 0], minlength=len(ann))[flagged]
        saving = np.maximum(idle, np.maximum(gpu_ns[flagged] - fused[flagged], 0.0))
        total_saving = float(saving.sum())
        steps = int(flagged.sum())
        idx = np.flatnonzero(flagged)
        first = ann.iloc[int(idx[0])]
        single_frames = _single_tensor_frames(trace, ann.iloc[idx])
        optimizer = str(first["name"]).split("#", 1)[1].split(".")[0]
        kernels_seen = int(n_kernels[flagged].sum())
        params_seen = int(params[flagged].max())
        evidence = [
            Evidence(
                name=f"{ann['name'].iloc[i]}: {n_kernels[i]} kernels for ~{params[i]} tensors",
                ts_us=int(ann["ts_ns"].iloc[i]) / 1000.0,
                dur_us=int(ann["dur_ns"].iloc[i]) / 1000.0,
            )
            for i in idx[:5].tolist()
        ]
        location = location_of(trace, int(first["pid"]), int(first["tid"]), int(first["ts_ns"]))
        frames_txt = "; _single_tensor_ frames seen" if single_frames else ""
        idle_raw = int(gaps[np.isin(gaps["host_row"].to_numpy(), rows[flagged])]["dur_ns"].sum())
        yield self.finding(
            trace,
            message=(
                f"{optimizer}.step runs per parameter: {kernels_seen / steps:.0f} kernels per step for "
                f"~{params_seen} parameter tensors ({kernels_seen / steps / params_seen:.1f} per tensor), "
                f"no foreach/fused ops{frames_txt}. The GPU idled {idle_raw / 1e3:.1f} µs while the host looped over "
                f"the parameters; a fused update would save about {total_saving / steps / 1e3:.1f} µs per step."
            ),
            recommendation=(
                f"Construct the optimizer with fused=True, e.g. torch.optim.{optimizer or 'AdamW'}(params, fused=True) "
                "(or foreach=True); remove foreach=False."
            ),
            impact_ns=total_saving,
            basis=(
                "per step: the larger of the GPU idle while the host ran the per-tensor optimizer loop (less the "
                f"profiler's own {opts.profiler_event_us:g} µs per recorded event) and the optimizer kernels' GPU "
                f"time beyond a fused update moving the optimizer state at {opts.bandwidth_efficiency:.0%} of "
                f"{bw / 1e12:.2f} TB/s"
            ),
            evidence=evidence,
            location=location,
            data={
                "steps": steps,
                "kernels_per_step": kernels_seen / steps,
                "params": params_seen,
                "single_tensor_frames": single_frames,
                "idle_us": idle_raw / 1e3,
                "saving_per_step_us": total_saving / steps / 1e3,
            },
        )


def _holding(spans: pd.DataFrame, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Position in ``spans`` of the span on the same thread holding each time (-1 if none).

    Optimizer steps on one thread do not overlap, so the latest span starting at or before a time
    is the only candidate.
    """
    out = np.full(len(ts), -1, dtype=np.int64)
    for (p, t), grp in spans.groupby(["pid", "tid"], sort=False):
        sel = np.flatnonzero((pid == p) & (tid == t))
        if not len(sel):
            continue
        pos = spans.index.get_indexer(grp.index)
        order = np.argsort(grp["ts_ns"].to_numpy(), kind="stable")
        start, end, pos = grp["ts_ns"].to_numpy()[order], grp["end_ns"].to_numpy()[order], pos[order]
        j = np.searchsorted(start, ts[sel], side="right") - 1
        ok = j >= 0
        ok[ok] = ts[sel][ok] <= end[j[ok]]
        out[sel[ok]] = pos[j[ok]]
    return out


def _bytes_moved(inputs: pd.DataFrame) -> np.ndarray:
    """Bytes one fused update moves for each op (first input's elements × dtype size × accesses).

    Parameter shapes repeat every step: each distinct (dims, types) pair is parsed once.
    """
    dims_code, dims = pd.factorize(inputs["input_dims"], use_na_sentinel=False)
    types_code, types = pd.factorize(inputs["input_types"], use_na_sentinel=False)
    pairs, which = np.unique(dims_code * len(types) + types_code, return_inverse=True)
    per_pair = np.zeros(len(pairs))
    for i, key in enumerate(pairs.tolist()):  # distinct shapes, not events
        d, t = parse_raw(dims[key // len(types)]), parse_raw(types[key % len(types)])
        size = _DTYPE_BYTES.get(str(t[0]) if t else "float", 4)
        per_pair[i] = float(prod(d[0]) * size * ACCESSES_PER_ELEMENT) if d and d[0] else 0.0
    out: np.ndarray = per_pair[which.reshape(-1)]
    return out


def _single_tensor_frames(trace: Trace, steps: pd.DataFrame) -> bool:
    """Whether Python frames named ``_single_tensor_*`` run inside the flagged optimizer steps."""
    frames = trace.frames
    if not len(frames):
        return False
    names = frames["name"].astype("category")  # test each distinct frame name once
    hit = np.asarray(names.cat.categories.astype(str).str.contains("_single_tensor_", regex=False))
    codes = names.cat.codes.to_numpy()
    single = frames[(codes >= 0) & hit[np.maximum(codes, 0)]]
    if not len(single):
        return False
    return bool(
        (_holding(steps, single["pid"].to_numpy(), single["tid"].to_numpy(), single["ts_ns"].to_numpy()) >= 0).any()
    )
