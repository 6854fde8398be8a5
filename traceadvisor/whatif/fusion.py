"""Fusion what-if scenarios: many eager kernels replaced by one modelled kernel (docs/whatif.md).

Four fixes, each a graph change of the replay (``replay.Overrides``):

* ``fused-optimizer``: a per-parameter optimizer step (``foreach=False``) becomes a multi-tensor
  kernel (``_fused_adamw_`` / ``multi_tensor_apply``);
* ``sdpa``: the matmul → softmax → matmul attention chain becomes one flash-attention kernel;
* ``fuse-elementwise``: producer → consumer chains of memory-bound kernels become one kernel each;
* ``fused-cross-entropy``: the fp32 loss over a large vocabulary becomes a fused / chunked one.

GPU records can only be re-timed, not added or removed (``replay.Overrides``): a group of kernels
replaced by ``n`` fused kernels gives the first ``n`` the fused duration (split evenly) and the
others 0 ns and no release delay. Where the fix also removes host work (the eager ops that launched
the group), the host interval of the group's launching ops collapses (``host_time.Region``) to what
the fused call costs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses.cache import memoised
from traceadvisor.analyses.idle import MULTI_TENSOR_MARKS
from traceadvisor.roofline.view import LATENCY_FLOOR_NS, MAX_INPUT_LINKS
from traceadvisor.roofline.view import of as roofline_of
from traceadvisor.trace.columns import parse_raw
from traceadvisor.trace.cuda_api import BLOCKING_CALLS
from traceadvisor.trace.model import Trace
from traceadvisor.trace.steps import name_codes
from traceadvisor.whatif.host_time import HostTimeMap, Region, thread_key
from traceadvisor.whatif.refused import Refused
from traceadvisor.whatif.replay import Overrides

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
BOOL = npt.NDArray[np.bool_]

# Kernels moving at least this many bytes run at the memory roof (launch and tail effects are a few
# µs: at 3 TB/s 8 MB take ~3 µs): their bytes over their time is the bandwidth this GPU reaches.
BIG_KERNEL_BYTES = 8 * 2**20
# Without such kernels: this share of the datasheet bandwidth (large elementwise kernels reach
# 0.88-0.92 of it in p12_elementwise_before, H100 SXM: 2.9-3.1 of 3.35 TB/s).
BANDWIDTH_EFFICIENCY = 0.85

OPTIMIZER_STEP = "Optimizer.step#"  # the annotation torch.optim puts around each step() call
MIN_OPTIMIZER_KERNELS = 32  # as rules/op201_optimizer_not_fused.py: fewer is not a per-tensor loop
# Memory accesses per parameter element of one fused update (reads + writes of param, grad and the
# state): Adam/AdamW read param, grad, exp_avg, exp_avg_sq and write param, exp_avg, exp_avg_sq;
# SGD with momentum reads param, grad, buf and writes param, buf; Adagrad reads param, grad, sum.
ACCESSES = {"Adam": 7, "AdamW": 7, "SGD": 5, "Adagrad": 5, "RMSprop": 5}
# multi_tensor_apply (aten/src/ATen/native/cuda/MultiTensorApply.cuh): one launch holds at most
# depth_to_max_tensors[depth - 1] tensors and 320 blocks of 65,536-element chunks; Adam's lists
# have depth 4 (param, grad, exp_avg, exp_avg_sq): 36 tensors, SGD with momentum depth 3: 48.
MAX_TENSORS_BY_DEPTH = {1: 110, 2: 64, 3: 48, 4: 36, 5: 30}
DEPTH = {"Adam": 4, "AdamW": 4, "SGD": 3, "Adagrad": 3, "RMSprop": 3}
CHUNK_ELEMENTS = 65_536
MAX_BLOCKS = 320
# multi_tensor_apply gives each chunk to one block: with fewer chunks than SMs the update cannot
# reach the memory roof. One block moved its 65,536-element fp32 AdamW chunk (1.8 MB) in 27 µs in
# p12_adamw_after (H100): 68 GB/s per block.
BLOCK_BYTES_PER_S = 68e9
# Host time a fused step keeps per parameter tensor: torch.optim's _init_group still loops over the
# parameters in Python (grads, state lookups, lists for the fused call); the Optimizer.step
# annotation of p12_adamw_after_nostack (AdamW(fused=True), 64 tensors, H100 host) lasts 0.82 ms
# once the profiler's cost is taken out: 12.8 µs per tensor.
FUSED_STEP_NS_PER_TENSOR = 12_800
# Host time of one eager op launching one kernel, unprofiled: issue 12's storm (100 x Linear,
# LayerNorm, ReLU on an H100 host) ran 1,200 kernels per step in 22.5 ms unprofiled: 18.8 µs each.
FUSED_OP_HOST_NS = 18_750
_DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2}

# Fused attention ops: where one runs, attention is already fused (nothing to replace).
FUSED_ATTENTION = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")
SOFTMAX_OPS = ("aten::softmax", "aten::_softmax", "aten::_safe_softmax")
MIN_SEQ = 128  # score matrices smaller than this (L or S) are not worth a fused kernel (OP101's default)
# A flash-attention kernel reaches this share of the FLOP/s the trace's own GEMMs reach: in
# p12_sdpa_after (H100, bf16) cuDNN's flash forward ran at 431 and its backward at 395 TFLOP/s
# while the same trace's projection GEMMs ran at 650-795 (FlashAttention-2, Dao 2023, reports the
# forward at 50-73% of the A100 peak, the backward lower: softmax and its rescaling are not on
# the tensor cores).
FLASH_VS_GEMM = 0.6
# A fused backward recomputes the scores (Q·Kᵀ) and computes dV, dP, dQ, dK: 5 products where the
# unfused backward ran 4 (dV, dP, dQ, dK) from the saved probabilities.
FLASH_BWD_PRODUCTS = 5.0 / 4.0
# Kernels between two score-path kernels that still belong to the chain when they are no GEMM: the
# .contiguous() copies of q/k/v around the matmuls, which SDPA does not need.
MAX_GAP_KERNELS = 2

# No time gap breaks a chain by default (RF101's max_gap_us can set one). Inside a step, the GPU's
# gap between two chained kernels is the host's time between their launches, which the profiler
# inflates 2-3x with stacks and which the capture's host speed moves: with the 100 µs cut of
# before, the captures of one program (tfm_infer_compile, runs 31-33b) found 9 to 27 chains and
# predicted compile's saving at 12.4-18.5%; without it, 27 chains in each and 17.9-18.9%
# (docs/whatif.md, "A chain is broken by a sync, not by a gap"). What stops torch.compile or a
# fused kernel joining two ops is a blocking call between their launches (a graph break: the host
# waits for the GPU there), which breaks a chain (``_blocking_between_launches``).
MAX_CHAIN_GAP_NS = math.inf

LOSS_OPS = ("aten::_log_softmax", "aten::log_softmax")
MIN_VOCAB = 8_192  # a log_softmax over a last dim this large is a loss over a vocabulary
# A fused / chunked cross-entropy (Liger's, or what Inductor makes of F.cross_entropy) reads the
# bf16 logits once to compute the log-sum-exp and the loss, and once more to write the bf16
# gradient: 3 passes of 2 bytes per logit.
FUSED_CE_BYTES_PER_LOGIT = 6.0
FUSED_CE_BWD_BYTES = 4.0  # of which the backward: read the logits, write the gradient


# -- shared pieces ---------------------------------------------------------------------------------
def achieved_bandwidth(trace: Trace) -> float:
    """Bytes/s the trace's own big memory-bound kernels reach (their bytes over their time, never
    above the datasheet), else ``BANDWIDTH_EFFICIENCY`` of the datasheet bandwidth."""
    roof = roofline_of(trace)
    if roof.peaks is None:
        raise Refused("no GPU peaks for this trace's device (see the roofline section): no bandwidth to model")
    peak = roof.peaks.bytes_per_s
    k = roof.kernels
    big = k[(k["bound"] == "memory").to_numpy() & (k["bytes"].fillna(0).to_numpy() >= BIG_KERNEL_BYTES)]
    dur = float(big["dur_ns"].sum())
    if dur <= 0:
        return BANDWIDTH_EFFICIENCY * peak
    return min(peak, float(big["bytes"].sum()) / dur * 1e9)


@dataclass(frozen=True)
class Group:
    """Kernels (gpu rows, in stream order) replaced by ``launches`` fused kernels lasting ``fused_ns``
    in all, and the host interval of their launching ops that collapses to ``keep_ns`` (no host
    change when ``keep_ns`` is None)."""

    rows: I64
    fused_ns: float
    launches: int = 1
    keep_ns: int | None = None
    host: Region | None = None


def _overrides(groups: Iterable[Group]) -> Overrides:
    dur: dict[int, int] = {}
    delay: dict[int, int] = {}
    regions: list[Region] = []
    for g in groups:
        n = max(1, min(g.launches, len(g.rows)))
        each = max(1, round(g.fused_ns / n))
        dur.update({int(r): each for r in g.rows[:n].tolist()})
        dur.update({int(r): 0 for r in g.rows[n:].tolist()})
        delay.update({int(r): 0 for r in g.rows[n:].tolist()})
        if g.host is not None:
            regions.append(g.host)
    if not dur:
        raise Refused("nothing to fuse")
    return Overrides(gpu_dur_ns=dur, gpu_delay_ns=delay, host_removed=HostTimeMap(regions=tuple(regions)))


def _launch_region(trace: Trace, rows: I64) -> Region | None:
    """The host interval of the ops that launched ``rows`` (one thread: None if they span several),
    kept at ``FUSED_OP_HOST_NS``: the fused op is dispatched and launched once."""
    ops = trace.gpu["op"].to_numpy()[rows]
    ops = ops[ops >= 0]
    if len(ops) < 2:
        return None
    host = trace.host
    at = host.index.get_indexer(ops)
    th = thread_key(host["pid"].to_numpy()[at], host["tid"].to_numpy()[at])
    if len(np.unique(th)) != 1:
        return None
    ts, end = host["ts_ns"].to_numpy()[at], host["end_ns"].to_numpy()[at]
    lo, hi = int(ts.min()), int(end.max())
    if _blocks_between(trace, int(th[0]), lo, hi):
        return None  # a sync between the ops waits for the GPU: collapsing it would drop the wait
    return Region(int(th[0]), lo, hi, FUSED_OP_HOST_NS)


@memoised
def _blocking_starts(trace: Trace) -> dict[int, I64]:
    """Per host thread (``thread_key``), the sorted start times of its blocking runtime calls
    (``BLOCKING_CALLS``: a synchronize, a synchronous copy, ``.item()``'s); once per trace, names
    tested once per distinct name."""
    rt = trace.runtime
    if not len(rt):
        return {}
    codes, categories = name_codes(rt["name"])
    hit = np.array([str(n) in BLOCKING_CALLS for n in categories] + [False], dtype=bool)[codes]
    rows = np.flatnonzero(hit)
    ts = rt["ts_ns"].to_numpy()[rows]
    th = thread_key(rt["pid"].to_numpy()[rows], rt["tid"].to_numpy()[rows])
    return {int(t): np.sort(ts[th == t]) for t in np.unique(th).tolist()}


def _blocks_between(trace: Trace, thread: int, lo: int, hi: int) -> bool:
    """Whether a blocking runtime call (cudaStreamSynchronize, a synchronous copy, ...) starts on
    ``thread`` inside ``[lo, hi)``."""
    starts = _blocking_starts(trace).get(thread)
    return starts is not None and bool(np.searchsorted(starts, hi, side="left") > np.searchsorted(starts, lo))


def first_input(dims_raw: object, types_raw: object) -> tuple[int, int]:
    """(elements, bytes per element) of an op's first input, (0, 4) when not recorded."""
    dims, types = parse_raw(dims_raw), parse_raw(types_raw)
    if not dims or not isinstance(dims[0], list) or not dims[0]:
        return 0, 4
    size = _DTYPE_BYTES.get(str(types[0]) if types else "float", 4)
    return int(math.prod(int(x) for x in dims[0])), size


# -- fused-optimizer -------------------------------------------------------------------------------
def _holding(spans: pd.DataFrame, pid: I64, tid: I64, ts: I64) -> I64:
    """Position in ``spans`` of the span on the same thread holding each time (-1 if none)."""
    out = np.full(len(ts), -1, dtype=np.int64)
    sp_pid, sp_tid = spans["pid"].to_numpy(), spans["tid"].to_numpy()
    start, end = spans["ts_ns"].to_numpy(), spans["end_ns"].to_numpy()
    for i in range(len(spans)):
        hit = (pid == sp_pid[i]) & (tid == sp_tid[i]) & (ts >= start[i]) & (ts <= end[i])
        out[hit & (out < 0)] = i
    return out


def _optimizer_group(trace: Trace, ann: pd.Series, k_rows: I64, op_rows: I64) -> Group | None:
    """One per-parameter optimizer step as a fused update, or None when it is not a per-tensor loop."""
    host = trace.host
    if len(k_rows) < MIN_OPTIMIZER_KERNELS:
        return None
    launching = np.unique(op_rows)
    names = host["name"].astype(str).to_numpy()[host.index.get_indexer(launching)]
    per_name = pd.Series(names).value_counts()
    # One op per parameter tensor runs as often as there are tensors: the most common count among
    # the ops (AdamW's lerp_, addcmul_, sqrt, addcdiv_ run once per tensor; add_ and mul_ twice).
    repeated = per_name[per_name >= 2]
    if not len(repeated):
        return None
    counts = repeated.value_counts()
    params = int(counts[counts == counts.max()].index.min())
    if len(k_rows) / params < 3.0:  # OP201's min_kernels_per_param
        return None
    optimizer = str(ann["name"]).split("#", 1)[1].split(".")[0]
    top = launching[names == repeated[repeated == params].index[0]]
    at = host.index.get_indexer(top)
    dims, types = host["input_dims"].to_numpy()[at], host["input_types"].to_numpy()[at]
    sizes = [first_input(d, t) for d, t in zip(dims, types, strict=True)]
    numel = np.array([n for n, _ in sizes], dtype=np.int64)
    nbytes = float(sum(n * s for n, s in sizes)) * ACCESSES.get(optimizer, 7)
    if not nbytes:  # no shapes: the eager kernels' own bytes are an upper bound; a quarter, as OP201
        fused_ns = float(trace.gpu["dur_ns"].to_numpy()[k_rows].sum()) / 4.0
    else:
        fused_ns = nbytes / achieved_bandwidth(trace) * 1e9
    depth = DEPTH.get(optimizer, 4)
    chunks = int(np.ceil(numel / CHUNK_ELEMENTS).sum())
    launches = max(math.ceil(params / MAX_TENSORS_BY_DEPTH[depth]), math.ceil(chunks / MAX_BLOCKS), 1)
    if nbytes:  # each launch runs its chunks in waves of one block per SM, a block at BLOCK_BYTES_PER_S
        peaks = roofline_of(trace).peaks
        sms = peaks.sm_count if peaks is not None and peaks.sm_count else 132
        chunk_bytes = min(int(numel.max()), CHUNK_ELEMENTS) * nbytes / max(int(numel.sum()), 1)
        waves = math.ceil(math.ceil(chunks / launches) / sms)
        fused_ns = max(fused_ns, launches * waves * chunk_bytes / BLOCK_BYTES_PER_S * 1e9)
    th = int(thread_key(np.array([ann["pid"]]), np.array([ann["tid"]]))[0])
    region = Region(th, int(ann["ts_ns"]), int(ann["end_ns"]), params * FUSED_STEP_NS_PER_TENSOR)
    order = np.argsort(trace.gpu["ts_ns"].to_numpy()[k_rows], kind="stable")
    return Group(k_rows[order], max(fused_ns, launches * LATENCY_FLOOR_NS), launches, host=region)


def optimizer_groups(trace: Trace) -> list[Group]:
    """The per-parameter optimizer steps inside the profiler steps (no ``_foreach_``/``_fused_`` op,
    at least ``MIN_OPTIMIZER_KERNELS`` kernels, 3 or more per parameter tensor), each as a fused update."""
    ann = trace.annotations
    ann = ann[ann["name"].astype(str).str.startswith(OPTIMIZER_STEP).to_numpy()]
    ann = ann[trace.step_of(ann["ts_ns"].to_numpy()) >= 0]
    gpu, host = trace.gpu, trace.host
    rows = np.flatnonzero((gpu["op"].to_numpy() >= 0) & (gpu["launch"].to_numpy() >= 0))
    if not len(ann) or not len(rows):
        return []
    ops = gpu["op"].to_numpy()[rows]
    at = host.index.get_indexer(ops)
    cols = [host[c].to_numpy() for c in ("pid", "tid", "ts_ns")]
    k_ann = _holding(ann, *(c[at] for c in cols))
    is_op = ~host["is_annotation"].to_numpy()
    multi = np.flatnonzero(is_op & host["name"].astype(str).str.contains("|".join(MULTI_TENSOR_MARKS)).to_numpy())
    has_multi = _holding(ann, *(c[multi] for c in cols))
    out = []
    for i in range(len(ann)):
        if (has_multi == i).any():
            continue
        mine = k_ann == i
        g = _optimizer_group(trace, ann.iloc[i], rows[mine], ops[mine])
        if g is not None:
            out.append(g)
    return out


def fused_optimizer(trace: Trace) -> Overrides:
    """Each per-parameter optimizer step as a multi-tensor update: the step's kernels replaced by
    ``multi_tensor_apply`` launches moving the optimizer state once (``ACCESSES`` per element of
    each parameter, at the trace's achieved bandwidth), its host time by the fused call's cost."""
    groups = optimizer_groups(trace)
    if not groups:
        raise Refused("no optimizer step runs per parameter (foreach/fused ops run, or too few kernels)")
    return _overrides(groups)


# -- sdpa ------------------------------------------------------------------------------------------
def score_numels(trace: Trace) -> set[int]:
    """Element counts of materialized attention score matrices (softmax over [..., L, S], L, S ≥
    ``MIN_SEQ``); none when a fused attention op runs."""
    names = trace.ops["name"].astype(str)
    if names.str.contains("|".join(FUSED_ATTENTION)).any():
        return set()
    out: set[int] = set()
    for raw in trace.ops.loc[names.isin(SOFTMAX_OPS).to_numpy(), "input_dims"].unique():
        dims = parse_raw(raw)
        shape = dims[0] if isinstance(dims, list) and dims else None
        if isinstance(shape, list) and len(shape) >= 3 and shape[-1] >= MIN_SEQ and shape[-2] >= MIN_SEQ:
            out.add(int(np.prod(shape)))
    return out


def _gemm_rate(k: pd.DataFrame, exclude: BOOL) -> float:
    """FLOP/s the trace's own compute-bound GEMMs reach (the attention's kernels left out); without
    such GEMMs, the attention's own products (memory-bound on the scores: a lower bound)."""
    gemm = (k["op_class"] == "matmul").to_numpy()
    for pick in (gemm & (k["bound"] == "compute").to_numpy() & ~exclude, gemm):
        dur = float(k["dur_ns"].to_numpy()[pick].sum())
        if dur > 0:
            return float(k["flops"].to_numpy()[pick].sum()) / dur * 1e9
    return 0.0


def attention_groups(trace: Trace) -> list[Group]:
    """The unfused attention chains: runs of kernels on score-sized tensors (consecutive on a stream,
    up to ``MAX_GAP_KERNELS`` non-GEMM kernels between them), each replaced by one flash kernel doing
    the run's matmul FLOPs (×``FLASH_BWD_PRODUCTS`` for a backward run) at ``FLASH_VS_GEMM`` of the
    FLOP/s the trace's own GEMMs reach."""
    scores = score_numels(trace)
    if not scores:
        return []
    k = roofline_of(trace).kernels
    k = k.sort_values(["device", "stream", "ts_ns"], kind="stable")
    cols = ["out_numel", *[f"in_numel_{i}" for i in range(MAX_INPUT_LINKS)]]
    on_scores: BOOL = np.asarray(np.isin(k[cols].to_numpy(), list(scores)).any(axis=1), dtype=bool)
    rate = FLASH_VS_GEMM * _gemm_rate(k, on_scores)
    if rate <= 0:
        return []
    is_gemm = (k["op_class"] == "matmul").to_numpy()
    # A backward run is one launched by the thread that runs the softmax backward (the autograd
    # engine's): a run split by another kernel keeps its direction.
    host = trace.host
    at = host.index.get_indexer(k["op"].to_numpy())
    threads = thread_key(host["pid"].to_numpy()[at], host["tid"].to_numpy()[at])
    bwd_threads = np.unique(threads[k["op_name"].astype(str).str.contains("softmax_backward").to_numpy()])
    softmax_bwd = np.isin(threads, bwd_threads)
    stream = k["stream"].to_numpy()
    step = _step_of_gpu(trace, k["ts_ns"].to_numpy())
    hits = np.flatnonzero(on_scores & (step >= 0))
    out: list[Group] = []
    run: list[int] = []
    for pos in [*hits.tolist(), -1]:
        if run and pos >= 0:
            prev = run[-1]
            between = np.arange(prev + 1, pos)
            joined = (
                pos - prev - 1 <= MAX_GAP_KERNELS
                and stream[pos] == stream[prev]
                and step[pos] == step[prev]
                and not is_gemm[between].any()
            )
            if joined:
                run.extend([*between.tolist(), pos])
                continue
        if run:
            out.extend(_attention_group(trace, k, np.array(run), is_gemm, softmax_bwd, rate))
        run = [pos]
    return out


def _attention_group(
    trace: Trace, k: pd.DataFrame, run: I64, is_gemm: BOOL, softmax_bwd: BOOL, rate: float
) -> list[Group]:
    if not is_gemm[run].any():  # a softmax alone: nothing a flash kernel computes
        return []
    flops = float(k["flops"].to_numpy()[run][is_gemm[run]].sum())
    if softmax_bwd[run].any():
        flops *= FLASH_BWD_PRODUCTS
    rows = k.index.to_numpy()[run].astype(np.int64)
    return [Group(rows, max(flops / rate * 1e9, LATENCY_FLOOR_NS), host=_launch_region(trace, rows))]


def sdpa(trace: Trace) -> Overrides:
    """Each unfused attention chain as one flash-attention kernel (``attention_groups``); the chain's
    eager ops collapse to one dispatch."""
    groups = attention_groups(trace)
    if not groups:
        raise Refused("no attention computed as matmul → softmax → matmul over L×S scores (L, S ≥ 128)")
    return _overrides(groups)


# -- fuse-elementwise ------------------------------------------------------------------------------
def inside_annotation(trace: Trace, op_rows: I64, prefix: str) -> BOOL:
    """Whether each host op lies inside an annotation whose name starts with ``prefix`` (same thread)."""
    out = np.zeros(len(op_rows), dtype=bool)
    ann = trace.annotations
    ann = ann[ann["name"].astype(str).str.startswith(prefix).to_numpy()]
    if not len(ann) or not len(op_rows):
        return out
    host = trace.host
    pid, tid, ts = (host[c].to_numpy()[host.index.get_indexer(op_rows)] for c in ("pid", "tid", "ts_ns"))
    for (p, t), grp in ann.groupby(["pid", "tid"], sort=False):
        sel = np.flatnonzero((pid == p) & (tid == t))
        if not len(sel):
            continue
        g = grp.sort_values("ts_ns")
        starts, ends = g["ts_ns"].to_numpy(), np.maximum.accumulate(g["end_ns"].to_numpy())
        j = np.searchsorted(starts, ts[sel], side="right") - 1
        out[sel] = (j >= 0) & (ts[sel] < ends[np.maximum(j, 0)])
    return out


def fusible_kernels(trace: Trace, k: pd.DataFrame) -> BOOL:
    """The roofline kernels ``k`` a fused kernel would replace, less those another fix owns.

    Fusible op classes that are memory-bound, or latency-bound because they are tiny (roof time
    under the latency floor; kernels starved of SMs are ``low-occupancy``'s, not fusion's).
    Excluded: kernels of ops inside ``Optimizer.*`` annotations (``fused-optimizer`` /
    ``optimizer-not-fused`` own per-parameter optimizer kernels) and, when attention runs unfused,
    the kernels on score-sized tensors (``sdpa`` / ``unfused-attention`` own them).
    """
    small = (k["bound"] == "latency") & (k["roof_time_ns"] < LATENCY_FLOOR_NS)
    ok = k["fusible"].to_numpy(dtype=bool) & ((k["bound"] == "memory") | small).to_numpy()
    ok &= ~inside_annotation(trace, k["op"].to_numpy(), "Optimizer.")
    scores = score_numels(trace)
    if scores:
        cols = ["out_numel", *[f"in_numel_{i}" for i in range(MAX_INPUT_LINKS)]]
        ok &= ~np.isin(k[cols].to_numpy(), list(scores)).any(axis=1)
    return np.asarray(ok, dtype=bool)


_CHAIN_COLUMNS = ["dur_ns", "bytes", "flops", "saved", "links", "kernels", "first_op", "last_out", "fused_bytes"]


def _step_of_gpu(trace: Trace, ts: I64) -> I64:
    """Index of the step whose GPU window holds each kernel start (-1 outside every step)."""
    t = trace.steps.table
    if not len(t):
        return np.zeros(len(ts), dtype=np.int64)
    g = t[t["gpu_start_ns"] >= 0].sort_values("gpu_start_ns")
    starts, ends = g["gpu_start_ns"].to_numpy(), g["gpu_end_ns"].to_numpy()
    i = np.searchsorted(starts, ts, side="right") - 1
    inside = (i >= 0) & (ts < ends[np.maximum(i, 0)]) if len(starts) else np.zeros(len(ts), dtype=bool)
    return np.asarray(np.where(inside, i, -1), dtype=np.int64)


def fusion_chains(trace: Trace, k: pd.DataFrame, max_gap_ns: float) -> pd.DataFrame:
    """Producer → consumer chains of the kernels ``k`` (eligible roofline rows), one row per chain (≥ 2 ops).

    Kernels are taken in stream order among *all* kernels of the window, so a kernel the roofline
    does not model (a GEMM without shapes, a Triton kernel) breaks a chain. Columns: ``dur_ns``,
    ``bytes``, ``flops``, ``fused_bytes`` (bytes less 2 × each intermediate output), ``kernels``,
    ``first_op``; ``attrs["kernel_rows"]`` lists the chained kernels' rows and
    ``attrs["kernel_chain"]`` the chain (index) of each.
    """
    if not len(k):
        return pd.DataFrame(columns=_CHAIN_COLUMNS)
    allk = trace.kernels
    lo, hi = int(k["ts_ns"].min()), int(k["ts_ns"].max()) + 1
    allk = allk[(allk["ts_ns"] >= lo) & (allk["ts_ns"] < hi)]
    order = np.lexsort((allk["ts_ns"].to_numpy(), allk["stream"].to_numpy(), allk["device"].to_numpy()))
    rows = allk.index.to_numpy()[order]
    r = k.reindex(rows)
    ok = r["op"].notna().to_numpy()  # the eligible kernels; every other kernel breaks a chain
    dev, stream = allk["device"].to_numpy()[order], allk["stream"].to_numpy()[order]
    ts, end = allk["ts_ns"].to_numpy()[order], allk["end_ns"].to_numpy()[order]
    op = r["op"].fillna(-1).to_numpy(dtype=np.int64)
    out_numel = r["out_numel"].fillna(0).to_numpy(dtype=np.int64)
    n = len(rows)
    linked = np.zeros(n, dtype=bool)
    if n > 1:
        step = _step_of_gpu(trace, ts)  # a chain is code inside one step: it never spans two
        same = (dev[1:] == dev[:-1]) & (stream[1:] == stream[:-1]) & (ts[1:] - end[:-1] <= max_gap_ns)
        same &= step[1:] == step[:-1]
        same &= ~_blocking_between_launches(trace, rows)
        prev_out = out_numel[:-1]
        feeds = np.zeros(n - 1, dtype=bool)
        for i in range(MAX_INPUT_LINKS):
            feeds |= (r[f"in_numel_{i}"].fillna(-1).to_numpy(dtype=np.int64)[1:] == prev_out) & (prev_out > 1)
        linked[1:] = feeds & (op[1:] != op[:-1])
        cont = same & ok[1:] & ok[:-1] & (feeds | (op[1:] == op[:-1]))
    else:
        cont = np.zeros(0, dtype=bool)
    starts = np.ones(n, dtype=bool)
    starts[1:] = ~cont
    chain = np.cumsum(starts) - 1
    # The intermediate a link saves: the producer's output, written once and read back once.
    saved = np.zeros(n)
    prev_out_bytes = r["out_bytes"].fillna(0.0).to_numpy()
    saved[1:] = np.where(linked[1:] & ~starts[1:], 2.0 * prev_out_bytes[:-1], 0.0)
    df = pd.DataFrame(
        {
            "chain": chain[ok],
            "dur_ns": r["dur_ns"].to_numpy(dtype=np.float64)[ok],
            "bytes": r["bytes"].to_numpy(dtype=np.float64)[ok],
            "flops": r["flops"].to_numpy(dtype=np.float64)[ok],
            "saved": saved[ok],
            "link": (linked & ~starts)[ok],
            "op": op[ok],
            "row": rows[ok],
            "last_out": prev_out_bytes[ok],
        }
    )
    g = df.groupby("chain", sort=False)
    chains = g.agg(
        dur_ns=("dur_ns", "sum"),
        bytes=("bytes", "sum"),
        flops=("flops", "sum"),
        saved=("saved", "sum"),
        links=("link", "sum"),
        kernels=("dur_ns", "size"),
        first_op=("op", "first"),
        last_out=("last_out", "last"),
    )
    chains = chains[chains["links"] > 0]
    chains["fused_bytes"] = np.maximum(chains["bytes"] - chains["saved"], chains["last_out"])
    member = df["chain"].isin(chains.index).to_numpy()
    chains.attrs["kernel_rows"] = df["row"].to_numpy()[member]
    chains.attrs["kernel_chain"] = df["chain"].to_numpy()[member]
    return chains


def _blocking_between_launches(trace: Trace, rows: I64) -> BOOL:
    """For each two consecutive gpu rows of ``rows``: whether a blocking runtime call starts on the
    later kernel's launching thread after the earlier kernel's launch and before the later one's
    (``_blocking_starts``). Rows without a launch record break nothing."""
    out = np.zeros(max(len(rows) - 1, 0), dtype=bool)
    starts = _blocking_starts(trace)
    if len(rows) < 2 or not starts:
        return out
    rt = trace.runtime
    launch = trace.gpu["launch"].to_numpy()[rows]
    prev, nxt = launch[:-1], launch[1:]
    has = np.flatnonzero((prev >= 0) & (nxt >= 0))
    rt_ts = rt["ts_ns"].to_numpy()
    lo, hi = rt_ts[prev[has]], rt_ts[nxt[has]]
    th = thread_key(rt["pid"].to_numpy()[nxt[has]], rt["tid"].to_numpy()[nxt[has]])
    for t, b in starts.items():
        mine = th == t
        out[has[mine]] = np.searchsorted(b, hi[mine], side="left") > np.searchsorted(b, lo[mine], side="right")
    return out


def fused_chain_ns(chains: pd.DataFrame, bytes_per_s: float, flops_per_s: float) -> F64:
    """Each chain's one fused kernel: its fused bytes at ``bytes_per_s``, no faster than its FLOPs
    at ``flops_per_s`` nor than the latency floor of a kernel."""
    return np.asarray(
        np.maximum.reduce(
            [
                chains["fused_bytes"].to_numpy(dtype=np.float64) / bytes_per_s * 1e9,
                chains["flops"].to_numpy(dtype=np.float64) / flops_per_s * 1e9,
                np.full(len(chains), LATENCY_FLOOR_NS),
            ]
        ),
        dtype=np.float64,
    )


def elementwise_chains(trace: Trace) -> pd.DataFrame:
    """The fusible memory-bound chains of the analysis window (``memory-bound`` reports these), with
    ``fused_ns``: one fused kernel's time at the trace's achieved bandwidth."""
    roof = roofline_of(trace)
    if roof.peaks is None:
        raise Refused("no GPU peaks for this trace's device (see the roofline section): no bandwidth to model")
    lo, hi, _ = trace.analysis_window
    k = roof.in_window(lo, hi)
    if not len(k):
        return fusion_chains(trace, k, MAX_CHAIN_GAP_NS)
    chains = fusion_chains(trace, k[fusible_kernels(trace, k)], MAX_CHAIN_GAP_NS)
    fp32 = roof.peaks.flops.get("fp32") or math.inf
    chains["fused_ns"] = fused_chain_ns(chains, achieved_bandwidth(trace), BANDWIDTH_EFFICIENCY * fp32)
    return chains


def fuse_elementwise(trace: Trace) -> Overrides:
    """Each memory-bound chain as one kernel at its fused bytes (inputs read once, the output
    written once), the chain's eager ops collapsed to one dispatch and launch."""
    chains = elementwise_chains(trace)
    if not len(chains):
        raise Refused("no producer → consumer chain of memory-bound kernels")
    rows, which = chains.attrs["kernel_rows"], chains.attrs["kernel_chain"]
    groups = []
    for c, fused in zip(chains.index.tolist(), chains["fused_ns"].tolist(), strict=True):
        mine = np.asarray(rows[which == c], dtype=np.int64)
        mine = mine[np.argsort(trace.gpu["ts_ns"].to_numpy()[mine], kind="stable")]
        groups.append(Group(mine, fused, host=_launch_region(trace, mine)))
    return _overrides(groups)


# -- fused-cross-entropy ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LossChain:
    """The kernels of the loss over a large vocabulary: per step and launching thread (forward,
    backward) one group, with the logits' element count."""

    groups: list[Group]
    logits: int  # elements of the logits (tokens × vocabulary)
    vocab: int
    fp32: bool  # the log_softmax runs on fp32 (the bf16 logits cast up)
    kernel_ns: float  # the chain's kernel time, all steps


def loss_chain(trace: Trace) -> LossChain | None:
    """The cross-entropy over a large vocabulary (``log_softmax`` over a last dim ≥ ``MIN_VOCAB``):
    the memory-bound kernels on logits-sized tensors (the cast to fp32, log_softmax, its backward,
    the zero-filled gradient, the cast back), GEMMs excluded; None without one."""
    ops = trace.ops
    names = ops["name"].astype(str)
    loss = ops[names.isin(LOSS_OPS).to_numpy()]
    best: tuple[int, int, bool] | None = None
    for dims_raw, types_raw in zip(loss["input_dims"].to_numpy(), loss["input_types"].to_numpy(), strict=True):
        dims, types = parse_raw(dims_raw), parse_raw(types_raw)
        shape = dims[0] if isinstance(dims, list) and dims and isinstance(dims[0], list) else None
        if shape and len(shape) >= 2 and shape[-1] >= MIN_VOCAB:
            numel = int(math.prod(shape))
            if best is None or numel > best[0]:
                best = (numel, int(shape[-1]), bool(types) and str(types[0]) == "float")
    if best is None:
        return None
    numel, vocab, fp32 = best
    roof = roofline_of(trace)
    if roof.peaks is None:
        return None
    k = roof.kernels
    cols = ["out_numel", *[f"in_numel_{i}" for i in range(MAX_INPUT_LINKS)]]
    on_logits = np.isin(k[cols].to_numpy(), [numel]).any(axis=1) & (k["op_class"] != "matmul").to_numpy()
    k = k[on_logits & (_step_of_gpu(trace, k["ts_ns"].to_numpy()) >= 0)]
    if not len(k):
        return None
    gpu_ops = k["op"].to_numpy()
    host = trace.host
    at = host.index.get_indexer(gpu_ops)
    th = thread_key(host["pid"].to_numpy()[at], host["tid"].to_numpy()[at])
    step = _step_of_gpu(trace, k["ts_ns"].to_numpy())
    bw = achieved_bandwidth(trace)
    backward = k["op_name"].astype(str).str.contains("backward").to_numpy()
    key = pd.DataFrame(
        {"step": step, "th": th, "row": k.index.to_numpy(), "ts": k["ts_ns"].to_numpy(), "bwd": backward}
    )
    groups = []
    for _, g in key.sort_values("ts", kind="stable").groupby(["step", "th"], sort=False):
        # the forward reads the bf16 logits once (log-sum-exp and loss); the backward reads them
        # again and writes the bf16 gradient
        per_logit = FUSED_CE_BWD_BYTES if g["bwd"].any() else FUSED_CE_BYTES_PER_LOGIT - FUSED_CE_BWD_BYTES
        groups.append(Group(g["row"].to_numpy(dtype=np.int64), max(per_logit * numel / bw * 1e9, LATENCY_FLOOR_NS)))
    return LossChain(groups, numel, vocab, fp32, float(k["dur_ns"].sum()))


def fused_cross_entropy(trace: Trace) -> Overrides:
    """The loss over a large vocabulary as a fused / chunked cross-entropy: its kernels on
    logits-sized tensors replaced by passes over the bf16 logits (``FUSED_CE_BYTES_PER_LOGIT``)
    at the trace's achieved bandwidth."""
    chain = loss_chain(trace)
    if chain is None:
        raise Refused(f"no log_softmax over a vocabulary of {MIN_VOCAB} or more (with shapes)")
    return _overrides(chain.groups)
