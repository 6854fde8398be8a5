"""Precision and layout scenarios: bf16 autocast and channels_last convolutions (docs/whatif.md).

``bf16``: the fp32 and TF32 convolution and matrix-product kernels run on the bf16 tensor cores, as
``torch.autocast("cuda", dtype=torch.bfloat16)`` runs them, and the casts autocast adds are paid.
``channels-last``: the layout transposes cuDNN runs around NCHW convolutions are gone, and training
batch norm runs its channels_last kernels (cuDNN's persistent ones, or ATen's under autocast).

Both are graph changes of the replay (``replay.Overrides``). The replay cannot add GPU records or
host events, so a cost autocast adds (a cast kernel and the ops that launch it) is added to the
converted op's first kernel and to that kernel's launch call: the cast runs on the same stream
right before the kernel that consumes it, and on the same host thread right before its launch.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses.cache import memoised
from traceadvisor.roofline.models import MATRIX_CLASSES
from traceadvisor.roofline.peaks import Peaks
from traceadvisor.roofline.view import LATENCY_FLOOR_NS
from traceadvisor.roofline.view import of as roofline_of
from traceadvisor.trace.columns import parse_raw
from traceadvisor.trace.lanes import thread_start_order
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.fusion import BANDWIDTH_EFFICIENCY, BIG_KERNEL_BYTES, first_input
from traceadvisor.whatif.host_time import HostTimeMap, Region, thread_key
from traceadvisor.whatif.refused import Refused
from traceadvisor.whatif.replay import Overrides

I64 = npt.NDArray[np.int64]

# Kernels already on the 16-bit tensor cores (cuBLAS/cuDNN/CUTLASS bf16 and fp16 tiles: "bf16",
# "f16", "h1688"/"h16816", "hmma", and the __nv_bfloat16/__half template arguments): autocast runs.
HALF_KERNEL = re.compile(r"bf16|f16|h1688|h16816|hmma|bfloat16|__half|c10::Half", re.IGNORECASE)
# GEMM and convolution kernels by name, for kernels the roofline cannot model (no record_shapes):
# cuBLAS/cuDNN xmma implicit GEMMs (fprop/dgrad/wgrad), CUTLASS, SIMT SGEMM, gemv, nvjet.
_MATRIX_KERNEL = re.compile(r"gemm|gemv|fprop|dgrad|wgrad|convolve|nvjet|cutlass", re.IGNORECASE)
# Kernels a convolution op launches that do no matrix arithmetic: cuDNN's layout transposes
# (channels-last's business; in p12_conv_bf16_after they run in bf16 at 0.85x their fp32 time, not
# at half) and its workspace initialisation: kept as measured.
_NOT_MATRIX = re.compile(r"nchwToNhwc|nhwcToNchw|init_device_workspace|convertTensor|Memset", re.IGNORECASE)
_FP32_OR_TF32 = re.compile(r"tf32|f32f32|sgemm|ffma|float", re.IGNORECASE)
# cuDNN's layout transposes: with NCHW tensors cuDNN runs its NHWC implicit-GEMM kernels
# ("nhwckrsc_nhwc" in their names) on transposed copies, and transposes results back
# (cudnn::engines_precompiled::nchwToNhwcKernel / nhwcToNchwKernel). channels_last tensors are NHWC
# already: p12_conv_cl_after has none of them.
LAYOUT_KERNEL = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw", re.IGNORECASE)
CONV_OPS = re.compile(r"conv", re.IGNORECASE)
# The convolution kernels' speed on NHWC tensors over NCHW ones: 1.0. The kernels cuDNN picks for
# NCHW fp32/TF32 convolutions on sm80/sm90 are the NHWC kernels themselves (their names end in
# "nhwckrsc_nhwc"): channels_last removes the transposes around them, not work inside them. Not
# fitted on any pair; the NCHW-only SIMT kernels ("nchwkcrs_nchw ... ffma", a few % of the conv
# time in p12_conv_*) are kept as measured for want of a measured NHWC replacement.
NHWC_CONV_RATIO = 1.0

# Training batch norm on channels_last tensors runs other kernels. With cuDNN (input and weight of
# one type): ATen asks for CUDNN_BATCHNORM_SPATIAL_PERSISTENT when a training input is channels_last
# (aten/src/ATen/native/cudnn/BatchNorm.cpp, getCudnnBatchNormMode), CUDNN_BATCHNORM_SPATIAL
# otherwise. Under autocast (bf16 input, fp32 weight: cuDNN is skipped) ATen's own kernels run, with
# separate channels_last variants (aten/src/ATen/native/cuda/Normalization.cuh). The NCHW kernels
# reach 0.1-0.5 of the HBM bandwidth on an H200. Each is replaced by the channels_last kernels that
# do its work. The passes are those of the two-pass algorithm: forward reads x for the statistics,
# reads it again and writes y (3); backward reads x and dy for the reductions, reads them again and
# writes dx (5). Each kernel takes, per byte of its passes, ``memory`` x the time the trace's own big
# elementwise kernels take to stream a byte (the HBM side) plus ``sm_ns_per_byte`` (the SM side:
# the reductions, the per-channel work, which does not follow the memory's bandwidth), the latter
# for 132 SMs and scaled by the trace's SM count (the SM clock is not in the trace; the fits are
# H100 and H200 SXM, both 132 SMs at up to 1,980 MHz). One term alone does not carry over between
# GPUs: fitted on an H200 at its streaming rate only, these kernels were predicted 41% (ATen) and 10%
# (cuDNN) slower than they ran on an H100 (resnet50_bf16_cl and resnet50_cl, run 36), whose HBM
# streams 27% slower while the kernels ran only 12% slower.
FIT_SMS = 132


@dataclass(frozen=True)
class ChannelsLastKernel:
    """A channels_last batch-norm kernel: its name, its passes over the op's input, and its time per
    byte of those passes: ``memory`` x the trace's streaming time per byte plus ``sm_ns_per_byte``
    (at ``FIT_SMS`` SMs)."""

    name: str
    passes: int
    memory: float
    sm_ns_per_byte: float

    def ns(self, nbytes: float, rate: float, sms: int) -> float:
        """Its time for ``nbytes`` per pass at a streaming ``rate`` (bytes/s) on ``sms`` SMs."""
        per_byte = self.memory / rate * 1e9 + self.sm_ns_per_byte * FIT_SMS / sms
        return max(LATENCY_FLOOR_NS, self.passes * nbytes * per_byte)


# Each NCHW training batch-norm kernel (by name) and the channels_last kernels that replace it. Both
# terms fitted on fit pairs alone, on two GPUs (``python bench/channels_last_bn.py``, least squares over
# the captures): cuDNN's persistent kernels (one pair of terms for forward and backward) on
# conv_cl_gpu's after traces (run 23, H200; run 37, H100), ATen's on conv_bf16_cl_gpu's (run 25, H200;
# run 37, H100); the validation pairs (resnet50_cl, resnet50_bf16_cl, conv_cl) are checked there, not
# fitted.
_CUDNN_BN = (0.899, 6.66e-5)  # cuDNN's persistent kernels, forward and backward (one pair of terms)
NCHW_BATCH_NORM: dict[str, tuple[ChannelsLastKernel, ...]] = {
    "bn_fw_tr_1C11": (ChannelsLastKernel("batchnorm_fwtr_nhwc", 3, *_CUDNN_BN),),
    "bn_bw_1C11": (ChannelsLastKernel("batchnorm_bwtr_nhwc", 5, *_CUDNN_BN),),
    "batch_norm_collect_statistics_kernel": (
        ChannelsLastKernel("batch_norm_collect_statistics_channels_last", 1, 1.243, 1.524e-3),
    ),
    "batch_norm_transform_input_kernel": (
        ChannelsLastKernel("batch_norm_transform_input_channels_last", 2, 0.694, 3.05e-4),
    ),
    "batch_norm_backward_kernel": (
        ChannelsLastKernel("batch_norm_backward_reduce_channels_last", 2, 0.971, 3.64e-4),
        ChannelsLastKernel("batch_norm_backward_elemt_channels_last", 3, 0.436, 3.00e-4),
    ),
}
NCHW_BN_KERNEL = re.compile("|".join(NCHW_BATCH_NORM))
BN_OPS = (
    "aten::cudnn_batch_norm",
    "aten::cudnn_batch_norm_backward",
    "aten::native_batch_norm",
    "aten::_native_batch_norm_legit",
    "aten::native_batch_norm_backward",
)

# Bytes per element a cast moves: an fp32 read and a bf16 write (fp32 -> bf16), or back.
CAST_BYTES_PER_ELEMENT = 4 + 2
# The least a kernel takes however small: an empty kernel measures 2-3 µs in CUPTI on NVIDIA GPUs
# (roofline/view.py LATENCY_FLOOR_NS says why).
CAST_KERNEL_FLOOR_NS = 2_000
# A cast (aten::to -> aten::_to_copy -> aten::empty_strided + aten::copy_, one copy kernel) costs the
# host 1.23x what a one-kernel elementwise op does: in p12_conv_bf16_after (a fit pair) aten::to takes
# 24.52 µs against aten::add_'s 19.87 µs (medians, profiler cost taken out: ``_unprofiled_op_ns``).
# The backward cast (the engine evaluating autograd's ToCopyBackward0 node) costs 1.36x a forward
# one there (33.47 µs).
CAST_PER_LEAF_OP = 1.23
BACKWARD_CAST_PER_CAST = 1.36
# One-kernel elementwise ops whose host cost stands for a cast's when the trace has no casts.
_LEAF_OPS = ("aten::add_", "aten::mul_", "aten::add", "aten::mul", "aten::clamp_min_", "aten::fill_", "aten::copy_")
# Matrix ops whose inputs include a parameter autocast casts (index of the weight, and of the bias).
_PARAM_INPUTS = {
    "aten::cudnn_convolution": (1,),
    "aten::convolution": (1, 2),
    "aten::_convolution": (1, 2),
    "aten::addmm": (0, 2),
    "aten::mm": (1,),
    "aten::linear": (1, 2),
}


def _peak(peaks: Peaks, figure: str) -> float:
    value = peaks.flops.get(figure)
    return float(value) if value else float("nan")


def bf16_ratio(trace: Trace) -> tuple[Peaks, float]:
    """The trace's GPU peaks and its bf16 tensor-core FLOP/s; Refused without them."""
    peaks = roofline_of(trace).peaks
    if peaks is None:
        raise Refused("no GPU peaks for this trace's device (see the roofline section): bf16 cannot be scaled")
    bf16 = _peak(peaks, "bf16")
    if not bf16 == bf16:
        raise Refused(f"{peaks.model or peaks.device} has no bf16 tensor cores (sm80 and later have them)")
    return peaks, bf16


