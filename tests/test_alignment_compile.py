"""The pad-gemm and compile what-if scenarios (traceadvisor/whatif/alignment.py, scenarios.compiled)
and the unaligned-gemm rule, on the real H100 pairs of fixtures/pairs12.json.

gpt_pad_vocab, storm_compile, gpt_compile and tfm_infer_compile are validation pairs: nothing in
either scenario was fitted on them (pad-gemm has no fitted constant; compile's host shares come from
mlp_compile, tfm_compile and mlp_infer_compile)."""

from __future__ import annotations

import json
import subprocess
import sys

import gpu_pairs
import numpy as np
import pytest

from traceadvisor import Finding
from traceadvisor.testing import find_rule
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.alignment import gemm_dims, unaligned_products
from traceadvisor.whatif.fusion import inside_annotation
from traceadvisor.whatif.host_time import HostTimeMap, Region, point_costs, thread_key
from traceadvisor.whatif.savings import Saving, scenario_saving
from traceadvisor.whatif.scenarios import (
    COMPILED_BACKWARD_HOST_SHARE,
    COMPILED_HOST_PER_LAUNCH,
    SCENARIOS,
    launch_segments,
    thread_runs,
)

# Run 14 (stack traces, its steps timed with CUPTI detached after each capture): the savings here
# are held to measured ones, which the main fixture timed with CUPTI left attached (tests/gpu_pairs.py).
FIXTURES, PAIRS = gpu_pairs.FIXTURES, gpu_pairs.CLEAN_PAIRS


def _trace(name: str) -> Trace:
    return gpu_pairs.clean_trace(f"p12_{name}")


def _findings(rule: str, name: str) -> tuple[Finding, ...]:
    return gpu_pairs.clean_findings(rule, f"p12_{name}")


@pytest.mark.parametrize(
    ("name", "dims", "mnk"),
    [
        ("aten::mm", [[4096, 384], [384, 50257]], (4096, 50257, 384)),
        ("aten::addmm", [[1152], [4096, 384], [384, 1152], [], []], (4096, 1152, 384)),
        ("aten::bmm", [[12, 256, 64], [12, 64, 256]], (256, 256, 64)),
        ("aten::linear", [[8, 256, 384], [50257, 384], [50257]], (2048, 50257, 384)),
        ("aten::matmul", [[8, 256, 384], [384, 50257]], (2048, 50257, 384)),
        ("aten::add", [[8, 4], [8, 4]], None),
        ("aten::mm", [[4096]], None),
    ],
)
def test_gemm_dims_from_recorded_shapes(name: str, dims: list[list[int]], mnk: tuple[int, int, int] | None) -> None:
    assert gemm_dims(name, json.dumps(dims).encode()) == mnk


def test_unaligned_products_are_the_lm_head_gemms() -> None:
    # nanoGPT's 50257-word vocabulary: the LM head's forward GEMM and its two backward GEMMs, per step
    bad = unaligned_products(_trace("gpt_pad_vocab_before_stack"))
    steps = len(_trace("gpt_pad_vocab_before_stack").steps.table)
    assert len(bad) == 3 * steps
    assert all(50257 in (m, n, k) for m, n, k in zip(bad["m"], bad["n"], bad["kdim"], strict=True))
    # they run far below the aligned GEMMs' rate, which is what the scenario re-times them at
    achieved = bad["flops"] / bad["dur_ns"] * 1e9
    assert (achieved < 0.5 * bad["rate"]).all()
    assert (bad["padded_ns"] < bad["dur_ns"]).all()


def test_padded_vocabulary_has_no_unaligned_product() -> None:
    assert len(unaligned_products(_trace("gpt_pad_vocab_after_stack"))) == 0
    assert scenario_saving(_trace("gpt_pad_vocab_after_stack"), "pad-gemm").refused is not None


def test_pad_gemm_saving_within_20_pct_of_measured() -> None:
    rec = PAIRS["gpt_pad_vocab"]
    assert rec["split"] == "validation" and rec["scenario"] == "pad-gemm"
    measured = rec["measured_saving_pct"]
    s = scenario_saving(_trace("gpt_pad_vocab_before_stack"), "pad-gemm")
    assert s.refused is None
    assert abs(s.share_pct - measured) <= 0.2 * measured, (s.share_pct, measured)


