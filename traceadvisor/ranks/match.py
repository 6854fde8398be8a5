"""Matching one collective across the ranks that ran it (doc multirank §1.4, items 1-3).

The key, per process group, strongest first:

* ``seq``: (process group, ``Seq``) when every row of the group has ``Seq`` (Kineto since 2026-03):
  the id PyTorch's Flight Recorder also uses (``collective_seq_id``), so the two can be joined;
* ``ordinal``: (process group, the rank's n-th collective in that group), TraceLens'
  ``collective_id = <Process Group Name>_<index_in_group>``;
* ``stream order``: no process group metadata (pre-2024 traces): (op, the rank's n-th collective of
  that op), TraceLens' "simplified mode" (one communication stream per rank).

Rows of one rank with the same key (coalesced collectives share a ``Seq``) are told apart by their
order. Members come from ``Process Group Ranks`` (a list cut with ``...`` rebuilt from its stride,
PARAM's ``_parse_ranks``), kept to the ranks the frame has traces for (a rank whose trace was not
given is not "missing"); without it, the ranks that have rows in the group.

Each instance gets a state in Flight Recorder's vocabulary (``torch/distributed/flight_recorder``
``MatchState``): ``fully_matched``, ``collective_type_mismatch`` (op differs),
``collective_dtype_mismatch``, ``size_or_syntax_mismatch`` (In/Out nelems differ; not checked for
all-to-all(v) and point-to-point, whose sizes differ per rank by design) and, ours,
``missing_ranks`` (FR's "Not all ranks joining collective"). Every problem is one row of
``mismatches``: kind ``type``, ``dtype``, ``size`` or ``missing``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.ranks.collectives import parse_ranks

KEY_KINDS = ("seq", "ordinal", "stream order")
# ops whose message size is rank-dependent: no size check
_SIZE_FREE = frozenset({"all_to_all", "all_to_allv", "send", "recv", "unknown"})
MISMATCH_COLUMNS = ("instance", "pg", "key_kind", "key", "kind", "ranks", "detail")


@dataclass(frozen=True)
class Matching:
    """``instance`` is aligned with the rows of the frame given (position i: row i), -1 for a row
    that no other rank ran (an instance needs two ranks, or a group of one). ``instances`` has one
    row per instance: ``instance``, ``key_kind``, ``pg``, ``key``, ``op``, ``members`` (ranks
    expected), ``present`` (ranks seen), ``complete``, ``state``. ``coverage`` = rows in complete
    instances / rows."""

    instance: npt.NDArray[np.int64]
    key_kind: str  # the one key kind used, or "mixed" (then per instance in ``instances``)
    instances: pd.DataFrame
    mismatches: pd.DataFrame
    coverage: float
    rows: int
    matched_rows: int


def match_collectives(colls: pd.DataFrame) -> Matching:
    """Match the rows of all ranks' collectives tables (``rank`` column added) across ranks."""
    n = len(colls)
    if n == 0:
        return Matching(
            np.empty(0, dtype=np.int64),
            "none",
            _empty_instances(),
            pd.DataFrame({c: [] for c in MISMATCH_COLUMNS}),
            0.0,
            0,
            0,
        )
    df = pd.DataFrame(
        {
            "pos": np.arange(n, dtype=np.int64),
            "rank": colls["rank"].to_numpy(dtype=np.int64),
            "pg": colls["pg"].fillna("").astype(str).to_numpy(),
            "op": colls["op"].astype(str).to_numpy(),
            # a send on one rank pairs with a recv on its peer: one type for the type check
            "op_type": colls["op"].astype(str).replace({"send": "p2p", "recv": "p2p"}).to_numpy(),
            "seq": colls["seq"].to_numpy(dtype=np.int64),
            "ordinal": colls["ordinal"].to_numpy(dtype=np.int64),
            "start_ns": colls["start_ns"].to_numpy(dtype=np.int64),
            "dtype": colls["dtype"].to_numpy(dtype=object),
            "in_nelems": colls["in_nelems"].to_numpy(dtype=np.float64),
            "out_nelems": colls["out_nelems"].to_numpy(dtype=np.float64),
            "pg_ranks": colls["pg_ranks"].fillna("").astype(str).to_numpy(),
            "group_size": colls["group_size"].to_numpy(dtype=np.int64),
        }
    )
    # key kind per process group
    has_seq = (df["seq"] >= 0).groupby(df["pg"]).transform("all").to_numpy(dtype=bool)
    named = (df["pg"] != "").to_numpy()
    kind = np.where(named & has_seq, "seq", np.where(named, "ordinal", "stream order"))
    df["key_kind"] = kind
    df["by_op"] = np.where(kind == "stream order", df["op"].to_numpy(), "")
    df = df.sort_values(["rank", "ordinal", "start_ns"], kind="stable")
    stream_key = df.groupby(["rank", "op"], sort=False).cumcount().to_numpy(dtype=np.int64)
    k = df["key_kind"].to_numpy()
    df["key"] = np.where(
        k == "seq", df["seq"].to_numpy(), np.where(k == "ordinal", df["ordinal"].to_numpy(), stream_key)
    )
    df["sub"] = df.groupby(["pg", "by_op", "key", "rank"], sort=False).cumcount().to_numpy(dtype=np.int64)
    df["group"] = df.groupby(["pg", "by_op", "key", "sub"], sort=True).ngroup().to_numpy(dtype=np.int64)
    df = df.sort_values("pos", kind="stable")

    members = _members(df)
    g = df.groupby("group", sort=True)
    agg = pd.DataFrame(
        {
            "key_kind": g["key_kind"].first(),
            "pg": g["pg"].first(),
            "key": g["key"].first(),
            "op": g["op"].first(),
            "n_present": g["rank"].nunique(),
            "n_rows": g["rank"].size(),
            "n_ops": g["op_type"].nunique(),
            "n_dtypes": g["dtype"].nunique(dropna=True),
            "n_in": g["in_nelems"].nunique(dropna=True),
            "n_out": g["out_nelems"].nunique(dropna=True),
        }
    )
    present = g["rank"].agg(lambda r: tuple(sorted(set(r.tolist()))))
    agg["present"] = present
    agg["members"] = [members[pg] if members[pg] else p for pg, p in zip(agg["pg"], present, strict=True)]
    n_members = np.array([len(m) for m in agg["members"]], dtype=np.int64)
    matched = (agg["n_present"].to_numpy() >= 2) | (n_members <= 1)
    complete = agg["n_present"].to_numpy() >= n_members
    inst_of_group = np.full(len(agg), -1, dtype=np.int64)
    inst_of_group[matched] = np.arange(int(matched.sum()), dtype=np.int64)
    agg["instance"] = inst_of_group
    agg["complete"] = complete

    size_checked = ~agg["op"].isin(_SIZE_FREE).to_numpy()
    type_bad = agg["n_ops"].to_numpy() > 1
    dtype_bad = agg["n_dtypes"].to_numpy() > 1
    size_bad = size_checked & ((agg["n_in"].to_numpy() > 1) | (agg["n_out"].to_numpy() > 1))
    missing = ~complete
    agg["state"] = np.select(
        [type_bad, dtype_bad, size_bad, missing],
        ["collective_type_mismatch", "collective_dtype_mismatch", "size_or_syntax_mismatch", "missing_ranks"],
        "fully_matched",
    )
    mismatches = _mismatch_rows(df, agg, type_bad, dtype_bad, size_bad, missing)

    instance = inst_of_group[df["group"].to_numpy()]
    rows_complete = complete[df["group"].to_numpy()] & (instance >= 0)
    inst = agg[matched][["instance", "key_kind", "pg", "key", "op", "members", "present", "complete", "state"]]
    kinds = sorted(set(inst["key_kind"])) if len(inst) else sorted(set(df["key_kind"]))
    return Matching(
        instance=instance,
        key_kind=kinds[0] if len(kinds) == 1 else "mixed",
        instances=inst.reset_index(drop=True),
        mismatches=mismatches,
        coverage=float(rows_complete.sum()) / n,
        rows=n,
        matched_rows=int(rows_complete.sum()),
    )