def matrix_kernels(trace: Trace) -> tuple[pd.DataFrame, pd.Series]:
    """The trace's convolution and matrix-product kernels (rows of ``trace.kernels``) and, for each,
    whether it already runs in 16-bit (bf16/fp16). The roofline's op class decides where it has the
    kernel's op; the kernel name elsewhere."""
    k = trace.kernels
    rk = roofline_of(trace).kernels
    names = k["name"].astype(str)
    by_name = names.str.contains(_MATRIX_KERNEL)
    modelled = pd.Series(False, index=k.index)
    modelled[rk.index.intersection(k.index)] = True
    cls = rk["op_class"].reindex(k.index)
    matrix = np.where(modelled, cls.isin(list(MATRIX_CLASSES - {"attention"})), True) & by_name
    matrix &= ~names.str.contains(_NOT_MATRIX).to_numpy()
    mk = k[matrix]
    half = mk["name"].astype(str).str.contains(HALF_KERNEL)
    dtype = rk["dtype"].reindex(mk.index).astype(object)
    half |= dtype.isin(["bf16", "fp16"]).to_numpy()
    return mk, half


def _converted_durations(trace: Trace, rows: pd.Index, peaks: Peaks, bf16: float) -> npt.NDArray[np.float64]:
    """Each kernel's duration on the bf16 tensor cores. Where the roofline has the kernel's FLOPs
    and bytes, its time scales as its roof does: max(FLOPs / peak, bytes / bandwidth) with the
    bf16 peak and half the bytes, over the same at its current precision (fp32 CUDA cores or TF32
    tensor cores, the roofline's ``peak_figure``): a compute-bound kernel gains the peak ratio, a
    memory-bound one only the halved bytes. A kernel the roofline calls latency-bound (roof under a
    few µs, or too few blocks) keeps its time: its fixed cost does not shrink with the precision.
    A kernel without FLOPs/bytes (no record_shapes) is taken as compute-bound: an upper bound."""
    k = trace.kernels.loc[rows]
    rk = roofline_of(trace).kernels.reindex(rows)
    dur = k["dur_ns"].to_numpy(dtype=np.float64)
    name = k["name"].astype(str)
    figure = rk["peak_figure"].astype(object).where(rk["peak_figure"].notna(), None)
    guess = np.where(name.str.contains(r"tf32|tensorop|s1688|s16816", case=False), "tf32", "fp32")
    figure = np.where(figure.isna(), guess, figure.astype(str))
    src_peak = np.array([_peak(peaks, str(f)) for f in figure], dtype=np.float64)
    flops = rk["flops"].to_numpy(dtype=np.float64)
    nbytes = rk["bytes"].to_numpy(dtype=np.float64)
    bw = peaks.memory_bandwidth_gbs * 1e9
    t_c, t_m = flops / src_peak, nbytes / bw
    roof = np.fmax(t_c, t_m)
    new_roof = np.fmax(flops / bf16, nbytes / 2.0 / bw)
    modelled = np.isfinite(roof) & (roof > 0)
    scale = np.where(modelled, new_roof / np.where(modelled, roof, 1.0), src_peak / bf16)
    scale = np.where(rk["bound"].astype(object).to_numpy() == "latency", 1.0, scale)
    scale = np.where(np.isfinite(scale), np.clip(scale, 0.0, 1.0), 1.0)
    return np.asarray(dur * scale, dtype=np.float64)


