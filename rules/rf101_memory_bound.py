"""RF101: memory-bound kernels pass intermediate tensors through device memory (fusion advice)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd

from traceadvisor.rules_api import (
    Capability,
    Finding,
    Rule,
    Severity,
    Trace,
    category_mask,
    evidence_from,
    fmt_ns,
    fmt_time,
    fusible_kernels,
    fusion_chains,
    op_location,
    pct,
    per_step,
    plural,
    replay_basis,
    roofline_of,
    scenario_saving,
    us,
)

_CLASS_WORDS = {
    "elementwise": "pointwise",
    "reduction": "reduction",
    "softmax": "softmax",
    "norm": "normalization",
    "copy": "copy/cast",
    "gather": "gather",
}

RECOMMENDATION = (
    "Fuse the chains: torch.compile the model or function (model = torch.compile(model)); "
    "otherwise use fused kernels ({}) and keep activations in bf16."
)
# Fused kernels to suggest, each with the op-name marks that show it already runs: suggesting
# what the trace shows in use is advice the trace contradicts.
_FUSED_KERNELS = (
    ("F.scaled_dot_product_attention", ("scaled_dot_product", "flash_attention", "efficient_attention")),
    ("fused LayerNorm/RMSNorm", ()),
    ("AdamW(fused=True)", ("_fused_adam",)),
)


@dataclass(frozen=True)
class Options:
    min_saving_pct: float = 1.0  # report only when the replayed saving is at least this share of the step
    max_gap_us: float = math.inf  # kernels further apart on a stream are not one chain (none by default)
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
    input with as many elements as the previous output); any other kernel in between breaks it,
    and so does a blocking call (a synchronize, `.item()`, a synchronous copy) between the two
    launches, where a compiled graph breaks too. The time between two kernels does not: in a step
    it is the host's time between their launches, which the profiler inflates and the capture's
    host speed moves (`max_gap_us` sets a limit; none by default). Kernels other rules own are
    left out: those of ops inside `Optimizer.*` annotations (`optimizer-not-fused`) and, when
    attention runs unfused, those on score-sized tensors (`unfused-attention`). The saving is a
    what-if replay (scenario `fuse-elementwise`, `traceadvisor whatif`, on the chains found
    without a gap limit):
    each chain becomes one kernel moving the chain's bytes less the write and re-read of every
    intermediate tensor at the bandwidth the trace's own big memory-bound kernels reach (no
    faster than its FLOPs or a 3 µs kernel floor), and its eager ops one dispatch; the saving is
    the replayed unprofiled step before minus after, so chains off the critical path (a host-bound
    step) save nothing. The message names the hottest memory-bound ops with their achieved
    bandwidth against the peak.

    ## How to fix
    Compile the code that runs the chain: `model = torch.compile(model)` (or decorate the
    function with `@torch.compile`); Inductor fuses pointwise ops, reductions and normalizations
    into one kernel per chain. Without a compiler, use fused kernels:
    `torch.nn.functional.scaled_dot_product_attention` for attention, fused LayerNorm / RMSNorm
    (`torch.nn.RMSNorm`, Apex or Transformer Engine), `torch.optim.AdamW(..., fused=True)`;
    keep activations in bf16 so each pass moves half the bytes, and avoid `.contiguous()` /
    `.float()` copies between ops.

    ## Options
    - `min_saving_pct`: report only when the replayed saving is at least this share of the
      predicted unprofiled step.
    - `max_gap_us`: kernels further apart than this on a stream are not one chain (default: no
      limit; the scenario's chains are found without one).
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
        opts = self.options
        roof = roofline_of(trace)
        peaks = roof.peaks
        if peaks is None:
            return
        lo, hi, _ = trace.analysis_window
        k = roof.in_window(lo, hi)
        chains = fusion_chains(trace, k[fusible_kernels(trace, k)], opts.max_gap_us * 1000.0) if len(k) else k.iloc[:0]
        if not len(chains):
            return
        replayed = scenario_saving(trace, "fuse-elementwise")
        if not replayed.reaches(opts.min_saving_pct):
            return
        all_k = trace.kernels
        kernel_ns = float(all_k.loc[(all_k["ts_ns"] >= lo) & (all_k["ts_ns"] < hi), "dur_ns"].sum())
        found = _summary(k, chains, kernel_ns, peaks.memory_bandwidth_gbs, opts.top_ops)
        yield self.finding(
            trace,
            message=found.message(),
            recommendation=_recommendation(trace),
            per_step=per_step(replayed),
            basis=replay_basis(
                replayed,
                f"{plural(len(chains), 'producer→consumer chain')} of fusible memory-bound ops, each one fused "
                f"kernel moving {fmt_gb(found.after_gb)} instead of {fmt_gb(found.before_gb)} at the bandwidth the "
                "trace's big kernels reach, its eager ops one dispatch",
            ),
            evidence=evidence_from(all_k.loc[found.in_chain.index], category="kernel"),
            location=op_location(trace, int(chains.at[chains["dur_ns"].idxmax(), "first_op"])),
            data=found.data(replayed.saving_ns),
        )


def fmt_gb(gb: float) -> str:
    """A byte count given in GB, in the unit that keeps it readable (chains of small kernels move MB)."""
    if gb >= 0.1:
        return f"{gb:.2f} GB"
    if gb >= 1e-4:
        return f"{gb * 1e3:.1f} MB"
    return f"{gb * 1e6:.1f} KB"


def _recommendation(trace: Trace) -> str:
    """The fusion advice, less the fused kernels the trace shows already run."""
    return RECOMMENDATION.format(", ".join(text for text, marks in _FUSED_KERNELS if not _runs(trace, marks)))


def _runs(trace: Trace, marks: tuple[str, ...]) -> bool:
    """Whether an op whose name holds one of ``marks`` runs in the trace (never, without marks)."""
    if not marks:
        return False
    pattern = "|".join(marks)
    return bool(category_mask(trace.ops["name"], lambda names: names.str.contains(pattern)).any())


@dataclass(frozen=True)
class Summary:
    """What the finding says about the memory-bound kernels and the chains."""

    mem_ns: float  # memory-bound kernel time in the window
    mem_pct: float  # ... as a share of all kernel time there
    bw: float  # peak memory bandwidth (GB/s)
    chains: int
    in_chain: pd.DataFrame  # the chained kernels
    chain_ns: float
    before_gb: float  # bytes the chains move now
    after_gb: float  # ... and fused
    top: list[dict[str, Any]]  # the hottest memory-bound ops

    def message(self) -> str:
        classes = ", ".join(
            _CLASS_WORDS.get(c, c) for c in self.in_chain.groupby("op_class")["dur_ns"].sum().sort_values().index[::-1]
        )
        chains = (
            f"{plural(self.chains, 'chain')} of {len(self.in_chain)} {classes} kernels "
            f"({fmt_ns(self.chain_ns)}) write intermediate tensors to memory and read them back: "
            f"{fmt_gb(self.before_gb)} moved where fused kernels would move {fmt_gb(self.after_gb)}."
        )
        if self.mem_ns <= 0:
            # No kernel in the window is memory-bound: the chained kernels are too small to reach any
            # roof, and what fusing them saves is their launches and the eager ops' dispatch (host
            # time). Leading with "memory-bound kernels take 0 µs" would contradict the rule's name.
            return (
                f"{chains} None of them reaches the memory roof (each is too small: launch and fixed "
                "costs dominate), so fused they save launches and dispatch, not bandwidth."
            )
        return (
            f"Memory-bound kernels take {fmt_ns(self.mem_ns)} ({self.mem_pct:.0f}% of kernel time "
            f"in the analysis window; peak {self.bw:.0f} GB/s). {chains} Hottest: {_hottest(self.top)}."
        )

    def data(self, saving: float) -> dict[str, object]:
        return {
            "memory_bound_us": us(self.mem_ns),
            "memory_bound_pct": self.mem_pct,
            "chains": self.chains,
            "chain_kernels": len(self.in_chain),
            "chain_us": us(self.chain_ns),
            "saving_us": us(saving),
            "bytes_gb": self.before_gb,
            "fused_bytes_gb": self.after_gb,
            "peak_bandwidth_gbs": self.bw,
            "top_ops": self.top,
        }


def _summary(k: pd.DataFrame, chains: pd.DataFrame, kernel_ns: float, bw: float, top_ops: int) -> Summary:
    mem = k[k["bound"] == "memory"]
    mem_ns = float(mem["dur_ns"].sum())
    return Summary(
        mem_ns=mem_ns,
        mem_pct=pct(mem_ns, kernel_ns),
        bw=bw,
        chains=len(chains),
        in_chain=k.loc[chains.attrs["kernel_rows"]],
        chain_ns=float(chains["dur_ns"].sum()),
        before_gb=float(chains["bytes"].sum()) / 1e9,
        after_gb=float(chains["fused_bytes"].sum()) / 1e9,
        top=_top_ops(mem, bw, top_ops),
    )


def _hottest(top: list[dict[str, Any]]) -> str:
    return (
        "; ".join(
            f"{t['op']} {fmt_time(t['time_us'])} at {t['achieved_gbs']:.0f} GB/s ({t['bw_pct']:.0f}% of "
            "peak" + (", above it: L2-resident or broadcast inputs" if t["bw_pct"] > 100 else "") + ")"
            for t in top
        )
        or "none reaches the memory roof (the chained kernels are too small: launch and fixed costs dominate)"
    )


def _top_ops(mem: pd.DataFrame, bandwidth_gbs: float, n: int) -> list[dict[str, Any]]:
    """The memory-bound ops with the most kernel time, with their achieved bandwidth."""
    if not len(mem):
        return []
    by_op = mem.groupby(mem["op_name"].astype(str))
    g = by_op.agg(dur=("dur_ns", "sum"), nbytes=("bytes", "sum"), count=("op", "size"))
    g = g.sort_values("dur", ascending=False).head(n)
    out: list[dict[str, Any]] = []
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
