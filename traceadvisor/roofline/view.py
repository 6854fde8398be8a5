"""The per-kernel roofline of a trace: FLOPs, bytes, intensity, achieved rates, share of roof, bound.

Every GPU kernel tied to a CPU op (``kernels.op``, see ``trace/links.py``) whose FLOPs and bytes the
op models (``models.py``) can estimate gets a row, except communication kernels (NCCL/RCCL,
``analyses.communication``). Computed once per trace (``of(trace)``, memoised
by ``analyses.cache``) and shared by the report and the rules.

Custom Triton kernels have no aten op to model. A kernel launched under a Triton launch record
(``traceadvisor.analyses.triton_launches``: its launching op, or for records written as user
annotations the record around its launch call) takes its bytes and FLOPs from the record instead
(``models.triton_work``): bytes of the tensor arguments, each counted once, which is a lower
bound on its traffic when it reads an argument more than once and an upper bound when it touches
only part of one; FLOPs only where the kernel declares them. The ``basis`` column says which rows
rest on what (``BASIS_TEXT``). ``Roofline.launches`` places the records themselves, kernels or
not: on a CPU trace (Triton under ``TRITON_INTERPRET=1``) they are all the roofline has.

How the figures are computed:

* An op's work is split across the kernels it launched **in proportion to their durations**:
  kernels of one op share the op's tensors, and the trace says nothing about which kernel did
  which part; splitting by time keeps every kernel's achieved rate equal to the op's, so an op
  is judged as a whole (a 3-kernel cuDNN attention backward is as compute-bound as its main
  kernel).
* Roof time = max(FLOPs / peak FLOP/s, bytes / peak bandwidth): the least time the roofline
  allows. Share of roof = roof time / measured time (1.0 = on the roof); it equals achieved /
  attainable FLOP/s with attainable = min(peak, intensity × bandwidth), and stays defined for
  kernels that do no arithmetic (copies).
* Bound: ``compute`` when the compute term of the roof time is the larger, ``memory`` when the
  bytes term is; ``latency`` when neither roof is reachable: the roof time is under
  ``LATENCY_FLOOR_NS`` or the grid leaves most SMs idle (see below; not judged on ROCm, whose
  traces mix grids in blocks and in work-items, except for Triton kernels whose record gives the
  grid in programs); ``unknown`` without peaks for the kernel's dtype.
* Triton records without declared FLOPs or without tensor dtypes have no compute term: their
  roof is the memory roof only (``peak_tflops`` NaN, bound ``memory`` or ``latency``), so a
  kernel that is in fact compute-bound shows as far below its memory roof.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses import triton_launches
from traceadvisor.analyses.cache import memoised
from traceadvisor.analyses.communication import communication_kernels
from traceadvisor.roofline.models import (
    FUSIBLE_CLASSES,
    MATRIX_CLASSES,
    TRITON_CLASS,
    Work,
    op_work,
    oversized_warning,
    triton_work,
)
from traceadvisor.roofline.peaks import Peaks, resolve_peaks
from traceadvisor.trace.columns import parse_raw
from traceadvisor.trace.device import GpuConfig
from traceadvisor.trace.model import Trace

# A kernel whose roof time is below this cannot reach either roof: its fixed cost dominates.
# That cost is a few µs on NVIDIA GPUs since Volta (launch processing and block dispatch, the
# first DRAM round trip of ~0.5-1 µs, the tail of the last wave: an empty kernel measures 2-3 µs
# in CUPTI), and by Little's law a GPU needs bandwidth × latency ≈ 2-3 MB in flight (H100:
# 3.35 TB/s × ~0.7 µs) before it nears peak bandwidth: a few µs of traffic at the least.
LATENCY_FLOOR_NS = 3_000.0
# A grid with fewer blocks than half the SMs leaves most SMs without work, so neither the
# compute nor the bandwidth peak (both need every SM issuing) is within a factor of two.
MIN_SM_FILL = 0.5
# Kernel names of TF32 tensor-core kernels (cuBLAS/cuDNN "tf32", CUTLASS sm80 "s1688"/"s16816"
# TF32 tiles, hipBLASLt "xf32"): an fp32 product running them is judged against the TF32 peak.
_TF32_KERNEL = re.compile(r"tf32|xf32|s1688gemm|s16816gemm", re.IGNORECASE)
MAX_INPUT_LINKS = 4  # input sizes kept per kernel for producer → consumer links

# What a row's FLOPs and bytes rest on (the ``basis`` column).
BASIS_OP_MODEL = "op-model"
BASIS_TRITON = "triton-record"
BASIS_TRITON_MEMORY = "triton-record-memory-only"
BASIS_TEXT = {
    BASIS_OP_MODEL: (
        "FLOPs and bytes modelled from the launching op's recorded shapes and dtypes "
        "(compulsory traffic: each input read once, each output written once)"
    ),
    BASIS_TRITON: (
        "Triton launch record: bytes of the kernel's tensor arguments, each counted once (a lower bound on "
        "its traffic when it reads an argument more than once, an upper bound when it touches only part of "
        "one); FLOPs as the kernel declares them in launch_metadata; compute roof: the tensor-core peak of "
        "its narrowest tensor dtype (fp32 at the TF32 rate, tl.dot's default)"
    ),
    BASIS_TRITON_MEMORY: (
        "Triton launch record without declared FLOPs or without tensor dtypes: bytes of the kernel's tensor "
        "arguments, each counted once (a lower bound on its traffic when it reads an argument more than once, "
        "an upper bound when it touches only part of one), judged against the memory roof only"
    ),
}

COLUMNS = [
    "name",
    "op",
    "op_name",
    "op_class",
    "dtype",
    "kind",
    "device",
    "stream",
    "ts_ns",
    "dur_ns",
    "end_ns",
    "blocks",
    "flops",
    "bytes",
    "intensity",
    "achieved_tflops",
    "achieved_gbs",
    "peak_tflops",
    "peak_figure",
    "roof_time_ns",
    "roof_share",
    "bound",
    "fusible",
    "basis",
    "out_numel",
    "out_bytes",
    *[f"in_numel_{i}" for i in range(MAX_INPUT_LINKS)],
]


class Roofline:
    """A trace's peaks (or why there are none) and, on first use, its per-kernel roofline table."""

    def __init__(self, trace: Trace, config: GpuConfig | None = None) -> None:
        self._trace = trace
        result = resolve_peaks(trace.device_properties(), config)
        self.peaks: Peaks | None = result.peaks
        self.reason: str = result.reason

    @cached_property
    def kernels(self) -> pd.DataFrame:
        """One row per modelled kernel (index: the kernel's row in ``trace.gpu``); see ``COLUMNS``."""
        return kernel_table(self._trace, self.peaks)

    @cached_property
    def launches(self) -> pd.DataFrame:
        """One row per Triton launch record with bytes (index: the record's ``host`` row); see ``launch_table``."""
        return launch_table(self._trace, self.peaks)

    def in_window(self, lo: int, hi: int) -> pd.DataFrame:
        """Rows of kernels that start inside ``[lo, hi)``."""
        k = self.kernels
        return k[(k["ts_ns"] >= lo) & (k["ts_ns"] < hi)]


