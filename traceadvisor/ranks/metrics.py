"""Per matched collective: transfer, waits, skews, the last arriver, bandwidths (doc multirank §1.4.4).

For an instance run by ranks r (``n`` = its group size: ``Group size`` when known, else its members):

* ``transfer_ns = min_r dur_r``: the fastest rank waited least, so its duration is the closest to
  the time the data took (tb_plugin's "data transfer time", TraceLens' ``comm_latency``);
* ``wait_ns = dur_r - transfer_ns`` (tb_plugin's "synchronizing time") and the arrival form
  ``arrival_wait_ns = max start - start_r`` (TraceLens' ``rank_r_wait_time``): equal when the
  ends coincide, as they do for implicit-sync collectives on one clock;
* ``start_skew_ns``, ``end_skew_ns`` (max - min; a large end skew across hosts is a clock offset,
  not slowness: ``align.py``), ``last_arriver`` (the latest start);
* bandwidths in GB/s with GB = 1e9 (nccl-tests ``doc/PERFORMANCE.md``; B/ns is GB/s): ``algbw =
  S / t``, ``busbw = algbw x F(n)`` with nccl-tests' factors (``FACTORS``). "transfer" uses
  ``transfer_ns``; "observed" uses each rank's own ``dur`` (which includes its wait, as PARAM
  reports it), then the median over the ranks.

Point-to-point (send/recv) rows only get waits when their instance holds both a send and a recv: a
send alone has no peer in the frame, so nothing says how long it waited.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceadvisor.ranks.match import Matching

_P2P = ("send", "recv")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor (``src/*.cu`` ``*GetBw``); NaN for an unknown op or size."""
    if op == "barrier":
        return 0.0
    if op in ("broadcast", "reduce", "send", "recv"):
        return 1.0
    if n <= 0:
        return math.nan
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather", "all_to_all", "all_to_allv", "gather", "scatter"):
        return (n - 1) / n
    return math.nan


@dataclass(frozen=True)
class CollectiveMetrics:
    instances: pd.DataFrame  # one row per instance
    per_rank: pd.DataFrame  # one row per (instance, rank)


def collective_metrics(colls: pd.DataFrame, matching: Matching) -> CollectiveMetrics:
    """Metrics of every matched instance (``matching.instance >= 0``) of ``colls`` (with ``rank``)."""
    inst = matching.instance
    keep = inst >= 0
    rows = pd.DataFrame(
        {
            "instance": inst[keep],
            "rank": colls["rank"].to_numpy(dtype=np.int64)[keep],
            "op": colls["op"].astype(str).to_numpy()[keep],
            "start_ns": colls["start_ns"].to_numpy(dtype=np.int64)[keep],
            "end_ns": colls["end_ns"].to_numpy(dtype=np.int64)[keep],
            "bytes": colls["bytes"].to_numpy(dtype=np.float64)[keep],
            "group_size": colls["group_size"].to_numpy(dtype=np.int64)[keep],
        }
    )
    rows["dur_ns"] = rows["end_ns"] - rows["start_ns"]
    g = rows.groupby("instance", sort=True)
    per = pd.DataFrame(
        {
            "op": g["op"].first(),
            "n_ranks": g["rank"].nunique(),
            "group_size": g["group_size"].max(),
            "bytes": g["bytes"].median(),
            "transfer_ns": g["dur_ns"].min(),
            "max_dur_ns": g["dur_ns"].max(),
            "first_start_ns": g["start_ns"].min(),
            "last_start_ns": g["start_ns"].max(),
            "first_end_ns": g["end_ns"].min(),
            "last_end_ns": g["end_ns"].max(),
            "has_send": g["op"].agg(lambda s: bool((s == "send").any())),
            "has_recv": g["op"].agg(lambda s: bool((s == "recv").any())),
        }
    )
    members = matching.instances.set_index("instance")["members"]
    per["n"] = [
        int(gs) if gs > 0 else len(members.get(i, ())) for i, gs in zip(per.index, per["group_size"], strict=True)
    ]
    per["start_skew_ns"] = per["last_start_ns"] - per["first_start_ns"]
    per["end_skew_ns"] = per["last_end_ns"] - per["first_end_ns"]
    last = rows.loc[g["start_ns"].idxmax().to_numpy(), ["instance", "rank"]].set_index("instance")["rank"]
    per["last_arriver"] = last.reindex(per.index).to_numpy(dtype=np.int64)
    per["factor"] = [bus_factor(op, n) for op, n in zip(per["op"], per["n"], strict=True)]
    p2p = per["op"].isin(_P2P)
    per["waits_known"] = ~p2p | (per["has_send"] & per["has_recv"])
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw_t = per["bytes"] / per["transfer_ns"].where(per["transfer_ns"] > 0)
    per["algbw_transfer_gbps"] = algbw_t
    per["busbw_transfer_gbps"] = algbw_t * per["factor"]

    # per (instance, rank)
    t = per["transfer_ns"].reindex(rows["instance"]).to_numpy()
    last_start = per["last_start_ns"].reindex(rows["instance"]).to_numpy()
    known = per["waits_known"].reindex(rows["instance"]).to_numpy(dtype=bool)
    pr = rows[["instance", "rank", "op", "start_ns", "end_ns", "dur_ns", "bytes"]].copy()
    pr["wait_ns"] = np.where(known, rows["dur_ns"].to_numpy() - t, np.nan)
    pr["arrival_wait_ns"] = np.where(known, last_start - rows["start_ns"].to_numpy(), np.nan)
    factor = per["factor"].reindex(rows["instance"]).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        dur = rows["dur_ns"].to_numpy(dtype=np.float64)
        pr["algbw_observed_gbps"] = np.where(dur > 0, rows["bytes"].to_numpy() / dur, np.nan)
    pr["busbw_observed_gbps"] = pr["algbw_observed_gbps"] * factor
    pr["last_arriver"] = per["last_arriver"].reindex(rows["instance"]).to_numpy() == rows["rank"].to_numpy()
    obs = pr.groupby("instance", sort=True)[["algbw_observed_gbps", "busbw_observed_gbps"]].median()
    per["algbw_observed_gbps"] = obs["algbw_observed_gbps"]
    per["busbw_observed_gbps"] = obs["busbw_observed_gbps"]

    instances = per.drop(columns=["has_send", "has_recv"]).reset_index()
    return CollectiveMetrics(instances=instances, per_rank=pr.reset_index(drop=True))
