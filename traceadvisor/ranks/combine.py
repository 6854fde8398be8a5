"""The reduce step: rank summaries combined into one ``RankRun`` (docs/multirank.md).

Runs in one process on small columnar summaries, never on raw traces: matching collectives across
ranks (``match.py``), clock alignment per host (``align.py``), per-collective transfer, waits and
bandwidth (``metrics.py``), the per-(rank, step) breakdown with exposed communication split into
exposed wait (waiting for a straggler) and exposed transfer (bandwidth or overlap), and the
straggler (``straggler.py``). Cross-rank rules read the ``RankRun``; nothing here prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceadvisor.ranks.align import Alignment, align_clocks, apply_offsets
from traceadvisor.ranks.match import Matching, match_collectives
from traceadvisor.ranks.metrics import CollectiveMetrics, collective_metrics
from traceadvisor.ranks.straggler import Straggler, find_straggler
from traceadvisor.ranks.summary import RankSummary


@dataclass(frozen=True)
class RankRun:
    """Everything the cross-rank rules and the report's rank section read."""

    ranks: pd.DataFrame  # rank, host, path, rank_source, world_size, device, steps
    collectives: pd.DataFrame  # every rank's collectives, with rank, instance, aligned times
    matching: Matching
    metrics: CollectiveMetrics
    alignment: Alignment
    breakdown: pd.DataFrame  # per (rank, step): the sum, and exposed_wait_ns / exposed_transfer_ns
    straggler: Straggler | None
    reports: tuple[dict[str, Any], ...]  # each rank's single-rank report (Report.to_dict())
    problems: tuple[str, ...] = field(default_factory=tuple)  # rank discovery: mixed, missing
    # each rank's longest host spans outside ops per step, with the user's source (rank column)
    host_gaps: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def size(self) -> int:
        return len(self.ranks)

    def comparison(self) -> pd.DataFrame:
        """The rank comparison table: per rank, the mean over its steps of step, compute, exposed
        wait, exposed transfer, exposed memcpy and idle (ns), the straggler marked."""
        b = self.breakdown
        cols = ["step_ns", "compute_ns", "exposed_wait_ns", "exposed_transfer_ns", "memcpy_exposed_ns", "idle_ns"]
        if not len(b):
            return pd.DataFrame(columns=["rank", *cols, "straggler"])
        out = b.groupby("rank")[cols].mean().reset_index()
        out["straggler"] = out["rank"] == (self.straggler.rank if self.straggler else -1)
        return out


def combine(summaries: Sequence[RankSummary], gpus_per_node: int | None = None) -> RankRun:
    """Combine the summaries of one run's ranks (one per rank; see ``rank_problems``).
    ``gpus_per_node``: the host of a rank whose trace names none is ``node<rank // N>``."""
    problems = rank_problems(summaries)
    ranks = _ranks(summaries)
    if gpus_per_node:
        unnamed = ranks["host"] == ""
        ranks.loc[unnamed, "host"] = [f"node{int(r) // gpus_per_node}" for r in ranks.loc[unnamed, "rank"]]
    elif (ranks["host"] == "").any() and (ranks["host"] != "").any():
        problems.append("some traces name their host and some do not: clocks of the unnamed ones are taken as shared")
    host_of = {int(r): str(h) for r, h in zip(ranks["rank"].tolist(), ranks["host"].tolist(), strict=True)}
    colls = _stack(summaries, "collectives")
    matching = match_collectives(colls)
    colls = colls.assign(instance=matching.instance)
    alignment = align_clocks(colls, matching, host_of)
    steps = _stack(summaries, "steps")
    if alignment.method == "collective-end" and not alignment.refused:
        colls = apply_offsets(colls, alignment, host_of)
        steps = _shift(steps, alignment, host_of)
    metrics = collective_metrics(colls, matching)
    breakdown = _split_exposed(summaries, colls, metrics)
    straggler = find_straggler(colls, metrics.per_rank, metrics.instances, steps, breakdown)
    return RankRun(
        ranks=ranks,
        collectives=colls,
        matching=matching,
        metrics=metrics,
        alignment=alignment,
        breakdown=breakdown,
        straggler=straggler,
        reports=tuple(s.report for s in summaries),
        problems=tuple(problems),
        host_gaps=_stack(summaries, "host_gaps"),
    )