@memoised
def of(trace: Trace) -> Roofline:
    """The roofline of a trace under the GPU configuration it was given (``Trace.gpu_config``), once per trace."""
    return Roofline(trace, trace.gpu_config)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in COLUMNS})


def kernel_table(trace: Trace, peaks: Peaks | None) -> pd.DataFrame:
    """Build the per-kernel roofline table (vectorised; the op models run once per distinct op)."""
    k = trace.kernels
    op_col = k["op"].to_numpy()
    # A kernel under a Triton launch record is the record's: its launching op already where the
    # record is an op, the record around its launch call where torch < 2.2 wrote it as an annotation.
    recs = triton_launches.kernels(trace)
    if len(recs):
        op_col = op_col.copy()
        op_col[k.index.get_indexer(recs.index)] = recs["record"].to_numpy()
    # Communication kernels (NCCL/RCCL) get no roofline row: they run on a few SMs by design and
    # their time is mostly waiting for the other ranks, so no FLOP or byte rate says how far they are
    # from a roof (the op models would read a collective's tensors as bytes moved at memory speed).
    keep = (op_col >= 0) & ~k.index.isin(communication_kernels(trace))
    k = k[keep]
    op_rows = op_col[keep]
    if not len(k):
        return _empty()
    uops, inv = np.unique(op_rows, return_inverse=True)
    host = trace.host
    pos = host.index.get_indexer(uops)
    ok = pos >= 0
    if not ok.all():  # a link to a row that is not in the host table: drop those kernels
        keep = ok[inv]
        k, op_rows = k[keep], op_rows[keep]
        uops, inv = np.unique(op_rows, return_inverse=True)
        pos = host.index.get_indexer(uops)
    kname_codes = k["name"].cat.codes.to_numpy()
    _, first_of_op = np.unique(inv, return_index=True)
    first_kernel = kname_codes[first_of_op].astype(np.int64)  # the op's first kernel: dtype hint
    oversized: list[str] = []  # ops whose shapes give sizes beyond int64: left out, with a warning
    models, back = _op_works(host, pos, first_kernel, k["name"].cat.categories, oversized)
    if oversized:
        trace.meta.warnings.append(oversized_warning(oversized))
    modelled = np.array([w is not None for w in models], dtype=bool)[back]
    if not modelled.any():
        return _empty()
    keep = modelled[inv]
    k, inv, op_rows = k[keep], inv[keep], op_rows[keep]
    # Per-kernel index into the distinct models (columns are built once per model, then gathered).
    m = back[inv]
    dur = k["dur_ns"].to_numpy().astype(np.float64)
    # Split each op's work over its kernels by duration (equal shares when all are 0 ns).
    op_dur = np.bincount(inv, weights=dur, minlength=len(uops))
    op_cnt = np.bincount(inv, minlength=len(uops)).astype(np.float64)
    share = np.where(op_dur[inv] > 0, dur / np.where(op_dur[inv] > 0, op_dur[inv], 1.0), 1.0 / op_cnt[inv])
    flops = np.array([w.flops if w else 0.0 for w in models])[m] * share
    nbytes = np.array([w.bytes if w else 0.0 for w in models])[m] * share
    op_class = np.array([w.op_class if w else "" for w in models], dtype=object)[m]
    dtype = np.array([w.dtype if w else "" for w in models], dtype=object)[m]
    kind = np.where(np.isin(op_class, [*MATRIX_CLASSES, TRITON_CLASS]), "matrix", "vector").astype(object)
    out_numel = np.array([w.out_numel if w else 0 for w in models], dtype=np.int64)[m]
    out_bytes = np.array([w.out_bytes if w else 0.0 for w in models])[m]
    ins = np.full((len(models), MAX_INPUT_LINKS), -1, dtype=np.int64)
    for i, w in enumerate(models):
        if w is not None and w.in_numels:
            n = min(MAX_INPUT_LINKS, len(w.in_numels))
            ins[i, :n] = w.in_numels[:n]
    names = np.asarray(host["name"].to_numpy()[pos], dtype=object)
    blocks = (k["grid_x"].to_numpy() * k["grid_y"].to_numpy() * k["grid_z"].to_numpy()).astype(np.int64)
    # ROCm traces give the grid of some kernels in blocks (PyTorch's own launches) and of others
    # in work-items (hipExtModuleLaunchKernel: MIOpen, Tensile), so the block count is not known;
    # a Triton launch record gives it in programs (blocks) on either platform.
    grid_in_blocks = np.full(len(k), trace.platform != "rocm")
    triton = op_class == TRITON_CLASS
    if triton.any():
        fields = [triton_launches.parse(str(n)) for n in names]
        # The row names the kernel, not the launch: its grid and sizes vary from launch to launch.
        names = np.array(
            [n if f is None else triton_launches.PREFIX + f["kernel"] for f, n in zip(fields, names, strict=True)]
        )
        grids = np.array([[-1] * 3 if f is None else [f["grid_x"], f["grid_y"], f["grid_z"]] for f in fields])
        rec_blocks = np.where((grids > 0).all(axis=1), grids.prod(axis=1), -1)[inv].astype(np.int64)
        use = triton & (rec_blocks > 0) & ~grid_in_blocks
        blocks = np.where(use, rec_blocks, blocks)
        grid_in_blocks = grid_in_blocks | use
    basis = np.array([_basis(w) for w in models], dtype=object)[m]
    secs = np.where(dur > 0, dur, np.nan) / 1e9
    df = pd.DataFrame(
        {
            "name": k["name"].to_numpy(),
            "op": op_rows,
            "op_name": names.astype(object)[inv],
            "op_class": op_class,
            "dtype": dtype,
            "kind": kind,
            "device": k["device"].to_numpy(),
            "stream": k["stream"].to_numpy(),
            "ts_ns": k["ts_ns"].to_numpy(),
            "dur_ns": k["dur_ns"].to_numpy(),
            "end_ns": k["end_ns"].to_numpy(),
            "blocks": blocks,
            "flops": flops,
            "bytes": nbytes,
            "intensity": np.where(nbytes > 0, flops / np.where(nbytes > 0, nbytes, 1.0), np.nan),
            "achieved_tflops": flops / secs / 1e12,
            "achieved_gbs": nbytes / secs / 1e9,
            "fusible": np.isin(op_class, list(FUSIBLE_CLASSES)),
            "basis": basis,
            "out_numel": out_numel,
            "out_bytes": out_bytes,
            **{f"in_numel_{i}": ins[m, i] for i in range(MAX_INPUT_LINKS)},
        },
        index=k.index,
    )
    df["name"] = pd.Categorical(df["name"])
    _add_bounds(df, peaks, grid_in_blocks)
    return df[COLUMNS]


