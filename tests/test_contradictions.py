"""No advice the trace contradicts (issue 12 item 7), each kind on the real traces where it occurred.

- communication kernels (NCCL/RCCL, c10d symmetric memory) are neither low-occupancy (GK301) nor
  in the roofline (so not memory-bound, RF101);
- idle-gap's fix text follows its cause: no DataLoader advice for model compute, no fused/foreach
  advice where those kernels run;
- the annotation Bottleneck line is named only when annotations hold most of the time, and never
  recommends the optimizer implementation that already runs;
- a GPU trace cut off mid-write is still a GPU trace.
"""

from __future__ import annotations

import gzip
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

from traceadvisor.analyses.annotation_time import annotation_time
from traceadvisor.analyses.communication import communication_kernels, is_communication_name
from traceadvisor.pipeline import analyze, analyze_traces, configure
from traceadvisor.report.model import Report
from traceadvisor.roofline import view as roofline
from traceadvisor.summary.annotations import (
    MIN_ANNOTATED_PCT,
    annotated_pct,
    annotation_advice,
    annotation_summary,
    multi_tensor_in_use,
)
from traceadvisor.summary.roofline import roofline_summary
from traceadvisor.trace.load import load
from traceadvisor.trace.model import Trace

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "fixtures" / "traces"
HTA = ROOT / "fixtures" / "external" / "hta"
TRACELENS = ROOT / "fixtures" / "external" / "tracelens"

# The external traces on which GK301 rated a communication kernel before (one per kernel family:
# NCCL 2.1x ncclKernel_*, NCCL 2.19+ ncclDevKernel_* on ROCm (RCCL), c10d's multimem all-reduce).
WITH_COMMUNICATION = {
    "nccl_allreduce": HTA / "nccl_data.json.gz",
    "nccl_sendrecv": HTA / "sampled_rank-0.json.gz",
    "rccl_generic": TRACELENS / "mi300" / "resnet_act_checkpoint.json.gz",
    "multimem_all_reduce": TRACELENS / "b200" / "eager_trace.json.gz",
}


@cache
def _trace(path: Path) -> Trace:
    return load(path)[0]


@cache
def _report(path: Path) -> Report:
    return analyze_traces([_trace(path)], configure(select=["GK101", "GK301", "RF101"]))


def _findings(path: Path, code: str) -> list[str]:
    return [f"{f.message}\n{f.recommendation}" for f in _report(path).findings if f.code == code]


# -- 1. communication kernels ------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(WITH_COMMUNICATION))
def test_communication_kernels_are_not_low_occupancy(case: str) -> None:
    path = WITH_COMMUNICATION[case]
    trace = _trace(path)
    comm = communication_kernels(trace)
    names = set(trace.gpu.loc[comm, "name"].astype(str))
    assert names, "the trace has communication kernels"
    assert all(is_communication_name(n) for n in names)
    for text in _findings(path, "GK301"):
        assert not any(n[:40] in text for n in names), text
        assert "nccl" not in text.lower() and "multimem" not in text.lower(), text


@pytest.mark.parametrize("case", sorted(WITH_COMMUNICATION))
def test_communication_kernels_have_no_roofline_row(case: str) -> None:
    trace = _trace(WITH_COMMUNICATION[case])
    rows = roofline.of(trace).kernels
    assert not rows.index.isin(communication_kernels(trace)).any()


@pytest.mark.parametrize("case", sorted(WITH_COMMUNICATION))
def test_the_roofline_section_takes_its_shares_of_compute_kernels(case: str) -> None:
    trace = _trace(WITH_COMMUNICATION[case])
    section = roofline_summary(trace)
    lo, hi, _ = trace.analysis_window
    k = trace.kernels
    compute = k[(k["ts_ns"] >= lo) & (k["ts_ns"] < hi) & ~is_communication(k["name"])]
    assert section.kernel_time_us * 1000 == pytest.approx(int(compute["dur_ns"].sum()), abs=0.5)
    assert not any(is_communication_name(t.name) for t in section.top_kernels)


def is_communication(names: pd.Series) -> npt.NDArray[np.bool_]:
    return names.astype(str).map(is_communication_name).to_numpy(dtype=bool)


