"""The cross-rank rules DS102-DS105 (issue 13 item 6) on real multi-rank traces.

Each expected value is recomputed here from the combined run's tables (``RankRun``) or from the
traces' own args, not read back from the rule; the YAML cases (fixtures/rules/DS10x.yaml) run
through the harness's ``ranks:`` key, tested here too.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fixture_paths import FIXTURE_TRACES, HTA, REPO

from traceadvisor.engine.rule import RankRule
from traceadvisor.pipeline import rank_summary
from traceadvisor.ranks.combine import RankRun, combine
from traceadvisor.ranks.summary import RankSummary
from traceadvisor.report.finding import Finding
from traceadvisor.testing import CaseError, check_case, find_rule, load_case_file, run_case

BASELINE = FIXTURE_TRACES / "multirank" / "baseline_2r"
INPUT_DELAY = FIXTURE_TRACES / "multirank" / "input_delay_2r"
SAMPLED = (HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz")
CASES = REPO / "fixtures" / "rules"
DERIVED = CASES / "DS104_baseline_2r_rank1_two_steps.json.gz"


def _run(paths: tuple[Path, ...], hosts: dict[int, str] | None = None) -> RankRun:
    summaries = [rank_summary(str(p)) for p in paths]
    for i, host in (hosts or {}).items():
        summaries[i] = dataclasses.replace(summaries[i], host=host)
    return combine(summaries)


def _findings(code: str, run: RankRun, **options: Any) -> list[Finding]:
    cls = find_rule(code)
    rule = cls(cls.make_options(options))
    assert isinstance(rule, RankRule)
    return list(rule.check_ranks(run))


@pytest.fixture(scope="module")
def baseline() -> RankRun:
    return _run(tuple(sorted(BASELINE.glob("rank*.json.gz"))))


@pytest.fixture(scope="module")
def sampled() -> RankRun:
    return _run(SAMPLED)


# -- DS102 exposed-communication ---------------------------------------------------------------
def test_exposed_transfer_is_the_mean_over_ranks_of_the_per_step_breakdown(baseline: RankRun) -> None:
    b = baseline.breakdown
    # by hand: exposed communication minus its wait part, per (rank, step); mean per rank, then over ranks
    transfer = (b["comm_exposed_ns"] - b["exposed_wait_ns"]).groupby(b["rank"]).mean()
    exposed = float(transfer.mean())
    step = float(b["step_ns"].mean())
    assert 100.0 * exposed / step > 5.0  # the DDP baseline's last buckets run after backward
    (f,) = _findings("DS102", baseline)
    assert f.impact is not None
    assert f.impact.saving_per_step_us == pytest.approx(exposed / 1e3)
    assert f.impact.share_pct == pytest.approx(100.0 * exposed / step)
    assert f.ranks == (0, 1)
    # all the transfer is in all-reduces: DDP advice, no accumulation (3 different bucket sizes per step)
    assert set(baseline.metrics.instances["op"]) == {"all_reduce"}
    assert "bucket_cap_mb" in f.recommendation and "no_sync" not in f.recommendation
    # the bar is the option: just above the share, nothing
    assert _findings("DS102", baseline, min_share_pct=100.0 * exposed / step + 0.01) == []


def test_exposed_wait_of_a_straggler_is_not_exposed_transfer() -> None:
    run = _run(tuple(sorted(INPUT_DELAY.glob("rank*.json.gz"))))
    b = run.breakdown
    per_rank = b.groupby("rank")[["exposed_wait_ns", "exposed_transfer_ns"]].mean()
    # rank 0 waits ~50 ms per step for rank 1's input: all of its exposed communication is wait
    assert per_rank.loc[0, "exposed_wait_ns"] > 40e6 and per_rank.loc[0, "exposed_transfer_ns"] == 0
    share = 100.0 * per_rank["exposed_transfer_ns"].mean() / b["step_ns"].mean()
    assert share < 5.0
    assert _findings("DS102", run) == []
    (f,) = _findings("DS102", run, min_share_pct=share - 0.01)
    assert f.ranks == (1,)  # rank 0 has none


# -- DS103 low-bus-bandwidth -------------------------------------------------------------------
def _by_hand(run: RankRun, min_bytes: float) -> pd.DataFrame:
    """Transfer busbw per instance from the collectives' own times and args (nccl-tests: all-reduce
    2(n-1)/n, all-gather (n-1)/n), grouped by op and power-of-two size."""
    c = run.collectives[run.collectives["instance"] >= 0]
    states = run.matching.instances.set_index("instance")["state"]
    rows = []
    for inst, g in c.groupby("instance"):
        if states[inst] != "fully_matched":
            continue
        op = str(g["op"].iloc[0])
        n = g["rank"].nunique()
        factor = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "all_to_all": (n - 1) / n}[op]
        dtype_bytes = {"Float": 4, "Char": 1, "Byte": 1, "Long": 8, "Int": 4}[str(g["dtype"].iloc[0])]
        nelems = g["out_nelems"].iloc[0] if op == "all_gather" else g["in_nelems"].iloc[0]
        nbytes = float(nelems) * dtype_bytes
        t = int((g["end_ns"] - g["start_ns"]).min())
        if nbytes >= min_bytes:
            rows.append(
                {"instance": inst, "op": op, "bucket": math.floor(math.log2(nbytes)), "t": t, "bw": nbytes / t * factor}
            )
    df = pd.DataFrame(rows)
    df["best"] = df.groupby(["op", "bucket"])["bw"].transform("max")
    df["excess"] = df["t"] - df["t"] * df["bw"] / df["best"]
    return df


def test_slow_all_gather_against_the_best_of_its_size(sampled: RankRun) -> None:
    hand = _by_hand(sampled, 8e6)
    ag = hand[hand["op"] == "all_gather"].sort_values("bw")
    assert len(ag) == 2 and ag["bucket"].nunique() == 1  # two 1 GiB all-gathers
    slow = ag.iloc[0]
    ratio = slow["bw"] / slow["best"]
    assert 0.5 < ratio < 0.75
    assert _findings("DS103", sampled) == []  # not below half of the best
    (f,) = _findings("DS103", sampled, max_ratio=0.75)
    assert f.data["instances"] == [int(slow["instance"])]
    assert f.data["busbw_gbps"] == [pytest.approx(slow["bw"])]
    assert f.data["best_busbw_gbps"] == pytest.approx(slow["best"])
    steps = sampled.breakdown["step"].nunique()
    assert f.impact is not None and f.impact.saving_per_step_us == pytest.approx(slow["excess"] / steps / 1e3)
    assert f.ranks == (0, 1)


def test_every_slow_bucket_is_one_finding(baseline: RankRun) -> None:
    hand = _by_hand(baseline, 1e6)
    slow = hand[hand["bw"] < 0.5 * hand["best"]]
    found = _findings("DS103", baseline, min_message_mb=1.0)
    got = {(f.data["op"], tuple(f.data["instances"])) for f in found}
    want = {(str(op), tuple(sorted(int(i) for i in g["instance"]))) for (op, _), g in slow.groupby(["op", "bucket"])}
    assert got == want and len(found) >= 1
    for f in found:
        rows = hand[hand["instance"].isin(f.data["instances"])]
        assert f.data["excess_ns"] == pytest.approx(rows.sort_values("instance")["excess"].tolist())
    assert _findings("DS103", baseline) == []  # every message is under 8 MB


# -- DS104 collective-mismatch -----------------------------------------------------------------
def test_dtype_and_size_mismatches_of_the_sampled_pair(sampled: RankRun) -> None:
    c = sampled.collectives
    per = c.groupby("instance").agg(
        op=("op", "first"), dtypes=("dtype", "nunique"), sizes=("in_nelems", "nunique"), outs=("out_nelems", "nunique")
    )
    dtype_bad = set(per.index[per["dtypes"] > 1])
    # element counts are checked except on all-to-all (uneven splits are legal)
    size_bad = set(per.index[(per["op"] != "all_to_all") & ((per["sizes"] > 1) | (per["outs"] > 1))])
    assert len(dtype_bad) == 4 and len(size_bad) == 2
    (f,) = _findings("DS104", sampled)
    assert f.data["by_state"] == {"COLLECTIVE_DTYPE_MISMATCH": len(dtype_bad), "SIZE_OR_SYNTAX_MISMATCH": len(size_bad)}
    assert {m["instance"] for m in f.data["mismatches"]} == dtype_bad | size_bad
    assert f.severity.value == "medium"  # matched by order alone: the trace has no pg / Seq
    assert set(c["pg"]) == {""}


def derive_shorter_window(source: Path) -> dict[str, Any]:
    """``source`` with every event from its last ProfilerStep on left out (metadata kept): the same
    rank, profiled one step less (the derived trace of DS104's missing-ranks case)."""
    with gzip.open(source, "rt") as fh:
        doc = json.load(fh)
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    cut = max(float(e["ts"]) for e in steps)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "M" or float(e.get("ts", 0)) < cut]
    return dict(doc)


