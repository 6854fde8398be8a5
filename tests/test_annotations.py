"""GPU time per top-level user annotation, the bottleneck line, and their place in the reports.

The oracle on real H100 traces is kineto's own ``gpu_user_annotation`` mirror: where the labelled
work runs on one thread and one stream, the kernels inside each mirror are exactly the kernels
launched inside the annotation, so both ways of counting must agree to the nanosecond.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import traceadvisor
from traceadvisor.analyses import annotation_time
from traceadvisor.pipeline import analyze
from traceadvisor.report import render_markdown, render_text
from traceadvisor.summary.annotations import annotation_advice, annotation_bottleneck
from traceadvisor.testing import write_case_trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
LABELLED = [
    "attention_layer",
    "planted_naive_attention",
    "pair_sdpa_before",
    "pair_sdpa_after",
    "clean_sdpa_attention",
    "train_step",
    "clean_compiled",
    "pair_fused_optimizer_before",
    "sync_heavy_loop",
]
COMPONENTS = ["qkv_projection", "scores", "softmax", "weighted_sum", "output_projection"]


def load(name: str) -> traceadvisor.Trace:
    return traceadvisor.load_file(str(FIXTURES / f"{name}.json.gz"))


def mirror_gpu_time(t: traceadvisor.Trace) -> dict[str, int]:
    """Kernel time inside kineto's GPU mirrors of the user annotations, within the steps' GPU windows."""
    steps = t.steps.table
    g = t.gpu
    out: dict[str, int] = {}
    for r in t.gpu_annotations.itertuples():
        name = str(r.name)
        if name.startswith("ProfilerStep#"):
            continue
        # mirrors are widened by 1 ns (old kineto: 1 µs) per side; compare with the step windows loosely
        if not ((steps["gpu_start_ns"] <= r.ts_ns + 1000) & (r.end_ns - 1000 <= steps["gpu_end_ns"])).any():
            continue
        inside = (
            (g["device"] == r.device) & (g["stream"] == r.stream) & (g["ts_ns"] >= r.ts_ns) & (g["end_ns"] <= r.end_ns)
        )
        out[name] = out.get(name, 0) + int(g.loc[inside, "dur_ns"].sum())
    return out


# -- real GPU traces ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", LABELLED)
def test_gpu_time_per_annotation_equals_the_kernels_inside_kineto_gpu_mirrors(name: str) -> None:
    t = load(name)
    result = annotation_time.annotation_time(t)
    assert result is not None and result.basis == "gpu"
    ours = dict(zip(result.table["name"], result.table["time_ns"].astype(int), strict=True))
    mirrors = mirror_gpu_time(t)
    assert mirrors, "the fixture has GPU mirrors of its annotations"
    for label, ns in mirrors.items():
        assert ours[label] == ns, label
    # labels without a mirror launched no GPU work
    for label in set(ours) - set(mirrors):
        assert ours[label] == 0, label


@pytest.mark.parametrize("name", LABELLED)
def test_shares_and_the_rest_add_up_to_the_gpu_work_launched_in_the_steps(name: str) -> None:
    t = load(name)
    result = annotation_time.annotation_time(t)
    assert result is not None
    # independent denominator: GPU work whose launch call starts inside a CPU step window
    launched = t.gpu[t.gpu["launch"] >= 0]
    ts = t.runtime["ts_ns"].to_numpy()[launched["launch"].to_numpy()]
    steps = t.steps.table
    in_step = np.zeros(len(ts), dtype=bool)
    for lo, hi in zip(steps["cpu_start_ns"], steps["cpu_end_ns"], strict=True):
        in_step |= (ts >= lo) & (ts < hi)
    total = int(launched.loc[in_step, "dur_ns"].sum())
    assert result.total_ns == total
    assert int(result.table["time_ns"].sum()) + result.unannotated_ns == total
    assert np.allclose(result.table["share_pct"], 100.0 * result.table["time_ns"] / total)
    assert list(result.table["time_ns"]) == sorted(result.table["time_ns"], reverse=True)


def test_naive_attention_names_scores_as_the_bottleneck_and_advises_sdpa() -> None:
    result = annotation_time.annotation_time(load("planted_naive_attention"))
    assert result is not None
    assert list(result.table["name"][:2]) == ["scores", "softmax"]
    assert set(result.table["name"]) == set(COMPONENTS)
    assert set(result.table["calls"]) == {3}  # three recorded steps, one layer call each
    # 58% of the GPU time is outside the annotations: no annotation is named the bottleneck (issue 12)
    assert annotation_bottleneck(result) is None
    assert "scaled_dot_product_attention" in annotation_advice("scores")
    whole = annotation_time.annotation_time(load("workload_attention_naive"))  # every kernel annotated
    assert whole is not None and whole.unannotated_ns == 0
    b = annotation_bottleneck(whole)
    assert b is not None and b.name == "softmax"
    share = float(whole.table["share_pct"].iloc[0])
    assert b.message == f"Bottleneck: softmax ({share:.0f}%). {b.advice}"
    assert "scaled_dot_product_attention" in b.advice


def test_sdpa_trace_has_no_score_components_and_other_advice() -> None:
    result = annotation_time.annotation_time(load("pair_sdpa_after"))
    assert result is not None
    assert set(result.table["name"]) == {"qkv_projection", "scaled_dot_product_attention", "output_projection"}
    assert annotation_bottleneck(result) is None  # 80% of the GPU time outside the annotations (issue 12)
    whole = annotation_time.annotation_time(load("workload_attention_sdpa"))  # every kernel annotated
    assert whole is not None
    b = annotation_bottleneck(whole)
    assert b is not None and b.name == "scaled_dot_product_attention"
    assert "already runs fused" in b.advice


def test_traces_without_user_annotations_have_no_section() -> None:
    t = load("planted_fp32_matmul")
    assert annotation_time.annotation_time(t) is None
    report = analyze([FIXTURES / "planted_fp32_matmul.json.gz"])
    assert report.traces[0].annotations is None
    assert "annotation" not in render_text.render(report)


def test_reports_show_the_table_and_the_bottleneck() -> None:
    report = analyze([FIXTURES / "workload_attention_naive.json.gz"])
    section = report.traces[0].annotations
    assert section is not None and section.bottleneck is not None
    assert section.basis == "gpu" and section.rows[0].name == "softmax"
    assert section.total_us == pytest.approx(section.unannotated_us + sum(r.time_us for r in section.rows))
    text = render_text.render(report, width=200)
    assert "annotation" in text and "GPU time" in text and "(outside annotations)" in text
    assert section.bottleneck.message in text
    md = render_markdown.render(report)
    assert "| annotation | GPU time | share | calls |" in md
    # Markdown escapes the message (its underscores would turn "__init__" into bold "init")
    from traceadvisor.report.safe_text import TEXT_LIMIT, markdown

    assert f"**{markdown(section.bottleneck.message, TEXT_LIMIT)}**" in md
    assert "**Bottleneck: softmax (42%). Use scaled\\_dot\\_product\\_attention: one fused kernel" in md
    first = section.rows[0]
    assert f"| softmax | {first.time_us / 1000:.3f} ms | {first.share_pct:.1f}% | 3 |" in md


def test_json_report_carries_the_section() -> None:
    named = FIXTURES / "planted_per_param_optimizer.json.gz"  # 56% annotated: the bottleneck is named (issue 12)
    p = subprocess.run(
        [sys.executable, "-m", "traceadvisor", "analyze", str(named), "-f", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    section = json.loads(p.stdout)["traces"][0]["annotations"]
    assert set(section) == {"basis", "total_us", "unannotated_us", "unannotated_pct", "rows", "bottleneck"}
    assert set(section["rows"][0]) == {"name", "time_us", "share_pct", "calls"}
    assert section["bottleneck"]["name"] == section["rows"][0]["name"]


def test_advice_follows_what_the_name_says() -> None:
    assert "scaled_dot_product_attention" in annotation_advice("attn_scores")
    assert "fused optimizer" in annotation_advice("Optimizer.step#AdamW.step")
    assert "set_to_none" in annotation_advice("Optimizer.zero_grad#SGD.zero_grad")
    assert "num_workers" in annotation_advice("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__")
    assert annotation_advice("my_block") == annotation_advice("decoder")  # generic


# -- nesting, threads and steps on small traces -----------------------------------------------------
def _case(events: list[dict[str, Any]], steps: list[list[float]]) -> dict[str, Any]:
    return {"steps": steps, "events": events}


def test_top_level_means_outermost_inside_the_step(tmp_path: Path) -> None:
    events = [
        {"cat": "annotation", "name": "train_loop", "ts": 0, "dur": 300},  # holds whole steps: ignored
        {"cat": "annotation", "name": "block", "ts": 10, "dur": 50},
        {"cat": "annotation", "name": "inner", "ts": 20, "dur": 20},  # nested in block: not top level
        {"cat": "launch", "name": "cudaLaunchKernel", "ts": 25, "dur": 2, "corr": 1},
        {"cat": "kernel", "name": "k1", "ts": 30, "dur": 7, "corr": 1},
        {"cat": "launch", "name": "cudaLaunchKernel", "ts": 50, "dur": 2, "corr": 2},
        {"cat": "kernel", "name": "k2", "ts": 55, "dur": 3, "corr": 2},
        {"cat": "launch", "name": "cudaLaunchKernel", "ts": 70, "dur": 2, "corr": 3},  # outside block
        {"cat": "kernel", "name": "k3", "ts": 75, "dur": 11, "corr": 3},
        {"cat": "annotation", "name": "after_the_steps", "ts": 250, "dur": 10},
        {"cat": "launch", "name": "cudaLaunchKernel", "ts": 252, "dur": 2, "corr": 4},
        {"cat": "kernel", "name": "k4", "ts": 256, "dur": 100, "corr": 4},
    ]
    t = traceadvisor.load_file(str(write_case_trace(_case(events, [[5, 100], [105, 100]]), tmp_path)))
    result = annotation_time.annotation_time(t)
    assert result is not None
    assert list(result.table["name"]) == ["block"]
    assert int(result.table["time_ns"].iloc[0]) == 10_000  # k1 + k2
    assert result.total_ns == 21_000 and result.unannotated_ns == 11_000  # k4 is outside the steps


def test_backward_thread_launches_count_for_the_annotation_open_on_the_main_thread(tmp_path: Path) -> None:
    events = [
        {"cat": "annotation", "name": "forward", "ts": 10, "dur": 20, "tid": 1},
        {"cat": "launch", "name": "cudaLaunchKernel", "ts": 15, "dur": 2, "corr": 1, "tid": 1},
        {"cat": "kernel", "name": "fwd", "ts": 20, "dur": 4, "corr": 1},
        {"cat": "annotation", "name": "backward", "ts": 40, "dur": 40, "tid": 1},
        # the autograd engine's thread launches while the main thread waits inside "backward"
        {"cat": "op", "name": "autograd::engine::evaluate_function: MmBackward0", "ts": 45, "dur": 20, "tid": 2},
        {"cat": "launch", "name": "cudaLaunchKernel", "ts": 50, "dur": 2, "corr": 2, "tid": 2},
        {"cat": "kernel", "name": "bwd", "ts": 55, "dur": 9, "corr": 2},
        # and once when the main thread is in no annotation: left unannotated
        {"cat": "launch", "name": "cudaLaunchKernel", "ts": 85, "dur": 2, "corr": 3, "tid": 2},
        {"cat": "kernel", "name": "late", "ts": 88, "dur": 5, "corr": 3},
    ]
    t = traceadvisor.load_file(str(write_case_trace(_case(events, [[0, 100]]), tmp_path)))
    result = annotation_time.annotation_time(t)
    assert result is not None
    times = dict(zip(result.table["name"], result.table["time_ns"].astype(int), strict=True))
    assert times == {"backward": 9_000, "forward": 4_000}
    assert result.unannotated_ns == 5_000


def test_a_step_boundary_inside_the_optimizer_annotation_does_not_hide_it(tmp_path: Path) -> None:
    # Stepping the profiler from an optimizer hook ends ProfilerStep#0 inside the optimizer's annotation.
    events = [
        {"cat": "annotation", "name": "Optimizer.step#SGD.step", "ts": 80, "dur": 40},
        {"cat": "launch", "name": "cudaLaunchKernel", "ts": 90, "dur": 2, "corr": 1},
        {"cat": "kernel", "name": "sgd", "ts": 95, "dur": 6, "corr": 1},
    ]
    t = traceadvisor.load_file(str(write_case_trace(_case(events, [[0, 100], [100, 100]]), tmp_path)))
    result = annotation_time.annotation_time(t)
    assert result is not None and list(result.table["name"]) == ["Optimizer.step#SGD.step"]
    assert int(result.table["time_ns"].iloc[0]) == 6_000


# -- a CPU trace of the naive attention workload ------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_attention_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    from traceadvisor.workloads import attention_naive

    step = attention_naive.build(attention_naive.parser().parse_args(["--device", "cpu"]))
    path = tmp_path_factory.mktemp("attention") / "naive_cpu.json.gz"
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=1, warmup=1, active=3),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(6):
            step()
            prof.step()
    return path


def test_cpu_trace_uses_cpu_time_and_says_so(cpu_attention_trace: Path) -> None:
    t = traceadvisor.load_file(str(cpu_attention_trace))
    result = annotation_time.annotation_time(t)
    assert result is not None and result.basis == "cpu"
    assert set(result.table["name"]) == set(COMPONENTS)
    assert set(result.table["calls"]) == {3}
    # independent: the annotations' durations and the steps' CPU time, read from the raw JSON
    import gzip

    events = json.loads(gzip.decompress(cpu_attention_trace.read_bytes()))["traceEvents"]
    ann = [e for e in events if e.get("cat") == "user_annotation"]
    for label in COMPONENTS:
        ns = sum(round(float(e["dur"]) * 1000) for e in ann if e["name"] == label)
        assert int(result.table.set_index("name").loc[label, "time_ns"]) == ns, label
    step_ns = sum(round(float(e["dur"]) * 1000) for e in ann if e["name"].startswith("ProfilerStep#"))
    assert result.total_ns == step_ns
    b = annotation_bottleneck(result)
    assert b is not None and b.message.startswith("Bottleneck (CPU time): ")
    report = analyze([cpu_attention_trace])
    text = render_text.render(report, width=200)
    assert "CPU time" in text and "(CPU time: the trace has no GPU activity)" in text