def test_a_kernel_with_collective_args_is_communication_whatever_its_name() -> None:
    """Kineto writes the collective's args on the kernel itself (``collectives`` rows with ``on_gpu``):
    those mark it even under a name the pattern does not know."""
    trace = load(HTA / "nccl_data.json.gz")[0]
    coll = trace.collectives[trace.collectives["on_gpu"]]
    assert len(coll)
    first = coll.iloc[0]
    gpu = trace.gpu
    row = gpu.index[(gpu["correlation"] == first["correlation"]) & (gpu["ts_ns"] == first["ts_ns"])][0]
    # rename it in this copy of the trace: the name no longer says NCCL, the args still do
    gpu["name"] = gpu["name"].cat.add_categories(["my_custom_kernel"])
    gpu.loc[row, "name"] = "my_custom_kernel"
    assert not is_communication_name("my_custom_kernel")
    assert row in communication_kernels(trace)


def test_compute_kernels_are_not_communication() -> None:
    for name in (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>",
        "triton_per_fused_native_layer_norm_0",
        "ampere_sgemm_128x64_tn",
    ):
        assert not is_communication_name(name), name
    for name in (
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
        "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)",
    ):
        assert is_communication_name(name), name


def test_the_planted_low_occupancy_kernel_is_still_reported() -> None:
    """The exclusion removes communication only: a compute kernel on few SMs is still found."""
    found = _findings(TRACES / "planted_low_occupancy.json.gz", "GK301")
    assert len(found) == 1 and "scan_innermost_dim" in found[0]


# -- 2. idle-gap's advice follows its cause ------------------------------------------------------

MODEL_COMPUTE = {
    "aten::batch_norm": HTA / "nccl_data.json.gz",
    "aten::linear": TRACELENS / "b200" / "eager_trace.json.gz",
    "aten::conv2d": HTA / "benchmark_result_2869224_1695835535_trace.json.gz",
}


@pytest.mark.parametrize("op", sorted(MODEL_COMPUTE))
def test_idle_gap_gives_model_compute_no_dataloader_advice(op: str) -> None:
    (text,) = _findings(MODEL_COMPUTE[op], "GK101")
    recommendation = text.split("\n", 1)[1]
    assert recommendation.startswith(f"{op} is model compute")
    assert "DataLoader" not in recommendation and "torch.compile" in recommendation and "CUDA graph" in recommendation


def test_idle_gap_gives_a_compiled_graph_no_compile_advice() -> None:
    """HTA's df_index_resolver: the host stalls in CompiledFunction (AOTAutograd's compiled graph)."""
    (text,) = _findings(HTA / "df_index_resolver.json.gz", "GK101")
    recommendation = text.split("\n", 1)[1]
    assert recommendation.startswith("CompiledFunction already runs compiled")
    assert "torch.compile(model)" not in recommendation and "DataLoader" not in recommendation
    assert "reduce-overhead" in recommendation


def test_idle_gap_advises_fused_where_only_foreach_runs() -> None:
    path = TRACES / "sync_heavy_loop.json.gz"
    assert multi_tensor_in_use(_trace(path)) == {"_foreach_"}
    (text,) = _findings(path, "GK101")
    recommendation = text.split("\n", 1)[1]
    assert recommendation.startswith("Optimizer.step#AdamW.step holds the GPU idle although it already runs foreach")
    assert "fused=True" in recommendation and "foreach=True" not in recommendation


def test_idle_gap_gives_no_fused_advice_where_fused_kernels_run() -> None:
    """train_step runs aten::_fused_adamw_ (and _foreach_ ops): the optimizer advice must not ask for them."""
    path = TRACES / "train_step.json.gz"
    assert {"_fused_", "_foreach_"} <= multi_tensor_in_use(_trace(path))
    (text,) = _findings(path, "GK101")
    recommendation = text.split("\n", 1)[1]
    assert recommendation.startswith("Optimizer.step#AdamW.step holds the GPU idle although it already runs")
    assert "fused=True" not in recommendation and "foreach=True" not in recommendation
    assert "DataLoader" not in recommendation


def test_memory_bound_does_not_recommend_the_fused_kernels_that_run() -> None:
    path = TRACES / "train_step.json.gz"
    (text,) = _findings(path, "RF101")
    recommendation = text.split("\n", 1)[1]
    assert "AdamW(fused=True)" not in recommendation and "scaled_dot_product_attention" not in recommendation
    assert "torch.compile" in recommendation and "LayerNorm" in recommendation


