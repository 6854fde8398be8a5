"""OP201: the optimizer updates parameters one tensor at a time (foreach and fused off)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.rules_api import (
    MULTI_TENSOR_MARKS,
    Capability,
    Evidence,
    Finding,
    IdleCause,
    Rule,
    Severity,
    Trace,
    category_mask,
    event_location,
    fmt_ns,
    idle_of,
    per_step,
    replay_basis,
    scenario_saving,
    us,
)

OPTIMIZER_STEP = "Optimizer.step#"  # the annotation torch.optim puts around each step() call
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
BOOL = npt.NDArray[np.bool_]

RECOMMENDATION = (
    "Construct the optimizer with fused=True, e.g. torch.optim.{}(params, fused=True) (or foreach=True); "
    "remove foreach=False."
)
BASIS = (
    "each per-tensor optimizer step's kernels replaced by multi_tensor_apply launches moving the optimizer "
    "state once at the bandwidth the trace's big kernels reach, its host time by a fused step's"
)


@dataclass(frozen=True)
class Options:
    min_kernels: int = 32  # optimizer steps with fewer kernels are not worth fusing
    min_kernels_per_param: float = 3.0  # kernels per parameter tensor that mark a per-tensor loop
    min_saving_pct: float = 1.0  # report only when the replayed saving is this share of the step


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
    the GPU ran dry). The saving per step is a what-if replay (scenario `fused-optimizer`,
    `traceadvisor whatif`): each such step's kernels replaced by `multi_tensor_apply` launches
    (one per 36 tensors for Adam) moving the optimizer state once (7 accesses per element for Adam,
    from the input dims) at the bandwidth the trace's own big kernels reach, and the step's host
    time by what a fused step keeps (its Python loop over the parameters, 12.8 µs per tensor);
    the replayed unprofiled step before minus after, so a loop off the critical path saves nothing.

    ## How to fix
    Construct the optimizer with `fused=True` (Adam, AdamW, SGD, Adagrad on CUDA), e.g.
    `torch.optim.AdamW(params, lr=..., fused=True)`, or `foreach=True`; remove an explicit
    `foreach=False`. Compiling the step (`torch.compile(opt.step)`) also fuses it.

    ## Options
    - `min_kernels`: optimizer steps with fewer kernels are not reported.
    - `min_kernels_per_param`: kernels per parameter tensor that mark a per-tensor loop.
    - `min_saving_pct`: report only when the replayed saving is at least this share of the
      predicted unprofiled step (default 1%).

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
        opts = self.options
        ann = trace.annotations
        ann = ann[ann["name"].astype(str).str.startswith(OPTIMIZER_STEP).to_numpy()]
        k = trace.kernels
        k = k[k["op"] >= 0]
        if not len(ann) or not len(k):
            return
        st = _optimizer_steps(trace, ann, k)
        flagged = st.per_tensor_loops(opts)
        if not flagged.any():
            return
        saving = scenario_saving(trace, "fused-optimizer")
        if not saving.reaches(opts.min_saving_pct):
            return
        gaps = idle_of(trace, IdleCause.optimizer)
        idx = np.flatnonzero(flagged)
        first = ann.iloc[int(idx[0])]
        optimizer = str(first["name"]).split("#", 1)[1].split(".")[0]
        idle_raw = int(gaps[np.isin(gaps["host_row"].to_numpy(), ann.index.to_numpy()[flagged])]["dur_ns"].sum())
        found = _flagged(trace, st, flagged, idle_raw, saving.saving_ns)
        yield self.finding(
            trace,
            message=found.message(optimizer),
            recommendation=RECOMMENDATION.format(optimizer or "AdamW"),
            per_step=per_step(saving),
            basis=replay_basis(saving, BASIS),
            evidence=_evidence(st, idx[:5]),
            location=event_location(trace, first),
            data=found.data(),
        )


@dataclass(frozen=True)
class OptimizerSteps:
    """The optimizer steps (``Optimizer.step#`` annotations) with, per step, the kernels launched
    from inside it and the op the parameter loop repeats most."""

    ann: pd.DataFrame
    ops: pd.DataFrame  # one row per (step, launching op): ``ann`` (position), ``op`` (host row), ``code`` (name)
    n_kernels: I64  # kernels per step
    gpu_ns: F64  # their GPU time per step
    params: I64  # launches of the most repeated op per step: one per parameter tensor
    top_code: I64  # that op's name code (-2: no op)
    has_multi: BOOL  # a multi-tensor (_foreach_ / _fused_) op ran inside the step

    def per_tensor_loops(self, opts: Options) -> BOOL:
        """The steps that loop over the parameters: no multi-tensor op, enough kernels, and enough
        kernels per parameter tensor."""
        with np.errstate(divide="ignore", invalid="ignore"):
            per_param = np.where(self.params > 0, self.n_kernels / np.maximum(self.params, 1), 0.0)
        return np.asarray(
            ~self.has_multi
            & (self.n_kernels >= opts.min_kernels)
            & (self.params > 0)
            & (per_param >= opts.min_kernels_per_param)
        )


def _optimizer_steps(trace: Trace, ann: pd.DataFrame, k: pd.DataFrame) -> OptimizerSteps:
    host = trace.host
    # Each kernel's optimizer step: the annotation on its launching op's thread holding that op.
    launching = k["op"].to_numpy()
    at = host.index.get_indexer(launching)
    k_ann = _holding(ann, host["pid"].to_numpy()[at], host["tid"].to_numpy()[at], host["ts_ns"].to_numpy()[at])
    inside = k_ann >= 0
    kk = pd.DataFrame(
        {
            "ann": k_ann[inside],
            "op": launching[inside],
            "code": host["name"].cat.codes.to_numpy()[at[inside]],
            "dur": k["dur_ns"].to_numpy()[inside],
        }
    )
    # Launching ops per step by name; the most repeated one counts the parameter tensors.
    ops = kk.drop_duplicates(["ann", "op"])
    counts = ops.groupby(["ann", "code"]).size().sort_values(ascending=False, kind="stable")
    counts = counts[~counts.index.get_level_values("ann").duplicated()]
    params = np.zeros(len(ann), dtype=np.int64)
    top_code = np.full(len(ann), -2, dtype=np.int64)
    params[counts.index.get_level_values("ann")] = counts.to_numpy()
    top_code[counts.index.get_level_values("ann")] = counts.index.get_level_values("code")
    return OptimizerSteps(
        ann=ann,
        ops=ops,
        n_kernels=np.bincount(kk["ann"], minlength=len(ann)),
        gpu_ns=np.asarray(np.bincount(kk["ann"], weights=kk["dur"], minlength=len(ann)), dtype=np.float64),
        params=params,
        top_code=top_code,
        has_multi=_has_multi_tensor_ops(host, ann),
    )


def _has_multi_tensor_ops(host: pd.DataFrame, ann: pd.DataFrame) -> BOOL:
    """Whether a multi-tensor op runs inside each optimizer step (read from the host columns: a copy
    of the op table costs more than this rule)."""
    is_multi = category_mask(host["name"], lambda n: n.str.contains("|".join(MULTI_TENSOR_MARKS)))
    multi = np.flatnonzero(~host["is_annotation"].to_numpy() & is_multi)
    in_step = _holding(ann, *(host[c].to_numpy()[multi] for c in ("pid", "tid", "ts_ns")))
    return np.asarray(np.bincount(in_step + 1, minlength=len(ann) + 1)[1:] > 0)


@dataclass(frozen=True)
class Flagged:
    """What the flagged optimizer steps show, for the message and the finding's data."""

    steps: int
    kernels_per_step: float
    params: int  # parameter tensors (the most in one step)
    single_tensor_frames: bool
    idle_ns: int  # GPU idle while the host ran the loop, as recorded
    saving_ns: float  # the replayed saving per step

    def message(self, optimizer: str) -> str:
        frames_txt = "; _single_tensor_ frames seen" if self.single_tensor_frames else ""
        return (
            f"{optimizer}.step runs per parameter: {self.kernels_per_step:.0f} kernels per step for "
            f"~{self.params} parameter tensors ({self.kernels_per_step / self.params:.1f} per tensor), "
            f"no foreach/fused ops{frames_txt}. The GPU idled {fmt_ns(self.idle_ns)} while the host looped over "
            f"the parameters; a fused update would save about {fmt_ns(self.saving_ns)} per step (replayed)."
        )

    def data(self) -> dict[str, object]:
        return {
            "steps": self.steps,
            "kernels_per_step": self.kernels_per_step,
            "params": self.params,
            "single_tensor_frames": self.single_tensor_frames,
            "idle_us": us(self.idle_ns),
            "saving_per_step_us": us(self.saving_ns),
        }


def _flagged(trace: Trace, st: OptimizerSteps, flagged: BOOL, idle_ns: int, saving_ns: float) -> Flagged:
    steps = int(flagged.sum())
    return Flagged(
        steps=steps,
        kernels_per_step=int(st.n_kernels[flagged].sum()) / steps,
        params=int(st.params[flagged].max()),
        single_tensor_frames=_single_tensor_frames(trace, st.ann.iloc[np.flatnonzero(flagged)]),
        idle_ns=idle_ns,
        saving_ns=saving_ns,
    )


def _evidence(st: OptimizerSteps, idx: npt.NDArray[np.intp]) -> list[Evidence]:
    ann = st.ann
    return [
        Evidence(
            name=f"{ann['name'].iloc[i]}: {st.n_kernels[i]} kernels for ~{st.params[i]} tensors",
            ts_us=int(ann["ts_ns"].iloc[i]) / 1000.0,
            dur_us=int(ann["dur_ns"].iloc[i]) / 1000.0,
        )
        for i in idx.tolist()
    ]


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
