"""What-if scenarios: each a function (trace) -> Overrides of the replay (docs/whatif.md).

A scenario changes the dependency graph the replay runs (``replay.Overrides``); its saving is the
difference of the two replays' step spans. The spans are PROFILED step times: the profiler's own
host cost is still in them (issue 12 item 2 will take it out).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from traceadvisor.analyses.cache import memoised
from traceadvisor.analyses.copies import pinned_rate
from traceadvisor.roofline.view import of as roofline_of
from traceadvisor.trace.cuda_api import BLOCKING_CALLS
from traceadvisor.trace.model import Trace
from traceadvisor.whatif import alignment, batch, fusion, host_stalls, precision
from traceadvisor.whatif.host_time import HostTimeMap, Region, thread_key
from traceadvisor.whatif.refused import Refused
from traceadvisor.whatif.replay import Overrides, Replay

# fp32 GEMM kernels that run on CUDA cores (the kernel families rules/pr101_fp32_matmul.py names:
# cuBLAS/CUTLASS SIMT SGEMM, gemv, sm80 xmma "ffma" kernels, f32f32_f32f32); their TF32 variants
# (f32f32_tf32f32, "tensorop") already use the tensor cores and are left alone.
_FP32_KERNEL = re.compile(r"sgemm|gemmSN|gemv|_ffma_|f32f32_f32f32", re.IGNORECASE)


@dataclass(frozen=True)
class Scenario:
    """A named graph change and the findings (rule names) it answers."""

    name: str
    answers: tuple[str, ...]
    build: Callable[[Trace], Overrides]
    describe: str


def _steps_mask(trace: Trace, ts: np.ndarray) -> np.ndarray:
    """Which host times lie inside a step's CPU window."""
    t = trace.steps.table
    inside = np.zeros(len(ts), dtype=bool)
    for cs, ce in zip(t["cpu_start_ns"].tolist(), t["cpu_end_ns"].tolist(), strict=True):
        inside |= (ts >= cs) & (ts < ce)
    return inside


def no_sync(trace: Trace) -> Overrides:
    """Remove the blocking syncs inside steps: their host wait goes (the call costs its measured
    return path only), the GPU work they waited for stays. Syncs outside the steps (the profiler's
    final cudaDeviceSynchronize when it stops) are kept."""
    rt = trace.runtime
    blocking = rt["name"].astype(str).isin(BLOCKING_CALLS).to_numpy()
    rows = np.flatnonzero(blocking & _steps_mask(trace, rt["ts_ns"].to_numpy()))
    return Overrides(no_wait=frozenset(int(r) for r in rows))


def tf32_ratio(trace: Trace) -> float:
    """TF32 / fp32 FLOP/s of the trace's GPU (datasheet, or a measured profile or configuration,
    as the roofline resolves them): how much faster an fp32 GEMM runs on the tensor cores."""
    peaks = roofline_of(trace).peaks
    if peaks is None:
        raise Refused("no GPU peaks for this trace's device (see the roofline section): tf32 cannot be scaled")
    fp32 = peaks.flops.get("fp32_matrix") or peaks.flops.get("fp32")
    tf32 = peaks.flops.get("tf32")
    if not fp32 or not tf32:
        raise Refused(f"{peaks.model or peaks.device} has no TF32 tensor cores (sm80 and later have them)")
    return tf32 / fp32


def tf32(trace: Trace) -> Overrides:
    """Scale the fp32 GEMM kernels' durations by fp32 / TF32 peak FLOP/s (an upper bound of the
    saving: the kernels are taken as compute-bound at both rates)."""
    ratio = tf32_ratio(trace)
    gpu = trace.gpu
    names = gpu["name"].astype(str)
    rows = np.flatnonzero(names.str.contains(_FP32_KERNEL).to_numpy() & (gpu["launch"].to_numpy() >= 0))
    dur = (gpu["end_ns"].to_numpy() - gpu["ts_ns"].to_numpy())[rows]
    new = np.maximum(np.rint(dur / ratio).astype(np.int64), 1)
    return Overrides(gpu_dur_ns={int(r): int(d) for r, d in zip(rows.tolist(), new.tolist(), strict=True)})