LAUNCH_COLUMNS = [
    "kernel",
    "ts_ns",
    "grid_x",
    "grid_y",
    "grid_z",
    "blocks",
    "flops",
    "bytes",
    "intensity",
    "dtype",
    "kind",
    "peak_tflops",
    "peak_figure",
    "roof_time_ns",
    "bound",
    "basis",
]


def launch_table(trace: Trace, peaks: Peaks | None) -> pd.DataFrame:
    """The Triton launch records placed on the roofline by their own figures (no measured time).

    One row per record that has bytes (index: its ``host`` row): the kernel, the record's grid
    (-1: not recorded) and ``blocks``, ``flops`` (NaN: not declared), ``bytes``, ``intensity``,
    the ``dtype`` and ``kind`` of its compute roof, ``peak_tflops``/``peak_figure``, the least time
    the roof allows (``roof_time_ns``), ``bound`` and ``basis``, as in the kernel table. The bound
    needs no measured time: compute or memory is which side of the ridge point the intensity
    lies on, latency a roof time under the floor or a grid that leaves most SMs idle. What a GPU
    kernel achieved (rates, share of roof) is the kernel table's; a CPU trace (``TRITON_INTERPRET``)
    has records but no kernels, and the interpreter's CPU time says nothing about a GPU.
    """
    recs = triton_launches.launches(trace)
    rows: list[Work] = []
    if len(recs):
        works: dict[tuple[int, int, str], Work | None] = {}  # one model per distinct (bytes, flops, types)
        types = trace.host.loc[recs.index, "input_types"].to_numpy()
        got: list[Work | None] = []
        for nbytes, flops, raw in zip(recs["bytes"].to_numpy(), recs["flops"].to_numpy(), types, strict=True):
            key = (int(nbytes), int(flops), raw if isinstance(raw, str) else "")
            if key not in works:
                works[key] = triton_work(key[0], key[1], parse_raw(raw))
            got.append(works[key])
        has = np.array([w is not None for w in got], dtype=bool)
        recs, rows = recs[has], [w for w in got if w is not None]
    if not len(recs):
        return pd.DataFrame({c: [] for c in LAUNCH_COLUMNS})
    flops = np.array([w.flops for w in rows])
    nbytes = np.array([w.bytes for w in rows])
    grid = recs[["grid_x", "grid_y", "grid_z"]].to_numpy()
    df = pd.DataFrame(
        {
            "kernel": recs["kernel"].to_numpy(),
            "name": pd.Categorical(recs["kernel"].to_numpy()),
            "ts_ns": recs["ts_ns"].to_numpy(),
            "grid_x": grid[:, 0],
            "grid_y": grid[:, 1],
            "grid_z": grid[:, 2],
            "blocks": np.where((grid > 0).all(axis=1), grid.prod(axis=1), -1).astype(np.int64),
            "flops": flops,
            "bytes": nbytes,
            "intensity": np.where(nbytes > 0, flops / np.where(nbytes > 0, nbytes, 1.0), np.nan),
            "dtype": np.array([w.dtype for w in rows], dtype=object),
            "kind": np.array([w.kind for w in rows], dtype=object),
            "op_class": TRITON_CLASS,
            "basis": np.array([_basis(w) for w in rows], dtype=object),
            "dur_ns": np.zeros(len(recs)),  # no measured time: no share of roof
        },
        index=recs.index,
    )
    _add_bounds(df, peaks, np.ones(len(df), dtype=bool))  # a record's grid counts programs (blocks)
    return df[LAUNCH_COLUMNS]


