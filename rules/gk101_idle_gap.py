"""GK101: the GPU sits idle inside steps while the host does something else."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

import pandas as pd

from traceadvisor.rules_api import (
    MULTI_TENSOR_MARKS,
    Capability,
    ClaimedIdle,
    Finding,
    IdleCause,
    Location,
    Rule,
    Severity,
    Trace,
    category_mask,
    cause_name,
    event_location,
    evidence_of,
    fmt_ns,
    idle_attribution,
    plural,
    share_of_steps_text,
    unprofiled_idle_cap_ns,
    us,
    worth_reporting,
)

MINE = frozenset({IdleCause.cpu_op, IdleCause.unknown})  # the idle causes this rule claims
GPU_SIDE = "next work already queued (GPU-side wait)"
BASIS = (
    "GPU idle while the host stalled in CPU work or the queued work waited on the GPU side, less the "
    "profiler's own host cost of {} in those gaps (the other causes of idle are other rules')"
)
# How BASIS names the profiler's cost: the fitted per-kind model, or the flat cost a user configured
MODEL_COST = "the events it recorded (the fitted cost of each kind: op, Python frame, runtime call...)"
FLAT_COST = "{:g} µs per event recorded"


@dataclass(frozen=True)
class Options:
    min_gap_us: float = 5.0  # gaps shorter than this are launch latency, not an idle problem
    min_idle_pct: float = 2.0  # report only when the recoverable idle is at least this share of the steps
    # the profiler's host cost per recorded event; None: each event kind's fitted cost (profiler_cost)
    profiler_event_us: float | None = None


class IdleGap(Rule[Options]):
    """The GPU idles inside steps; each gap is attributed to what the host was doing.

    ## Why it matters
    Every microsecond the GPU waits for the host is lost throughput: the step cannot finish
    faster than the host feeds the GPU. Idle time inside the steady state is the first thing to
    remove before tuning kernels.

    ## How it shows up in a trace
    Gaps between the merged busy intervals (kernels, copies, memsets on all streams) of the device
    inside the steps' GPU windows. Each gap gets one primary cause (`idle_breakdown` in the
    report): a synchronization, the DataLoader, a per-tensor optimizer step, launch-bound
    dispatch of small ops, a CPU stall (a host interval over 200 µs without a launch, named by the
    CPU op or region that filled it), launch latency, or a GPU-side wait (the next work was
    already queued). `sync-point`, `data-loader-bound`, `optimizer-not-fused` and
    `launch-overhead` claim their causes; this rule claims CPU stalls and GPU-side waits, so no
    gap is counted twice. The impact is the claimed idle less the profiler's own host cost of the
    events it recorded inside those gaps (each kind at its cost fitted on the GPU pairs, at the
    trace's host speed: an op with shapes, a Python frame and a runtime call cost it different
    amounts; or `profiler_event_us` each where set), which an unprofiled run does not pay, and
    never more than the idle the predicted unprofiled steps leave (steps x (step - GPU busy per
    step)).

    ## How to fix
    Look at the named CPU op or region; the advice follows what it is. Data work (DataLoader,
    collate, `to()`, NumPy/PIL preprocessing) moves to DataLoader workers (`num_workers > 0`,
    `pin_memory=True`). Model compute (`aten::linear`, `aten::conv2d`, `CompiledFunction`, ...)
    cannot move there: cut its host overhead with `torch.compile(model)` or a CUDA graph
    (`mode="reduce-overhead"`; the only advice for a graph already compiled, `CompiledFunction`)
    and keep the launches asynchronous. An optimizer step gets a fused
    or foreach optimizer, unless the trace shows `_fused_`/`_foreach_` kernels already run (where
    only `_foreach_` runs, `fused=True`);
    `zero_grad` gets `set_to_none=True`. For GPU-side
    waits, check the cross-stream dependencies (`cudaStreamWaitEvent`, `wait_stream`) that hold
    the queued work back.

    ## Options
    - `min_gap_us`: gaps shorter than this are not counted (default 5 µs).
    - `min_idle_pct`: report only when the recoverable claimed idle is at least this share of the steps.
    - `profiler_event_us`: a flat host cost per recorded op, annotation or Python frame instead of
      the fitted cost of each kind (default: unset, the fitted costs; `0` reports the raw idle).

    ## References
    - https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html
    - https://hta.readthedocs.io/en/latest/source/features/idle_time_breakdown.html
    """

    code = "GK101"
    name = "idle-gap"
    severity = Severity.medium
    requires = frozenset({Capability.gpu})
    claims = MINE

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        gaps = idle_attribution(trace)
        gaps = gaps[gaps["dur_ns"] >= opts.min_gap_us * 1000]
        if not len(gaps):
            return
        mine = ClaimedIdle.of(gaps[gaps["cause"].isin(MINE)], opts.profiler_event_us, trace)
        mine = replace(mine, recoverable_ns=min(mine.recoverable_ns, unprofiled_idle_cap_ns(trace)))
        if not worth_reporting(trace, mine.recoverable_ns, opts.min_idle_pct):
            return
        by_detail = mine.gaps.groupby("detail")["dur_ns"].sum().sort_values(ascending=False)
        top_name, top_ns = str(by_detail.index[0]), int(by_detail.iloc[0])
        causes = gaps.groupby("cause")["dur_ns"].sum().sort_values(ascending=False)
        breakdown = ", ".join(
            f"{cause_name(str(c))} {fmt_ns(v)}{_owner(self.claimed_by, str(c))}" for c, v in causes.items()
        )
        worst = mine.gaps.nlargest(5, "dur_ns")
        labels = (f"GPU idle: {c}, {d or 'unknown'}" for c, d in zip(worst["cause"], worst["detail"], strict=True))
        total = int(gaps["dur_ns"].sum())
        yield self.finding(
            trace,
            message=(
                f"GPU idle {fmt_ns(total)} in {plural(len(gaps), 'gap')} of {opts.min_gap_us:g} µs or more "
                f"({share_of_steps_text(trace, total)}). {fmt_ns(mine.raw_ns)} of it is not another "
                f"rule's cause (CPU stalls, GPU-side waits), most in {top_name} ({fmt_ns(top_ns)}); about "
                f"{fmt_ns(mine.recoverable_ns)} of that would remain without the profiler. Idle by cause: {breakdown}."
            ),
            recommendation=_recommendation(trace, top_name),
            impact_ns=mine.recoverable_ns,
            basis=BASIS.format(
                MODEL_COST if opts.profiler_event_us is None else FLAT_COST.format(opts.profiler_event_us)
            ),
            evidence=evidence_of(worst, labels, start="start_ns"),
            location=_location(trace, mine.gaps, top_name),
            data={
                "idle_us": us(total),
                "claimed_us": us(mine.raw_ns),
                "recoverable_us": us(mine.recoverable_ns),
                "gaps": len(gaps),
                "top_op": top_name,
                "by_cause_us": {str(c): us(int(v)) for c, v in causes.items()},
            },
        )


def _location(trace: Trace, mine: pd.DataFrame, top_name: str) -> Location | None:
    """The source line of the host op that held the longest gap of the top detail, when the gap
    started (the op may have begun long before)."""
    first = mine[mine["detail"] == top_name].nlargest(1, "dur_ns").iloc[0]
    if first["host_row"] < 0:
        return None
    h = trace.host.loc[int(first["host_row"])]
    return event_location(trace, h, at_ns=max(int(h["ts_ns"]), int(first["start_ns"])))


# What the host work that held the GPU is, from its name (an op, an annotation, or OUTSIDE_OPS).
# Only data work belongs in DataLoader workers: they run the Dataset and collate_fn in other
# processes, so model compute or an optimizer step cannot move there (torch.utils.data docs).
_DATA = re.compile(
    r"dataloader|_next_data|collate|dataset|data_?load|load_?data|fetch_?batch|preprocess|augment"
    r"|^aten::(?:to|_to_copy|pin_memory|_pin_memory|from_file)$|numpy|torchvision\.(?:io|transforms)",
    re.IGNORECASE,
)
_IMAGE = re.compile(r"\bPIL\b|Image\.")  # PIL's names, case-sensitive ("pil" is in "compile")
_OPTIMIZER = re.compile(r"^Optimizer\.|optimizer|^aten::_?(?:adam|sgd|lamb|rmsprop|adagrad)", re.IGNORECASE)
# torch.compile's graphs in a trace: AOTAutograd's CompiledFunction (autograd), Inductor's
# CompiledFxGraph, and the "Torch-Compiled Region" annotation: advising torch.compile there is
# advice the trace contradicts.
_COMPILED = re.compile(r"CompiledFunction|CompiledFxGraph|Torch-Compiled Region")
_ZERO_GRAD = re.compile(r"zero_grad", re.IGNORECASE)
OUTSIDE_OPS = "host (outside any op)"


def _recommendation(trace: Trace, top_name: str) -> str:
    """Advice for the host work that held the GPU, specific to what that work is."""
    if top_name == GPU_SIDE:
        return (
            "The GPU waited with work already queued: check the cross-stream dependencies (cudaStreamWaitEvent, "
            "stream.wait_stream) and collectives that hold it back, and overlap them with independent work."
        )
    if _DATA.search(top_name) or _IMAGE.search(top_name):
        return (
            f"Take {top_name} off the critical path: it is data work, so move it to DataLoader workers "
            "(num_workers > 0, pin_memory=True, persistent_workers=True) and copy batches with "
            "to(device, non_blocking=True), so that it overlaps the GPU's work on the previous batch."
        )
    if _ZERO_GRAD.search(top_name):
        return (
            f"{top_name} holds the GPU idle: use zero_grad(set_to_none=True) (the default since PyTorch 2.0) so it "
            "launches no memset per parameter, or capture the step in a CUDA graph."
        )
    if _OPTIMIZER.search(top_name):
        return _optimizer_advice(trace, top_name)
    if _COMPILED.search(top_name):
        return (
            f"{top_name} already runs compiled (torch.compile) and its host side is still slower than its GPU work: "
            "capture it in CUDA graphs (torch.compile(mode='reduce-overhead')), remove the graph breaks that split it "
            "(torch._dynamo.explain), and keep the launches asynchronous (no .item() or .cpu() in between)."
        )
    if top_name == OUTSIDE_OPS:
        return (
            "The host ran Python between ops (no op recorded) while the GPU idled: move bookkeeping, logging and "
            "metrics out of the step or every N steps, avoid host syncs, and cut per-op host overhead with "
            "torch.compile(model) or CUDA graphs (torch.compile(mode='reduce-overhead'))."
        )
    return (
        f"{top_name} is model compute whose host side is slower than its GPU work: cut per-op host overhead with "
        "torch.compile(model), or capture the step in a CUDA graph (torch.compile(mode='reduce-overhead') or "
        "torch.cuda.graphs) so the host launches it once; keep the launches asynchronous (no .item(), .cpu() or "
        "print of GPU tensors in between) so the host runs ahead of the GPU."
    )


def _optimizer_advice(trace: Trace, top_name: str) -> str:
    """Fused/foreach advice for an optimizer step, unless the trace shows those kernels already run."""
    running = [mark for mark in MULTI_TENSOR_MARKS if _runs(trace, mark)]
    if running == ["_foreach_"]:
        return (
            f"{top_name} holds the GPU idle although it already runs foreach multi-tensor kernels: fused=True "
            "(e.g. AdamW(..., fused=True)) does the whole update in one kernel per group of tensors; or overlap it "
            "with the next step's forward, or capture it in a CUDA graph to cut its host time."
        )
    already = " and ".join(mark.strip("_") for mark in running)
    if already:
        return (
            f"{top_name} holds the GPU idle although it already runs {already} multi-tensor kernels: overlap it with "
            "the next step's forward, run it every N steps (gradient accumulation), or compile it "
            "(torch.compile on the optimizer step) / capture it in a CUDA graph to cut its host time."
        )
    return (
        f"{top_name} holds the GPU idle: use a fused or multi-tensor optimizer (e.g. AdamW(..., fused=True) or "
        "foreach=True), a few kernels for all parameters instead of several per parameter."
    )


def _runs(trace: Trace, mark: str) -> bool:
    """Whether any op whose name holds ``mark`` (``_fused_``, ``_foreach_``) runs in the trace."""
    return bool(category_mask(trace.ops["name"], lambda names: names.str.contains(mark, regex=False)).any())


def _owner(claimed_by: Mapping[str, str | None], cause: str) -> str:
    owner = claimed_by.get(cause)
    return "" if owner == IdleGap.name else f" ({owner or 'unclaimed'})"