def pinned(trace: Trace) -> Overrides:
    """Pageable copies from pinned memory: each copy takes its bytes at the pinned rate (never longer
    than measured), and its cudaMemcpyAsync returns at once. From pageable memory the driver stages
    the data through a pinned bounce buffer and the call returns only once it has (CUDA runtime API,
    "API synchronization behavior"); from pinned memory the call only enqueues the DMA, so it costs
    what the trace's median cudaLaunchKernel costs. A synchronous cudaMemcpy stays blocking: it
    waits for its shorter copy.

    The fix is pinned memory *and* ``non_blocking=True`` (what pageable-copy advises). A blocking
    host-to-device ``copy_`` from pageable memory ends with a ``cudaStreamSynchronize`` inside the
    same op (ATen's ``copy_kernel_cuda``: ``stream_synchronize`` unless non_blocking), so the host
    waits for each copy before it can enqueue the next; non-blocking, it does not, and the copies
    run back to back. Those syncs no longer wait. A device-to-host copy keeps its sync: the host
    reads what it copied."""
    gpu, rt = trace.gpu, trace.runtime
    launch = gpu["launch"].to_numpy()
    rows = np.flatnonzero(gpu["name"].astype(str).str.contains("Pageable", regex=False).to_numpy() & (launch >= 0))
    if not len(rows):
        return Overrides()
    dur = (gpu["end_ns"] - gpu["ts_ns"]).to_numpy()[rows]
    need = np.rint(gpu["bytes"].fillna(0).to_numpy()[rows] / pinned_rate(trace)[0]).astype(np.int64)
    new = np.maximum(np.minimum(need, dur), 1)
    names = rt["name"].astype(str)
    enqueue = (rt["end_ns"] - rt["ts_ns"]).to_numpy()[(names == "cudaLaunchKernel").to_numpy()]
    cost = int(np.median(enqueue)) if len(enqueue) else 0
    calls = {int(c) for c in launch[rows].tolist() if names.iat[int(c)].endswith("MemcpyAsync")}
    return Overrides(
        gpu_dur_ns={int(r): int(d) for r, d in zip(rows.tolist(), new.tolist(), strict=True)},
        host_dur_ns={c: min(cost, int(rt["end_ns"].iat[c] - rt["ts_ns"].iat[c])) for c in calls},
        no_wait=_copy_op_syncs(trace, rows),
    )


def _copy_op_syncs(trace: Trace, copies: np.ndarray) -> frozenset[int]:
    """The ``cudaStreamSynchronize`` calls inside the same host op as a host-to-device copy of
    ``copies`` (gpu rows), on the same thread: the blocking ``copy_``'s own wait for it."""
    gpu, rt = trace.gpu, trace.runtime
    htod = copies[gpu["name"].iloc[copies].astype(str).str.contains("HtoD", regex=False).to_numpy()]
    if not len(htod) or "op" not in rt:
        return frozenset()
    launch = gpu["launch"].to_numpy()[htod]
    op, pid, tid = rt["op"].to_numpy(), rt["pid"].to_numpy(), rt["tid"].to_numpy()
    owners = {(int(op[c]), int(pid[c]), int(tid[c])) for c in launch.tolist() if op[c] >= 0}
    syncs = np.flatnonzero((rt["name"].astype(str) == "cudaStreamSynchronize").to_numpy() & (op >= 0))
    return frozenset(int(r) for r in syncs.tolist() if (int(op[r]), int(pid[r]), int(tid[r])) in owners)


# Kernels of one cudaGraphLaunch start 0.256 µs after the previous one ends (median; p90 0.29-0.32 µs)
# in p12_storm_after and p12_decode_after (H100, CUDA 13): a graph's nodes are released by the GPU's
# front end, with no host launch and no launch latency between them.
GRAPH_NODE_GAP_NS = 256
# What the profiler adds to each gap between a graph's nodes on the GPU: without it the nodes of
# p12_storm_after (fit) run GRAPH_NODE_PROFILER_NS closer together (the median over its clean runs'
# traces of the cut that meets the measured unprofiled step: ``python bench/fit_graph_gap.py``).
# The trace cannot tell whether the gaps or the kernels themselves lose it; the replay takes it
# out of the gaps, and a captured graph's nodes (the cuda-graphs scenario) run this much closer
# than a profiled graph's.
GRAPH_NODE_PROFILER_NS = 164
# The host cost of launching a captured graph: a cudaGraphLaunch of a straight-line graph costs a
# few µs whatever its size since CUDA 12 ("constant time launch", CUDA 12.? release notes); the
# profiled calls in the pairs are inflated by CUPTI's per-node records (255 µs for 300 nodes).
GRAPH_LAUNCH_NS = 10_000