def _unprofiled_op_ns(trace: Trace, names: tuple[str, ...]) -> float:
    """Median host duration of the named ops less the profiler's cost of the events recorded from
    their start to their end on their thread (the op itself, the ops it calls, their runtime calls
    and Python frames, at the cost model's per-event cost, ``profiler_cost.json``). The unprofiled
    replay puts each event's cost at its start, so these are the costs it takes out of the op's
    interval: the trace's own measure of what such an op costs an unprofiled run. NaN when none ran."""
    host = trace.host
    sel = np.flatnonzero(host["name"].astype(str).isin(names).to_numpy() & ~host["is_annotation"].to_numpy())
    if not len(sel):
        return float("nan")
    cost = _profiler_cost_ns()
    op_ts = host["ts_ns"].to_numpy()[sel]
    op_end = op_ts + host["dur_ns"].to_numpy()[sel]
    op_thread = thread_key(host["pid"].to_numpy()[sel], host["tid"].to_numpy()[sel])
    shapes = host["input_dims"].notna().to_numpy()
    ops_cost = np.where(shapes, cost["op_shapes"], cost["op"])
    inside = np.zeros(len(sel), dtype=np.float64)
    for table, per_event in (
        (host, ops_cost),
        (trace.frames, None),
        (trace.runtime, None),
    ):
        if not len(table):
            continue
        c = (
            per_event
            if per_event is not None
            else np.full(len(table), cost["python" if table is trace.frames else "runtime"])
        )
        inside += _cost_within(table, np.asarray(c, dtype=np.float64), op_thread, op_ts, op_end)
    dur = op_end - op_ts
    return float(np.median(np.maximum(dur - inside, 0.0)))