def test_derived_trace_is_the_baseline_rank1_one_step_shorter() -> None:
    with gzip.open(DERIVED, "rt") as fh:
        committed = json.load(fh)
    assert committed == derive_shorter_window(BASELINE / "rank1.json.gz")


def test_missing_ranks_from_a_shorter_capture_window() -> None:
    run = _run((BASELINE / "rank0.json.gz", DERIVED))
    per_rank = run.collectives.groupby("rank").size()
    missing = int(per_rank[0] - per_rank[1])
    assert missing == 3  # 3 all-reduces per step, one step fewer on rank 1
    (f,) = _findings("DS104", run)
    assert f.data["collectives"] == missing and f.ranks == (1,)
    assert f.data["windows_differ"] and f.severity.value == "medium"
    assert run.matching.coverage == pytest.approx((len(run.collectives) - missing) / len(run.collectives))


# -- DS105 clock-misaligned --------------------------------------------------------------------
def _residual_by_hand(run: RankRun, hosts: dict[int, str]) -> tuple[float, float]:
    """nsys-jax's recipe on the implicit-sync collectives spanning both hosts, the first profiled
    step left out: MAD of each host's end skew minus its median, and the median duration."""
    c = run.collectives  # unaligned: the alignment is what is being checked
    c = c[(c["instance"] >= 0) & c["op"].isin(["all_reduce", "all_gather", "all_to_all", "reduce_scatter"])]
    first = c.loc[c["step"] >= 0, "step"].min()
    c = c[~c.groupby("instance")["step"].transform(lambda s: (s == first).any())]
    c = c.assign(host=c["rank"].map(hosts))
    c = c[c.groupby("instance")["host"].transform("nunique") > 1]
    rel = (c["end_ns"] - c.groupby("instance")["end_ns"].transform("min")).astype(float)
    dev = rel - rel.groupby(c["instance"]).transform("mean")
    skew = dev.groupby([c["instance"], c["host"]]).mean().rename("skew").reset_index()
    corrected = skew["skew"] - skew.groupby("host")["skew"].transform("median")
    residual = float(np.median(np.abs(corrected - np.median(corrected))))
    return residual, float(np.median((c["end_ns"] - c["start_ns"]).to_numpy()))