def _basis(w: Work | None) -> str:
    if w is None or w.op_class != TRITON_CLASS:
        return BASIS_OP_MODEL
    return BASIS_TRITON if w.dtype and not np.isnan(w.flops) else BASIS_TRITON_MEMORY


def _op_works(
    host: pd.DataFrame, pos: Any, first_kernel: Any, kernel_names: pd.Index, oversized: list[str]
) -> tuple[list[Work | None], npt.NDArray[np.intp]]:
    """The model of each distinct (name, dims, types, concrete inputs, first kernel) op, and for
    each op (``pos``: host positions) the index of its model."""
    name_codes = host["name"].cat.codes.to_numpy()[pos].astype(np.int64)
    parts = [name_codes]
    for col in ("input_dims", "input_types", "concrete_inputs"):
        codes, _ = pd.factorize(host[col].to_numpy()[pos], use_na_sentinel=False)
        parts.append(codes.astype(np.int64))
    parts.append(first_kernel)
    uniq, first_pos, back = _unique_rows(parts)
    host_names = host["name"].cat.categories
    dims_col = host["input_dims"].to_numpy()
    types_col = host["input_types"].to_numpy()
    conc_col = host["concrete_inputs"].to_numpy()
    models: list[Work | None] = []
    for j in range(len(uniq)):
        p = pos[first_pos[j]]
        name = str(host_names[uniq[j, 0]])
        record = triton_launches.parse(name)
        if record is not None:  # a Triton launch record: its own bytes and declared FLOPs
            models.append(triton_work(int(record["bytes"]), int(record["flops"]), parse_raw(types_col[p])))
            continue
        hint = str(kernel_names[uniq[j, 4]]) if uniq[j, 4] >= 0 else ""
        dims, types, concrete = parse_raw(dims_col[p]), parse_raw(types_col[p]), parse_raw(conc_col[p])
        models.append(op_work(name, dims, types, concrete, hint, oversized))
    return models, back