def _cost_within(
    table: pd.DataFrame, cost: npt.NDArray[np.float64], thread: I64, lo: I64, hi: I64
) -> npt.NDArray[np.float64]:
    """Per interval [lo, hi) on ``thread``, the summed cost of ``table``'s events starting in it."""
    keys = thread_key(table["pid"].to_numpy(), table["tid"].to_numpy())
    ts = table["ts_ns"].to_numpy()
    out = np.zeros(len(lo), dtype=np.float64)
    for th in np.unique(thread).tolist():
        mine = np.flatnonzero(keys == th)
        order = mine[np.argsort(ts[mine], kind="stable")]
        cum = np.concatenate(([0.0], np.cumsum(cost[order])))
        at = np.flatnonzero(thread == th)
        a = np.searchsorted(ts[order], lo[at], side="left")
        b = np.searchsorted(ts[order], hi[at], side="left")
        out[at] = cum[b] - cum[a]
    return out


def _profiler_cost_ns() -> dict[str, float]:
    """The profiler's host cost per recorded event kind (``profiler_cost.json``, fitted by
    bench/fit_profiler_cost.py). Read here, not through profiler_cost.py, which imports the
    scenarios module this one is registered in."""
    doc = json.loads(resources.files("traceadvisor.whatif").joinpath("profiler_cost.json").read_text())
    return {k: float(v) for k, v in doc["ns_per_event"].items()}


