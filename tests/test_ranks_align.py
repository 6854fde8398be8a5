"""Clock alignment across hosts (issue 13 item 4): synthetic offsets applied to real traces.

The truth is known because we put it there: one host's collective times are shifted by 0.2, 2 and
20 ms. The estimate must move by exactly that shift; against the truth it must be within 20 µs,
or its residual must exceed 20 µs (the collectives' ends disagree by more than the tolerance, and
the report says so).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from fixture_paths import FIXTURE_TRACES, HTA

from traceadvisor.ranks.align import align_clocks, apply_offsets
from traceadvisor.ranks.collectives import rank_collectives
from traceadvisor.ranks.match import match_collectives
from traceadvisor.trace.load import load_file

NCCL_DATA = HTA / "nccl_data.json.gz"
SAMPLED = (HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz")
MULTIRANK = FIXTURE_TRACES / "multirank"
SHIFTS_NS = (200_000, 2_000_000, 20_000_000)
TOLERANCE_NS = 20_000


def _ranked(paths: tuple[Path, ...]) -> pd.DataFrame:
    frames = []
    for p in paths:
        t = load_file(p)
        assert t.rank is not None
        frames.append(rank_collectives(t).assign(rank=t.rank))
    return pd.concat(frames, ignore_index=True)


def _shift(colls: pd.DataFrame, ranks: set[int], ns: int) -> pd.DataFrame:
    out = colls.copy()
    sel = out["rank"].isin(ranks)
    out.loc[sel, "start_ns"] += ns
    out.loc[sel, "end_ns"] += ns
    return out


def _pairs() -> list[tuple[str, tuple[Path, ...]]]:
    pairs: list[tuple[str, tuple[Path, ...]]] = [("hta_sampled", SAMPLED)]
    if MULTIRANK.exists():
        for d in sorted(MULTIRANK.iterdir()):
            paths = tuple(sorted(d.glob("rank*.json.gz")))
            if len(paths) >= 2:
                pairs.append((d.name, paths))
    return pairs


@pytest.mark.parametrize(("name", "paths"), _pairs(), ids=[n for n, _ in _pairs()])
def test_synthetic_offsets_recovered_or_residual_says_why(name: str, paths: tuple[Path, ...]) -> None:
    """Ranks of one machine (one clock: the true offset is 0) split into two 'hosts', the second
    half shifted: the estimate is the shift, within 20 µs or within what the residual admits."""
    colls = _ranked(paths)
    ranks = sorted(set(colls["rank"]))
    second = set(ranks[len(ranks) // 2 :])
    host_of = {r: ("b" if r in second else "a") for r in ranks}
    matching = match_collectives(colls)  # shifting times changes no key
    base = align_clocks(colls, matching, host_of)
    assert base.method == "collective-end" and base.reference_host == "a" and base.offsets_ns["a"] == 0
    for shift in SHIFTS_NS:
        a = align_clocks(_shift(colls, second, shift), matching, host_of)
        # the median moves with the shift, to the ns but for rounding
        assert abs(a.offsets_ns["b"] - base.offsets_ns["b"] - shift) <= 1
        error = abs(a.offsets_ns["b"] - shift)
        assert error <= TOLERANCE_NS or a.residual_ns > TOLERANCE_NS, (name, error, a.residual_ns)
        assert a.residual_ns == pytest.approx(base.residual_ns)
        assert a.refused == (a.residual_ns > 0.1 * a.median_dur_ns)
        if a.refused:
            assert a.warnings and a.applied_offsets_ns == {"a": 0, "b": 0}


def test_identical_ranks_recover_the_offset_exactly_and_apply_it() -> None:
    """nccl_data as ranks 0 and 1 on two hosts: the ends coincide, so each shift is recovered to the
    ns (residual 0), the first profiled step is left out, and applying the offsets undoes it."""
    one = rank_collectives(load_file(NCCL_DATA))
    colls = pd.concat([one.assign(rank=0), one.assign(rank=1)], ignore_index=True)
    matching = match_collectives(colls)
    host_of = {0: "h0", 1: "h1"}
    first_step = int(one.loc[one["step"] >= 0, "step"].min())
    implicit = one["op"].isin(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"])
    expected_used = int((implicit & (one["step"] != first_step)).sum())  # broadcasts and step 4 out
    for shift in SHIFTS_NS:
        shifted = _shift(colls, {1}, shift)
        a = align_clocks(shifted, matching, host_of)
        assert a.method == "collective-end" and not a.refused
        assert a.offsets_ns == {"h0": 0, "h1": shift} and a.residual_ns == 0.0
        assert a.n_instances == expected_used == 10
        assert a.describe() == "alignment: collective-end (residual 0.0 µs)"
        back = apply_offsets(shifted, a, host_of)
        assert back["start_ns"].tolist() == colls["start_ns"].tolist()
        assert back["end_ns"].tolist() == colls["end_ns"].tolist()


def test_one_host_is_skipped() -> None:
    colls = _ranked(SAMPLED)
    a = align_clocks(_shift(colls, {1}, 2_000_000), match_collectives(colls), {0: "node0", 1: "node0"})
    assert a.method == "shared-host" and a.offsets_ns == {"node0": 0}
    assert a.describe() == "alignment: shared-host"


def test_no_collective_spanning_hosts() -> None:
    """Only broadcasts (their ends are not simultaneous): nothing to align on."""
    one = rank_collectives(load_file(NCCL_DATA))
    one = one[one["op"] == "broadcast"]
    colls = pd.concat([one.assign(rank=0), one.assign(rank=1)], ignore_index=True)
    a = align_clocks(colls, match_collectives(colls), {0: "h0", 1: "h1"})
    assert a.method == "none" and a.offsets_ns == {"h0": 0, "h1": 0} and a.warnings
