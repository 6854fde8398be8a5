"""Each matched collective's transfer bus bandwidth against the best the run itself reaches.

No hardware table is needed (doc multirank §1.4 item 7): the collectives of one op, about one
size, over the same kind of link (one host: NVLink/PCIe/shared memory; several: the network) should
move data at about the same bus bandwidth, so the best of them is what the link can do here, and
one far below it lost time to something else (contention, a slow link, a protocol switch).

* the size bucket is the power of two below the message (``floor(log2 bytes)``): nccl-tests'
  bandwidth rises with the size up to the link's plateau, so only messages within a factor of two
  are compared;
* ``span`` is ``intra-node`` when all the instance's ranks are on one host, else ``inter-node``;
* only complete, fully matched instances count (``Matching.instances.state``): a size or dtype
  mismatch leaves ``bytes`` in doubt, and a missing rank leaves ``transfer_ns = min dur`` short of
  the slowest link;
* ``ideal_ns`` = the time at the best busbw (``transfer_ns x busbw / best``; same op, n and bytes,
  so the factor cancels), ``excess_ns = transfer_ns - ideal_ns``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from traceadvisor.ranks.combine import RankRun

COLUMNS = (
    "instance",
    "op",
    "span",
    "bucket",
    "bytes",
    "n",
    "transfer_ns",
    "busbw_gbps",
    "best_gbps",
    "ratio",
    "ideal_ns",
    "excess_ns",
    "in_step",
)


def size_bucket(nbytes: float) -> int:
    """The power of two at or below ``nbytes`` (its exponent); -1 for an unknown or empty size."""
    if not np.isfinite(nbytes) or nbytes < 1:
        return -1
    return int(np.floor(np.log2(nbytes)))


def bucket_label(bucket: int) -> str:
    """``[2^k, 2^(k+1))`` bytes in MB (1e6), as the finding prints it."""
    lo, hi = 2.0**bucket / 1e6, 2.0 ** (bucket + 1) / 1e6
    return f"{_mb(lo)}-{_mb(hi)} MB"


def _mb(v: float) -> str:
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def bandwidth_table(run: RankRun, min_bytes: float = 0.0) -> pd.DataFrame:
    """One row per complete, fully matched instance of at least ``min_bytes`` with a known transfer
    busbw (a positive duration and a bus factor: barriers and unknown ops are left out), with the
    best busbw of its (op, span, size bucket) among those rows (``COLUMNS``)."""
    mi = run.metrics.instances
    if not len(mi):
        return pd.DataFrame(columns=list(COLUMNS))
    state = run.matching.instances.set_index("instance")["state"]
    ok_state = state.reindex(mi["instance"]).to_numpy() == "fully_matched"
    busbw = mi["busbw_transfer_gbps"].to_numpy(dtype=np.float64)
    keep = (
        ok_state
        & mi["waits_known"].to_numpy(dtype=bool)
        & np.isfinite(busbw)
        & (busbw > 0)
        & (mi["bytes"].to_numpy(dtype=np.float64) >= min_bytes)
    )
    t = mi[keep]
    if not len(t):
        return pd.DataFrame(columns=list(COLUMNS))
    host_of = dict(zip(run.ranks["rank"].astype(int), run.ranks["host"].astype(str), strict=True))
    pr = run.metrics.per_rank
    hosts = pr.assign(host=[host_of.get(int(r), "") for r in pr["rank"]]).groupby("instance")["host"].nunique()
    steps = run.collectives[run.collectives["instance"] >= 0].groupby("instance")["step"].max()
    out = pd.DataFrame(
        {
            "instance": t["instance"].to_numpy(dtype=np.int64),
            "op": t["op"].astype(str).to_numpy(),
            "span": np.where(hosts.reindex(t["instance"]).to_numpy() > 1, "inter-node", "intra-node"),
            "bucket": [size_bucket(float(b)) for b in t["bytes"]],
            "bytes": t["bytes"].to_numpy(dtype=np.float64),
            "n": t["n"].to_numpy(dtype=np.int64),
            "transfer_ns": t["transfer_ns"].to_numpy(dtype=np.int64),
            "busbw_gbps": t["busbw_transfer_gbps"].to_numpy(dtype=np.float64),
        }
    )
    out["best_gbps"] = out.groupby(["op", "span", "bucket"])["busbw_gbps"].transform("max")
    out["ratio"] = out["busbw_gbps"] / out["best_gbps"]
    out["ideal_ns"] = out["transfer_ns"] * out["ratio"]
    out["excess_ns"] = out["transfer_ns"] - out["ideal_ns"]
    out["in_step"] = steps.reindex(out["instance"]).fillna(-1).to_numpy() >= 0
    return out[list(COLUMNS)]