def cast_host_ns(trace: Trace) -> float:
    """What one forward cast costs the host without the profiler: the trace's own casts where it has
    some (aten::to ops that launched a copy), else ``CAST_PER_LEAF_OP`` times a one-kernel
    elementwise op of the trace; 0 when the trace has neither."""
    ns = _unprofiled_op_ns(trace, ("aten::to",)) if _has_launching_casts(trace) else float("nan")
    if not ns == ns:
        ns = CAST_PER_LEAF_OP * _unprofiled_op_ns(trace, _LEAF_OPS)
    return ns if ns == ns else 0.0


def _has_launching_casts(trace: Trace) -> bool:
    host, rt = trace.host, trace.runtime
    copies = np.flatnonzero((host["name"].astype(str) == "aten::copy_").to_numpy())
    return bool(len(copies)) and bool(np.isin(rt["op"].to_numpy(), copies).any())


def _forward_thread(trace: Trace) -> int | None:
    """The thread running the steps' forward: the one holding the ProfilerStep annotations (the
    backward of CUDA tensors runs on the autograd engine's device thread)."""
    ann = trace.annotations
    step = ann[ann["name"].astype(str).str.startswith("ProfilerStep#")]
    if not len(step):
        return None
    keys = thread_key(step["pid"].to_numpy(), step["tid"].to_numpy())
    values, counts = np.unique(keys, return_counts=True)
    return int(values[np.argmax(counts)])


def _param_numel(name: str, dims_raw: object) -> tuple[int, int]:
    """(casts, elements cast) for the parameters of one forward matrix op: its weight and bias."""
    dims = parse_raw(dims_raw) or []
    casts = numel = 0
    for i in _PARAM_INPUTS.get(name, ()):
        if i < len(dims) and isinstance(dims[i], list) and dims[i]:
            casts += 1
            numel += int(np.prod([int(x) for x in dims[i]]))
    return casts, numel


def bf16(trace: Trace) -> Overrides:
    """fp32/TF32 convolutions and matrix products on the bf16 tensor cores, with autocast's casts.

    Kernel times: ``_converted_durations``. Casts: each forward op's parameters (weight, bias) are
    cast to bf16 every step (autocast's weight cache lives only inside one autocast region, so a
    training step pays them again) and their gradients cast back in the backward; the step's input
    is cast once. Each cast costs a copy kernel (its bytes at the memory bandwidth, at least
    ``CAST_KERNEL_FLOOR_NS``) and the host ops that launch it (``cast_host_ns``; a backward cast
    ``BACKWARD_CAST_PER_CAST`` times that); both are added to the op's first converted kernel and
    its launch. Not modelled: other ops autocast changes (batch norm on bf16 inputs took cuDNN's
    kernels' place with slower native ones in p12_conv_bf16_after; elementwise ops on bf16 move
    half the bytes), so the saving is that of the matrix kernels alone.
    """
    peaks, peak_bf16 = bf16_ratio(trace)
    mk, half = matrix_kernels(trace)
    if not len(mk):
        raise Refused("no convolution or matrix-product kernels")
    dur = mk["dur_ns"].to_numpy(dtype=np.float64)
    half_ns, full_ns = float(dur[half.to_numpy()].sum()), float(dur[~half.to_numpy()].sum())
    if half_ns >= full_ns:
        raise Refused(
            f"autocast already runs: bf16/fp16 kernels hold {half_ns / (half_ns + full_ns):.0%} of the "
            "convolution and matrix-product time"
        )
    cand = mk[~half.to_numpy() & (mk["launch"].to_numpy() >= 0)]
    cand = cand[cand["name"].astype(str).str.contains(_FP32_OR_TF32).to_numpy() | _modelled_fp32(trace, cand.index)]
    if not len(cand):
        raise Refused("no fp32 or TF32 convolution or matrix-product kernel launched in the trace")
    new = _converted_durations(trace, cand.index, peaks, peak_bf16)
    gpu_dur = {int(r): max(1, round(d)) for r, d in zip(cand.index.tolist(), new.tolist(), strict=True)}
    host_dur = _add_casts(trace, cand, gpu_dur, peaks)
    return Overrides(gpu_dur_ns=gpu_dur, host_dur_ns=host_dur)