@dataclass(frozen=True)
class LaunchSegment:
    """The launches of one step and process between two blocking calls: ``rows`` (gpu rows, in
    launch order) launched from host time ``start_ns`` to ``end_ns`` (the last launch call's end)."""

    thread: int
    start_ns: int
    end_ns: int
    rows: np.ndarray


def launch_segments(trace: Trace, exclude: np.ndarray | None = None) -> list[LaunchSegment]:
    """Per step and process, the launches between two blocking calls (a sync splits them, as it
    splits a CUDA graph capture or a torch.compile'd graph) with two or more distinct launches.
    Pageable copies are never in a segment and split segments like syncs (a graph cannot capture
    them). ``exclude``: gpu rows left out (they neither join nor split a segment)."""
    gpu, rt = trace.gpu, trace.runtime
    launch = gpu["launch"].to_numpy()
    rows = np.flatnonzero(launch >= 0)
    if exclude is not None and len(exclude):
        rows = np.setdiff1d(rows, exclude)
    if not len(rows) or not len(trace.steps.table):
        return []
    lrow = launch[rows]
    rt_ts, rt_end = rt["ts_ns"].to_numpy(), rt["end_ns"].to_numpy()
    # per process: the autograd engine's thread launches the backward while the main thread waits
    # in backward(), so one step's segment spans both (host_time.py)
    threads = thread_key(rt["pid"].to_numpy(), rt["tid"].to_numpy()) >> 32 << 32
    names = rt["name"].astype(str)
    pageable = gpu["name"].astype(str).str.contains("Pageable", regex=False).to_numpy()[rows]
    cut_rows = np.union1d(np.flatnonzero(names.isin(BLOCKING_CALLS).to_numpy()), lrow[pageable])
    cut_ts, cut_th = rt_ts[cut_rows], threads[cut_rows]
    rows, lrow = rows[~pageable], lrow[~pageable]
    order = np.lexsort((gpu["ts_ns"].to_numpy()[rows], rt_ts[lrow]))
    rows, lrow = rows[order], lrow[order]
    lts, lth = rt_ts[lrow], threads[lrow]
    out: list[LaunchSegment] = []
    t = trace.steps.table
    for cs, ce in zip(t["cpu_start_ns"].tolist(), t["cpu_end_ns"].tolist(), strict=True):
        in_step = np.flatnonzero((lts >= cs) & (lts < ce))
        for th in np.unique(lth[in_step]).tolist():
            mine = in_step[lth[in_step] == th]
            cuts = np.sort(cut_ts[(cut_th == th) & (cut_ts >= cs) & (cut_ts < ce)])
            segment = np.searchsorted(cuts, lts[mine], side="right")
            for seg in np.unique(segment).tolist():
                part = mine[segment == seg]
                if len(np.unique(lrow[part])) < 2:
                    continue  # one launch: nothing to capture or compile
                out.append(LaunchSegment(int(th), int(lts[part[0]]), int(rt_end[lrow[part[-1]]]), rows[part]))
    return out


@dataclass(frozen=True)
class ThreadRun:
    """Consecutive launches of a segment from one host thread: ``rows`` launched from ``start_ns``
    to ``end_ns``; ``step_thread``: the thread that runs the step (ProfilerStep#N), not the autograd
    engine's."""

    thread: int
    start_ns: int
    end_ns: int
    rows: np.ndarray
    step_thread: bool


