"""``traceadvisor diff BEFORE AFTER`` on real before/after captures (fixtures/traces/pair_*, p12_*,
multirank/*). Expected values are computed here from the raw trace events, not read from the code."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import typer
from fixture_paths import FIXTURE_TRACES, REPO
from typer.testing import CliRunner

from traceadvisor.diff import diff_runs, load_run
from traceadvisor.diff.model import Diff
from traceadvisor.diff.stats import permutation_test
from traceadvisor.diff_command import diff

MULTIRANK = FIXTURE_TRACES / "multirank"


def _pair(name: str) -> tuple[Path, Path]:
    return FIXTURE_TRACES / f"pair_{name}_before.json.gz", FIXTURE_TRACES / f"pair_{name}_after.json.gz"


@cache
def _diff(before: Path, after: Path) -> Diff:
    return diff_runs(load_run(before), load_run(after))


def _invoke(*args: str | Path) -> typer.testing.Result:
    app = typer.Typer()
    app.command()(diff)  # until cli.TOOL_COMMANDS registers "diff"
    return CliRunner().invoke(app, [str(a) for a in args])


# -- independent readings of the raw trace -------------------------------------------------------


def _events(path: Path) -> list[dict[str, object]]:
    with gzip.open(path) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _ns(us: object) -> int:
    return round(float(str(us)) * 1000)


def _raw_steps(path: Path) -> tuple[list[tuple[int, int]], list[int], list[tuple[str, int | None]]]:
    """(CPU window per ProfilerStep#N, end of each step, (kernel name, launch ts) per kernel).

    A step ends at its CPU end or at the end of the GPU work launched inside it, whichever is later
    (the host of a GPU-bound loop runs ahead; the runtime launch carries the kernel's correlation)."""
    ev = _events(path)
    steps = sorted(
        (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
        for e in ev
        if e.get("cat") in ("user_annotation", "cpu_op") and re.fullmatch(r"ProfilerStep#\d+", str(e["name"]))
    )
    launch: dict[object, int] = {}
    for e in ev:
        args = e.get("args")
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and isinstance(args, dict) and "correlation" in args:
            launch[args["correlation"]] = _ns(e["ts"])
    gpu = []
    kernels = []
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            args = e.get("args")
            at = launch.get(args.get("correlation")) if isinstance(args, dict) else None
            gpu.append((at, _ns(e["ts"]) + _ns(e["dur"])))
            if e.get("cat") == "kernel":
                kernels.append((str(e["name"]), at))
    ends = [max([ce, *(end for at, end in gpu if at is not None and cs <= at < ce)]) for cs, ce in steps]
    return steps, ends, kernels


def _profiled_step_ns(path: Path) -> float:
    """The mean spacing of step ends (the report's profiled step time)."""
    _, ends, _ = _raw_steps(path)
    return (ends[-1] - ends[0]) / (len(ends) - 1)


def _kernel_family(name: str) -> str:
    """A kernel's name without ``void``, template arguments and parameters; Triton's as written."""
    if name.startswith("triton_"):
        return name
    return re.split(r"[<(]", name.removeprefix("void "), maxsplit=1)[0].strip()


def _kernels_in_steps(path: Path) -> set[str]:
    steps, _, kernels = _raw_steps(path)
    return {_kernel_family(n) for n, at in kernels if at is not None and any(cs <= at < ce for cs, ce in steps)}


# -- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "resolved"),
    [
        # the sync pair drops the boolean-mask index (nonzero synchronises the host with the GPU)
        (*_pair("sync"), "SY101"),
        # pinned memory: the copy is no longer staged through a pageable buffer
        (*_pair("pinned"), "MC101"),
        (*_pair("tf32"), "PR101"),
        (
            FIXTURE_TRACES / "p12_item_gpu_before_stack.json.gz",
            FIXTURE_TRACES / "p12_item_gpu_after_stack.json.gz",
            "SY101",
        ),
    ],
)
def test_diff_names_the_resolved_finding_and_the_step_change(before: Path, after: Path, resolved: str) -> None:
    d = _diff(before, after)
    assert resolved in {f.code for f in d.findings if f.status == "resolved"}
    assert resolved not in {f.code for f in d.findings if f.status != "resolved"}
    expected = _profiled_step_ns(after) - _profiled_step_ns(before)
    assert d.profiled.delta_ns == pytest.approx(expected, abs=2)  # trace µs carry 3 decimals: 1 ns per end
    result = _invoke(before, after)
    assert result.exit_code == 0, result.output
    assert f"resolved: {resolved}" in result.stdout
    # the profiled change as the text renders it, signed: ms with three decimals, µs below 1 ms
    shown = f"{expected / 1e6:+.3f} ms" if abs(expected) >= 1e6 else f"{expected / 1e3:+.1f} µs"
    assert f"({shown}, " in result.stdout


def test_swapped_pair_fails_on_regression() -> None:
    before, after = _pair("pinned")
    ok = _invoke(before, after, "--fail-on-regression", "5")
    assert ok.exit_code == 0, ok.output
    swapped = _invoke(after, before, "--fail-on-regression", "5")
    assert swapped.exit_code == 1
    lines = swapped.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceadvisor: regression: predicted unprofiled step")
    # the pinned copy is ~5x faster: swapped, the profiled step grows by far more than 5 %
    assert _profiled_step_ns(before) > 1.05 * _profiled_step_ns(after)
    # the report still went to stdout before the exit
    assert "new: MC101" in swapped.stdout


def test_no_regression_within_the_threshold() -> None:
    before, _ = _pair("sync")
    same = _invoke(before, before, "--fail-on-regression", "0")
    assert same.exit_code == 0, same.output
    assert "unchanged: SY101" in same.stdout


@pytest.mark.parametrize("pair", ["sync", "pinned", "compile_elementwise"])
def test_category_deltas_reconcile_with_the_step_delta(pair: str) -> None:
    before, after = _pair(pair)
    b = _diff(before, after).breakdown
    assert b is not None
    step_delta = _profiled_step_ns(after) - _profiled_step_ns(before)
    assert sum(c.delta_ns for c in b.categories) + b.unexplained_delta_ns == pytest.approx(step_delta, abs=2)
    assert b.step_delta_ns == pytest.approx(step_delta, abs=2)


def test_category_deltas_reconcile_on_folders_of_ranks() -> None:
    before, after = MULTIRANK / "baseline_2r", MULTIRANK / "input_delay_2r"
    d = _diff(before, after)
    assert d.before_traces == d.after_traces == 2
    b = d.breakdown
    assert b is not None and b.basis.startswith("rank table")
    assert sum(c.delta_ns for c in b.categories) + b.unexplained_delta_ns == b.step_delta_ns
    # the injected input delay makes the other rank wait: the run is slower, by far more than 5 %
    result = _invoke(before, after, "--fail-on-regression", "5")
    assert result.exit_code == 1
    assert "rank 1:" in result.stdout


def test_kernels_added_and_removed_on_the_compile_pair() -> None:
    before, after = _pair("compile_elementwise")
    b, a = _kernels_in_steps(before), _kernels_in_steps(after)
    k = _diff(before, after).kernels
    assert {r.name for r in k.rows if r.bucket == "added"} == a - b
    assert {r.name for r in k.rows if r.bucket == "removed"} == b - a
    assert any(n.startswith("triton_") for n in a - b)  # Inductor's fused kernel replaces the eager chain


def test_kernels_added_and_removed_on_the_sync_pair() -> None:
    before, after = _pair("sync")
    b, a = _kernels_in_steps(before), _kernels_in_steps(after)
    k = _diff(before, after).kernels
    assert {r.name for r in k.rows if r.bucket == "added"} == a - b
    assert {r.name for r in k.rows if r.bucket == "removed"} == b - a
    assert b - a  # nonzero's cub kernels are gone


def test_too_few_steps() -> None:
    d = _diff(*_pair("fused_optimizer"))  # two profiled steps per side
    assert d.before_steps == d.after_steps == 2
    assert d.profiled.test is None
    assert "too few steps" in _invoke(*_pair("fused_optimizer")).stdout


def test_permutation_test_by_hand() -> None:
    # 3 vs 3 fully separated: 20 splits, 2 as extreme as the data (it and its mirror): p = 0.1
    t = permutation_test([1, 2, 3], [4, 5, 6])
    assert t is not None and t.exact and t.permutations == 20
    assert t.p_value == pytest.approx(2 / 20)
    assert t.cliffs_delta == 1.0
    # identical samples: every split is as extreme (|difference| 0 or more)
    same = permutation_test([5, 5, 5], [5, 5, 5])
    assert same is not None and same.p_value == 1.0 and same.cliffs_delta == 0.0
    assert permutation_test([1, 2], [3, 4, 5]) is None


def test_markdown_and_json() -> None:
    before, after = _pair("sync")
    md = _invoke(before, after, "--format", "markdown")
    assert md.exit_code == 0
    assert "## Findings" in md.stdout
    assert "pair\\_sync\\_before" in md.stdout  # underscores escaped: no italics
    js = _invoke(before, after, "-f", "json")
    data = json.loads(js.stdout)
    expected = (_profiled_step_ns(after) - _profiled_step_ns(before)) / 1000
    assert data["step_time"]["profiled"]["delta_us"] == pytest.approx(expected, abs=0.002)
    assert {"status": "resolved", "code": "SY101"}.items() <= next(
        f for f in data["findings"] if f["code"] == "SY101"
    ).items()


def test_output_file_and_bad_input(tmp_path: Path) -> None:
    before, after = _pair("sync")
    out = tmp_path / "d.md"
    r = _invoke(before, after, "-f", "markdown", "-o", out)
    assert r.exit_code == 0 and r.stdout == ""
    assert out.read_text().startswith("# diff:")
    bad = tmp_path / "nope.json"
    bad.write_text("{not json")
    r = _invoke(bad, after)
    assert r.exit_code == 2
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("traceadvisor: error:")


def _registered() -> bool:
    from traceadvisor.cli import TOOL_COMMANDS

    return "diff" in TOOL_COMMANDS


@pytest.mark.skipif(not _registered(), reason="not registered yet")
def test_python_m_traceadvisor_diff() -> None:
    before, after = _pair("pinned")
    run = subprocess.run(
        [sys.executable, "-m", "traceadvisor", "diff", str(after), str(before), "--fail-on-regression", "5"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert run.returncode == 1, run.stderr
    assert "regression" in run.stderr
    assert "new: MC101" in run.stdout


def test_html_is_self_contained_and_names_the_resolved_finding(tmp_path: Path) -> None:
    before, after = _pair("pinned")
    out = tmp_path / "d.html"
    r = _invoke(before, after, "-f", "html", "-o", out)
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # offline: nothing fetched (no script, stylesheet link, import or remote url)
    assert not re.search(r"<script|<link|@import|url\(", page)
    row = re.search(r"<tr class='finding-change' data-status='resolved' data-code='MC101'>", page)
    assert row is not None
    d = _diff(before, after)
    # the headline is the gate's change, as the text report words it
    from traceadvisor.diff.render import _signed

    assert _signed(d.gate.delta_ns) in page.split('id="headline"')[1].split("</p>")[0]
    # the breakdown chart: one pair of bars per category plus the unexplained remainder
    assert d.breakdown is not None
    chart = page.split('id="breakdown-chart"')[1].split("</svg>")[0]
    assert chart.count("<rect") == 2 + 2 * (len(d.breakdown.categories) + 1)


def test_html_escapes_trace_names() -> None:
    from dataclasses import replace

    from traceadvisor.diff.render_html import render_html

    d = _diff(*_pair("sync"))
    evil = "<script>alert(1)</script>&"
    row = replace(d.kernels.rows[0], name=evil, bucket="added")
    page = render_html(replace(d, kernels=replace(d.kernels, rows=(row,))))
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;" in page
