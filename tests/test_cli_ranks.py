"""Several traces on the command line (issue 14): a rank claimed twice is warned about on stderr,
each finding names its ranks, and skipped rules are one line per reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fixture_paths import FIXTURE_TRACES

BASELINE = FIXTURE_TRACES / "multirank" / "baseline_2r"


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400"}
    return subprocess.run(
        [sys.executable, "-m", "traceadvisor", "analyze", *args], capture_output=True, text=True, timeout=300, env=env
    )


def test_a_rank_claimed_by_two_files_is_warned_about_on_stderr(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(BASELINE / "rank0.json.gz", folder / "rank0.json.gz")
    shutil.copy(BASELINE / "rank0.json.gz", folder / "rank0-again.json.gz")
    shutil.copy(BASELINE / "rank1.json.gz", folder / "rank1.json.gz")
    for extra in ([], ["--jobs", "2"]):  # in this process, and through the rank summaries
        p = analyze(str(folder), "-f", "json", *extra)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)  # the warning stays off stdout
        claimed = f"rank 0 is claimed by {folder / 'rank0-again.json.gz'} and {folder / 'rank0.json.gz'}"
        line = f"traceadvisor: warning: {claimed}"
        assert line in p.stderr.splitlines(), p.stderr
        assert line.removeprefix("traceadvisor: warning: ") in doc["ranks"]["problems"]
    clean = analyze(str(BASELINE), "-f", "json")
    assert clean.returncode == 0 and "claimed" not in clean.stderr


def test_multirank_findings_name_their_ranks_and_skipped_rules_group_by_reason() -> None:
    folder = FIXTURE_TRACES / "multirank" / "input_delay_4r"
    doc = json.loads(analyze(str(folder), "-f", "json").stdout)
    text = analyze(str(folder), "--all").stdout
    heads = [line for line in text.splitlines() if line[:1].isdigit() and ". [" in line[:6]]
    assert len(heads) == len(doc["findings"])
    for head, f in zip(heads, doc["findings"], strict=True):
        ranks = f["ranks"]
        label = f"[rank {ranks[0]}]" if len(ranks) == 1 else f"[ranks {', '.join(map(str, ranks))}]"
        assert label in head, head
    # A finding of every rank (TQ101 here) is one line, not one per rank.
    assert sum("(TQ101)" in h for h in heads) == 1
    reasons = {s["reason"] for s in doc["skipped"]}
    skipped = [line for line in text.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == len(reasons) and reasons
    # each rank's skips are kept, and each line says on which ranks its reason holds
    ranks = {t["path"]: t["rank"] for t in doc["traces"]}
    for reason in reasons:
        on = {ranks[s["trace"]] for s in doc["skipped"] if s["reason"] == reason}
        scope = "every rank" if on == set(ranks.values()) else ", ".join(f"rank {r}" for r in sorted(on))
        assert sum(f" on {scope}: {reason[:40]}" in line for line in skipped) == 1, (reason, skipped)


def test_a_gpu_and_a_cpu_trace_say_whose_skips_they_are() -> None:
    gpu, cpu = FIXTURE_TRACES / "train_step.json.gz", FIXTURE_TRACES / "cpu_slow_getitem.json.gz"
    p = analyze(str(gpu), str(cpu), "-f", "json")
    doc = json.loads(p.stdout)
    lacks = {Path(s["trace"]).name for s in doc["skipped"] if s["reason"].startswith("trace lacks gpu")}
    assert lacks == {cpu.name}  # the GPU trace runs its GPU rules
    (t,) = [t for t in doc["traces"] if Path(t["path"]).name == cpu.name]
    label = f"rank {t['rank']}" if t["rank"] is not None else cpu.name
    text = analyze(str(gpu), str(cpu)).stdout
    assert any(line.startswith("skipped ") and f" on {label}: trace lacks gpu" in line for line in text.splitlines())