def thread_runs(trace: Trace, segments: list[LaunchSegment]) -> list[ThreadRun]:
    """Each segment split where its launches change host thread (in launch order)."""
    rt, launch = trace.runtime, trace.gpu["launch"].to_numpy()
    tid, ts, end = rt["tid"].to_numpy(), rt["ts_ns"].to_numpy(), rt["end_ns"].to_numpy()
    ann = trace.annotations
    step_tids = (
        set(ann.loc[ann["name"].astype(str).str.startswith("ProfilerStep#"), "tid"].tolist()) if len(ann) else set()
    )
    out = []
    for seg in segments:
        lrow = launch[seg.rows]
        lt = tid[lrow]
        cuts = np.flatnonzero(lt[1:] != lt[:-1]) + 1
        for part in np.split(np.arange(len(lrow)), cuts):
            if not len(part):
                continue
            first, last = lrow[part[0]], lrow[part[-1]]
            out.append(
                ThreadRun(seg.thread, int(ts[first]), int(end[last]), seg.rows[part], int(lt[part[0]]) in step_tids)
            )
    return out


def cuda_graphs(trace: Trace) -> Overrides:
    """Capture each step's launches in CUDA graphs: per step and process, the launches
    between two blocking calls (a sync cannot be captured: it splits the graph, as
    torch.compile(mode="reduce-overhead") splits at a graph break) form one graph. The host time
    from the first launch of a graph to the end of its last one shrinks to one graph launch
    (``GRAPH_LAUNCH_NS``): the host no longer runs the captured ops; the graph's GPU records run
    ``GRAPH_NODE_GAP_NS`` apart instead of waiting for their launches. Pageable copies stay eager
    (a graph cannot capture them) and split graphs like syncs."""
    if not (trace.gpu["launch"].to_numpy() >= 0).any() or not len(trace.steps.table):
        raise Refused("no GPU work launched inside the steps")
    segments = launch_segments(trace)
    if not segments:
        raise Refused("no step launches two or more kernels between syncs: nothing to capture")
    regions = [Region(s.thread, s.start_ns, s.end_ns, GRAPH_LAUNCH_NS) for s in segments]
    gap = max(0, GRAPH_NODE_GAP_NS - GRAPH_NODE_PROFILER_NS)
    delays = {int(r): gap for s in segments for r in s.rows[1:].tolist()}
    return Overrides(host_removed=HostTimeMap(regions=tuple(regions)), gpu_delay_ns=delays)


# The host records one call of a torch.compile'd function makes around its graph (Dynamo's region,
# the FX graph's call), whatever their category: a trace holding them already runs compiled code.
COMPILED_REGION_PREFIXES = ("Torch-Compiled Region", "## Call CompiledFxGraph")


@memoised
def runs_compiled(trace: Trace) -> bool:
    """Whether the trace shows torch.compile'd graphs running (``COMPILED_REGION_PREFIXES``); once
    per trace: the compile scenario, the unaligned-gemm rule and the report's step time ask, and
    each answer scans every host record's name."""
    host = trace.host
    return bool(len(host)) and bool(host["name"].astype(str).str.startswith(COMPILED_REGION_PREFIXES).any())


# A torch.compile'd graph's host time on the step's own thread (the forward) per kernel it
# launches, as a share of what the eager ops of the same launches spent per launched kernel
# (profiler cost taken out): every eager op also pays for its module call and Python frames, which
# the compiled wrapper skips (it calls each launcher directly). Fitted by
# bench/fit_compile_launch.py on the fit pairs mlp_compile, tfm_compile (trainers) and
# mlp_infer_compile (inference: forward only), both capture variants of runs 14-16 (the first timed
# with CUPTI detached after each capture), and nothing else.
COMPILED_HOST_PER_LAUNCH = 0.94
# The compiled backward's host time on the autograd engine's threads, as a share of the eager
# backward's: measured, not fitted. fixtures/host_phases_bench.py timed backward() on the host
# without any profiler (H100, 9 interleaved rounds of 40 steps; fixtures/host_phases/):
# compiled / eager 0.80 for mlp_compile and 0.82 for tfm_compile, the fit pairs (gpt_compile, a
# validation pair: 0.71, not used). It replaces a per-launch share fitted on the savings (1.64 x
# the kernels left over those launched, clipped at 1: the whole eager backward kept), which had
# absorbed the model's other errors: with the measured share the compile validation pairs of runs
# 14-18 came out 11 of 15 within 20% of the measured saving, against 8 (docs/whatif.md).
COMPILED_BACKWARD_HOST_SHARE = 0.81
# The memsets eager kernels launch inside a compiled graph (zero-fills before accumulating:
# LayerNorm's weight gradients, split-K GEMMs, embedding backward) go with it: Inductor's
# reductions write their outputs whole (mlp_compile: 17 memsets a step eager, none in its graphs).
# Decided on the two fit pairs: they fit with it at 0.054 (summed squared relative error) against
# 0.080 without (bench/fit_compile_launch.py, and with --keep-memsets).
COMPILED_DROPS_MEMSETS = True