# -- 3. the annotation Bottleneck line ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "named"),
    [
        ("train_step", False),  # 17% annotated: 9% Optimizer.step was named before
        ("pair_sdpa_after", False),  # 20% annotated
        ("pair_fused_optimizer_before", True),  # 56% annotated
        ("workload_attention_naive", True),  # 100% annotated
    ],
)
def test_bottleneck_is_named_only_when_annotations_hold_most_of_the_time(name: str, named: bool) -> None:
    trace = _trace(TRACES / f"{name}.json.gz")
    result = annotation_time(trace)
    assert result is not None
    assert (annotated_pct(result) >= MIN_ANNOTATED_PCT) is named
    section = annotation_summary(trace)
    assert section is not None and (section.bottleneck is not None) is named


def test_bottleneck_never_recommends_the_optimizer_that_runs() -> None:
    fused = multi_tensor_in_use(_trace(TRACES / "train_step.json.gz"))  # aten::_fused_adamw_ runs
    assert "_fused_" in fused
    advice = annotation_advice("Optimizer.step#AdamW.step", fused)
    assert "fused=True" not in advice and "foreach=True" not in advice
    foreach = multi_tensor_in_use(_trace(TRACES / "sync_heavy_loop.json.gz"))  # _foreach_ only
    assert foreach == {"_foreach_"}
    advice = annotation_advice("Optimizer.step#AdamW.step", foreach)
    assert "foreach=True" not in advice and "fused=True" in advice
    section = annotation_summary(_trace(TRACES / "sync_heavy_loop.json.gz"))
    assert section is not None and section.bottleneck is not None
    assert section.bottleneck.name == "Optimizer.step#AdamW.step" and "foreach=True" not in section.bottleneck.message
    assert "fused=True" in annotation_advice("Optimizer.step#AdamW.step")  # nothing multi-tensor runs: advise it


# -- 4. a GPU trace cut off mid-write -----------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "platform"),
    [(TRACES / "train_step.json.gz", "cuda"), (HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz", "rocm")],
)
@pytest.mark.parametrize("cut", [0.05, 0.2, 0.5, 0.9])
def test_a_truncated_gpu_trace_is_still_a_gpu_trace(tmp_path: Path, fixture: Path, platform: str, cut: float) -> None:
    """train_step's CPU ops come first in the file: cut at 5-50% it holds no GPU event at all."""
    data = gzip.decompress(fixture.read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(data[: int(len(data) * cut)])
    report = analyze([path])
    (summary,) = report.traces
    assert summary.platform == platform


def test_a_truncated_gzip_gpu_trace_is_still_a_gpu_trace(tmp_path: Path) -> None:
    raw = (TRACES / "train_step.json.gz").read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(raw[: len(raw) // 3])
    (summary,) = analyze([path]).traces
    assert summary.platform == "cuda"


def test_a_complete_cpu_only_profile_stays_a_cpu_trace(tmp_path: Path) -> None:
    """Only a cut file falls back to its header: a complete trace with a GPU visible but no GPU
    activity recorded (``activities=[CPU]``) is a CPU trace. Here: train_step cut, then closed."""
    data = gzip.decompress((TRACES / "train_step.json.gz").read_bytes()).decode()
    head = data[: int(len(data) * 0.2)]
    head = head[: head.rindex("},") + 1] + "]}"  # the complete events before the cut, then the end
    path = tmp_path / "cpu_only.json"
    path.write_text(head)
    trace = load(path)[0]
    assert not trace.meta.truncated and not len(trace.gpu) and trace.meta.devices
    assert trace.platform == "cpu"


ALL_TRACES = sorted((ROOT / "fixtures").rglob("*.json.gz"))  # ours, the vendored external ones, the rule cases


@pytest.mark.parametrize("path", ALL_TRACES, ids=[str(p.relative_to(ROOT / "fixtures")) for p in ALL_TRACES])
def test_no_occupancy_or_memory_bound_finding_names_a_communication_kernel(path: Path) -> None:
    """Issue 13's must-show, on every fixture (the multi-rank ones included) and external trace:
    neither low-occupancy nor memory-bound names a kernel the analysis counts as communication."""
    trace = _trace(path)
    comm = set(trace.gpu.loc[communication_kernels(trace), "name"].astype(str))
    for f in _report(path).findings:
        if f.code not in ("GK301", "RF101"):
            continue
        named = [e.name for e in f.evidence]
        assert not any(n.split(" (grid")[0] in comm or is_communication_name(n) for n in named), (f.code, named)
        assert not any(c[:60] in f.message for c in comm), f.message
