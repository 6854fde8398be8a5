"""The roofline of custom Triton kernels, placed by their launch records (tensor-argument bytes, declared FLOPs).

On this CPU machine the records come from real runs of the Triton workloads under
``TRITON_INTERPRET=1`` (``test_triton_launches._profile_cpu``). A CPU trace has no GPU kernels, so
its per-kernel table is empty: the records are placed by ``Roofline.launches``, against peaks given
the way a user gives them for a trace without ``deviceProperties`` (``[tool.traceadvisor.gpu]``).
The per-kernel table joins records to GPU kernels; it is tested on GPU-shaped traces written with
``traceadvisor.testing`` whose record events are the ones captured here (names, shapes and dtypes
exactly as torch wrote them), and on records at the workloads' GPU sizes named by the hooks' own
``label``. Expected figures are computed here from the tensor sizes, not read back from the code.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_triton_launches import _profile_cpu

import traceadvisor
from traceadvisor import roofline
from traceadvisor.analyses import triton_launches
from traceadvisor.config import load_config
from traceadvisor.pipeline import analyze_traces
from traceadvisor.roofline import view
from traceadvisor.roofline.gpus import lookup
from traceadvisor.testing import write_case_trace
from traceadvisor.trace.columns import parse_raw
from traceadvisor.trace.device import GpuConfig

H100 = {"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "numSms": 132, "totalGlobalMem": 85e9}
H100_SPEC = lookup("h100-sxm")
N_ADD = 3000  # vector add: x + y → out, fp32
M, N, K = 48, 40, 32  # matmul: A (M×K) @ B (K×N) → C, fp16
ROWS, COLS = 16, 96  # softmax: x → out, fp32; the kernel declares no FLOPs

ADD_BYTES, ADD_FLOPS = 3 * N_ADD * 4, N_ADD
MM_BYTES, MM_FLOPS = (M * K + K * N + M * N) * 2, 2 * M * N * K
SOFTMAX_BYTES = 2 * ROWS * COLS * 4


@pytest.fixture(scope="module")
def cpu_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real CPU trace: vector add, fp16 matmul and softmax, interpreted, under the hooks (2 steps)."""
    from traceadvisor.workloads import matmul, softmax, vector_add

    steps = [
        vector_add.build(vector_add.parser().parse_args(["--device", "cpu", "--n", str(N_ADD)])),
        matmul.build(matmul.parser().parse_args(["--device", "cpu", "--m", str(M), "--n", str(N), "--k", str(K)])),
        softmax.build(softmax.parser().parse_args(["--device", "cpu", "--rows", str(ROWS), "--cols", str(COLS)])),
    ]

    def body() -> None:
        for step in steps:
            step()

    path = tmp_path_factory.mktemp("triton-roofline") / "cpu.json.gz"
    _profile_cpu(path, body, steps=2)
    return path


def _fresh(path: Path, config: GpuConfig | None = None) -> traceadvisor.Trace:
    return traceadvisor.load_file(str(path), gpu=config)


def _by_kernel(table: Any, column: str = "kernel") -> dict[str, Any]:
    """The first row of each kernel (every launch of one kernel here has the same shapes)."""
    return {str(name): grp.iloc[0] for name, grp in table.groupby(column, observed=True)}