def compiled(trace: Trace) -> Overrides:
    """``torch.compile`` (default mode, no CUDA graphs): on the GPU, what Inductor does that the
    replay models, together: memory-bound chains fused (``fuse-elementwise``), the loss over a large
    vocabulary fused (``fused-cross-entropy``) and unaligned 16-bit products padded (``pad-gemm``:
    Inductor's ``shape_padding``, on by default), and the memsets inside the graphs gone
    (``COMPILED_DROPS_MEMSETS``); whichever finds nothing is left out. On the host,
    per step and process, the launches outside the optimizer between two blocking calls are one
    compiled graph (a sync is a graph break). Each run of its launches from one thread, from the
    run's first launch to its last, keeps, on the step's own thread (the forward),
    ``COMPILED_HOST_PER_LAUNCH`` times the eager host time per launch for each kernel still
    launched (the fused ones are gone), and on the autograd engine's threads (the backward)
    ``COMPILED_BACKWARD_HOST_SHARE`` of its eager host time."""
    if runs_compiled(trace):
        raise Refused("the trace already runs torch.compile'd graphs")
    parts = []
    for build in (fusion.fuse_elementwise, fusion.fused_cross_entropy, alignment.pad_gemm):
        try:
            parts.append(build(trace))
        except Refused:
            continue
    gpu = combine(parts) if parts else Overrides()
    ops = trace.gpu["op"].to_numpy()
    has_op = np.flatnonzero(ops >= 0)
    optimizer = has_op[fusion.inside_annotation(trace, ops[has_op], "Optimizer.")]
    segments = launch_segments(trace, exclude=optimizer)
    if not parts and not segments:
        raise Refused("nothing torch.compile would change that the replay models (no launches to compile)")
    dur, delay = gpu.gpu_dur_ns, gpu.gpu_delay_ns
    if COMPILED_DROPS_MEMSETS:  # the zero-fills of eager kernels inside the graphs gone with them
        memset = trace.gpu["name"].astype(str).str.startswith("Memset").to_numpy()
        fills = [int(r) for seg in segments for r in seg.rows.tolist() if memset[r]]
        dur, delay = dict(dur) | dict.fromkeys(fills, 0), dict(delay) | dict.fromkeys(fills, 0)
    gone = {r for r, d in dur.items() if d == 0}
    regions = []
    for run in thread_runs(trace, segments):
        left = sum(1 for r in run.rows.tolist() if r not in gone)
        if run.step_thread:
            share = min(1.0, COMPILED_HOST_PER_LAUNCH * left / len(run.rows))
        else:
            share = COMPILED_BACKWARD_HOST_SHARE
        regions.append(Region(run.thread, run.start_ns, run.end_ns, 0, keep_share=share))
    return Overrides(gpu_dur_ns=dur, gpu_delay_ns=delay, host_removed=HostTimeMap(regions=tuple(regions)))


