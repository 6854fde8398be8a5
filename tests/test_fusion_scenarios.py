"""The fusion what-if scenarios (traceadvisor/whatif/fusion.py) and the rules that report them, on
the real H100 pairs of runs 14 and 15 (fixtures/pairs12_runs/): each scenario's replayed saving on the BEFORE trace
against the saving measured without the profiler, the rules firing on the before traces and silent
on the after traces, and the cross-entropy fix claiming nothing where it measured slower."""

from __future__ import annotations

import gpu_pairs
import numpy as np
import pytest

from traceadvisor import Finding
from traceadvisor.roofline.view import of as roofline_of
from traceadvisor.trace.model import Trace
from traceadvisor.whatif import fusion
from traceadvisor.whatif.savings import Saving, scenario_saving

# Runs 14 (stack) and 15 (nostack): the savings here are held to measured ones, which the main
# fixture timed with CUPTI left attached (tests/gpu_pairs.py).
FIXTURES = gpu_pairs.FIXTURES
PAIRS = gpu_pairs.CLEAN_PAIRS


def _trace(name: str) -> Trace:
    return gpu_pairs.clean_trace(f"p12_{name}")


def _findings(rule: str, name: str) -> tuple[Finding, ...]:
    return gpu_pairs.clean_findings(rule, f"p12_{name}")


def _saving(name: str, scenario: str) -> Saving:
    return scenario_saving(_trace(name), scenario)


# pair, trace variant, scenario: the predicted saving is within 20% of the measured one.
# adamw with stacks is not claimed: the profiler cost model takes more Python-frame time out of the
# per-tensor loop than it held (its unprofiled step is 37% under the measured one), leaving the
# fix little host time to remove (replayed 36% against 59%).
CLAIMED = [
    ("adamw", "before_nostack", "fused-optimizer"),
    ("sdpa", "before_stack", "sdpa"),
    ("elementwise", "before_stack", "fuse-elementwise"),
]


@pytest.mark.parametrize(("pair", "variant", "scenario"), CLAIMED, ids=[c[0] for c in CLAIMED])
def test_replayed_saving_within_20_pct_of_measured(pair: str, variant: str, scenario: str) -> None:
    rec = gpu_pairs.clean_pair(pair, variant.split("_")[1])
    assert rec["scenario"] == scenario
    measured = rec["measured_saving_pct"]
    s = _saving(f"{pair}_{variant}", scenario)
    assert s.refused is None
    assert abs(s.share_pct - measured) <= 0.2 * measured, (s.share_pct, measured)


def test_fused_cross_entropy_claims_nothing_where_it_measured_no_gain() -> None:
    # gpt_loss: torch.compile of the loss measured no gain it can tell from noise (run 14: +6.8%,
    # its rounds' own savings from -3.3 to +10.2% at the median's 95% interval; the main fixture,
    # timed with CUPTI left attached: -4.8%); the step is host-bound (GPU work ~10 ms of a ~12.7 ms
    # step), so faster loss kernels are off the critical path.
    rounds = [
        (b - a) / b * 100.0
        for b, a in zip(
            PAIRS["gpt_loss"]["before_step_us"]["repeats"], PAIRS["gpt_loss"]["after_step_us"]["repeats"], strict=True
        )
    ]
    assert min(rounds) < 0 < max(rounds)
    s = _saving("gpt_loss_before_stack", "fused-cross-entropy")
    assert s.refused is None and s.changed > 0  # the scenario applied: it found the loss ...
    assert s.share_pct < 1.0  # ... and the replay says it saves (next to) nothing


@pytest.mark.parametrize(
    ("name", "scenario"),
    [
        ("adamw_after_stack", "fused-optimizer"),  # _fused_adamw_ runs
        ("sdpa_after_stack", "sdpa"),  # cuDNN attention runs
        ("elementwise_after_stack", "fuse-elementwise"),  # the compiled chain is a few Triton kernels
        ("sdpa_before_stack", "fused-cross-entropy"),  # no log_softmax over a vocabulary
    ],
)
def test_scenario_refused_where_the_fix_is_in_place(name: str, scenario: str) -> None:
    assert _saving(name, scenario).refused


def test_fused_optimizer_models_the_multi_tensor_launches() -> None:
    # p12_adamw_after runs _fused_adamw_ as 2 multi_tensor_apply launches per step (36 + 28 of 64
    # tensors of 256×256 fp32, 53.7-54.1 µs together); the model replaces each per-tensor step's
    # kernels by 2 launches whose time is within 20% of that.
    before, after = _trace("adamw_before_stack"), _trace("adamw_after_stack")
    groups = fusion.optimizer_groups(before)
    assert len(groups) == len(before.steps.table) == 2
    k = after.kernels
    fused = k[k["name"].astype(str).str.contains("multi_tensor_apply_kernel").to_numpy() & (k["dur_ns"] > 10_000)]
    measured_ns = float(fused["dur_ns"].sum()) / len(groups)
    for g in groups:
        assert g.launches == 2
        assert abs(g.fused_ns - measured_ns) <= 0.2 * measured_ns, (g.fused_ns, measured_ns)
        ov = fusion._overrides([g])
        assert sum(d > 0 for d in ov.gpu_dur_ns.values()) == 2
        assert len(ov.gpu_dur_ns) == len(g.rows) > 500