def test_refused_alignment_is_reported() -> None:
    hosts = {0: "", 1: "node1"}
    run = _run(SAMPLED, {1: "node1"})
    residual, median_dur = _residual_by_hand(run, hosts)
    assert residual > 0.1 * median_dur
    (f,) = _findings("DS105", run)
    assert f.data["residual_ns"] == pytest.approx(residual)
    assert f.data["median_dur_ns"] == pytest.approx(median_dur)
    assert f.ranks == (1,) and f.impact is None


def test_aligned_hosts_say_nothing() -> None:
    paths = tuple(sorted(BASELINE.glob("rank*.json.gz")))
    run = _run(paths, {1: "vm2"})
    residual, median_dur = _residual_by_hand(run, {0: "vm", 1: "vm2"})
    assert residual < 0.1 * median_dur
    assert _findings("DS105", run) == []


# -- the harness's ranks: key ------------------------------------------------------------------
@pytest.mark.parametrize("code", ["DS102", "DS103", "DS104", "DS105"])
def test_case_files_use_real_traces_only(code: str) -> None:
    cf = load_case_file(CASES / f"{code}.yaml")
    for case in cf.cases.values():
        assert "ranks" in case and "events" not in case
        for entry in case["ranks"]:
            assert Path(entry["path"]).is_file(), entry