def test_unaligned_gemm_rule_reports_the_replayed_saving_and_is_silent_after() -> None:
    (found,) = _findings("unaligned-gemm", "gpt_pad_vocab_before_stack")
    s = scenario_saving(_trace("gpt_pad_vocab_before_stack"), "pad-gemm")
    assert found.code == "OP103" and found.severity.value == "high"
    assert found.impact is not None and found.impact.scenario == "pad-gemm"
    assert found.impact.saving_per_step_us == pytest.approx(s.saving_ns / 1e3)
    assert "50257" in found.message and "50304" in found.recommendation
    assert found.data["odd_dims"] == [50257]
    assert found.location is not None
    assert _findings("unaligned-gemm", "gpt_pad_vocab_after_stack") == ()


def test_compile_combines_what_inductor_changes() -> None:
    assert set(SCENARIOS["compile"].answers) == {"memory-bound", "cross-entropy", "unaligned-gemm"}
    t = _trace("gpt_compile_before_stack")
    parts = [scenario_saving(t, n) for n in ("fuse-elementwise", "fused-cross-entropy", "pad-gemm")]
    both = scenario_saving(t, "compile")
    assert all(p.refused is None for p in parts) and both.refused is None
    # together they save more than any one alone, and never more than the step
    assert both.saving_ns > max(p.saving_ns for p in parts)
    assert both.saving_ns < both.before_ns


@pytest.mark.parametrize(
    "pair",
    [
        "storm_compile",
        pytest.param(
            "gpt_compile",
            marks=pytest.mark.xfail(
                strict=True,
                reason="a known miss since the loop's steady state (docs/whatif.md): run 14's compiled side "
                "replays host-bound at its last step's host time, 32.5% against 24.3% measured "
                "(calibrated, within 20% on 6 of 9 runs)",
            ),
        ),
        "tfm_infer_compile",
    ],
)
def test_compile_saving_within_20_pct_on_the_validation_pairs(pair: str) -> None:
    """Nothing of the compile scenario was fitted on these pairs (its forward share comes from
    mlp_compile, tfm_compile and mlp_infer_compile of runs 14-16, its backward share from those
    trainers timed without a profiler). Run 14: storm_compile 35.9% against 34.8% measured,
    tfm_infer_compile 18.3% against 21.6%; gpt_compile 32.5% against 24.3% (26.9% before the
    steady-state replay)."""
    rec = PAIRS[pair]
    assert rec["split"] == "validation" and rec["scenario"] == "compile"
    s = scenario_saving(_trace(f"{pair}_before_stack"), "compile")
    assert s.refused is None
    measured = rec["measured_saving_pct"]
    assert abs(s.share_pct - measured) <= 0.2 * measured, (s.share_pct, measured)


def test_compile_fit_pairs_split_and_memsets_dropped() -> None:
    assert {PAIRS[p]["split"] for p in ("mlp_compile", "tfm_compile", "mlp_infer_compile")} == {"fit"}
    assert {PAIRS[p]["split"] for p in ("storm_compile", "gpt_compile", "tfm_infer_compile")} == {"validation"}
    # tfm_compile's eager step launches memsets inside its graph; the scenario zeroes them
    t = _trace("tfm_compile_before_stack")
    ov = SCENARIOS["compile"].build(t)
    memset = t.gpu["name"].astype(str).str.startswith("Memset").to_numpy()
    inside = {int(r) for seg in launch_segments(t) for r in seg.rows.tolist() if memset[r]}
    assert inside and all(ov.gpu_dur_ns.get(r) == 0 for r in inside)


def test_compile_refused_where_nothing_is_modelled() -> None:
    # the compiled storm: no fusible chain left, no loss, no unaligned GEMM
    s = scenario_saving(_trace("storm_compile_after_stack"), "compile")
    assert s.refused is not None


def test_no_compile_advice_where_compile_runs() -> None:
    # p12_gpt_compile_after: Inductor padded two of the LM head's GEMMs but left the weight gradient's
    # (50257 x 384 x 4096) unpadded; the fix text must not suggest the torch.compile that already runs
    rule = find_rule("unaligned-gemm")
    # rule files load by path and leave sys.modules again: reach the function through the rule's globals
    cls = rule if isinstance(rule, type) else type(rule)
    recommendation = cls.check.__globals__["recommendation"]
    compiled = _trace("gpt_compile_after_stack")
    assert len(unaligned_products(compiled)) == len(compiled.steps.table)
    assert "torch.compile already runs" in recommendation(compiled)
    assert "torch.compile the model" in recommendation(_trace("gpt_pad_vocab_before_stack"))