# -- CPU traces: the records, no kernels ---------------------------------------------------------------
def test_a_cpu_trace_has_no_kernel_rows_but_places_every_record(cpu_path: Path) -> None:
    t = _fresh(cpu_path)
    r = roofline.of(t)
    assert r.peaks is None and "deviceProperties" in r.reason  # a CPU trace names no GPU
    assert len(t.kernels) == 0 and len(r.kernels) == 0
    launches = r.launches
    assert len(launches) == 3 * 2  # three kernels, two recorded steps
    assert set(launches.index) == set(triton_launches.launches(t).index)
    rows = _by_kernel(launches)
    add, mm, sm = rows["add_kernel"], rows["matmul_kernel"], rows["softmax_kernel"]
    assert (add["bytes"], add["flops"], add["dtype"]) == (ADD_BYTES, ADD_FLOPS, "fp32")
    assert (mm["bytes"], mm["flops"], mm["dtype"]) == (MM_BYTES, MM_FLOPS, "fp16")
    assert add["intensity"] == pytest.approx(ADD_FLOPS / ADD_BYTES)  # 1/12 FLOP/B
    assert mm["intensity"] == pytest.approx(MM_FLOPS / MM_BYTES)
    assert (add["basis"], mm["basis"]) == (view.BASIS_TRITON, view.BASIS_TRITON)
    # softmax declares no FLOPs: bytes only, no intensity, the memory roof only
    assert sm["bytes"] == SOFTMAX_BYTES and math.isnan(sm["flops"]) and math.isnan(sm["intensity"])
    assert sm["basis"] == view.BASIS_TRITON_MEMORY
    assert (rows["add_kernel"]["grid_x"], mm["grid_x"], sm["grid_x"]) == (math.ceil(N_ADD / 1024), 9, ROWS)
    assert (launches["bound"] == "unknown").all() and launches["roof_time_ns"].isna().all()  # no peaks


def test_configured_peaks_place_the_records_on_either_side_of_the_ridge(cpu_path: Path, tmp_path: Path) -> None:
    # Peaks small enough that these tiny launches are far above the 3 µs latency floor, given as
    # a user gives them: [tool.traceadvisor.gpu] figures (a CPU trace matches no GPU).
    bw_gbs, tf32, fp16 = 1.0, 0.001, 0.002
    cfg_file = tmp_path / "pyproject.toml"
    cfg_file.write_text(
        f"[tool.traceadvisor.gpu]\nmemory-bandwidth-gbs = {bw_gbs}\ndevice-profile = false\n"
        f"[tool.traceadvisor.gpu.tflops]\ntf32 = {tf32}\nfp16 = {fp16}\n"
    )
    t = _fresh(cpu_path, load_config(cfg_file).gpu)
    rows = _by_kernel(roofline.of(t).launches)
    add, mm, sm = rows["add_kernel"], rows["matmul_kernel"], rows["softmax_kernel"]
    # fp32 data: the TF32 rate (tl.dot's default for fp32), the highest the data allows
    assert add["peak_figure"] == "tf32" and add["peak_tflops"] == pytest.approx(tf32)
    assert add["roof_time_ns"] == pytest.approx(max(ADD_FLOPS / (tf32 * 1e12), ADD_BYTES / (bw_gbs * 1e9)) * 1e9)
    assert add["bound"] == "memory"  # 1/12 FLOP/B, below the ridge of 1 FLOP/B
    assert mm["peak_figure"] == "fp16" and mm["peak_tflops"] == pytest.approx(fp16)
    assert mm["roof_time_ns"] == pytest.approx(max(MM_FLOPS / (fp16 * 1e12), MM_BYTES / (bw_gbs * 1e9)) * 1e9)
    assert MM_FLOPS / MM_BYTES > fp16 * 1e12 / (bw_gbs * 1e9) and mm["bound"] == "compute"
    assert sm["peak_figure"] == "" and math.isnan(sm["peak_tflops"])
    assert sm["roof_time_ns"] == pytest.approx(SOFTMAX_BYTES / (bw_gbs * 1e9) * 1e9) and sm["bound"] == "memory"


def test_on_a_real_gpus_peaks_these_launches_are_too_small_to_reach_a_roof(cpu_path: Path) -> None:
    t = _fresh(cpu_path, GpuConfig(name="h100-sxm", search_profiles=False))
    rows = _by_kernel(roofline.of(t).launches)
    bw = H100_SPEC.memory_bandwidth_gbs * 1e9
    assert rows["add_kernel"]["roof_time_ns"] == pytest.approx(ADD_BYTES / bw * 1e9)  # ~11 ns
    fp16 = H100_SPEC.flops["fp16"]
    assert fp16 is not None
    assert rows["matmul_kernel"]["roof_time_ns"] == pytest.approx(max(MM_FLOPS / fp16, MM_BYTES / bw) * 1e9)
    assert all(r["roof_time_ns"] < view.LATENCY_FLOOR_NS and r["bound"] == "latency" for r in rows.values())