SCENARIOS: dict[str, Scenario] = {
    "cuda-graphs": Scenario(
        "cuda-graphs", ("launch-overhead",), cuda_graphs, "each step's launches between syncs replayed from CUDA graphs"
    ),
    "no-sync": Scenario("no-sync", ("sync-point",), no_sync, "blocking syncs inside the steps removed"),
    "tf32": Scenario("tf32", ("fp32-matmul",), tf32, "fp32 GEMM kernels at the TF32 peak rate"),
    "pinned": Scenario("pinned", ("pageable-copy",), pinned, "pageable copies from pinned memory"),
    "bf16": Scenario("bf16", ("mixed-precision",), precision.bf16, "fp32/TF32 convs and matmuls in bf16 autocast"),
    "channels-last": Scenario("channels-last", ("channels-last",), precision.channels_last, "NHWC convolutions"),
    "fused-optimizer": Scenario("fused-optimizer", ("optimizer-not-fused",), fusion.fused_optimizer, "multi-tensor"),
    "sdpa": Scenario("sdpa", ("unfused-attention",), fusion.sdpa, "matmul/softmax/matmul as one flash kernel"),
    "fuse-elementwise": Scenario("fuse-elementwise", ("memory-bound",), fusion.fuse_elementwise, "chains fused"),
    "fused-cross-entropy": Scenario("fused-cross-entropy", ("cross-entropy",), fusion.fused_cross_entropy, "fused CE"),
    "pad-gemm": Scenario(
        "pad-gemm", ("unaligned-gemm",), alignment.pad_gemm, "16-bit GEMMs padded to multiples of 8 (aligned rate)"
    ),
    "compile": Scenario(
        "compile",
        ("memory-bound", "cross-entropy", "unaligned-gemm"),
        compiled,
        "torch.compile: chains and loss fused, GEMMs padded, one host call per kernel",
    ),
    "batch-size": Scenario("batch-size", ("batch-size",), batch.doubled_batch, "the batch doubled (2x the samples)"),
    "data-workers": Scenario(
        "data-workers", ("data-loader-bound",), host_stalls.data_workers, "DataLoader fetches moved to workers"
    ),
}


def combine(parts: list[Overrides]) -> Overrides:
    """One Overrides applying every part's changes (a duration or delay changed twice: the shorter;
    host time removed by several parts: all of it; kernel scales: their product, as only the
    calibrated baseline sets one)."""
    dur: dict[int, int] = {}
    host: dict[int, int] = {}
    delay: dict[int, int] = {}
    removed = HostTimeMap()
    for p in parts:
        for r, d in p.gpu_dur_ns.items():
            dur[r] = min(d, dur.get(r, d))
        for r, d in p.host_dur_ns.items():
            host[r] = min(d, host.get(r, d))
        for r, d in p.gpu_delay_ns.items():
            delay[r] = min(d, delay.get(r, d))
        removed = removed.plus(p.host_removed)
    return Overrides(
        gpu_dur_ns=dur,
        host_dur_ns=host,
        no_wait=frozenset().union(*(p.no_wait for p in parts)),
        no_event_wait=frozenset().union(*(p.no_event_wait for p in parts)),
        host_removed=removed,
        gpu_delay_ns=delay,
        kernel_scale=math.prod(p.kernel_scale for p in parts),
        graph_gap_cut_ns=max((p.graph_gap_cut_ns for p in parts), default=0),
    )


def step_time_ns(r: Replay, measured: bool = False) -> float:
    """The step time of a replay (ns): the mean spacing of consecutive step ends, NaN without steps.

    Not the mean step span: when the loop is GPU-bound the host runs steps ahead (kernel launches
    are asynchronous), so a step's span, from its CPU start to the end of its GPU work, includes
    the GPU backlog of the steps before it and grows step after step (pair_tf32_before: 12.6, 17.6,
    22.7 ms) while the loop completes a step every 5.3 ms. The spacing of the step ends is the rate
    in both regimes (host-bound: the CPU windows). With one step, its span.
    """
    if not r.steps:
        return float("nan")
    if not measured and r.period_ns is not None:
        return r.period_ns
    ends = [s.measured_end_ns if measured else s.replayed_end_ns for s in r.steps]
    if len(ends) == 1:
        s0 = r.steps[0]
        return float(s0.measured_span_ns if measured else s0.replayed_span_ns)
    return (ends[-1] - ends[0]) / (len(ends) - 1)


def parse(names: str) -> list[Scenario]:
    """The scenarios a comma-separated list names; ValueError on an unknown one."""
    out = []
    for n in (x.strip() for x in names.split(",")):
        if n not in SCENARIOS:
            raise ValueError(f"unknown scenario {n!r} (known: {', '.join(SCENARIOS)})")
        out.append(SCENARIOS[n])
    return out