def test_a_share_region_keeps_its_share_of_the_time_left_after_point_costs() -> None:
    # a 1000 ns region on one thread with a 200 ns point cost inside: 800 ns are left, a 0.25
    # share keeps 200 of them, so a time after the region moves 200 + 600 ns earlier
    th = int(thread_key(np.array([1]), np.array([1]))[0])
    costs = point_costs(np.array([th]), np.array([1500], dtype=np.int64), np.array([200.0]))
    both = costs.plus(HostTimeMap(regions=(Region(th, 1000, 2000, 0, keep_share=0.25),)))
    assert both.removed(th, np.array([2500], dtype=np.int64)).tolist() == [800]
    # inside the region (1000-1800 once the cost is out: 600 ns go), a time 500 ns in moves to its start
    assert both.removed(th, np.array([1000, 1500], dtype=np.int64)).tolist() == [0, 500]
    whole = HostTimeMap(regions=(Region(th, 1000, 2000, 0, keep_share=1.0),))
    assert not whole  # keeping all of it removes nothing


def test_compile_keeps_the_host_share_of_the_launches_left() -> None:
    # the storm: 300 launches a step (Linear, LayerNorm, ReLU), one segment each step, all from the
    # step's thread (a forward); Inductor fuses each LayerNorm with its ReLU, so 200 launches are
    # left: the segment keeps the forward share x 200/300 of its host time
    t = _trace("storm_compile_before_stack")
    ov = SCENARIOS["compile"].build(t)
    regions = ov.host_removed.regions
    assert len(regions) == len(t.steps.table)
    assert all(r.keep_share == pytest.approx(COMPILED_HOST_PER_LAUNCH * 200 / 300) for r in regions)
    assert sum(1 for d in ov.gpu_dur_ns.values() if d == 0) == 100 * len(t.steps.table)


def test_compile_splits_forward_and_backward_launches() -> None:
    # a trainer's segment: the forward's launches from the step's thread, then the backward's from the
    # autograd engine's thread; each run keeps its own share (the forward's per kernel still launched,
    # the backward's the share measured without a profiler)
    assert 0 < COMPILED_HOST_PER_LAUNCH < 1.0 and 0 < COMPILED_BACKWARD_HOST_SHARE < 1.0
    t = _trace("mlp_compile_before_stack")
    runs = thread_runs(t, launch_segments(t))
    first_step = [r for r in runs if r.start_ns < int(t.steps.table["cpu_end_ns"].iloc[0])]
    assert [r.step_thread for r in first_step[:2]] == [True, False]
    forward, backward = first_step[:2]
    assert forward.end_ns <= backward.start_ns
    rt, launch = t.runtime, t.gpu["launch"].to_numpy()
    assert len(set(rt["tid"].to_numpy()[launch[forward.rows]].tolist())) == 1
    assert set(rt["tid"].to_numpy()[launch[forward.rows]].tolist()).isdisjoint(
        rt["tid"].to_numpy()[launch[backward.rows]].tolist()
    )
    regions = SCENARIOS["compile"].build(t).host_removed.regions
    by_start = {r.start_ns: r.keep_share for r in regions}
    assert by_start[backward.start_ns] == COMPILED_BACKWARD_HOST_SHARE
    assert by_start[forward.start_ns] is not None
    assert by_start[forward.start_ns] <= COMPILED_HOST_PER_LAUNCH  # fused kernels no longer launched
    assert by_start[forward.start_ns] != COMPILED_BACKWARD_HOST_SHARE