def test_analyze_of_a_cpu_trace_with_records_reports_no_roofline_and_no_nan(cpu_path: Path) -> None:
    report = analyze_traces([_fresh(cpu_path)]).to_dict()
    section = report["traces"][0]["roofline"]
    assert section["available"] is False and section["top_kernels"] == []
    json.dumps(report, allow_nan=False)


# -- GPU-shaped traces: the records joined to kernels ----------------------------------------------------
def _captured_records(cpu_path: Path) -> dict[str, dict[str, Any]]:
    """Name, input dims and types of the first record of each kernel, as captured."""
    t = traceadvisor.load_file(str(cpu_path))
    recs = triton_launches.launches(t)
    out = {}
    for kernel, grp in recs.groupby("kernel"):
        row = t.host.loc[grp.index[0]]
        rec = grp.iloc[0]
        out[str(kernel)] = {
            "name": str(row["name"]),
            "dims": parse_raw(row["input_dims"]),
            "types": parse_raw(row["input_types"]),
            "grid": [int(rec["grid_x"]), int(rec["grid_y"]), int(rec["grid_z"])],
        }
    return out


def _launch(ext: int, ts: float, record: dict[str, Any], kernel: str, dur: float, grid: list[int]) -> list[Any]:
    """A record op around its driver launch, and the kernel it produced (linked by External id)."""
    op = {"cat": "op", "name": record["name"], "ts": ts, "dur": 20, "ext": ext}
    if record.get("dims") is not None:
        op["dims"], op["types"] = record["dims"], record["types"]
    return [
        op,
        {"cat": "driver", "name": "cuLaunchKernelEx", "ts": ts + 5, "dur": 5, "corr": ext, "ext": ext},
        {"cat": "kernel", "name": kernel, "ts": ts + 30, "dur": dur, "corr": ext, "ext": ext, "grid": grid},
    ]


DUR_US = {"add_kernel": 4.0, "matmul_kernel": 9.0, "softmax_kernel": 5.0}