def _unique_rows(
    columns: list[npt.NDArray[np.int64]],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Distinct rows of integer columns in lexicographic order, the first position of each, and
    each position's row: ``np.unique(axis=0)``, which sorts rows as bytes, without that slow sort.

    Each column shifted to start at 0 is one digit of a mixed-radix number whose order is the
    rows' lexicographic order; where the digits do not fit in 63 bits, the row sort it is.
    """
    keys = np.stack(columns, axis=1)
    combined = np.zeros(len(keys), dtype=np.int64)
    capacity = 1
    for col in columns:
        low = int(col.min()) if len(col) else 0
        radix = (int(col.max()) - low + 1) if len(col) else 1
        capacity *= radix
        if capacity >= 2**63:
            uniq, back = np.unique(keys, axis=0, return_inverse=True)
            back = back.reshape(-1)
            _, first_pos = np.unique(back, return_index=True)
            return uniq, first_pos, back
        combined = combined * radix + (col - low)
    _, first_pos, back = np.unique(combined, return_index=True, return_inverse=True)
    return keys[first_pos], first_pos, back.reshape(-1)


def _add_bounds(df: pd.DataFrame, peaks: Peaks | None, grid_in_blocks: npt.NDArray[np.bool_]) -> None:
    """``peak_tflops``, ``peak_figure``, ``roof_time_ns``, ``roof_share`` and ``bound`` of each row.

    ``grid_in_blocks``: rows whose ``blocks`` count blocks (the SM-fill test applies to them).
    """
    n = len(df)
    if peaks is None or not n:
        df["peak_tflops"] = np.full(n, np.nan)
        df["peak_figure"] = np.full(n, "", dtype=object)
        df["roof_time_ns"] = np.full(n, np.nan)
        df["roof_share"] = np.full(n, np.nan)
        df["bound"] = np.full(n, "unknown", dtype=object)
        return
    cats = df["name"].cat.categories
    tf32_cat = np.asarray(pd.Series(cats, dtype=object).str.contains(_TF32_KERNEL).to_numpy(), dtype=bool)
    tf32 = tf32_cat[df["name"].cat.codes.to_numpy()] if len(cats) else np.zeros(n, dtype=bool)
    kind = df["kind"].to_numpy()
    dtype = df["dtype"].to_numpy()
    # Triton's tl.dot computes fp32 operands in TF32 by default (input_precision="tf32").
    tf32 = tf32 | ((df["op_class"].to_numpy() == TRITON_CLASS) & (dtype == "fp32"))
    if "op" in df and tf32.any():
        # The kernels of one op share its work (split by duration: the module docstring), so they
        # share its peak: the layout transposes of a cuDNN TF32 convolution (nchwToNhwcKernel) run
        # at the op's rate, which the fp32 CUDA-core peak put above the roof (108% of it in
        # p12_conv_cl_before, H200 run 21: convolution_backward at 72 TFLOP/s against 67).
        op = df["op"].to_numpy()
        tf32 = tf32 | (np.isin(op, op[tf32]) & (dtype == "fp32"))
    # Rows without a compute term: the memory roof is all there is (see the module docstring).
    memory_only = df["basis"].to_numpy() == BASIS_TRITON_MEMORY
    combo = pd.MultiIndex.from_arrays([kind, dtype, tf32])
    codes, uniq = pd.factorize(combo)
    peak = np.full(len(uniq), np.nan)
    figure = np.empty(len(uniq), dtype=object)
    for j, (kd, dt, t) in enumerate(uniq):
        value, fig = peaks.compute_peak(str(kd), str(dt), bool(t))
        peak[j] = np.nan if value is None else value
        figure[j] = fig
    peak_k = np.where(memory_only, np.nan, peak[codes])
    dur = df["dur_ns"].to_numpy().astype(np.float64)
    compute_ns = np.where(memory_only, 0.0, df["flops"].to_numpy() / peak_k * 1e9)
    memory_ns = df["bytes"].to_numpy() / peaks.bytes_per_s * 1e9
    roof = np.fmax(compute_ns, memory_ns)
    side = np.where((compute_ns >= memory_ns) & ~memory_only, "compute", "memory").astype(object)
    blocks = df["blocks"].to_numpy()
    sm = peaks.sm_count or 0
    few_blocks = (blocks > 0) & (sm > 0) & (blocks < MIN_SM_FILL * sm) & grid_in_blocks
    latency = (roof < LATENCY_FLOOR_NS) | few_blocks
    bound = np.where(latency, "latency", side).astype(object)
    no_roof = np.isnan(peak_k) & ~memory_only
    bound[no_roof] = "unknown"
    df["peak_tflops"] = peak_k / 1e12
    df["peak_figure"] = np.where(memory_only, "", figure[codes])
    df["roof_time_ns"] = np.where(no_roof, np.nan, roof)
    df["roof_share"] = np.where(dur > 0, df["roof_time_ns"].to_numpy() / np.where(dur > 0, dur, 1.0), np.nan)
    df["bound"] = bound
