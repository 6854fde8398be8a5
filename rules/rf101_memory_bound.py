"""RF101: memory-bound kernels pass intermediate tensors through device memory (fusion advice)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceadvisor.rules_api import (
    LATENCY_FLOOR_NS,
    MAX_INPUT_LINKS,
    Capability,
    Evidence,
    Finding,
    Rule,
    Severity,
    Trace,
    category_mask,
    location_of,
    parse_raw,
    roofline_of,
)

_CLASS_WORDS = {
    "elementwise": "pointwise",
    "reduction": "reduction",
    "softmax": "softmax",
    "norm": "normalization",
    "copy": "copy/cast",
    "gather": "gather",
}


@dataclass(frozen=True)
class Options:
    min_saving_pct: float = 1.0  # report only when the fusion saving is at least this share of the steps
    fused_bandwidth_efficiency: float = 0.8  # share of peak bandwidth a fused kernel reaches
    max_gap_us: float = 100.0  # kernels further apart on a stream are not one chain
    top_ops: int = 5  # ops named in the message


class MemoryBound(Rule[Options]):
    """Memory-bound pointwise and normalization kernels write and re-read intermediates a fused kernel keeps on chip.

    ## Why it matters
    A kernel whose arithmetic intensity (FLOPs per byte moved) is below the GPU's ridge point is
    limited by memory bandwidth, not compute: an elementwise op on fp32 does a FLOP per 8 bytes
    while an H100 needs about 20 (fp32) to 300 (bf16 tensor cores) to be compute-bound. In eager
    PyTorch every op of a chain like `x * 2 + 1 → sin → exp → …` is its own kernel that reads
    its input from memory and writes its output back, so a chain of n ops moves the tensor about
    2n times where one fused kernel moves it twice. Fusion is the only way to speed such code up:
    the kernels already run close to peak bandwidth.

    ## How it shows up in a trace
    Needs `record_shapes` and a known GPU (the roofline's peaks). Every kernel tied to an op gets
    FLOPs and bytes from the op's shapes and a bound from the roofline (see the report's roofline
    section). On each stream and inside one step, consecutive kernels of fusible op classes
    (pointwise, reduction, softmax, normalization, copy/cast, gather) that are memory-bound (or
    latency-bound for being tiny) form a chain while each consumes the previous one's output (an
    input with as many elements as the previous output) and starts within `max_gap_us`; any
    other kernel in between breaks it. Kernels other rules own are left out: those of ops inside
    `Optimizer.*` annotations (`optimizer-not-fused`) and, when attention runs unfused, those on
    score-sized tensors (`unfused-attention`). The saving of a chain is its kernel time minus
    the time of one fused kernel: the chain's bytes less the write and re-read of every
    intermediate tensor, at `fused_bandwidth_efficiency` of the peak bandwidth (and no faster
    than its FLOPs at that share of the fp32 peak or a 3 µs kernel floor). The message names the
    hottest memory-bound ops with their achieved bandwidth against the peak.

    ## How to fix
    Compile the code that runs the chain: `model = torch.compile(model)` (or decorate the
    function with `@torch.compile`); Inductor fuses pointwise ops, reductions and normalizations
    into one kernel per chain. Without a compiler, use fused kernels:
    `torch.nn.functional.scaled_dot_product_attention` for attention, fused LayerNorm / RMSNorm
    (`torch.nn.RMSNorm`, Apex or Transformer Engine), `torch.optim.AdamW(..., fused=True)`;
    keep activations in bf16 so each pass moves half the bytes, and avoid `.contiguous()` /
    `.float()` copies between ops.

    ## Options
    - `min_saving_pct`: report only when the estimated fusion saving is at least this share of the steps.
    - `fused_bandwidth_efficiency`: share of the peak memory bandwidth a fused kernel reaches (default 0.8).
    - `max_gap_us`: kernels further apart than this on a stream are not one chain.
    - `top_ops`: how many memory-bound ops the message names.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.compile.html
    - https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html
    - https://docs.nvidia.com/deeplearning/performance/dl-performance-gpu-background/index.html#understand-perf
    - https://people.eecs.berkeley.edu/~kubitron/cs252/handouts/papers/RooflineVyNoYellow.pdf (Roofline model)
    """

    code = "RF101"
    name = "memory-bound"
    severity = Severity.medium
    requires = frozenset({Capability.gpu, Capability.shapes, Capability.peaks})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts: Options = self.options
        roof = roofline_of(trace)
        peaks = roof.peaks
        if peaks is None:
            return
        lo, hi, _ = trace.analysis_window
        k = roof.in_window(lo, hi)
        if not len(k):
            return
        eligible = _eligible(trace, k)
        chains = fusion_chains(trace, k[eligible], opts.max_gap_us * 1000.0)
        if not len(chains):
            return
        fp32_peak = peaks.flops.get("fp32") or np.inf
        eff = opts.fused_bandwidth_efficiency
        fused_ns = np.maximum.reduce(
            [
                chains["fused_bytes"].to_numpy() / (eff * peaks.bytes_per_s) * 1e9,
                chains["flops"].to_numpy() / (eff * fp32_peak) * 1e9,
                np.full(len(chains), LATENCY_FLOOR_NS),
            ]
        )
        chains["saving_ns"] = np.maximum(0.0, chains["dur_ns"].to_numpy() - fused_ns)
        saving = float(chains["saving_ns"].sum())
        if saving < opts.min_saving_pct / 100.0 * trace.analysed_ns:
            return
        mem = k[k["bound"] == "memory"]
        all_k = trace.kernels
        kernel_ns = float(all_k.loc[(all_k["ts_ns"] >= lo) & (all_k["ts_ns"] < hi), "dur_ns"].sum())
        mem_ns = float(mem["dur_ns"].sum())
        top = _top_ops(mem, peaks.memory_bandwidth_gbs, opts.top_ops)
        in_chain = k.loc[chains.attrs["kernel_rows"]]
        classes = ", ".join(
            _CLASS_WORDS.get(c, c) for c in in_chain.groupby("op_class")["dur_ns"].sum().sort_values().index[::-1]
        )
        chain_ns = float(chains["dur_ns"].sum())
        before_gb = float(chains["bytes"].sum()) / 1e9
        after_gb = float(chains["fused_bytes"].sum()) / 1e9
        biggest = chains["saving_ns"].idxmax()
        first_op = int(chains.at[biggest, "first_op"])
        h = trace.host.loc[first_op]
        location = location_of(trace, int(h["pid"]), int(h["tid"]), int(h["ts_ns"]))
        bw = peaks.memory_bandwidth_gbs
        bw_source = _short(peaks.sources.get("memory_bandwidth", ""))
        hottest = (
            "; ".join(
                f"{t['op']} {t['time_us'] / 1e3:.2f} ms at {t['achieved_gbs']:.0f} GB/s ({t['bw_pct']:.0f}% of peak"
                + (", above it: L2-resident or broadcast inputs" if t["bw_pct"] > 100 else "")
                + ")"
                for t in top
            )
            or "none reaches the memory roof (the chained kernels are too small: launch and fixed costs dominate)"
        )
        mem_pct = 100 * mem_ns / kernel_ns if kernel_ns else 0.0
        yield self.finding(
            trace,
            message=(
                f"Memory-bound kernels take {mem_ns / 1e6:.2f} ms ({mem_pct:.0f}% of kernel time; "
                f"peak {bw:.0f} GB/s). {_plural(len(chains), 'chain')} of {len(in_chain)} {classes} kernels "
                f"({chain_ns / 1e6:.2f} ms) write intermediate tensors to memory and read them back: "
                f"{before_gb:.2f} GB moved where fused kernels would move {after_gb:.2f} GB. Hottest: {hottest}."
            ),
            recommendation=(
                "Fuse the chains: torch.compile the model or function (model = torch.compile(model)); "
                "otherwise use fused kernels (F.scaled_dot_product_attention, fused LayerNorm/RMSNorm, "
                "AdamW(fused=True)) and keep activations in bf16."
            ),
            impact_ns=saving,
            basis=(
                f"kernel time of {_plural(len(chains), 'producer→consumer chain')} of fusible memory-bound ops "
                f"minus one fused kernel per chain moving {after_gb:.2f} GB instead of {before_gb:.2f} GB "
                f"at {eff:.0%} of the peak bandwidth ({bw:.0f} GB/s, {bw_source})"
            ),
            evidence=_evidence(trace, in_chain),
            location=location,
            data={
                "memory_bound_us": mem_ns / 1e3,
                "memory_bound_pct": mem_pct,
                "chains": len(chains),
                "chain_kernels": len(in_chain),
                "chain_us": chain_ns / 1e3,
                "saving_us": saving / 1e3,
                "bytes_gb": before_gb,
                "fused_bytes_gb": after_gb,
                "peak_bandwidth_gbs": bw,
                "top_ops": top,
            },
        )


def _eligible(trace: Trace, k: pd.DataFrame) -> np.ndarray:
    """Kernels a fused kernel would replace, less those another rule owns.

    Fusible op classes that are memory-bound, or latency-bound because they are tiny (roof time
    under the latency floor; kernels starved of SMs are ``low-occupancy``'s, not fusion's).
    Excluded: kernels of ops inside ``Optimizer.*`` annotations (``optimizer-not-fused`` owns
    per-parameter optimizer kernels) and, when attention runs unfused (softmax over L×S score
    matrices, L and S ≥ 128, no SDPA op), the ops on score-sized tensors (``unfused-attention``
    owns them: SDPA removes them).
    """
    small = (k["bound"] == "latency") & (k["roof_time_ns"] < LATENCY_FLOOR_NS)
    ok = k["fusible"].to_numpy(dtype=bool) & ((k["bound"] == "memory") | small).to_numpy()
    op_rows = k["op"].to_numpy()
    ok &= ~_inside(trace, op_rows, "Optimizer.")
    scores = _score_numels(trace)
    if scores:
        cols = ["out_numel", *[f"in_numel_{i}" for i in range(MAX_INPUT_LINKS)]]
        on_scores = np.isin(k[cols].to_numpy(), list(scores)).any(axis=1)
        ok &= ~on_scores
    return ok


def _inside(trace: Trace, op_rows: np.ndarray, prefix: str) -> np.ndarray:
    """Whether each host op lies inside an annotation whose name starts with ``prefix`` (same thread)."""
    out = np.zeros(len(op_rows), dtype=bool)
    ann = trace.annotations
    ann = ann[category_mask(ann["name"], lambda names: names.str.startswith(prefix))]
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


_CHAIN_COLUMNS = ["dur_ns", "bytes", "flops", "saved", "links", "kernels", "first_op", "last_out", "fused_bytes"]
_SOFTMAX = {"aten::softmax", "aten::_softmax", "aten::_safe_softmax"}
_FUSED_ATTENTION = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")
_MIN_SEQ = 128


def _score_numels(trace: Trace) -> set[int]:
    """Element counts of materialized attention score matrices (softmax over [..., L, S], L, S ≥ 128)."""
    names = trace.ops["name"]
    if category_mask(names, lambda n: n.str.contains("|".join(_FUSED_ATTENTION))).any():
        return set()
    out: set[int] = set()
    for raw in trace.ops.loc[category_mask(names, lambda n: n.isin(_SOFTMAX)), "input_dims"].unique():
        dims = parse_raw(raw)
        shape = dims[0] if isinstance(dims, list) and dims else None
        if isinstance(shape, list) and len(shape) >= 3 and shape[-1] >= _MIN_SEQ and shape[-2] >= _MIN_SEQ:
            out.add(int(np.prod(shape)))
    return out


def fusion_chains(trace: Trace, k: pd.DataFrame, max_gap_ns: float) -> pd.DataFrame:
    """Producer → consumer chains of the kernels ``k`` (eligible ones), one row per chain (≥ 2 ops).

    Kernels are taken in stream order among *all* kernels of the window, so a kernel the roofline
    does not model (a GEMM without shapes, a Triton kernel) breaks a chain. Columns: ``dur_ns``,
    ``bytes``, ``flops``, ``fused_bytes`` (bytes less 2 × each intermediate output), ``kernels``,
    ``first_op``; ``attrs["kernel_rows"]`` lists the chained kernels' rows.
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
    same = np.zeros(n, dtype=bool)
    linked = np.zeros(n, dtype=bool)
    if n > 1:
        step = _step_of(trace, ts)  # a chain is code inside one step: it never spans two
        same[1:] = (dev[1:] == dev[:-1]) & (stream[1:] == stream[:-1]) & (ts[1:] - end[:-1] <= max_gap_ns)
        same[1:] &= step[1:] == step[:-1]
        prev_out = out_numel[:-1]
        feeds = np.zeros(n - 1, dtype=bool)
        for i in range(MAX_INPUT_LINKS):
            feeds |= (r[f"in_numel_{i}"].fillna(-1).to_numpy(dtype=np.int64)[1:] == prev_out) & (prev_out > 1)
        linked[1:] = feeds & (op[1:] != op[:-1])
        cont = same[1:] & ok[1:] & ok[:-1] & (feeds | (op[1:] == op[:-1]))
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
    chains.attrs["kernel_rows"] = df.loc[df["chain"].isin(chains.index), "row"].to_numpy()
    return chains