def test_kernels_under_captured_records_take_their_bytes_and_flops(cpu_path: Path, tmp_path: Path) -> None:
    records = _captured_records(cpu_path)
    events: list[Any] = []
    for i, (kernel, rec) in enumerate(sorted(records.items())):
        events += _launch(i + 1, 100.0 * i, rec, kernel, DUR_US[kernel], rec["grid"])
    # an aten op's kernel in the same trace: still modelled from its shapes
    events += [
        {"cat": "op", "name": "aten::mul", "ts": 400, "dur": 10, "ext": 9, "dims": [[1024, 1024], [1024, 1024]]},
        {"cat": "launch", "name": "cudaLaunchKernel", "ts": 402, "dur": 3, "corr": 9, "ext": 9},
        {"cat": "kernel", "name": "vectorized_elementwise_kernel", "ts": 420, "dur": 8, "corr": 9, "ext": 9},
    ]
    case = {"steps": [[0, 500]], "device": H100, "flags": ["record_shapes"], "events": events}
    t = traceadvisor.load_file(str(write_case_trace(case, tmp_path)))
    k = roofline.of(t).kernels
    assert len(k) == 4
    rows = _by_kernel(k, "name")
    expected = {
        "add_kernel": (ADD_BYTES, ADD_FLOPS, "fp32", "tf32"),
        "matmul_kernel": (MM_BYTES, MM_FLOPS, "fp16", "fp16"),
        "softmax_kernel": (SOFTMAX_BYTES, math.nan, "fp32", ""),
    }
    bw = H100_SPEC.memory_bandwidth_gbs * 1e9
    for kernel, (nbytes, flops, dtype, figure) in expected.items():
        r = rows[kernel]
        secs = DUR_US[kernel] / 1e6
        assert r["op_name"] == f"triton::{kernel}" and t.host.at[r["op"], "name"] == records[kernel]["name"]
        assert r["bytes"] == nbytes and r["dtype"] == dtype and r["peak_figure"] == figure
        assert r["achieved_gbs"] == pytest.approx(nbytes / secs / 1e9)
        assert not r["fusible"] and r["op_class"] == "triton"
        if math.isnan(flops):  # memory roof only
            assert math.isnan(r["flops"]) and math.isnan(r["intensity"]) and math.isnan(r["achieved_tflops"])
            assert r["basis"] == view.BASIS_TRITON_MEMORY and r["roof_time_ns"] == pytest.approx(nbytes / bw * 1e9)
        else:
            peak = H100_SPEC.flops[figure]
            assert peak is not None
            assert r["flops"] == flops and r["intensity"] == pytest.approx(flops / nbytes)
            assert r["achieved_tflops"] == pytest.approx(flops / secs / 1e12)
            assert r["peak_tflops"] == pytest.approx(peak / 1e12) and r["basis"] == view.BASIS_TRITON
            assert r["roof_time_ns"] == pytest.approx(max(flops / peak, nbytes / bw) * 1e9)
        assert r["roof_share"] == pytest.approx(r["roof_time_ns"] / (DUR_US[kernel] * 1e3))
        assert r["bound"] == "latency"  # a few ns of roof: far under the kernel's fixed cost
    mul = rows["vectorized_elementwise_kernel"]
    assert mul["basis"] == view.BASIS_OP_MODEL and mul["op_name"] == "aten::mul"
    assert mul["bytes"] == 3 * 1024 * 1024 * 4 and mul["flops"] == 1024 * 1024
    report = analyze_traces([t]).to_dict()
    top = {(r["name"], r["op"]) for r in report["traces"][0]["roofline"]["top_kernels"]}
    assert ("matmul_kernel", "triton::matmul_kernel") in top and ("softmax_kernel", "triton::softmax_kernel") in top
    json.dumps(report, allow_nan=False)


