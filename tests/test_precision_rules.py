"""mixed-precision, channels-last and fp32-matmul on the issue 12 GPU pairs (fixtures/pairs12.json):
the scenarios behind them (whatif/precision.py, the tf32 scenario) and the rules' replayed savings
against the measured ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import gpu_pairs
import numpy as np
import pytest

from traceadvisor.roofline.view import of as roofline_of
from traceadvisor.whatif import precision
from traceadvisor.whatif.replay import Overrides
from traceadvisor.whatif.savings import saving_of, scenario_saving

FIXTURES, TRACES, PAIRS = gpu_pairs.FIXTURES, gpu_pairs.TRACES, gpu_pairs.PAIRS
RUNS = [json.loads(p.read_text())["pairs"] for p in sorted((FIXTURES / "pairs12_runs").glob("*.json"))]
GPT = ["p12_gpt_compile_before_stack", "p12_gpt_batch_before_stack", "p12_gpt_loss_before_stack"]


_trace = gpu_pairs.trace
_findings = gpu_pairs.findings


def _measured_pct(pair: str) -> float:
    return float(PAIRS[pair]["measured_saving_pct"])


# -- mixed-precision / the bf16 scenario ------------------------------------------------------------


def test_bf16_predicts_no_saving_where_autocast_measured_slower() -> None:
    # conv_bf16: a small ResNet-18 whose step is host-bound measured 19% SLOWER under autocast; the
    # scenario must not promise a saving there, and the rule must stay silent.
    assert _measured_pct("conv_bf16") < 0
    s = scenario_saving(_trace("p12_conv_bf16_before_stack"), "bf16")
    assert s.refused is None
    assert s.after_ns > s.before_ns  # predicted slower, as measured
    assert s.share_pct == 0.0
    assert _findings("mixed-precision", "p12_conv_bf16_before_stack") == ()


def test_bf16_casts_cost_host_time_in_a_host_bound_step() -> None:
    # The casts autocast adds are what make conv_bf16 slower: the kernels alone would save a
    # little (they shrink; the host paces the step), with the casts the step is longer than before.
    trace = _trace("p12_conv_bf16_before_stack")
    ov = precision.bf16(trace)
    assert ov.host_dur_ns, "the casts' host ops are modelled"
    kernels_only = saving_of(trace, "bf16-kernels", Overrides(gpu_dur_ns=ov.gpu_dur_ns))
    with_casts = scenario_saving(trace, "bf16")
    assert with_casts.after_ns > kernels_only.after_ns
    # one cast costs the host more than a one-kernel elementwise op (an aten::to is four dispatches)
    leaf = precision._unprofiled_op_ns(trace, precision._LEAF_OPS)
    assert precision.cast_host_ns(trace) == pytest.approx(precision.CAST_PER_LEAF_OP * leaf)
    assert 5_000 < leaf < 40_000


def test_bf16_refuses_where_autocast_already_runs() -> None:
    for name in GPT:
        s = scenario_saving(_trace(name), "bf16")
        assert s.refused is not None and "autocast already runs" in s.refused, name
        assert _findings("mixed-precision", name) == (), name


def test_bf16_scales_compute_bound_fp32_kernels_by_the_peak_ratio() -> None:
    # p12_tf32_before: 4096³ fp32 GEMMs on the CUDA cores (ffma), compute-bound: at the bf16 peak
    # they take fp32 / bf16 peak (67 / 989.5 TFLOP/s) of their time; the ReLU between them is left alone.
    trace = _trace("p12_tf32_before_stack")
    peaks = roofline_of(trace).peaks
    assert peaks is not None
    ov = precision.bf16(trace)
    k = trace.kernels
    gemm = k[k["name"].astype(str).str.contains("ffma").to_numpy() & (k["launch"].to_numpy() >= 0)]
    assert set(ov.gpu_dur_ns) == set(gemm.index.tolist())
    ratio = peaks.flops["fp32"] / peaks.flops["bf16"]
    scaled = precision._converted_durations(trace, gemm.index, peaks, peaks.flops["bf16"])
    assert scaled == pytest.approx(gemm["dur_ns"].to_numpy() * ratio, rel=1e-6)
    # each aten::mm's first kernel also pays its casts (weight to bf16, its gradient back, and the
    # step's input once): 4096² elements at 6 bytes each over 3.35 TB/s is 30 µs a tensor
    added = np.array([ov.gpu_dur_ns[int(r)] for r in gemm.index]) - scaled
    assert np.all(added >= -1) and 25_000 < added.max() < 120_000


def test_bf16_keeps_latency_bound_kernels_and_halves_memory_bound_ones() -> None:
    trace = _trace("p12_conv_bf16_before_stack")
    rk = roofline_of(trace).kernels
    mk, half = precision.matrix_kernels(trace)
    rows = mk.index[~half.to_numpy()]
    new = precision._converted_durations(trace, rows, *precision.bf16_ratio(trace))
    scale = new / trace.kernels.loc[rows, "dur_ns"].to_numpy()
    bound = rk["bound"].reindex(rows).astype(object).to_numpy()
    tf32 = (rk["peak_figure"].reindex(rows).astype(object) == "tf32").to_numpy()
    assert (bound == "latency").any() and (bound == "memory").any() and (bound == "compute").any()
    assert np.all(scale[bound == "latency"] == 1.0)  # fixed cost: no faster in bf16
    # a memory-bound kernel gains at most its halved bytes
    assert np.all(scale[bound == "memory"] >= 0.5 - 1e-9)
    # TF32 -> bf16: compute-bound kernels gain the peak ratio (989.5 / 494.5), memory-bound ones half the bytes
    assert np.allclose(scale[tf32 & (bound != "latency")], 0.5, atol=0.001)


# -- fp32-matmul (PR101) and its relation to mixed-precision ---------------------------------------


def test_fp32_matmul_reports_the_replayed_tf32_saving_within_20pct_of_measured() -> None:
    (f,) = _findings("fp32-matmul", "p12_tf32_before_stack")
    assert f.impact is not None and f.impact.scenario == "tf32"
    measured = _measured_pct("tf32")  # 85.1%
    assert f.impact.share_pct == pytest.approx(measured, rel=0.2)
    assert f.impact.saving_per_step_us == pytest.approx(
        scenario_saving(_trace("p12_tf32_before_stack"), "tf32").saving_ns / 1e3
    )
    assert _findings("fp32-matmul", "p12_tf32_after_stack") == ()


def test_mixed_precision_reports_only_what_bf16_saves_beyond_tf32() -> None:
    trace = _trace("p12_tf32_before_stack")
    bf16, tf32 = scenario_saving(trace, "bf16"), scenario_saving(trace, "tf32")
    assert bf16.saving_ns > tf32.saving_ns > 0
    (f,) = _findings("mixed-precision", "p12_tf32_before_stack")
    assert f.impact is not None
    assert f.impact.saving_per_step_us * 1e3 == pytest.approx(bf16.saving_ns - tf32.saving_ns, rel=1e-6)
    (pr101,) = _findings("fp32-matmul", "p12_tf32_before_stack")
    assert pr101.impact is not None
    total = (f.impact.saving_per_step_us + pr101.impact.saving_per_step_us) * 1e3
    assert total == pytest.approx(bf16.saving_ns, rel=1e-6)  # no time claimed twice


# -- channels-last ---------------------------------------------------------------------------------


def test_channels_last_removes_the_cudnn_transposes_and_their_launches() -> None:
    before, after = _trace("p12_conv_cl_before_stack"), _trace("p12_conv_cl_after_stack")
    tk = precision.layout_transposes(before)
    # nchwToNhwc / nhwcToNchw around each convolution, forward and backward: 161 per step
    assert len(tk) == 161 * len(before.steps.table)
    assert precision.layout_transposes(after).empty  # channels_last: none of them
    ov = precision.channels_last(before)
    assert all(ov.gpu_dur_ns[int(r)] == 0 and ov.gpu_delay_ns[int(r)] == 0 for r in tk.index)
    assert len(ov.host_removed.regions) == len(np.unique(tk["launch"].to_numpy()))
    assert scenario_saving(after, "channels-last").refused is not None


def test_channels_last_saving_lies_within_the_measured_runs() -> None:
    # conv_cl is a validation pair (nothing was fitted on it) on a host-bound step, and its measured
    # saving moves from run to run (4.5%, 8.6%, 13.9%): the prediction must lie within them.
    measured = [_measured_pct("conv_cl")] + [float(r["conv_cl"]["measured_saving_pct"]) for r in RUNS]
    (f,) = _findings("channels-last", "p12_conv_cl_before_stack")
    assert f.impact is not None and f.impact.scenario == "channels-last"
    assert min(measured) <= f.impact.share_pct <= max(measured)
    assert _findings("channels-last", "p12_conv_cl_after_stack") == ()


def test_channels_last_silent_without_convolutions() -> None:
    for name in ["p12_tf32_before_stack", *GPT]:
        assert _findings("channels-last", name) == (), name


def _whatif_json(trace: Path, apply: str) -> dict[str, Any]:
    p = subprocess.run(
        [sys.executable, "-m", "traceadvisor", "whatif", str(trace), "--apply", apply, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout))


def test_whatif_command_knows_both_scenarios() -> None:
    report = _whatif_json(TRACES / "p12_conv_cl_before_stack.json.gz", "channels-last,bf16")
    by = {s["name"]: s for s in report["scenarios"]}
    assert by["channels-last"]["answers"] == ["channels-last"]
    assert by["bf16"]["answers"] == ["mixed-precision"]
    assert by["channels-last"]["changed"] > 0