def test_sdpa_replaces_every_score_product_at_the_flash_rate() -> None:
    trace = _trace("sdpa_before_stack")
    groups = fusion.attention_groups(trace)
    k = roofline_of(trace).kernels
    in_steps = fusion._step_of_gpu(trace, k["ts_ns"].to_numpy()) >= 0
    bmm = k[(k["op_name"].astype(str) == "aten::bmm").to_numpy() & in_steps]
    replaced = np.concatenate([g.rows for g in groups])
    assert set(bmm.index.tolist()) <= set(replaced.tolist())  # all 6 products of each step
    # forward Q·Kᵀ and P·V of 64 × 2048 × 2048 × 64 (2 × 34.4 GFLOP); the backward's 4 products
    # become 5 (Q·Kᵀ recomputed): 7 × 34.4 GFLOP per step at 0.6 of the GEMMs' FLOP/s
    steps = len(trace.steps.table)
    per_step_ns = sum(g.fused_ns for g in groups) / steps
    flops = 7 * 2 * 64 * 2048 * 2048 * 64
    gemm = k[(k["op_class"] == "matmul").to_numpy() & (k["bound"] == "compute").to_numpy()]
    rate = fusion.FLASH_VS_GEMM * float(gemm["flops"].sum()) / float(gemm["dur_ns"].sum()) * 1e9
    assert per_step_ns == pytest.approx(flops / rate * 1e9, rel=0.01)


def test_achieved_bandwidth_is_the_big_kernels() -> None:
    # the chain's 8.4 M-element fp32 kernels run at 2.9-3.1 TB/s (H100 SXM datasheet 3.35 TB/s)
    bw = fusion.achieved_bandwidth(_trace("elementwise_before_stack"))
    assert 2.8e12 < bw < 3.35e12


# rule, pair: fires on the before trace with the scenario's replayed saving, silent on the after.
RULES = [
    ("optimizer-not-fused", "adamw", "nostack", "fused-optimizer"),
    ("optimizer-not-fused", "adamw", "stack", "fused-optimizer"),
    ("unfused-attention", "sdpa", "stack", "sdpa"),
    ("memory-bound", "elementwise", "stack", "fuse-elementwise"),
]


@pytest.mark.parametrize(("rule", "pair", "variant", "scenario"), RULES, ids=[f"{r[0]}-{r[2]}" for r in RULES])
def test_rule_reports_the_replayed_saving(rule: str, pair: str, variant: str, scenario: str) -> None:
    (found,) = _findings(rule, f"{pair}_before_{variant}")
    s = _saving(f"{pair}_before_{variant}", scenario)
    assert found.impact is not None and found.impact.scenario == scenario
    assert found.impact.saving_per_step_us == pytest.approx(s.saving_ns / 1e3)
    assert found.impact.share_pct == pytest.approx(s.share_pct)
    assert found.severity.value in ("medium", "high")


@pytest.mark.parametrize(
    ("rule", "name"),
    [
        ("optimizer-not-fused", "adamw_after_nostack"),
        ("optimizer-not-fused", "adamw_after_stack"),
        ("unfused-attention", "sdpa_after_stack"),
        ("memory-bound", "elementwise_after_stack"),
        ("cross-entropy", "gpt_loss_before_stack"),  # host-bound: the replay saves nothing
        ("cross-entropy", "gpt_loss_after_stack"),  # the loss is compiled
    ],
)
def test_rule_silent(rule: str, name: str) -> None:
    assert _findings(rule, name) == ()


def test_cross_entropy_fires_on_the_gpu_bound_gpt_trainer() -> None:
    # p12_gpt_compile_before: the same eager GPT trainer at a GPU-bound size; the fp32 loss chain
    # (cast, log_softmax, fill, backward, cast back over 4096 × 50257 logits) is 3.5 ms per step.
    (found,) = _findings("cross-entropy", "gpt_compile_before_stack")
    s = _saving("gpt_compile_before_stack", "fused-cross-entropy")
    assert found.impact is not None and found.impact.scenario == "fused-cross-entropy"
    assert found.impact.saving_per_step_us == pytest.approx(s.saving_ns / 1e3) and s.share_pct >= 2.0
    assert "50257-word vocabulary" in found.message and "fp32 logits" in found.message
    assert found.data["loss_us"] > 0 and found.data["share_pct"] >= 10.0
    # the loss kernels' own time bounds the saving: a fused loss still runs
    assert s.saving_ns < float(found.data["loss_us"]) * 1e3 / len(_trace("gpt_compile_before_stack").steps.table)