def _modelled_fp32(trace: Trace, rows: pd.Index) -> npt.NDArray[np.bool_]:
    """Which kernels the roofline judges against the fp32 or TF32 peak (an fp32 op's kernels)."""
    rk = roofline_of(trace).kernels
    return np.asarray(rk["peak_figure"].reindex(rows).isin(["fp32", "tf32"]).to_numpy(), dtype=bool)


def _add_casts(trace: Trace, cand: pd.DataFrame, gpu_dur: dict[int, int], peaks: Peaks) -> dict[int, int]:
    """Add autocast's casts to the first converted kernel of each forward op (``gpu_dur``, in place)
    and to its launch call; returns the launch calls' new durations."""
    fwd = _forward_thread(trace)
    host, rt = trace.host, trace.runtime
    op = cand["op"].to_numpy()
    ok = op >= 0
    if fwd is None or not ok.any():
        return {}
    first = cand[ok].groupby(op[ok]).head(1)  # each op's first converted kernel
    ops = first["op"].to_numpy()
    on_fwd = thread_key(host["pid"].to_numpy()[ops], host["tid"].to_numpy()[ops]) == fwd
    first, ops = first[on_fwd], ops[on_fwd]
    if not len(first):
        return {}
    host_ns = cast_host_ns(trace)
    bw = peaks.memory_bandwidth_gbs * 1e9
    names = host["name"].astype(str).to_numpy()
    dims = host["input_dims"].to_numpy()
    step_starts = trace.steps.table["cpu_start_ns"].to_numpy()
    op_ts = host["ts_ns"].to_numpy()[ops]
    # the first converted op of each step also casts the step's input
    first_of_step = np.zeros(len(ops), dtype=bool)
    for s in step_starts.tolist():
        after = np.flatnonzero(op_ts >= s)
        if len(after):
            first_of_step[after[np.argmin(op_ts[after])]] = True
    rt_dur = (rt["end_ns"] - rt["ts_ns"]).to_numpy()
    out: dict[int, int] = {}
    for r, o, lead in zip(first.index.tolist(), ops.tolist(), first_of_step.tolist(), strict=True):
        casts, numel = _param_numel(names[o], dims[o])
        act_casts, act_numel = (1, _input_numel(dims[o])) if lead else (0, 0)
        gpu_ns = (numel * 2 + act_numel) * CAST_BYTES_PER_ELEMENT / bw * 1e9  # params: to bf16, grads back
        gpu_ns += (2 * casts + act_casts) * CAST_KERNEL_FLOOR_NS
        gpu_dur[int(r)] += round(gpu_ns)
        extra = host_ns * (casts * (1.0 + BACKWARD_CAST_PER_CAST) + act_casts)
        call = int(trace.gpu["launch"].iat[int(r)])
        if extra > 0 and call >= 0:
            out[call] = int(rt_dur[call] + round(extra))
    return out


