"""The straggler: which rank the others wait for, why, and what it costs them (docs/multirank.md).

Three signals, as the doc recommends: the rank that arrives last at most collectives (TraceLens'
``pct_arrived_last``), that waits least (its ``total_wait``), and whose removal shortens the step
most in a replay across ranks.

**The replay** works at the granularity of collectives, the edges between ranks. In each step, rank
r reaches collective k at ``start_rk`` (its progress ``p_rk = start_rk - step_start_r``, on its own
clock, so it needs no clock alignment); an implicit-sync collective ends ``T_k`` (its transfer:
the fastest rank's duration) after its last member arrives, and the step ends with its last
collective plus each rank's measured tail. The straggler brought to the other ranks' pace
(``p'_sk = min(p_sk, median over the others of p_rk)``) moves the last arrivals earlier; the saving is
the step's end before minus after, averaged over steps: exactly the wait it causes the others
(the others keep their measured progress: what they did does not change).

**The class** (traceml's input / host / compute / H2D) comes from the straggler's lead (its step's
start to its first collective) against the median of the others' leads, split by what filled it
(``ranks/breakdown.py``): its DataLoader fetches, host code outside any op, compute, host-to-device
copies. Only the lead is used: the others wait for the straggler later, inside their own steps, and
that waiting would read as their host time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# Ops whose end is a synchronisation point of all members (nccl-tests' implicit-sync collectives).
IMPLICIT_SYNC = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_allv", "barrier"})
CLASSES = ("input", "host", "compute", "h2d")
_LEAD_COLUMN = {"input": "lead_input_ns", "host": "lead_host_ns", "compute": "lead_compute_ns", "h2d": "lead_h2d_ns"}


@dataclass(frozen=True)
class Straggler:
    rank: int
    pct_arrived_last: float
    total_wait_ns: float  # its own wait over the matched collectives
    others_wait_ns: float  # the others' mean total wait over the same collectives
    saving_per_step_ns: float  # the replay's saving (mean over steps)
    step_ns: float  # the mean replayed step before the change
    cls: str  # one of CLASSES, or "unknown"
    excess_lead_ns: float  # its lead minus the others' median lead (mean over steps)
    excess_by_class_ns: dict[str, float] = field(default_factory=dict)
    steps: int = 0


def per_rank_waits(per_rank: pd.DataFrame) -> pd.DataFrame:
    """Per rank: matched collectives, times last, % last, total wait (TraceLens' straggler table)."""
    pr = per_rank[per_rank["wait_ns"].notna()]
    if not len(pr):
        return pd.DataFrame(columns=["rank", "collectives", "times_last", "pct_arrived_last", "total_wait_ns"])
    g = pr.groupby("rank")
    out = pd.DataFrame(
        {
            "collectives": g.size(),
            "times_last": g["last_arriver"].sum(),
            "total_wait_ns": g["wait_ns"].sum(),
        }
    )
    out["pct_arrived_last"] = out["times_last"] / out["collectives"] * 100.0
    return out.reset_index()


def find_straggler(
    colls: pd.DataFrame, per_rank: pd.DataFrame, instances: pd.DataFrame, steps: pd.DataFrame, lead: pd.DataFrame
) -> Straggler | None:
    """The straggler and its replayed cost, or None when no rank arrives last at most collectives.

    ``colls``: all ranks' collectives with ``rank`` and ``instance``; ``steps``: all ranks' steps
    with ``rank``; ``lead``: all ranks' breakdown rows with ``rank`` (the lead columns)."""
    waits = per_rank_waits(per_rank)
    if len(waits) < 2:
        return None
    top = waits.sort_values(["pct_arrived_last", "total_wait_ns"], ascending=[False, True]).iloc[0]
    if top["pct_arrived_last"] < 50.0:
        return None
    rank = int(top["rank"])
    cls, excess, by_class = _class_of(lead, rank)
    if cls == "unknown":  # it arrives last, but does nothing more than the others before: noise
        return None
    saving, step_ns, n_steps = replay_saving(colls, instances, steps, rank)
    others = waits[waits["rank"] != rank]
    return Straggler(
        rank=rank,
        pct_arrived_last=float(top["pct_arrived_last"]),
        total_wait_ns=float(top["total_wait_ns"]),
        others_wait_ns=float(others["total_wait_ns"].mean()) if len(others) else 0.0,
        saving_per_step_ns=saving,
        step_ns=step_ns,
        cls=cls,
        excess_lead_ns=excess,
        excess_by_class_ns=by_class,
        steps=n_steps,
    )


def replay_saving(
    colls: pd.DataFrame, instances: pd.DataFrame, steps: pd.DataFrame, rank: int
) -> tuple[float, float, int]:
    """(mean saving per step, mean time from step start to the last collective's end, steps used)
    of bringing ``rank`` to the others' pace, replayed over the implicit-sync collectives of each
    step that every rank ran."""
    c = colls[(colls["instance"] >= 0) & colls["op"].isin(IMPLICIT_SYNC) & (colls["step"] >= 0)]
    if not len(c):
        return 0.0, 0.0, 0
    transfer = instances.set_index("instance")["transfer_ns"]
    start_of = steps.set_index(["rank", "step"])["start_ns"]
    prof_of = steps.set_index(["rank", "step"])["profiler_ns"] if "profiler_ns" in steps else None
    n_ranks = c["rank"].nunique()
    savings: list[float] = []
    spans: list[float] = []
    for step, cs in c.groupby("step"):
        members = cs.groupby("instance")["rank"].nunique()
        cs = cs[cs["instance"].isin(members[members == n_ranks].index)]
        if not len(cs):
            continue
        key = pd.MultiIndex.from_arrays([cs["rank"].to_numpy(), np.full(len(cs), step)])
        origin = start_of.reindex(key).to_numpy(dtype=np.float64)
        if np.isnan(origin).any():
            continue
        if prof_of is not None:
            cs = cs.assign(profiler_origin_ns=prof_of.reindex(key).fillna(0).to_numpy(dtype=np.int64))
        got = _replay_step(cs, origin.astype(np.int64), transfer, rank)
        if got is not None:
            savings.append(got[0] - got[1])
            spans.append(got[0])
    if not savings:
        return 0.0, 0.0, 0
    return float(np.mean(savings)), float(np.mean(spans)), len(savings)


# A collective that starts within this of an earlier one ending on the same rank waited for it
# (NCCL runs one collective at a time per communicator stream; a gloo worker thread one at a time).
# A stream starts its next kernel within µs; a gloo worker thread on a loaded host was measured
# waking 83 µs after its previous collective ended (fixtures/traces/multirank/input_delay_2r).
GATE_NS = 1_000_000


def _replay_step(cs: pd.DataFrame, origin: np.ndarray, transfer: pd.Series, rank: int) -> tuple[float, float] | None:
    """(end of the step's last collective, the same with ``rank`` at the others' pace), both from
    the step's start on each rank's own clock.

    Each rank reaches collective k when it is ready (its measured start) unless that start came
    right after an earlier collective of its own ended (it was queued behind it: then it starts when
    that one ends, in the replay too). An instance ends its transfer after its last member starts."""
    # absolute (aligned) times: an implicit-sync collective ends at one moment on every member
    frame = pd.DataFrame(
        {
            "instance": cs["instance"].to_numpy(dtype=np.int64),
            "rank": cs["rank"].to_numpy(dtype=np.int64),
            "s": cs["start_ns"].to_numpy(dtype=np.int64),
            "e": cs["end_ns"].to_numpy(dtype=np.int64),
            "origin": origin,
        }
    )
    # progress in its own step (the pace, clock-free), without the profiler's own host cost recorded
    # since the step began (``profiler_ns``: cumulative on the rank's step thread, build.py)
    prof = cs["profiler_ns"].to_numpy(dtype=np.int64) if "profiler_ns" in cs else np.zeros(len(cs), np.int64)
    prof0 = cs["profiler_origin_ns"].to_numpy(dtype=np.int64) if "profiler_origin_ns" in cs else prof * 0
    frame["p"] = frame["s"] - frame["origin"] - np.maximum(prof - prof0, 0)
    gate = np.full(len(frame), -1, dtype=np.int64)  # the instance a row was queued behind
    for _, g in frame.groupby("rank"):
        idx = g.index.to_numpy()
        s, e, inst = g["s"].to_numpy(), g["e"].to_numpy(), g["instance"].to_numpy()
        for k, i in enumerate(idx.tolist()):
            before = np.flatnonzero((e <= s[k]) & (e >= s[k] - GATE_NS))
            if len(before):
                gate[i] = inst[before[np.argmax(e[before])]]
    frame["gate"] = gate
    # The others' pace: their progress where they were not queued behind a collective (a queued
    # start is a wait for the straggler, not their pace).
    free = frame[(frame["rank"] != rank) & (frame["gate"] < 0)]
    pace = free.groupby("instance")["p"].median()
    order = frame.groupby("instance")["e"].median().sort_values().index.tolist()
    t = transfer.reindex(order).to_numpy(dtype=np.float64)

    def run(faster: bool) -> float:
        end: dict[int, float] = {}
        shift = 0.0  # how far the straggler's timeline moves: its excess over the others' pace
        for k, inst in enumerate(order):
            rows = frame[frame["instance"] == inst]
            mine = rows[rows["rank"] == rank]
            if faster and len(mine) and inst in pace.index and int(mine["gate"].iloc[0]) < 0:
                shift = max(0.0, float(mine["p"].iloc[0]) - float(pace[inst]))
            last = -np.inf
            for r, s, g in zip(rows["rank"].tolist(), rows["s"].tolist(), rows["gate"].tolist(), strict=True):
                ready = float(s) - (shift if faster and r == rank else 0.0)
                start = end[g] if g >= 0 and g in end else ready
                last = max(last, start)
            end[inst] = last + t[k]
        return max(end.values())

    if frame["rank"].nunique() < 2:
        return None
    first = float(frame["origin"].min())
    return run(False) - first, run(True) - first


def _class_of(lead: pd.DataFrame, rank: int) -> tuple[str, float, dict[str, float]]:
    """The class whose lead time exceeds the others' median the most, with the excesses (ns/step)."""
    if not len(lead) or "lead_ns" not in lead:
        return "unknown", 0.0, {}
    per = lead.groupby("rank")[["lead_ns", *(_LEAD_COLUMN[c] for c in CLASSES)]].mean()
    if rank not in per.index or len(per) < 2:
        return "unknown", 0.0, {}
    mine, others = per.loc[rank], per.drop(index=rank).median()
    excess = {c: float(mine[_LEAD_COLUMN[c]] - others[_LEAD_COLUMN[c]]) for c in CLASSES}
    total = float(mine["lead_ns"] - others["lead_ns"])
    best = max(excess, key=lambda c: excess[c])
    return (best if excess[best] > 0 else "unknown"), total, excess