def _members(df: pd.DataFrame) -> dict[str, tuple[int, ...]]:
    """The ranks expected in each process group ("" and unreadable lists: none, i.e. the ranks
    present), kept to the ranks that have a trace here."""
    traced = set(df["rank"].tolist())
    out: dict[str, tuple[int, ...]] = {}
    for pg, rows in df.groupby("pg", sort=False):
        ranks: list[int] | None = None
        if pg:
            texts = rows["pg_ranks"][rows["pg_ranks"] != ""]
            if len(texts):
                size = int(rows["group_size"].max())
                ranks = parse_ranks(str(texts.iloc[0]), size if size > 0 else None)
        have = sorted(set(ranks) & traced) if ranks else sorted(set(rows["rank"].tolist()))
        out[str(pg)] = tuple(have)
    return out


def _mismatch_rows(
    df: pd.DataFrame,
    agg: pd.DataFrame,
    type_bad: npt.NDArray[np.bool_],
    dtype_bad: npt.NDArray[np.bool_],
    size_bad: npt.NDArray[np.bool_],
    missing: npt.NDArray[np.bool_],
) -> pd.DataFrame:
    bad = type_bad | dtype_bad | size_bad | missing
    recs: list[dict[str, object]] = []
    if bad.any():
        rows_of = df[np.isin(df["group"].to_numpy(), agg.index.to_numpy()[bad])].groupby("group")
        for pos in np.flatnonzero(bad):
            a = agg.iloc[pos]
            rows = rows_of.get_group(agg.index[pos])
            base = {"instance": int(a["instance"]), "pg": a["pg"], "key_kind": a["key_kind"], "key": int(a["key"])}
            for flag, kind, col in (
                (type_bad, "type", "op"),
                (dtype_bad, "dtype", "dtype"),
                (size_bad, "size", "in_nelems"),
            ):
                if flag[pos]:
                    cols = [col, "out_nelems"] if kind == "size" else [col]
                    by_value = rows.groupby(cols, dropna=False)["rank"].agg(lambda r: sorted(set(r.tolist())))
                    detail = "; ".join(f"{_value(v)}: ranks {rs}" for v, rs in by_value.items())
                    recs.append(
                        {**base, "kind": kind, "ranks": tuple(sorted(set(rows["rank"].tolist()))), "detail": detail}
                    )
            if missing[pos]:
                gone = tuple(sorted(set(a["members"]) - set(a["present"])))
                recs.append(
                    {
                        **base,
                        "kind": "missing",
                        "ranks": gone,
                        "detail": f"{a['op']} not run by ranks {list(gone)} (run by {list(a['present'])})",
                    }
                )
    return pd.DataFrame(recs, columns=list(MISMATCH_COLUMNS))


def _value(v: object) -> str:
    if isinstance(v, tuple):
        return "/".join(_value(x) for x in v)
    if isinstance(v, float):
        return "?" if np.isnan(v) else f"{v:g}"
    return str(v)


def _empty_instances() -> pd.DataFrame:
    return pd.DataFrame(
        {c: [] for c in ("instance", "key_kind", "pg", "key", "op", "members", "present", "complete", "state")}
    )