def test_a_directory_is_its_traces_sorted() -> None:
    case = load_case_file(CASES / "DS102.yaml").cases["ddp_buckets_exposed"]
    assert [Path(e["path"]).name for e in case["ranks"]] == ["rank0.json.gz", "rank1.json.gz"]


def test_ranks_and_one_trace_are_exclusive() -> None:
    case = {"ranks": [str(p) for p in SAMPLED], "trace": str(SAMPLED[0]), "expect": []}
    with pytest.raises(CaseError, match="ranks or one trace"):
        run_case(find_rule("DS102"), case)
    with pytest.raises(CaseError, match="not a cross-rank rule"):
        run_case(find_rule("SY101"), {"ranks": [str(p) for p in SAMPLED]})


def test_a_wrong_expectation_on_a_ranks_case_fails() -> None:
    case = dict(load_case_file(CASES / "DS104.yaml").cases["all_matched"])
    case["expect"] = [{"severity": "high"}]
    with pytest.raises(AssertionError, match="expected 1 findings, got 0"):
        check_case(find_rule("DS104"), case)
    with pytest.raises(CaseError, match=r"ranks\[0\]: unknown key 'hots'"):
        run_case(find_rule("DS105"), {"ranks": [{"path": str(SAMPLED[0]), "hots": "x"}, str(SAMPLED[1])]})


def _first_step_only(summary: RankSummary, shift_ns: int, host: str) -> RankSummary:
    """``summary`` cut to its first profiled step (a one-step capture), its times ``shift_ns`` later
    and its host renamed: a rank on another host whose clock is ``shift_ns`` ahead (known truth)."""
    t = {k: v.copy() for k, v in summary.tables.items()}
    first = int(t["steps"]["step"].min())
    keep = t["collectives"]["step"].to_numpy() == first
    new_index = np.cumsum(keep) - 1  # old collective row -> new row
    t["collectives"] = t["collectives"][keep].reset_index(drop=True)
    ex = t["comm_exposed"]
    ex = ex[keep[ex["coll"].to_numpy(dtype=np.int64)]].copy()
    ex["coll"] = new_index[ex["coll"].to_numpy(dtype=np.int64)]
    t["comm_exposed"] = ex.reset_index(drop=True)
    for name in ("steps", "breakdown", "host_gaps"):
        t[name] = t[name][t[name]["step"] == first].reset_index(drop=True)
    for name, cols in TIME_COLUMNS.items():
        for c in cols:
            t[name][c] = t[name][c].to_numpy(dtype=np.int64) + shift_ns
    return dataclasses.replace(summary, tables=t, host=host)


TIME_COLUMNS = {
    "collectives": ("start_ns", "end_ns"),
    "steps": ("start_ns", "end_ns", "cpu_end_ns"),
    "breakdown": ("start_ns",),
    "comm_exposed": ("start_ns", "end_ns"),
    "host_gaps": ("start_ns", "end_ns"),
}


@pytest.mark.parametrize("shift_ns", [0, 20_000_000])
def test_no_alignment_possible_and_the_ends_disagree(shift_ns: int) -> None:
    """One profiled step (the alignment leaves the first step out, so it has nothing to use): the
    rule compares the cross-host ends with the collectives' durations itself."""
    r0, r1 = (rank_summary(str(p)) for p in sorted(BASELINE.glob("rank*.json.gz")))
    run = combine([_first_step_only(r0, 0, "vm"), _first_step_only(r1, shift_ns, "vm2")])
    assert run.alignment.method == "none"
    c = run.collectives[run.collectives["instance"] >= 0]
    g = c.groupby("instance")
    skew = float(np.median((g["end_ns"].max() - g["end_ns"].min()).to_numpy()))
    dur = float(np.median((c["end_ns"] - c["start_ns"]).to_numpy()))
    found = _findings("DS105", run)
    if shift_ns:
        assert skew > 0.1 * dur  # 20 ms against all-reduces of a few ms
        (f,) = found
        assert f.data["median_end_skew_ns"] == pytest.approx(skew) and f.ranks == (1,)
    else:
        assert skew < 0.1 * dur and found == []  # one machine's clock: the ends agree
