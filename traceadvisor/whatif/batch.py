"""What-if scenario ``batch-size``: the batch doubled (docs/whatif.md, "batch-size").

A larger batch changes the GPU work, not the host's: each op is still dispatched once per step and
launches the same kernels (PyTorch's dispatch and launch cost does not depend on tensor sizes), so
every host event keeps its measured time and only GPU records that do per-sample work grow. The
replayed step then holds twice the samples; the figure is the time per sample, before
(step / samples) against after (step' / 2 samples).

Which GPU records grow: every record launched inside a step except

* those launched inside ``Optimizer.step#`` and ``Optimizer.zero_grad#`` (the annotations PyTorch's
  optimizer writes around step() and zero_grad()): per-parameter work (the update, grad zeroing)
  whose size is the model's, not the batch's;
* communication kernels (``analyses.communication``): data-parallel gradient all-reduces move the
  gradients, whose size is the model's.

How much one grows: its time is a fixed part (``FIXED_NS``: launch processing and the tail of a
kernel, which an empty kernel shows) plus a variable part that does the work. Doubled work doubles
the variable part unless the kernel was short of parallelism:

* wave quantisation: a grid smaller than one full wave (the blocks all SMs can hold at once, from
  the kernel's registers, shared memory and threads per block, as the CUDA occupancy calculator
  counts them) leaves block slots idle; the blocks a doubled batch adds first fill those slots,
  at no extra time (``_wave_growth``). A grid of at least one wave grows by 2x;
* the roofline bounds that gain: the doubled work cannot run faster than ``COMPUTE_EFFICIENCY``
  (or ``MEMORY_EFFICIENCY``) of the roof the roofline gives for the kernel's FLOPs and bytes
  (``roofline.view``), so a kernel already near its roof grows by ~2x whatever its grid;
* the variable part never more than doubles (a bigger problem never runs less efficiently).

So a GEMM far below the tensor-core peak on a partial wave, or a latency-bound kernel, takes less
than 2x; a full-wave GEMM or a bandwidth-bound elementwise kernel on a full grid takes ~2x.
Nothing is fitted on a batch pair: the constants are datasheet or CUPTI facts (see each).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses.communication import communication_kernels
from traceadvisor.roofline.view import of as roofline_of
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.refused import Refused
from traceadvisor.whatif.replay import Overrides

F64 = npt.NDArray[np.float64]

# How many times the batch grows.
FACTOR = 2
# Fixed part of a GPU record's time: an empty kernel measures 2-3 µs in CUPTI on NVIDIA GPUs since
# Volta (roofline/view.py LATENCY_FLOOR_NS); the low end, so that no growth is hidden in it.
FIXED_NS = 2_000
# Share of the roof a large kernel reaches: cuBLAS bf16/fp16 GEMMs reach ~70% of the H100's dense
# tensor-core peak (the 989 TFLOP/s datasheet figure assumes boost clocks no GEMM sustains); a
# streaming kernel ~85% of the HBM bandwidth (STREAM-like copies on A100/H100: 1.7/2.8-3.0 TB/s of
# 2.0/3.35).
COMPUTE_EFFICIENCY = 0.70
MEMORY_EFFICIENCY = 0.85
# Resident blocks per SM at most (CUDA C Programming Guide, "Technical Specifications per Compute
# Capability": 32 on 5.x-8.0 and 9.0, 16 on 8.6/8.7, 24 on 8.9).
_MAX_BLOCKS = {(8, 6): 16, (8, 7): 16, (8, 9): 24}
MAX_BLOCKS_PER_SM = 32
# PyTorch's optimizer annotations: per-parameter work inside them does not scale with the batch.
OPTIMIZER_MARKS = ("Optimizer.step#", "Optimizer.zero_grad#")


def in_marks(trace: Trace, ts: npt.NDArray[np.int64], marks: tuple[str, ...]) -> npt.NDArray[np.bool_]:
    """Which host times lie inside an annotation whose name starts with one of ``marks``."""
    ann = trace.annotations
    names = ann["name"].astype(str)
    mine = ann[names.str.startswith(marks).to_numpy()]
    inside = np.zeros(len(ts), dtype=bool)
    for s, e in zip(mine["ts_ns"].tolist(), mine["end_ns"].tolist(), strict=True):
        inside |= (ts >= s) & (ts <= e)
    return inside


def batch_rows(trace: Trace) -> npt.NDArray[np.int64]:
    """GPU rows whose work grows with the batch: launched inside a step, outside the optimizer's
    annotations, not communication."""
    gpu, rt = trace.gpu, trace.runtime
    launch = gpu["launch"].to_numpy()
    rows = np.flatnonzero(launch >= 0)
    lts = rt["ts_ns"].to_numpy()[launch[rows]]
    t = trace.steps.table
    in_step = np.zeros(len(rows), dtype=bool)
    for cs, ce in zip(t["cpu_start_ns"].tolist(), t["cpu_end_ns"].tolist(), strict=True):
        in_step |= (lts >= cs) & (lts < ce)
    keep = in_step & ~in_marks(trace, lts, OPTIMIZER_MARKS) & ~gpu.index[rows].isin(communication_kernels(trace))
    out: npt.NDArray[np.int64] = rows[keep].astype(np.int64)
    return out


def resident_blocks(gpu: pd.DataFrame, rows: npt.NDArray[np.int64], props: dict[str, object]) -> F64:
    """Blocks of each kernel one SM holds at once (the occupancy calculator's limits: threads,
    registers, shared memory, the per-SM block limit); NaN where the trace lacks the launch shape."""
    threads = (gpu["block_x"] * gpu["block_y"] * gpu["block_z"]).to_numpy()[rows].astype(np.float64)
    regs = gpu["registers"].to_numpy()[rows].astype(np.float64)
    smem = gpu["shared_mem"].to_numpy()[rows].astype(np.float64)

    def prop(key: str) -> float:
        v = props.get(key)
        return float(v) if isinstance(v, int | float) and v > 0 else np.nan

    cc = (props.get("computeMajor"), props.get("computeMinor"))
    limit = float(_MAX_BLOCKS.get(cc, MAX_BLOCKS_PER_SM))  # type: ignore[arg-type]
    with np.errstate(divide="ignore", invalid="ignore"):
        by_threads = np.floor(prop("maxThreadsPerMultiprocessor") / threads)
        by_regs = np.where(regs > 0, np.floor(prop("regsPerMultiprocessor") / (regs * threads)), limit)
        by_smem = np.where(smem > 0, np.floor(prop("sharedMemPerMultiprocessor") / smem), limit)
    out = np.fmin(np.fmin(by_threads, by_regs), np.fmin(by_smem, limit))
    out[~(threads > 0)] = np.nan
    slots: F64 = np.maximum(out, 1.0)
    return slots


def _wave_growth(blocks: F64, slots: F64) -> F64:
    """Growth of a kernel's variable time when its grid grows ``FACTOR``-fold: the waves it needs
    (at least one: a partial wave takes as long as its blocks, which run concurrently) after over
    before. 2 (``FACTOR``) where the grid or the slots are unknown."""
    with np.errstate(divide="ignore", invalid="ignore"):
        before = np.maximum(blocks / slots, 1.0)
        after = np.maximum(FACTOR * blocks / slots, 1.0)
        growth = after / before
    return np.where(np.isfinite(growth) & (blocks > 0), growth, float(FACTOR))


def _roof_growth(trace: Trace, rows: npt.NDArray[np.int64], var: F64) -> F64:
    """The least growth of each kernel's variable time the roofline allows: ``FACTOR`` x its roof
    time at a realistic share of the roof, over its variable time now (0 where not modelled)."""
    rk = roofline_of(trace).kernels
    pos = rk.index.get_indexer(trace.gpu.index[rows])
    ok = pos >= 0
    roof = np.zeros(len(rows))
    roof[ok] = np.nan_to_num(rk["roof_time_ns"].to_numpy(dtype=np.float64)[pos[ok]], nan=0.0)
    bound = np.full(len(rows), "", dtype=object)
    bound[ok] = rk["bound"].to_numpy()[pos[ok]]
    eff = np.where(bound == "compute", COMPUTE_EFFICIENCY, MEMORY_EFFICIENCY)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(var > 0, FACTOR * roof / eff / var, 0.0)


def scaled_durations(trace: Trace) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(gpu rows, their durations at the doubled batch, ns)."""
    rows = batch_rows(trace)
    if not len(rows):
        raise Refused("no GPU work launched inside the steps outside the optimizer: nothing grows with the batch")
    gpu = trace.gpu
    dur = (gpu["end_ns"] - gpu["ts_ns"]).to_numpy()[rows].astype(np.float64)
    var = np.maximum(dur - FIXED_NS, 0.0)
    props = trace.device_properties() or {}
    sms = float(props.get("numSms") or 0)
    blocks = (gpu["grid_x"] * gpu["grid_y"] * gpu["grid_z"]).to_numpy()[rows].astype(np.float64)
    slots = resident_blocks(gpu, rows, props) * sms if sms > 0 else np.full(len(rows), np.nan)
    growth = np.maximum(_wave_growth(blocks, slots), _roof_growth(trace, rows, var))
    growth = np.clip(growth, 1.0, float(FACTOR))
    new = np.rint(dur - var + var * growth).astype(np.int64)
    return rows, np.maximum(new, 1)


def doubled_batch(trace: Trace) -> Overrides:
    """The batch doubled: batch-scaled GPU records lengthened, host time unchanged."""
    rows, new = scaled_durations(trace)
    return Overrides(gpu_dur_ns={int(r): int(d) for r, d in zip(rows.tolist(), new.tolist(), strict=True)})
