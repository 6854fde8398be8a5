"""The multi-rank analysis end to end on real CPU multi-process runs (gloo DDP, fixtures/capture_multirank.py):
the injected straggler is the top finding, with its rank, its class and a saving within 20% of the
difference measured without the profiler (``fixtures/multirank.json``); the breakdown adds up; the
scale-out path gives the same report."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from fixture_paths import FIXTURE_TRACES, HTA, REPO

from traceadvisor.pipeline import analyze, analyze_scaled, rank_summary
from traceadvisor.ranks.combine import combine

MULTIRANK = FIXTURE_TRACES / "multirank"
TRUTH = json.loads((REPO / "fixtures" / "multirank.json").read_text())
SCENARIOS = {k: v for k, v in TRUTH.get("scenarios", TRUTH).items() if isinstance(v, dict) and "measured" in v}
INJECTED = sorted(k for k, v in SCENARIOS.items() if v.get("straggler_rank") is not None)


@pytest.mark.parametrize("scenario", INJECTED)
def test_the_injected_straggler_is_the_top_finding_with_its_rank_class_and_measured_saving(scenario: str) -> None:
    truth = SCENARIOS[scenario]
    report = analyze([MULTIRANK / scenario])
    top = report.findings[0]
    assert top.code == "DS101", [f.code for f in report.findings]
    assert top.ranks == (truth["straggler_rank"],)
    assert top.data["class"] == truth["class"]
    assert report.ranks is not None and report.ranks.straggler == truth["straggler_rank"]
    measured_us = truth["measured"]["measured_saving_us"]
    assert top.impact is not None and top.impact.saving_per_step_us is not None
    err = (top.impact.saving_per_step_us - measured_us) / measured_us
    predicted_us = top.impact.saving_per_step_us
    assert abs(err) <= 0.20, f"{scenario}: predicted {predicted_us:.0f} µs, measured {measured_us:.0f} µs"


def test_a_host_straggler_is_located_at_its_own_function() -> None:
    report = analyze([MULTIRANK / "host_straggler_2r"])
    loc = report.findings[0].location
    assert loc is not None and loc.function == "slow_host_preprocessing" and loc.file.endswith("capture_multirank.py")


def test_the_baseline_has_no_straggler() -> None:
    report = analyze([MULTIRANK / "baseline_2r"])
    assert report.ranks is not None and report.ranks.straggler is None
    assert not any(f.code == "DS101" for f in report.findings)
    assert not any(r.straggler for r in report.ranks.rows)


@pytest.mark.parametrize(
    "paths",
    [
        sorted((MULTIRANK / "input_delay_4r").glob("rank*.json.gz")),
        sorted((MULTIRANK / "uneven_work_2r").glob("rank*.json.gz")),
        [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"],
    ],
    ids=["input_delay_4r", "uneven_work_2r", "hta_sampled_pair"],
)
def test_the_breakdown_adds_up_to_the_step_and_exposed_comm_splits_into_wait_and_transfer(paths: list[Path]) -> None:
    run = combine([rank_summary(str(p)) for p in paths])
    b = run.breakdown
    assert len(b) > 0
    total = b["compute_ns"] + b["comm_exposed_ns"] + b["memcpy_exposed_ns"] + b["idle_ns"]
    assert (total == b["step_ns"]).all()
    assert (b[["compute_ns", "comm_exposed_ns", "memcpy_exposed_ns", "idle_ns"]] >= 0).all().all()
    assert (b["exposed_wait_ns"] + b["exposed_transfer_ns"] == b["comm_exposed_ns"]).all()
    assert (b["exposed_wait_ns"] >= 0).all() and (b["exposed_transfer_ns"] >= 0).all()


def test_the_waiting_rank_shows_its_wait_as_exposed_wait_and_the_straggler_shows_none() -> None:
    run = combine([rank_summary(str(p)) for p in sorted((MULTIRANK / "input_delay_2r").glob("rank*.json.gz"))])
    per = run.breakdown.groupby("rank")[["exposed_wait_ns", "step_ns"]].mean()
    assert per.loc[0, "exposed_wait_ns"] > 0.4 * per.loc[0, "step_ns"]  # rank 0 waits ~50 ms of ~75
    assert per.loc[1, "exposed_wait_ns"] < 0.05 * per.loc[1, "step_ns"]


def test_a_finding_on_every_rank_is_reported_once_with_the_ranks_listed() -> None:
    report = analyze([MULTIRANK / "input_delay_4r"])
    tq = [f for f in report.findings if f.code == "TQ101"]
    assert len(tq) == 1 and tq[0].ranks == (0, 1, 2, 3)


def test_the_scaled_path_gives_the_in_process_report(tmp_path: Path) -> None:
    """--jobs: summaries built in worker processes and cached beside the traces, then combined."""
    for p in (MULTIRANK / "host_straggler_2r").glob("rank*.json.gz"):
        shutil.copy(p, tmp_path / p.name)
    direct = analyze([tmp_path])
    scaled = analyze_scaled([tmp_path], jobs=2)
    cached = sorted(p.name for p in tmp_path.glob("*.tasummary"))
    assert cached == ["rank0.json.gz.tasummary", "rank1.json.gz.tasummary"]
    again = analyze_scaled([tmp_path], jobs=1)  # from the cache
    for rep in (scaled, again):
        assert [(f.code, f.ranks) for f in rep.findings] == [(f.code, f.ranks) for f in direct.findings]
        assert rep.findings[0].impact == direct.findings[0].impact
        assert rep.ranks == direct.ranks


def test_cli_rank_focus_and_rank_table(tmp_path: Path) -> None:
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "traceadvisor", "analyze", str(MULTIRANK / "input_delay_2r"), "--no-cache", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "COLUMNS": "200"},
        )

    text = cli()
    assert text.returncode == 0, text.stderr
    assert "1 (straggler)" in text.stdout and "exposed wait" in text.stdout
    assert "rank-straggler (DS101) [rank 1]" in text.stdout
    focused = json.loads(cli("--rank", "0", "-f", "json").stdout)
    assert [t["rank"] for t in focused["traces"]] == [0]
    assert all(0 in f["ranks"] for f in focused["findings"])
    missing = cli("--rank", "7")
    assert missing.returncode != 0 and missing.stderr.count("\n") == 1 and "--rank 7" in missing.stderr
    assert not list((MULTIRANK / "input_delay_2r").glob("*.tasummary"))  # --no-cache writes nothing


def test_gpus_per_node_puts_ranks_on_hosts_and_missing_ranks_are_said() -> None:
    """HTA's sampled pair names no host; with --gpus-per-node 1 the two ranks are two hosts, so the
    clocks are aligned on collective ends (refused here: the sampled kernels' ends disagree by far
    more than 10% of the median collective). The pair is 2 of a 128-rank job: said, not guessed."""
    summaries = [rank_summary(str(HTA / f"sampled_rank-{i}.json.gz")) for i in (0, 1)]
    assert combine(summaries).alignment.method == "shared-host"
    run = combine(summaries, gpus_per_node=1)
    assert run.ranks["host"].tolist() == ["node0", "node1"]
    assert run.alignment.method == "collective-end" and run.alignment.refused
    assert any(p.startswith("2 of 128 ranks given") for p in run.problems)


GPU_TRUTH = json.loads((REPO / "fixtures" / "multirank_gpu.json").read_text())
GPU_RUNS = {k: v for k, v in GPU_TRUTH.get("scenarios", GPU_TRUTH).items() if isinstance(v, dict) and "measured" in v}
# The 4x batch on a GPU both ranks share: measured 1.2 ms per step; the trace's lead excess is 5.0 ms,
# most of it the profiler's cost of the bigger batch's Python collate (4x the recorded frames), which an
# uncalibrated cost model cannot take out reliably (build.profiler_time_before).
GPU_KNOWN_MISS = {
    "uneven_work_2r": "the profiler inflates the straggler's 4x Python collate: 5.0 ms predicted, 1.2 measured"
}


@pytest.mark.parametrize("run", sorted(k for k, v in GPU_RUNS.items() if v.get("straggler_rank") is not None))
def test_two_ranks_sharing_a_gpu(run: str) -> None:
    """Real CUDA runs (an H100 shared by 2 gloo ranks): the straggler's saving within 20% of measured."""
    truth = GPU_RUNS[run]
    report = analyze([FIXTURE_TRACES / "multirank_gpu" / run])
    top = report.findings[0]
    measured_us = truth["measured"]["measured_saving_us"]
    saving = top.impact.saving_per_step_us if top.code == "DS101" and top.impact else None
    ok = saving is not None and abs(saving - measured_us) / measured_us <= 0.20
    if run in GPU_KNOWN_MISS:
        assert not ok, f"{run} now within 20%: drop its known miss"
        pytest.xfail(GPU_KNOWN_MISS[run])
    assert top.code == "DS101" and top.ranks == (truth["straggler_rank"],) and top.data["class"] == truth["class"]
    assert ok, f"{run}: predicted {saving} µs, measured {measured_us:.0f} µs"
    # the waiting rank's GPU idles inside the collective: its exposed wait, not "model compute"
    assert report.ranks is not None
    waiting = [r for r in report.ranks.rows if not r.straggler]
    assert all(r.exposed_wait_us > 0.5 * r.step_us for r in waiting)
    assert not any(f.code == "GK101" and "gloo" in f.recommendation for f in report.findings)


def test_profiler_cost_is_taken_out_of_the_progress_only_for_a_calibrated_trace() -> None:
    from traceadvisor.ranks.build import profiler_time_before
    from traceadvisor.trace.load import load_file

    trace = load_file(MULTIRANK / "uneven_work_2r" / "rank1.json.gz")
    times = trace.steps.table["cpu_end_ns"].to_numpy()
    assert (profiler_time_before(trace, times) == 0).all()
    trace = load_file(MULTIRANK / "uneven_work_2r" / "rank1.json.gz")
    trace.meta.traceadvisor = {"unprofiled_step_us": [23000.0, 24000.0, 23500.0]}
    removed = profiler_time_before(trace, times)
    assert (removed > 0).all() and (removed[1:] > removed[:-1]).all()