def _step_of(trace: Trace, ts: np.ndarray) -> np.ndarray:
    """Index of the step whose GPU window holds each kernel start (-1 outside every step)."""
    t = trace.steps.table
    if not len(t):
        return np.zeros(len(ts), dtype=np.int64)
    g = t[t["gpu_start_ns"] >= 0].sort_values("gpu_start_ns")
    starts, ends = g["gpu_start_ns"].to_numpy(), g["gpu_end_ns"].to_numpy()
    i = np.searchsorted(starts, ts, side="right") - 1
    inside = (i >= 0) & (ts < ends[np.maximum(i, 0)]) if len(starts) else np.zeros(len(ts), dtype=bool)
    return np.where(inside, i, -1)


def _top_ops(mem: pd.DataFrame, bandwidth_gbs: float, n: int) -> list[dict[str, object]]:
    """The memory-bound ops with the most kernel time, with their achieved bandwidth."""
    if not len(mem):
        return []
    by_op = mem.groupby(mem["op_name"].astype(str))
    g = by_op.agg(dur=("dur_ns", "sum"), nbytes=("bytes", "sum"), count=("op", "size"))
    g = g.sort_values("dur", ascending=False).head(n)
    out: list[dict[str, object]] = []
    for op, r in g.iterrows():
        gbs = r["nbytes"] / (r["dur"] / 1e9) / 1e9 if r["dur"] > 0 else 0.0
        out.append(
            {
                "op": str(op),
                "kernels": int(r["count"]),
                "time_us": float(r["dur"]) / 1e3,
                "achieved_gbs": float(gbs),
                "bw_pct": 100.0 * gbs / bandwidth_gbs,
            }
        )
    return out


def _evidence(trace: Trace, rows: pd.DataFrame) -> list[Evidence]:
    k = trace.kernels.loc[rows.index]
    top = k.nlargest(5, "dur_ns")
    out = []
    for r in top.itertuples():
        out.append(
            Evidence(
                name=str(r.name),
                ts_us=int(r.ts_ns) / 1000.0,
                dur_us=int(r.dur_ns) / 1000.0,
                stream=int(r.stream) if int(r.stream) >= 0 else None,
                correlation=int(r.correlation) if int(r.correlation) >= 0 else None,
                category="kernel",
            )
        )
    return out


def _short(source: str) -> str:
    """``datasheet: NVIDIA H100 … datasheet (…), https://…`` → ``datasheet``."""
    return source.split(":", 1)[0] if source else "unknown source"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
