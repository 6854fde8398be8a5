"""DS102: communication that moves data while nothing else runs (exposed transfer)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceadvisor.rules_api import Finding, IdleCause, RankRule, RankRun, fmt_ns, pct

BASIS = (
    "an upper bound: the exposed transfer per step (mean over ranks) if all of it overlapped with "
    "compute; the data still has to move, so only the part that finds compute to hide behind is saved"
)
# DDP's default bucket size (torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25)).
DDP_DEFAULT_BUCKET_MB = 25.0
_FSDP_OPS = ("all_gather", "reduce_scatter")
_MOE_OPS = ("all_to_all", "all_to_allv")


@dataclass(frozen=True)
class Options:
    min_share_pct: float = 5.0  # report when the exposed transfer is at least this share of the mean step


class ExposedCommunication(RankRule[Options]):
    """Collectives move data while the GPU (or CPU) has no compute to overlap them with.

    ## Why it matters
    A collective's time on a rank is a wait for its peers followed by the transfer. The wait
    belongs to the straggler (`rank-straggler`); the transfer is the data moving, and when no
    compute runs beside it the step is longer by that much on every rank. DDP and FSDP are built
    to hide the transfer behind the backward (or forward) pass; exposed transfer means the hiding
    failed: a bucket that cannot start before backward ends, an all-gather issued just before
    the layer that needs it, an all-reduce per micro-batch under gradient accumulation.

    ## How it shows up in a trace
    Per rank and step, the breakdown (`ranks/breakdown.py`) takes each collective's time not
    covered by compute; the combine step splits it into exposed wait (the collective's first
    `wait` ns: min-over-ranks duration subtracted from the rank's own, as tb_plugin's distributed
    view did) and exposed transfer (the rest). The rule averages the exposed transfer over each
    rank's steps, then over the ranks, and reports it when it is at least `min_share_pct` of the
    mean step; it names the ranks where it holds alone. The advice follows the collectives that
    carry the transfer: all-reduces (DDP buckets), all-gathers and reduce-scatters (FSDP),
    all-to-alls (expert parallelism); all-reduces whose sizes repeat within a step are the
    buckets of several micro-batches (gradient accumulation without `no_sync`). The saving is the
    exposed transfer per step: an upper bound, reached only if all of it finds compute to overlap.

    ## How to fix
    - DDP: `no_sync()` around all but the last micro-batch of an accumulation; a smaller
      `bucket_cap_mb` (default 25) shortens the last bucket, which cannot start before backward
      ends, while larger buckets reach a higher bus bandwidth; `gradient_as_bucket_view=True`
      drops the copy between gradients and buckets; `static_graph=True` and no
      `find_unused_parameters` let the first bucket start as soon as it is ready.
    - FSDP: `forward_prefetch=True`, `backward_prefetch=BackwardPrefetch.BACKWARD_PRE`; FSDP2:
      `set_modules_to_forward_prefetch` / `set_modules_to_backward_prefetch`, and
      `reshard_after_forward=False` on the last blocks.
    - Expert parallelism: overlap the dispatch all-to-all with the shared experts' compute, or
      split it into chunks that pipeline with the experts.

    ## Options
    - `min_share_pct`: report when the exposed transfer (mean over ranks, per step) is at least this
      share of the mean step (%).

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    - https://pytorch.org/docs/stable/notes/ddp.html
    - https://pytorch.org/docs/stable/fsdp.html
    - https://docs.pytorch.org/tutorials/intermediate/FSDP_tutorial.html
    """

    code = "DS102"
    # GPU idle while the host waits for a collective (analyses/idle.py, cause 3b) is this rule's in a
    # multi-rank report (or the straggler's, for its wait part), never a CPU stall (idle-gap)
    claims = frozenset({IdleCause.communication})
    name = "exposed-communication"

    def check_ranks(self, run: RankRun) -> Iterator[Finding]:
        b = run.breakdown
        if not len(b) or "exposed_transfer_ns" not in b:
            return
        per_rank = b.groupby("rank").agg(transfer=("exposed_transfer_ns", "mean"), step=("step_ns", "mean"))
        exposed = float(per_rank["transfer"].mean())
        step = float(b["step_ns"].mean())
        share = pct(exposed, step)
        if share < self.options.min_share_pct:
            return
        held = per_rank[100.0 * per_rank["transfer"] / per_rank["step"] >= self.options.min_share_pct]
        ranks = [int(r) for r in held.index] or [int(r) for r in per_rank.index]
        op_ns = run.metrics.instances.groupby("op")["transfer_ns"].sum().sort_values(ascending=False)
        op = str(op_ns.index[0]) if len(op_ns) else "unknown"
        repeats = accumulation_rounds(run.collectives)
        advice = _advice(op, run.collectives, repeats)
        shown = ", ".join(str(r) for r in ranks)
        yield self.rank_finding(
            run,
            message=(
                f"communication moves data with no compute beside it for {fmt_ns(exposed)} per step "
                f"({share:.1f}% of the {fmt_ns(step)} step, mean over ranks; ranks {shown}), mostly in {op}"
            ),
            recommendation=advice,
            ranks=ranks,
            saving_per_step_ns=exposed,
            step_ns=step,
            scenario="exposed transfer overlapped with compute (upper bound)",
            basis=BASIS,
            data={
                "exposed_transfer_per_step_ns": exposed,
                "mean_step_ns": step,
                "share_pct": share,
                "per_rank_exposed_transfer_ns": {str(int(r)): float(v) for r, v in per_rank["transfer"].items()},
                "transfer_ns_by_op": {str(k): int(v) for k, v in op_ns.items()},
                "dominant_op": op,
                "accumulation_rounds": repeats,
                "saving_is_upper_bound": True,
            },
        )


def accumulation_rounds(colls: pd.DataFrame) -> int:
    """How many times a step's all-reduce sizes repeat (the median over (rank, step)): ``k > 1``
    means the same gradient buckets were reduced k times in one step, once per micro-batch."""
    ar = colls[(colls["op"] == "all_reduce") & (colls["step"] >= 0)].sort_values(["rank", "step", "start_ns"])
    rounds = []
    for _, g in ar.groupby(["rank", "step"], sort=False):
        rounds.append(_repeats(g["bytes"].fillna(-1.0).tolist()))
    return int(np.median(rounds)) if rounds else 1


def _repeats(sizes: list[float]) -> int:
    """The largest k such that ``sizes`` is one pattern of at least two all-reduces written k times
    (a single repeated size is as likely two equal buckets of one backward as two micro-batches)."""
    n = len(sizes)
    for k in range(n // 2, 1, -1):
        if n % k == 0 and sizes == sizes[: n // k] * k:
            return k
    return 1


def _advice(op: str, colls: pd.DataFrame, repeats: int) -> str:
    if op in _FSDP_OPS:
        return (
            "FSDP's all-gathers/reduce-scatters are not prefetched ahead of the layers that need them: "
            "FSDP(forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE); with FSDP2, "
            "set_modules_to_forward_prefetch/set_modules_to_backward_prefetch and reshard_after_forward=False "
            "on the last blocks."
        )
    if op in _MOE_OPS:
        return (
            "The all-to-alls (expert dispatch/combine) run alone: overlap them with the shared experts' "
            "compute, or split them into chunks pipelined with the experts' GEMMs."
        )
    if op != "all_reduce":
        return (
            f"The {op} transfers run alone: issue them on a side stream ahead of the compute that needs "
            "them (async_op=True and wait() just before use), or use more micro-batches in a pipeline schedule."
        )
    ar = colls[colls["op"] == "all_reduce"]
    per_step = ar[ar["step"] >= 0].groupby(["rank", "step"]).size()
    n_per_step = float(per_step.median()) if len(per_step) else 0.0
    mb = float(ar["bytes"].median()) / 1e6 if len(ar) else 0.0
    parts = []
    if repeats > 1:
        parts.append(
            f"The same all-reduces run {repeats} times per step (gradient accumulation): wrap all but the "
            "last micro-batch in model.no_sync() so DDP reduces the gradients once."
        )
    size = "larger" if mb > DDP_DEFAULT_BUCKET_MB else "at most"
    parts.append(
        f"DDP all-reduces {n_per_step:.0f} bucket(s) per step of {mb:.1f} MB (median; {size} the default "
        f"bucket_cap_mb={DDP_DEFAULT_BUCKET_MB:g}): the last bucket cannot start before backward ends, so a "
        "smaller bucket_cap_mb shortens what stays exposed, while fewer, larger buckets move data faster; "
        "gradient_as_bucket_view=True drops the copies between gradients and buckets, and static_graph=True "
        "(no find_unused_parameters) lets the first bucket start as soon as it is ready."
    )
    return " ".join(parts)