def _input_numel(dims_raw: object) -> int:
    dims = parse_raw(dims_raw) or []
    if dims and isinstance(dims[0], list) and dims[0]:
        return int(np.prod([int(x) for x in dims[0]]))
    return 0


def layout_transposes(trace: Trace) -> pd.DataFrame:
    """cuDNN's NCHW<->NHWC transpose kernels launched by convolution ops (rows of ``trace.kernels``)."""
    k = trace.kernels
    op = k["op"].to_numpy()
    host_names = trace.host["name"].astype(str).to_numpy()
    by_conv = np.zeros(len(k), dtype=bool)
    by_conv[op >= 0] = pd.Series(host_names[op[op >= 0]]).str.contains(CONV_OPS).to_numpy()
    mask = k["name"].astype(str).str.contains(LAYOUT_KERNEL).to_numpy() & by_conv & (k["launch"].to_numpy() >= 0)
    return k[mask]


def streaming_bandwidth(trace: Trace) -> float:
    """Bytes/s the trace's big elementwise kernels stream at (their bytes over their time), else
    ``BANDWIDTH_EFFICIENCY`` of the datasheet bandwidth; NaN without either."""
    roof = roofline_of(trace)
    k = roof.kernels
    if len(k):
        big = k[(k["op_class"] == "elementwise").to_numpy() & (k["bytes"].fillna(0).to_numpy() >= BIG_KERNEL_BYTES)]
        dur = float(big["dur_ns"].sum())
        if dur > 0:
            return float(big["bytes"].sum()) / dur * 1e9
    return BANDWIDTH_EFFICIENCY * roof.peaks.bytes_per_s if roof.peaks is not None else float("nan")


def trace_sms(trace: Trace) -> int:
    """The SM count of the trace's busiest device (``deviceProperties.numSms``), else ``FIT_SMS``."""
    props = trace.device_properties() or {}
    sms = props.get("numSms")
    return int(sms) if isinstance(sms, int | float) and sms > 0 else FIT_SMS


@memoised
def nhwc_batch_norm_ns(trace: Trace) -> dict[int, int]:
    """The NCHW training batch-norm kernels (rows of ``trace.kernels``) and each one's predicted
    time on channels_last tensors (``NCHW_BATCH_NORM``); empty without them, without the op's
    input shape (record_shapes off) or without a streaming rate. Memoised: the channels-last
    scenario and OP102 both read it."""
    k = trace.kernels
    if not len(k):
        return {}
    op = k["op"].to_numpy()
    matched = k["name"].astype(str).str.extract(f"({NCHW_BN_KERNEL.pattern})", expand=False).to_numpy()
    mask = pd.notna(matched) & (op >= 0)
    if not mask.any():
        return {}
    rate = streaming_bandwidth(trace)
    if not np.isfinite(rate) or rate <= 0:
        return {}
    sms = trace_sms(trace)
    host = trace.host
    names = host["name"].astype(str).to_numpy()
    dims, types = host["input_dims"].to_numpy(), host["input_types"].to_numpy()
    out: dict[int, int] = {}
    for r, o, kernel in zip(k.index[mask].tolist(), op[mask].tolist(), matched[mask].tolist(), strict=True):
        if names[o] not in BN_OPS:
            continue
        numel, size = first_input(dims[o], types[o])
        if numel > 0:
            ns = sum(c.ns(numel * size, rate, sms) for c in NCHW_BATCH_NORM[kernel])
            out[int(r)] = round(ns)
    return out


def _nhwc_conv_kernels(trace: Trace) -> pd.DataFrame:
    """cuDNN's NHWC convolution kernels (implicit GEMMs whose names say nhwc) launched by convolution ops."""
    k = trace.kernels
    names = k["name"].astype(str)
    return k[
        names.str.contains("nhwc", case=False).to_numpy()
        & ~names.str.contains(LAYOUT_KERNEL).to_numpy()
        & names.str.contains(_MATRIX_KERNEL).to_numpy()
        & (k["launch"].to_numpy() >= 0)
    ]