def rank_problems(summaries: Sequence[RankSummary]) -> list[str]:
    """What is wrong with the set of ranks, said rather than guessed: unknown ranks (numbered in
    file order), a rank claimed twice, world sizes that disagree, ranks missing from the world."""
    out: list[str] = []
    unknown = [s.key.path for s in summaries if s.rank is None]
    if unknown:
        out.append(
            f"rank unknown for {len(unknown)} trace(s) (no distributedInfo, no rank in the file name, "
            f"no run.json): {', '.join(unknown[:3])}"
        )
    seen: dict[int, str] = {}
    for s in summaries:
        if s.rank is not None and s.rank in seen:
            out.append(f"rank {s.rank} is claimed by {seen[s.rank]} and {s.key.path}")
        elif s.rank is not None:
            seen[s.rank] = s.key.path
    worlds = {s.world_size for s in summaries if s.world_size is not None}
    if len(worlds) > 1:
        out.append(f"the traces disagree on the world size: {sorted(worlds)} (traces of different runs?)")
    elif worlds:
        world = worlds.pop()
        missing = sorted(set(range(world)) - set(seen))
        if missing and len(summaries) < world:
            shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
            out.append(f"{len(seen)} of {world} ranks given; missing: {shown}")
    return out


def _ranks(summaries: Sequence[RankSummary]) -> pd.DataFrame:
    used = {s.rank for s in summaries if s.rank is not None}
    nxt = 0
    rows = []
    for s in summaries:
        rank = s.rank
        if rank is None:  # numbered in the order given, and said so (rank_problems)
            while nxt in used:
                nxt += 1
            rank = nxt
            used.add(rank)
        rows.append(
            {
                "rank": rank,
                "host": s.host or "",
                "path": s.key.path,
                "rank_source": s.rank_source,
                "world_size": s.world_size if s.world_size is not None else -1,
                "device": s.device or "",
                "steps": len(s.tables["steps"]),
            }
        )
    return pd.DataFrame(rows)


def _stack(summaries: Sequence[RankSummary], table: str) -> pd.DataFrame:
    ranks = _ranks(summaries)["rank"].tolist()
    parts = [s.tables[table].assign(rank=np.int64(r)) for s, r in zip(summaries, ranks, strict=True)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _shift(steps: pd.DataFrame, alignment: Alignment, host_of: dict[int, str]) -> pd.DataFrame:
    off = np.array(
        [alignment.offsets_ns.get(host_of.get(int(r), ""), 0) for r in steps["rank"].tolist()], dtype=np.int64
    )
    out = steps.copy()
    for c in ("start_ns", "end_ns", "cpu_end_ns"):
        out[c] = out[c].to_numpy(dtype=np.int64) - off
    return out


def _split_exposed(summaries: Sequence[RankSummary], colls: pd.DataFrame, metrics: CollectiveMetrics) -> pd.DataFrame:
    """Each rank's breakdown with exposed communication split into exposed wait and exposed transfer.

    A collective waits for its peers first and moves data after (an NCCL kernel spins until every
    member arrived; gloo's worker blocks likewise), so its first ``wait_ns`` are the wait: the
    exposed parts of that prefix are exposed wait, the rest exposed transfer."""
    ranks = _ranks(summaries)["rank"].tolist()
    pr = metrics.per_rank
    wait_of = {
        (int(i), int(r), int(s)): float(w)
        for i, r, s, w in zip(pr["instance"], pr["rank"], pr["start_ns"], pr["wait_ns"].fillna(0.0), strict=True)
    }
    out = []
    for s, rank in zip(summaries, ranks, strict=True):
        b = s.tables["breakdown"].copy()
        mine = colls[colls["rank"] == rank].reset_index(drop=True)
        own = s.tables["collectives"]
        ex = s.tables["comm_exposed"]
        wait_part = np.zeros(len(b), dtype=np.int64)
        if len(ex) and len(mine) == len(own):
            # the summary's own (unaligned) starts: the exposed intervals are on the rank's clock
            starts = own["start_ns"].to_numpy(dtype=np.int64)
            inst = mine["instance"].to_numpy(dtype=np.int64)
            aligned = mine["start_ns"].to_numpy(dtype=np.int64)
            w = np.array(
                [wait_of.get((int(i), rank, int(a)), 0.0) for i, a in zip(inst, aligned, strict=True)], dtype=np.float64
            )
            c = ex["coll"].to_numpy(dtype=np.int64)
            lo = ex["start_ns"].to_numpy(dtype=np.int64)
            hi = ex["end_ns"].to_numpy(dtype=np.int64)
            cut = starts[c] + w[c].astype(np.int64)
            part = np.clip(np.minimum(hi, cut) - lo, 0, None)
            step_of = np.searchsorted(b["start_ns"].to_numpy(dtype=np.int64), lo, side="right") - 1
            ok = step_of >= 0
            np.add.at(wait_part, step_of[ok], part[ok])
        wait_part = np.minimum(wait_part, b["comm_exposed_ns"].to_numpy(dtype=np.int64))
        b["exposed_wait_ns"] = wait_part
        b["exposed_transfer_ns"] = b["comm_exposed_ns"].to_numpy(dtype=np.int64) - wait_part
        b["rank"] = np.int64(rank)
        out.append(b)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()