def _gpu_size_case() -> dict[str, Any]:
    """Records at the Triton workloads' GPU sizes, named by the hooks' own ``label``."""
    from traceadvisor.workloads.triton_hooks import label

    n = 1 << 26  # vector add: 2^26 fp32 elements
    s = 4096  # matmul: 4096³ fp16
    add = {
        "name": label("add_kernel", (n // 1024, 1, 1), 3 * n * 4, n),
        "dims": [[n], [n], [n]],
        "types": ["float"] * 3,
    }
    mm = {
        "name": label("matmul_kernel", (1024, 1, 1), 3 * s * s * 2, 2 * s**3),
        "dims": [[s, s]] * 3,
        "types": ["c10::Half"] * 3,
    }
    # record_shapes off: no tensor dtypes, so no compute roof although the kernel declares FLOPs
    bare = {"name": label("matmul_kernel", (1024, 1, 1), 3 * s * s * 2, 2 * s**3)}
    events = [
        *_launch(1, 0, add, "add_kernel", 300.0, [n // 1024, 1, 1]),
        *_launch(2, 400, mm, "matmul_kernel", 200.0, [1024, 1, 1]),
        *_launch(3, 700, bare, "matmul_kernel", 200.0, [1024, 1, 1]),
        # a record torch < 2.2 wrote as a user annotation: the kernel joins it by its launch's time
        {
            "cat": "annotation",
            "name": label("softmax_kernel", (8192, 1, 1), 2 * 8192 * 4096 * 4, None),
            "ts": 1000,
            "dur": 20,  # its span holds the launch call
        },
        {"cat": "driver", "name": "cuLaunchKernelEx", "ts": 1005, "dur": 5, "corr": 4},
        {"cat": "kernel", "name": "softmax_kernel", "ts": 1030, "dur": 100.0, "corr": 4, "grid": [8192, 1, 1]},
        # a launch whose record has the name only: nothing to place
        {"cat": "op", "name": "triton::mystery_kernel", "ts": 1200, "dur": 20, "ext": 5},
        {"cat": "driver", "name": "cuLaunchKernelEx", "ts": 1205, "dur": 5, "corr": 5, "ext": 5},
        {"cat": "kernel", "name": "mystery_kernel", "ts": 1230, "dur": 50.0, "corr": 5, "ext": 5},
    ]
    return {"steps": [[0, 1500]], "device": H100, "flags": ["record_shapes"], "events": events}


def test_records_at_gpu_sizes_are_memory_and_compute_bound(tmp_path: Path) -> None:
    t = traceadvisor.load_file(str(write_case_trace(_gpu_size_case(), tmp_path)))
    k = roofline.of(t).kernels.sort_values("ts_ns")
    assert list(k["name"].astype(str)) == ["add_kernel", "matmul_kernel", "matmul_kernel", "softmax_kernel"]
    add, mm, bare, sm = (k.iloc[i] for i in range(4))
    bw = H100_SPEC.memory_bandwidth_gbs * 1e9
    n, s = 1 << 26, 4096
    # vector add: 805 MB at 300 µs = 2684 GB/s, 80% of the 3350 GB/s roof
    assert add["bound"] == "memory" and add["roof_share"] == pytest.approx(3 * n * 4 / bw / 300e-6)
    assert add["achieved_gbs"] == pytest.approx(3 * n * 4 / 300e-6 / 1e9)
    # matmul: 2·4096³ FLOPs over 3·4096²·2 bytes = 1365 FLOP/B, above the fp16 ridge (295)
    fp16 = H100_SPEC.flops["fp16"]
    assert fp16 is not None
    assert mm["intensity"] == pytest.approx(2 * s**3 / (3 * s * s * 2)) and mm["bound"] == "compute"
    assert mm["roof_share"] == pytest.approx(2 * s**3 / fp16 / 200e-6) and mm["peak_figure"] == "fp16"
    # the same launch without dtypes: memory roof only, so it sits at a few % of that roof
    assert bare["basis"] == view.BASIS_TRITON_MEMORY and bare["bound"] == "memory" and bare["peak_figure"] == ""
    assert bare["flops"] == 2 * s**3 and bare["roof_share"] == pytest.approx(3 * s * s * 2 / bw / 200e-6)
    # the annotation record: found by time, bytes only
    assert sm["basis"] == view.BASIS_TRITON_MEMORY and sm["bytes"] == 2 * 8192 * 4096 * 4
    assert t.host.at[sm["op"], "is_annotation"] and sm["bound"] == "memory"
    assert "mystery_kernel" not in set(k["name"].astype(str))


def test_on_rocm_the_records_grid_counts_the_blocks(tmp_path: Path) -> None:
    from traceadvisor.workloads.triton_hooks import label

    n = 1 << 26
    rec = {"name": label("add_kernel", (8, 1, 1), 3 * n * 4, n), "dims": [[n]] * 3, "types": ["float"] * 3}
    events = _launch(1, 0, rec, "add_kernel", 300.0, [8 * 256, 1, 1])  # the trace's grid in work-items
    events[1]["name"] = "hipModuleLaunchKernel"
    events[1]["cat"] = "launch"
    case = {"steps": [[0, 400]], "flags": ["record_shapes"], "events": events}
    t = traceadvisor.load_file(
        str(write_case_trace(case, tmp_path)), gpu=GpuConfig(name="mi300x", search_profiles=False)
    )
    assert t.platform == "rocm"
    r = roofline.of(t).kernels.iloc[0]
    # 8 programs on 304 CUs: most idle, although the roof time (~150 µs) is far above the floor
    assert r["blocks"] == 8 and r["roof_time_ns"] > view.LATENCY_FLOOR_NS and r["bound"] == "latency"
    assert np.isclose(r["roof_time_ns"], 3 * n * 4 / (lookup("mi300x").memory_bandwidth_gbs * 1e9) * 1e9)