def launch_preparation_ns(trace: Trace, calls: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The host time cuDNN spends setting up each launch in ``calls`` (rows of ``trace.runtime``):
    the gap back to the runtime call before it on its thread, at most the median of those gaps
    where the call before is in the same op.

    Why: one convolution op runs a cuDNN plan of several kernels (transpose in, convolution,
    transpose out), and before each launch cuDNN fills in that kernel's parameters on the host
    (the gap after the previous kernel's launch and error check: median 1.4 µs in run 26's
    p12_conv_cl_before, 2.1 µs in run 23's p12_conv_cl_gpu_before; ``python bench/cudnn_setup.py``).
    Taking a transpose out of the plan takes that set-up with it, not only its launch call: over
    conv_cl's three run 26 captures,
    the NHWC side's convolution ops held 2.5 µs per transpose less host time than the NCHW side's,
    beyond the transposes' launch calls. A gap that reaches back out of the op (22% of them there,
    50-100 µs) or across the plan-building of a second convolution in the same backward op (a tenth
    of the in-op gaps exceed 19 µs) holds work the NHWC side does too, so every gap is capped at the
    median in-op gap: the typical set-up of one kernel in this trace. Nothing is fitted."""
    rt = trace.runtime
    if not len(calls) or not len(rt):
        return np.zeros(len(calls), dtype=np.int64)
    pid, tid, ts, end = (rt[c].to_numpy() for c in ("pid", "tid", "ts_ns", "end_ns"))
    key = thread_key(pid, tid)
    order = thread_start_order(pid, tid, ts, end - ts)
    rank = np.empty(len(rt), dtype=np.int64)
    rank[order] = np.arange(len(rt))
    r = rank[calls]
    prev = order[np.maximum(r - 1, 0)]
    has_prev = (r > 0) & (key[prev] == key[calls])
    gap = np.where(has_prev, np.maximum(ts[calls] - end[prev], 0), 0)
    op = trace.innermost_op_at(pid[calls], tid[calls], ts[calls])
    op_prev = trace.innermost_op_at(pid[prev], tid[prev], ts[prev])
    in_op = has_prev & (op >= 0) & (op_prev == op)
    if not in_op.any():
        return np.zeros(len(calls), dtype=np.int64)
    cap = int(np.median(gap[in_op]))
    return np.minimum(gap, cap).astype(np.int64)


def channels_last(trace: Trace, *, with_set_up: bool = True) -> Overrides:
    """Convolutions on channels_last tensors: cuDNN's layout transposes around them are gone (no
    GPU time, no release delay, and the host time of their launch calls and of cuDNN's set-up of
    each, ``launch_preparation_ns``, collapsed; ``with_set_up=False``: the launch calls alone, the
    model before 2026-12-04, for comparison), and the
    convolution kernels run at ``NHWC_CONV_RATIO`` of their time (1.0: the same NHWC kernels run)."""
    tk = layout_transposes(trace)
    if not len(tk):
        raise Refused("no cuDNN layout transposes (nchwToNhwc/nhwcToNchw) launched by convolutions")
    rt = trace.runtime
    calls = np.unique(tk["launch"].to_numpy())
    threads = thread_key(rt["pid"].to_numpy()[calls], rt["tid"].to_numpy()[calls])
    starts = rt["ts_ns"].to_numpy()[calls]
    if with_set_up:
        starts = starts - launch_preparation_ns(trace, calls)
    regions = tuple(
        Region(int(th), int(s), int(e), 0)
        for th, s, e in zip(
            threads.tolist(),
            starts.tolist(),
            rt["end_ns"].to_numpy()[calls].tolist(),
            strict=True,
        )
    )
    rows = tk.index.tolist()
    conv = _nhwc_conv_kernels(trace)
    dur = (conv["dur_ns"].to_numpy() * NHWC_CONV_RATIO).round().astype(np.int64)
    scaled = {int(r): int(d) for r, d in zip(conv.index.tolist(), dur.tolist(), strict=True)}
    scaled |= nhwc_batch_norm_ns(trace)
    return Overrides(
        gpu_dur_ns=scaled | {int(r): 0 for r in rows},
        gpu_delay_ns={int(r): 0 for r in rows},
        host_removed=HostTimeMap(regions=regions),
    )