def test_the_backward_share_is_the_measured_one() -> None:
    """COMPILED_BACKWARD_HOST_SHARE is the host-time ratio fixtures/host_phases_bench.py measured on the
    fit pairs' trainers (backward() timed without a profiler, compiled over eager), not a fitted value;
    the validation pair it also timed is not in it."""
    doc = json.loads((gpu_pairs.FIXTURES / "host_phases" / "host_phases.json").read_text())
    ratios = []
    for name in ("mlp_compile", "tfm_compile"):
        assert PAIRS[name]["split"] == "fit"
        med = doc["programs"][name]["median"]
        ratios.append(med["compiled"]["backward_us"] / med["eager"]["backward_us"])
    assert COMPILED_BACKWARD_HOST_SHARE == pytest.approx(sum(ratios) / len(ratios), abs=0.005)
    # each step host-bound when measured (the phases' wall time is host time): the CUDA-event step
    # within 10% of the phases' sum
    for name in ("mlp_compile", "tfm_compile"):
        for side in ("eager", "compiled"):
            med = doc["programs"][name]["median"][side]
            assert med["step_us"] == pytest.approx(med["host_us"], rel=0.1)


def test_compile_leaves_the_optimizer_out() -> None:
    # mlp_compile: the fused AdamW step's launches (inside Optimizer.step#) are not in the graph
    t = _trace("mlp_compile_before_stack")
    segments = launch_segments(t)
    ops = t.gpu["op"].to_numpy()
    has = np.flatnonzero(ops >= 0)
    optimizer = has[inside_annotation(t, ops[has], "Optimizer.")]
    assert len(optimizer) > 0
    compiled = launch_segments(t, exclude=optimizer)
    assert sum(len(s.rows) for s in compiled) == sum(len(s.rows) for s in segments) - len(optimizer)


def test_whatif_compile_lists_every_finding_it_answers() -> None:
    path = gpu_pairs.CLEAN / "traces" / "p12_gpt_compile_before_stack.json.gz"
    p = subprocess.run(
        [sys.executable, "-m", "traceadvisor", "whatif", str(path), "--apply", "compile,pad-gemm", "-f", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    by = {s["name"]: s for s in json.loads(p.stdout)["scenarios"]}
    # compile answers the findings whose savings came from its parts, by their rules
    assert set(by["compile"]["findings"]) == {"OP301 cross-entropy", "OP103 unaligned-gemm", "RF101 memory-bound"}
    assert by["pad-gemm"]["findings"] == ["OP103 unaligned-gemm"]
    # the combination names each rule it answers once
    assert by["combined"]["answers"] == ["memory-bound", "cross-entropy", "unaligned-gemm"]
    assert by["combined"]["after_step_us"] == pytest.approx(by["compile"]["after_step_us"], abs=1e-6)


def test_saving_reaches_is_the_rules_gate() -> None:
    s = Saving("pad-gemm", before_ns=1000.0, after_ns=980.0)
    assert s.share_pct == pytest.approx(2.0)
    assert s.reaches(2.0) and not s.reaches(2.1)
    assert not Saving("pad-gemm", 1000.0, 500.0, refused="nothing to pad").reaches(0.0)
    assert not Saving("pad-gemm", 1000.0, 1200.0).reaches(0.1)  # slower: saves nothing


def test_the_backward_share_holds_on_the_h200() -> None:
    """Run 35 timed the same trainers on an H200 (fixtures/host_phases/run_35/): the fit pairs'
    backward ratios moved apart (0.73 and 0.90 against 0.80 and 0.82) and their median over both
    machines is still the constant. Their forward, compiled over eager, kept 0.92 and 1.01 of its
    host time (0.95 and 0.87 on the H100), more than the scenario's per-launch share keeps of a
    trainer's forward: taking the measured share instead lost gpt_compile on most runs
    (docs/whatif.md, "Run 35"), so the scenario keeps the fitted one."""
    backward, forward = [], []
    for path in (
        gpu_pairs.FIXTURES / "host_phases" / "host_phases.json",
        gpu_pairs.FIXTURES / "host_phases" / "run_35" / "host_phases.json",
    ):
        doc = json.loads(path.read_text())
        for name in ("mlp_compile", "tfm_compile"):
            med = doc["programs"][name]["median"]
            backward.append(med["compiled"]["backward_us"] / med["eager"]["backward_us"])
            forward.append(med["compiled"]["forward_us"] / med["eager"]["forward_us"])
    assert COMPILED_BACKWARD_HOST_SHARE == pytest.approx(float(np.median(backward)), abs=0.005)
    t = _trace("mlp_compile_before_stack")
    kept = [r.keep_share for r in SCENARIOS["compile"].build(t).host_removed.regions]
    forward_kept = [k for k in kept if k is not None and k != COMPILED_BACKWARD_HOST_SHARE]
    assert forward_kept and max(forward_kept) < min(forward)
