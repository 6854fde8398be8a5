"""The roofline: GPU peak table and matching, peaks from device profiles and configuration, the op
FLOP/byte models (cross-checked against torch's FlopCounterMode, real tensor sizes, and TraceLens's
independent perf model), the per-kernel view on the real H100 fixtures (figures worked out by hand
from the recorded shapes), and the report section.

Tests that need torch import it inside the test (``pytest.importorskip``) and skip without it.
"""

from __future__ import annotations

import ast
import gzip
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fixture_paths import EXTERNAL, REPO, TRACELENS

from traceadvisor import load_file, roofline
from traceadvisor.config import Config, load_config
from traceadvisor.errors import UsageError
from traceadvisor.pipeline import analyze_traces
from traceadvisor.roofline import gpus, view
from traceadvisor.roofline.gpus import DTYPES, GPUS, lookup, match
from traceadvisor.roofline.models import causal_fraction, op_work
from traceadvisor.roofline.peaks import GpuConfig, parse_gpu_table, resolve_peaks
from traceadvisor.roofline.profile import (
    SCHEMA,
    DeviceProfile,
    ProfileError,
    default_profile_dir,
    find_device_profile,
    load_device_profile,
    parse_device_profile,
    profile_filename,
    save_device_profile,
)
from traceadvisor.trace.columns import parse_raw

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "fixtures" / "traces"
H100 = {"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "numSms": 132, "totalGlobalMem": 85e9}


@pytest.fixture(autouse=True)
def _no_user_profiles(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Profiles measured on this machine must not change what the tests see."""
    monkeypatch.setenv("TRACEADVISOR_HOME", str(tmp_path_factory.mktemp("home")))


# -- the GPU table --------------------------------------------------------------------------------


def test_every_gpu_has_every_figure_and_a_cited_source() -> None:
    assert len({g.key for g in GPUS}) == len(GPUS)
    for g in GPUS:
        assert set(g.flops) == set(DTYPES), g.key
        assert g.memory_bandwidth_gbs > 0 and g.sm_count > 0
        assert g.flops["fp32"], g.key  # every GPU has vector fp32
        for figure, source in g.to_dict()["sources"].items():
            assert "http" in source or "derived" in source, (g.key, figure)


def test_dense_tensor_core_figures_keep_the_architectural_ratios() -> None:
    # On Ampere, Ada, Hopper and Blackwell tensor cores, dense TF32 runs at half the 16-bit rate
    # and FP8/INT8 at twice it: the table must not mix sparse and dense figures.
    for g in GPUS:
        f = g.flops
        if g.vendor != "nvidia" or not f["tf32"]:
            continue
        assert f["tf32"] == pytest.approx(f["bf16"] / 2, rel=0.05), g.key  # datasheets round (B200: 2.2 PF)
        assert f["fp16"] == pytest.approx(f["bf16"], rel=0.01), g.key
        if f["fp8"]:  # (L40S: 733 vs 2 × 362.05 as printed)
            assert f["fp8"] == pytest.approx(2 * f["bf16"], rel=0.02), g.key
        assert f["int8"] == pytest.approx(2 * f["bf16"], rel=0.02), g.key


def test_gpu_variants_differ_where_the_datasheets_say() -> None:
    a40, a80s, a80p = lookup("a100-sxm-40gb"), lookup("a100-sxm-80gb"), lookup("a100-pcie-80gb")
    assert a40 and a80s and a80p
    assert a40.flops == a80s.flops == a80p.flops  # same GA100, same clocks
    assert a40.memory_bandwidth_gbs < a80p.memory_bandwidth_gbs < a80s.memory_bandwidth_gbs
    h100, h200 = lookup("h100-sxm"), lookup("h200-sxm")
    assert h100 and h200 and h100.flops == h200.flops and h200.memory_bandwidth_gbs > h100.memory_bandwidth_gbs
    pcie = lookup("h100-pcie")
    assert pcie and pcie.sm_count < h100.sm_count and all((pcie.flops[d] or 0) <= (h100.flops[d] or 0) for d in DTYPES)


@pytest.mark.parametrize(
    ("props", "key"),
    [
        (H100, "h100-sxm"),
        ({"name": "NVIDIA H100 PCIe", "numSms": 114, "totalGlobalMem": 85e9}, "h100-pcie"),
        ({"name": "NVIDIA H100 NVL", "numSms": 132, "totalGlobalMem": 100e9}, "h100-nvl"),
        ({"name": "NVIDIA H200", "numSms": 132, "totalGlobalMem": 150e9}, "h200-sxm"),
        ({"name": "NVIDIA H200 NVL", "numSms": 132, "totalGlobalMem": 150e9}, "h200-nvl"),
        ({"name": "NVIDIA A100-SXM4-80GB", "numSms": 108, "totalGlobalMem": 84990623744}, "a100-sxm-80gb"),
        ({"name": "NVIDIA A100-SXM4-40GB", "numSms": 108, "totalGlobalMem": 42505273344}, "a100-sxm-40gb"),
        ({"name": "NVIDIA A100-PG509-200", "numSms": 108, "totalGlobalMem": 42297524224}, "a100-sxm-40gb"),
        ({"name": "NVIDIA A100 80GB PCIe", "numSms": 108, "totalGlobalMem": 85e9}, "a100-pcie-80gb"),
        ({"name": "NVIDIA A100-PCIE-40GB", "numSms": 108, "totalGlobalMem": 42e9}, "a100-pcie-40gb"),
        ({"name": "Tesla V100-SXM2-32GB", "numSms": 80, "totalGlobalMem": 34e9}, "v100-sxm2"),
        ({"name": "Tesla V100-PCIE-16GB", "numSms": 80, "totalGlobalMem": 17e9}, "v100-pcie"),
        ({"name": "Tesla V100S-PCIE-32GB", "numSms": 80, "totalGlobalMem": 34e9}, "v100s-pcie"),
        ({"name": "NVIDIA B200", "numSms": 148, "totalGlobalMem": 191503138816}, "b200"),
        ({"name": "NVIDIA L4", "numSms": 58, "totalGlobalMem": 24e9}, "l4"),
        ({"name": "NVIDIA L40S", "numSms": 142, "totalGlobalMem": 48e9}, "l40s"),
        ({"name": "NVIDIA L40", "numSms": 142, "totalGlobalMem": 48e9}, "l40"),
        ({"name": "NVIDIA A10", "numSms": 72, "totalGlobalMem": 24e9}, "a10"),
        ({"name": "Tesla T4", "numSms": 40, "totalGlobalMem": 16e9}, "t4"),
        ({"name": "AMD Instinct MI300X", "computeMajor": 9, "computeMinor": 4, "numSms": 304}, "mi300x"),
        ({"name": "AMD Instinct MI250X", "computeMajor": 9, "computeMinor": 0, "numSms": 110}, "mi250x-gcd"),
        # ROCm names Instinct parts "AMD Radeon Graphics": gfx90a (9.0) with 104 CUs is an MI250 GCD / MI210
        (
            {"name": "AMD Radeon Graphics", "computeMajor": 9, "computeMinor": 0, "numSms": 104, "warpSize": 64},
            "mi210",
        ),
    ],
)
def test_devices_match_their_table_entry(props: dict[str, Any], key: str) -> None:
    m = match(props)
    assert m.spec is not None, m.reason
    assert m.spec.key == key


@pytest.mark.parametrize(
    ("props", "why"),
    [
        ({"name": "NVIDIA A10G", "numSms": 80, "totalGlobalMem": 24e9}, "not in the peak table"),
        ({"name": "Tesla V100-16GB", "numSms": 80}, "not in the peak table"),  # no form factor: clocks differ
        ({"name": "NVIDIA GH200 480GB", "numSms": 132}, "not in the peak table"),
        ({**H100, "numSms": 16}, "MIG slice"),
        (None, "no deviceProperties"),
    ],
)
def test_unknown_devices_get_no_peaks_and_say_why(props: dict[str, Any] | None, why: str) -> None:
    m = match(props)
    assert m.spec is None and why in m.reason
    res = resolve_peaks(props, GpuConfig())
    assert res.peaks is None and "no roofline" in res.reason and "calibrate" in res.reason


def test_every_fixture_and_external_trace_gpu_is_matched() -> None:
    names = {
        "hta/rank0.json.gz": "a100-sxm-80gb",
        "hta/benchmark_result_2869224_1695835535_trace.json.gz": "a100-sxm-40gb",
        "hta/df_index_resolver.json.gz": "v100-sxm2",
        "hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz": "mi210",
        "tracelens/mi300/resnet_act_checkpoint.json.gz": "mi300x",
        "tracelens/b200/eager_trace.json.gz": "b200",
        "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz": "h100-sxm",
    }
    for rel, key in names.items():
        with gzip.open(EXTERNAL / rel, "rt") as fh:
            props = json.load(fh)["deviceProperties"][0]
        assert match(props).spec is not None and match(props).spec.key == key, rel  # type: ignore[union-attr]
    assert roofline.of(load_file(TRACES / "planted_fp32_matmul.json.gz")).peaks.model == lookup("h100-sxm").name  # type: ignore[union-attr]


# -- peaks: configuration and device profiles -----------------------------------------------------


def _profile(**over: Any) -> DeviceProfile:
    base: dict[str, Any] = {
        "name": "NVIDIA H100 80GB HBM3",
        "sm_count": 132,
        "compute_capability": "9.0",
        "total_memory_bytes": 85017853952,
        "memory_bandwidth_gbs": 3010.0,
        "flops": {"bf16": 7.0e14, "fp32": 5.2e13, "fp8": None},
        "method": {"bandwidth": "copy 1 GiB x 20", "gemm": "8192^3 x 10"},
        "torch": "2.11.0+cu130",
        "created": "2026-11-21T19:44:38+00:00",
    }
    base.update(over)
    return DeviceProfile(**base)


def test_profile_round_trips_atomically(tmp_path: Path) -> None:
    path = tmp_path / "devices" / profile_filename("NVIDIA H100 80GB HBM3", 132)
    assert path.name == "nvidia-h100-80gb-hbm3-132sm.json"
    save_device_profile(_profile(), path)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    doc = json.loads(path.read_text())
    assert doc["schema"] == SCHEMA and doc["measured"]["flops"]["fp8"] is None
    back = load_device_profile(path)
    assert back.memory_bandwidth_gbs == 3010.0 and back.flops["bf16"] == 7.0e14 and back.path == str(path)
    assert back.to_dict() == doc


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schema="traceadvisor-device-profile/2"), "schema must be"),
        (lambda d: d["device"].pop("name"), "device.name"),
        (lambda d: d["device"].update(sm_count=0), "device.sm_count"),
        (lambda d: d["device"].update(compute_capability="sm90"), "compute_capability"),
        (lambda d: d["measured"].update(memory_bandwidth_gbs=-1), "memory_bandwidth_gbs"),
        (lambda d: d["measured"]["flops"].update(bf16="fast"), "measured.flops.bf16"),
        (lambda d: d["measured"].update(flops=[1, 2]), "measured.flops must be"),
        (lambda d: d.update(created="yesterday"), "ISO 8601"),
        (lambda d: d.pop("measured"), "measured must be"),
    ],
)
def test_bad_profiles_are_refused_with_the_reason(mutate: Callable[[dict[str, Any]], Any], message: str) -> None:
    doc = _profile().to_dict()
    mutate(doc)
    with pytest.raises(ProfileError, match=message):
        parse_device_profile(doc, "p.json")


def test_unreadable_profiles_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="not found"):
        load_device_profile(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ProfileError, match="not JSON"):
        load_device_profile(bad)


def test_unknown_dtype_keys_are_kept_aside_for_newer_calibrations() -> None:
    doc = _profile().to_dict()
    doc["measured"]["flops"]["fp4"] = 1.0e15
    prof = parse_device_profile(doc)
    assert "fp4" not in prof.flops and prof.extra_flops == {"fp4": 1.0e15}
    assert prof.to_dict()["measured"]["flops"]["fp4"] == 1.0e15


def test_default_dir_and_newest_matching_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEADVISOR_HOME", str(tmp_path))
    assert default_profile_dir() == tmp_path / "devices"
    monkeypatch.delenv("TRACEADVISOR_HOME")
    assert default_profile_dir() == Path.home() / ".cache" / "traceadvisor" / "devices"
    d = tmp_path / "devices"
    save_device_profile(_profile(memory_bandwidth_gbs=2900.0, created="2026-01-01T00:00:00+00:00"), d / "old.json")
    save_device_profile(_profile(memory_bandwidth_gbs=3000.0, created="2026-06-01T00:00:00+00:00"), d / "new.json")
    save_device_profile(_profile(sm_count=114, memory_bandwidth_gbs=1.0), d / "pcie.json")  # other SM count
    (d / "broken.json").write_text("{")
    found = find_device_profile("NVIDIA H100 80GB HBM3", 132, d)
    assert found is not None and found.memory_bandwidth_gbs == 3000.0
    assert find_device_profile("NVIDIA H200", 132, d) is None


def test_profile_in_the_default_dir_replaces_only_what_it_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEADVISOR_HOME", str(tmp_path))
    save_device_profile(_profile(), default_profile_dir() / "h100.json")
    peaks = resolve_peaks(H100, GpuConfig()).peaks
    assert peaks is not None
    assert peaks.memory_bandwidth_gbs == 3010.0 and peaks.flops["bf16"] == 7.0e14 and peaks.flops["fp32"] == 5.2e13
    h100 = lookup("h100-sxm")
    assert h100 is not None
    assert peaks.flops["fp8"] == h100.flops["fp8"]  # measured as null: the datasheet figure stays
    assert peaks.flops["tf32"] == h100.flops["tf32"]  # not measured
    assert "h100.json" in peaks.sources["bf16"] and peaks.sources["tf32"].startswith("datasheet")
    # ... and the search can be turned off.
    off = resolve_peaks(H100, GpuConfig(search_profiles=False)).peaks
    assert off is not None and off.memory_bandwidth_gbs == h100.memory_bandwidth_gbs


def test_a_profile_gives_peaks_to_a_gpu_the_table_lacks(tmp_path: Path) -> None:
    a10g = {"name": "NVIDIA A10G", "numSms": 80, "totalGlobalMem": 24e9}
    prof = _profile(name="NVIDIA A10G", sm_count=80, memory_bandwidth_gbs=560.0, flops={"fp32": 2.9e13})
    peaks = resolve_peaks(a10g, GpuConfig(device_profile=prof)).peaks
    assert peaks is not None and peaks.memory_bandwidth_gbs == 560.0 and peaks.flops["bf16"] is None
    assert peaks.compute_peak("vector", "fp32") == (2.9e13, "fp32")


def test_configuration_names_a_gpu_and_overrides_figures(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(json.dumps(_profile(name="whatever", sm_count=7).to_dict()))
    cfg_file = tmp_path / "pyproject.toml"
    cfg_file.write_text(
        "[tool.traceadvisor.gpu]\n"
        'name = "a100-sxm-80gb"\n'
        'device-profile = "p.json"\n'
        "memory-bandwidth-gbs = 1800\n"
        "[tool.traceadvisor.gpu.tflops]\n"
        "bf16 = 250\n"
    )
    cfg = load_config(cfg_file)
    assert cfg.gpu is not None and cfg.gpu.name == "a100-sxm-80gb" and cfg.gpu.device_profile is not None
    peaks = resolve_peaks(H100, cfg.gpu).peaks  # the configuration wins over matching the H100
    assert peaks is not None and peaks.model == "NVIDIA A100 SXM4 80GB"
    assert peaks.memory_bandwidth_gbs == 1800.0 and peaks.flops["bf16"] == 250e12
    assert peaks.flops["fp32"] == 5.2e13  # from the profile
    assert peaks.flops["tf32"] == 156e12  # from the A100 datasheet
    assert peaks.sources["bf16"] == f"configuration: {cfg_file}"
    assert peaks.sources["fp32"].startswith("measured: ") and peaks.sources["tf32"].startswith("datasheet")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('name = "h900"', "not in the peak table"),
        ('device-profile = "nope.json"', "not found"),
        ("device-profile = 3", "file path or false"),
        ("memory-bandwidth-gbs = -5", "positive number"),
        ("bogus = 1", "unknown key gpu.bogus"),
        ("tflops = 5", "table of dtype"),
        ("[tool.traceadvisor.gpu.tflops]\nfp4 = 5", "unknown dtype"),
    ],
)
def test_bad_gpu_configuration_is_a_usage_error(tmp_path: Path, table: str, message: str) -> None:
    cfg_file = tmp_path / "pyproject.toml"
    cfg_file.write_text(f"[tool.traceadvisor.gpu]\n{table}\n")
    with pytest.raises(UsageError, match=message):
        load_config(cfg_file)


def test_configuration_table_parser_turns_the_search_off() -> None:
    cfg = parse_gpu_table({"device-profile": False, "sm-count": 100}, Path(), "x.toml")
    assert not cfg.search_profiles and cfg.sm_count == 100


# -- op models against torch ----------------------------------------------------------------------


def _recorded(fn: Callable[[], Any], name: str, tmp_path: Path) -> tuple[Any, Any, Any]:
    """The first ``name`` op that torch.profiler (record_shapes) records while ``fn`` runs, as the loader keeps it."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    path = tmp_path / "cpu_trace.json"
    prof.export_chrome_trace(str(path))
    ops = load_file(path).ops
    rows = ops[ops["name"].astype(str) == name]
    assert len(rows), f"{name} not recorded; got {sorted(set(ops['name'].astype(str)))}"
    r = rows.iloc[0]
    return parse_raw(r["input_dims"]), parse_raw(r["input_types"]), parse_raw(r["concrete_inputs"])


def _counted(fn: Callable[[], Any], op: Any = None) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    if op is None:
        return int(counter.get_total_flops())
    return int(counter.get_flop_counts()["Global"][op])


def _flops_cases() -> list[Any]:
    return [
        pytest.param("mm", "aten::mm", id="mm"),
        pytest.param("addmm", "aten::addmm", id="addmm"),
        pytest.param("bmm", "aten::bmm", id="bmm"),
        pytest.param("baddbmm", "aten::baddbmm", id="baddbmm"),
        pytest.param("matmul_broadcast", "aten::matmul", id="matmul-broadcast-batch"),
        pytest.param("matmul_folded", "aten::matmul", id="matmul-batch-folded-into-mm"),
        pytest.param("linear", "aten::linear", id="linear"),
        pytest.param("conv2d", "aten::convolution", id="conv2d-stride-padding-dilation-groups"),
        pytest.param("conv1d", "aten::convolution", id="conv1d"),
        pytest.param("conv3d", "aten::convolution", id="conv3d-stride"),
        pytest.param("conv_transpose2d", "aten::convolution", id="conv-transpose2d-groups"),
        pytest.param("conv_same", "aten::convolution", id="conv2d-padding-same"),
    ]


def _flops_fn(case: str) -> Callable[[], Any]:
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> Any:
        return torch.randn(*shape, generator=g)

    a, b = r(64, 96), r(96, 80)
    x3, y3 = r(4, 32, 48), r(4, 48, 40)
    fns: dict[str, Callable[[], Any]] = {
        "mm": lambda: torch.mm(a, b),
        "addmm": lambda: torch.addmm(r(80), a, b),
        "bmm": lambda: torch.bmm(x3, y3),
        "baddbmm": lambda: torch.baddbmm(r(4, 32, 40), x3, y3),
        "matmul_broadcast": lambda: torch.matmul(r(3, 1, 32, 48), r(5, 48, 40)),
        "matmul_folded": lambda: torch.matmul(r(3, 7, 96), b),
        "linear": lambda: F.linear(r(2, 7, 64), r(32, 64), r(32)),
        "conv2d": lambda: F.conv2d(
            r(2, 8, 17, 19), r(12, 4, 3, 5), r(12), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2
        ),
        "conv1d": lambda: F.conv1d(r(3, 6, 50), r(10, 6, 5), padding=2),
        "conv3d": lambda: F.conv3d(r(1, 4, 9, 10, 11), r(6, 4, 3, 3, 3), stride=2, padding=1),
        "conv_transpose2d": lambda: F.conv_transpose2d(
            r(2, 8, 9, 7), r(8, 3, 4, 3), stride=2, padding=1, output_padding=1, groups=2
        ),
        "conv_same": lambda: F.conv2d(r(2, 3, 15, 16), r(5, 3, 3, 5), padding="same"),
    }
    return fns[case]


@pytest.mark.parametrize(("case", "op"), _flops_cases())
def test_matrix_and_convolution_flops_equal_flop_counter_mode(case: str, op: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    fn = _flops_fn(case)
    dims, types, concrete = _recorded(fn, op, tmp_path)
    work = op_work(op, dims, types, concrete)
    assert work is not None, (op, dims, types, concrete)
    assert work.flops == _counted(fn)
    assert work.op_class in ("matmul", "conv") and work.dtype == "fp32"


def test_convolution_with_an_unrecorded_string_padding_is_not_guessed(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    x, w = torch.randn(2, 3, 15, 16), torch.randn(5, 3, 3, 5)
    conv = lambda: torch.nn.functional.conv2d(x, w, padding="same")  # noqa: E731
    dims, types, concrete = _recorded(conv, "aten::conv2d", tmp_path)
    assert concrete[4] == "" and op_work("aten::conv2d", dims, types, concrete) is None


def test_convolution_backward_flops_equal_flop_counter_mode(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 6, 14, 15, requires_grad=True)
    w = torch.randn(8, 6, 3, 3, requires_grad=True)

    def fn() -> None:
        torch.nn.functional.conv2d(x, w, stride=2, padding=1).sum().backward()

    dims, types, concrete = _recorded(fn, "aten::convolution_backward", tmp_path)
    work = op_work("aten::convolution_backward", dims, types, concrete)
    assert work is not None
    assert work.flops == _counted(fn, torch.ops.aten.convolution_backward)


def _attention_inputs(b: int, hq: int, hk: int, lq: int, lk: int, d: int) -> tuple[Any, Any, Any]:
    import torch

    # Meta tensors: the CUDA attention ops have meta kernels, so they run (shapes only) on a CPU box.
    q = torch.empty(b, hq, lq, d, device="meta", dtype=torch.bfloat16)
    k = torch.empty(b, hk, lk, d, device="meta", dtype=torch.bfloat16)
    v = torch.empty(b, hk, lk, d, device="meta", dtype=torch.bfloat16)
    return q, k, v


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "op", ["aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_flash_attention"]
)
def test_attention_forward_flops_against_flop_counter_mode(op: str, causal: bool, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    q, k, v = _attention_inputs(2, 8, 8, 256, 256, 64)
    if op.endswith("efficient_attention"):

        def fn() -> Any:
            return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal)
    else:

        def fn() -> Any:
            return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)

    dims, types, concrete = _recorded(fn, op, tmp_path)
    work = op_work(op, dims, types, concrete)
    assert work is not None and work.op_class == "attention" and work.dtype == "bf16"
    full = _counted(fn)  # FlopCounterMode counts the whole score matrix, masked or not
    assert full == 4 * 2 * 8 * 256 * 256 * 64
    # Causal attention keeps the lower triangle (diagonal included): 256·257/2 of 256² scores.
    assert work.flops == pytest.approx(full * (257 / 512 if causal else 1.0), rel=1e-12)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_backward_flops_against_flop_counter_mode(causal: bool, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    q, k, v = _attention_inputs(2, 4, 4, 128, 384, 32)
    o, lse, seed, off = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal)
    op = "aten::_scaled_dot_product_efficient_attention_backward"

    def fn() -> Any:
        bias = torch.empty(0, device="meta")
        mask = [True, True, True, False]
        return torch.ops.aten._scaled_dot_product_efficient_attention_backward(
            o, q, k, v, bias, o, lse, seed, off, 0.0, mask, causal
        )

    dims, types, concrete = _recorded(fn, op, tmp_path)
    work = op_work(op, dims, types, concrete)
    assert work is not None
    counted = _counted(fn)
    assert counted == 2.5 * 4 * 2 * 4 * 128 * 384 * 32  # five matrix products of the score size
    # Lq = 128 < Lk = 384, top-left causal: row i keeps i + 1 keys → 128·129/2 of 128·384.
    fraction = (128 * 129 / 2) / (128 * 384) if causal else 1.0
    assert work.flops == pytest.approx(counted * fraction, rel=1e-12)
    assert fraction == pytest.approx(causal_fraction(128, 384) if causal else 1.0)


def test_grouped_query_attention_counts_the_query_heads(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = torch.randn(2, 8, 128, 32), torch.randn(2, 2, 128, 32), torch.randn(2, 2, 128, 32)

    def fn() -> Any:
        # The math backend repeats K and V per query group and runs two bmm's: FlopCounterMode sees them.
        with sdpa_kernel(SDPBackend.MATH):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    op = "aten::scaled_dot_product_attention"
    dims, types, concrete = _recorded(fn, op, tmp_path)
    work = op_work(op, dims, types, concrete)
    assert work is not None and work.flops == _counted(fn) == 4 * 2 * 8 * 128 * 128 * 32
    # Bytes read: K and V at their grouped size (2 heads), not repeated to 8.
    assert work.bytes == pytest.approx(4 * (q.numel() + 2 * k.numel() + q.numel() + 2 * 8 * 128), rel=1e-12)


def _nbytes(tensors: Any) -> int:
    """Bytes of an op's outputs (mean and rstd of a layer norm are outputs too)."""
    return sum(t.nbytes for t in tensors)


def _bytes_case(case: str) -> tuple[Callable[[], Any], str, Callable[[], float], str]:
    """(function, op to model, bytes it must move from real tensor sizes, kernel-name hint)."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 64, generator=g)
    w, bias = torch.randn(64, generator=g), torch.randn(64, generator=g)
    y = torch.randn(256, 64, generator=g)
    idx = torch.randint(0, 100, (37,), generator=g)
    table = torch.randn(100, 16, generator=g)
    a, b = torch.randn(64, 1, 32, generator=g), torch.randn(1, 16, 32, generator=g)
    cond = x > 0
    cases: dict[str, tuple[Callable[[], Any], str, Callable[[], float], str]] = {
        "add-broadcast": (lambda: a + b, "aten::add", lambda: a.nbytes + b.nbytes + (a + b).nbytes, ""),
        "mul-inplace": (lambda: x.clone().mul_(y), "aten::mul_", lambda: 3 * x.nbytes, ""),
        "sin": (lambda: torch.sin(x), "aten::sin", lambda: 2 * x.nbytes, ""),
        "where": (lambda: torch.where(cond, x, y), "aten::where", lambda: cond.nbytes + 3 * x.nbytes, ""),
        "cast-to-bf16": (lambda: x.to(torch.bfloat16), "aten::copy_", lambda: x.nbytes + x.bfloat16().nbytes, ""),
        "cast-code": (lambda: x.to(torch.bfloat16), "aten::_to_copy", lambda: x.nbytes + x.bfloat16().nbytes, ""),
        "sum-dim": (lambda: x.sum(dim=1), "aten::sum", lambda: x.nbytes + x.sum(dim=1).nbytes, ""),
        "mean-all": (lambda: x.mean(), "aten::mean", lambda: x.nbytes + x.mean().nbytes, ""),
        "amax-dims": (lambda: x.view(16, 16, 64).amax(dim=(0, 2)), "aten::amax", lambda: x.nbytes + 16 * 4, ""),
        "softmax": (lambda: torch.softmax(x, -1), "aten::_softmax", lambda: 2 * x.nbytes, ""),
        "log-softmax": (lambda: torch.log_softmax(x, -1), "aten::_log_softmax", lambda: 2 * x.nbytes, ""),
        "layer-norm": (
            lambda: F.layer_norm(x, (64,), w, bias),
            "aten::native_layer_norm",
            lambda: x.nbytes + w.nbytes + bias.nbytes + _nbytes(torch.native_layer_norm(x, (64,), w, bias, 1e-5)),
            "",
        ),
        "rms-norm": (
            lambda: F.rms_norm(x, (64,), w),
            "aten::_fused_rms_norm",
            lambda: x.nbytes + w.nbytes + _nbytes(torch._fused_rms_norm(x, [64], w, None)),
            "",
        ),
        "embedding": (
            lambda: F.embedding(idx, table),
            "aten::embedding",
            lambda: idx.nbytes + 2 * F.embedding(idx, table).nbytes,  # gathered rows read, then written
            "",
        ),
        "cat": (
            lambda: torch.cat([x, y, x]),
            "aten::cat",
            lambda: 2 * torch.cat([x, y, x]).nbytes,
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<"
            "at::native::(anonymous namespace)::OpaqueType<4u>, unsigned int, 2, 128, 1>",
        ),
    }  # fmt: skip
    return cases[case]


@pytest.mark.parametrize(
    "case",
    [
        "add-broadcast",
        "mul-inplace",
        "sin",
        "where",
        "cast-to-bf16",
        "cast-code",
        "sum-dim",
        "mean-all",
        "amax-dims",
        "softmax",
        "log-softmax",
        "layer-norm",
        "rms-norm",
        "embedding",
        "cat",
    ],
)
def test_byte_models_equal_the_tensor_sizes(case: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    fn, op, expected, hint = _bytes_case(case)
    dims, types, concrete = _recorded(fn, op, tmp_path)
    work = op_work(op, dims, types, concrete, hint)
    assert work is not None, (op, dims, types, concrete)
    assert work.bytes == pytest.approx(expected(), rel=1e-9)


def test_backward_byte_models_equal_the_tensor_sizes(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = torch.randn(256, 64, requires_grad=True)
    table = torch.randn(100, 16, requires_grad=True)
    idx = torch.randint(0, 100, (37,))

    def fn() -> None:
        (torch.softmax(x, -1) * 2).sum().backward()
        F.embedding(idx, table).sum().backward()

    dims, types, concrete = _recorded(fn, "aten::_softmax_backward_data", tmp_path)
    work = op_work("aten::_softmax_backward_data", dims, types, concrete)
    assert work is not None and work.bytes == 3 * x.nbytes  # reads grad and output, writes grad_input
    dims, types, concrete = _recorded(fn, "aten::embedding_dense_backward", tmp_path)
    work = op_work("aten::embedding_dense_backward", dims, types, concrete)
    assert work is not None
    assert work.bytes == 37 * 16 * 4 + idx.nbytes + table.nbytes  # grad rows + indices + the gradient table


def test_out_and_empty_tensor_arguments_are_not_read() -> None:
    # ``mul.out(self, other, *, out)`` records the destination as a third input; ``abs`` records an
    # empty ``out`` of shape [0]: neither is read.
    mul = op_work("aten::mul", [[512, 512], [], [512, 512]], ["c10::BFloat16", "double", "c10::BFloat16"], ["", "", ""])
    assert mul is not None and mul.bytes == 2 * 512 * 512 * 2 + 8
    ab = op_work("aten::abs", [[4096, 2048], [0]], ["float", "float"], ["", ""])
    assert ab is not None and ab.bytes == 2 * 4096 * 2048 * 4 and ab.flops == 4096 * 2048


def test_unmodelled_and_shapeless_ops_get_no_work() -> None:
    assert op_work("aten::nonzero", [[10]], ["float"]) is None
    assert op_work("aten::mm", None, None) is None
    assert op_work("aten::mm", [[], []], ["", ""]) is None
    assert op_work("aten::cat", [[[4, 4], [4, 4]], []], ["TensorList", "Scalar"], ["", "0"]) is None  # dtype unknown


# -- models against TraceLens's perf model (an independent implementation) -----------------------


def _tracelens_rows() -> list[Any]:
    rows = []
    for csv in sorted(TRACELENS.glob("*/*_perf_report_csvs/*.csv")):
        if csv.stem not in ("GEMM", "SDPA_fwd", "CONV_fwd", "CONV_bwd", "BinaryElementwise", "UnaryElementwise"):
            continue
        df = pd.read_csv(csv)
        for i, r in df.iterrows():
            rows.append(pytest.param(csv.stem, r.to_dict(), id=f"{csv.parent.parent.name}-{csv.stem}-{i}"))
    assert rows, f"no TraceLens perf-report sheets under {TRACELENS}"  # an empty list would collect as a skip
    return rows


@pytest.mark.parametrize(("sheet", "row"), _tracelens_rows())
def test_models_agree_with_tracelens(sheet: str, row: dict[str, Any]) -> None:
    columns = ("Input Dims_first", "Input type_first", "Concrete Inputs_first")
    dims, types, concrete = (ast.literal_eval(row[c]) for c in columns)
    work = op_work(row["name"], dims, types, concrete)
    assert work is not None
    flops = row["GFLOPS_first"] * 1e9
    if sheet == "CONV_bwd" and "[False, True" in str(concrete[-1]):
        flops /= 2  # TraceLens counts the input gradient even when output_mask skips it
    # Causal attention: TraceLens halves the score matrix, we keep the triangle with its diagonal.
    if row["name"] != "aten::copy_":  # TraceLens counts a FLOP per copied element, we count none
        assert work.flops == pytest.approx(flops, rel=0.011)
    if sheet != "CONV_bwd":  # TraceLens reads grad_output once per gradient; we count each input once
        assert work.bytes == pytest.approx(row["Data Moved (MB)_first"] * 2**20, rel=0.011)


# -- the per-kernel view on the real fixtures -----------------------------------------------------


def _view(name: str) -> pd.DataFrame:
    return roofline.of(load_file(TRACES / f"{name}.json.gz")).kernels


def test_fp32_matmul_kernels_are_compute_bound_on_the_cuda_cores() -> None:
    k = _view("planted_fp32_matmul")
    mm = k[k["op_name"] == "aten::mm"]
    assert len(mm) == 9
    n = 4096
    assert (mm["flops"] == 2 * n**3).all()  # one kernel per op: its whole work
    assert (mm["bytes"] == 3 * n * n * 4).all()
    # 2n³ / 3·4n² = n/6 ≈ 683 FLOP/B, far above the fp32 ridge 67e12 / 3.35e12 = 20 FLOP/B
    assert mm["intensity"].to_numpy() == pytest.approx(n / 6)
    assert (mm["bound"] == "compute").all()
    assert (mm["peak_figure"] == "fp32").all() and (mm["peak_tflops"] == 67.0).all()  # ffma kernel: no TF32
    achieved = 2 * n**3 / (mm["dur_ns"].to_numpy() / 1e9) / 1e12
    assert mm["achieved_tflops"].to_numpy() == pytest.approx(achieved)
    assert mm["roof_share"].to_numpy() == pytest.approx(achieved / 67.0)


def test_tf32_kernels_are_judged_against_the_tf32_peak() -> None:
    k = _view("pair_tf32_after")
    mm = k[k["op_name"] == "aten::mm"]
    assert len(mm) and (mm["peak_figure"] == "tf32").all() and (mm["peak_tflops"] == 494.5).all()


def test_flash_attention_kernel_is_compute_bound() -> None:
    k = _view("clean_sdpa_attention")
    fwd = k[k["op_name"] == "aten::_cudnn_attention_forward"]
    assert len(fwd) == 3
    b, h, s, d = 16, 16, 2048, 64  # recorded q/k/v [16, 16, 2048, 64] bf16, is_causal False
    flops = 4 * b * h * s * s * d
    nbytes = 4 * b * h * s * d * 2 + b * h * s * 4  # q, k, v, out in bf16 + the fp32 log-sum-exp
    assert (fwd["flops"] == flops).all() and (fwd["bytes"] == nbytes).all()
    assert flops / nbytes > 989.5e12 / 3.35e12  # above the bf16 ridge point (295 FLOP/B)
    assert (fwd["bound"] == "compute").all() and (fwd["peak_figure"] == "bf16").all()


def test_an_ops_work_is_split_over_its_kernels_by_duration() -> None:
    k = _view("clean_sdpa_attention")
    bwd = k[k["op_name"] == "aten::_cudnn_attention_backward"]
    assert len(bwd) == 9  # three kernels per backward op, three steps
    for _, grp in bwd.groupby("op"):
        assert grp["flops"].sum() == pytest.approx(2.5 * 4 * 16 * 16 * 2048 * 2048 * 64)
        share = grp["dur_ns"] / grp["dur_ns"].sum()
        assert (grp["flops"] / grp["flops"].sum()).to_numpy() == pytest.approx(share.to_numpy())
        assert grp["achieved_tflops"].nunique() == 1 or grp["achieved_tflops"].to_numpy() == pytest.approx(
            grp["achieved_tflops"].iloc[0]
        )


def test_pointwise_chain_kernels_are_memory_bound() -> None:
    k = _view("planted_unfused_elementwise")
    t = load_file(TRACES / "planted_unfused_elementwise.json.gz")
    assert len(k) == len(t.kernels)  # every kernel is tied to an op and modelled
    sin = k[k["op_name"] == "aten::sin"]
    n = 4096 * 2048
    assert (sin["bytes"] == 2 * 4 * n).all() and (sin["flops"] == n).all()
    assert (sin["bound"] == "memory").all()
    assert sin["achieved_gbs"].to_numpy() == pytest.approx(2 * 4 * n / (sin["dur_ns"].to_numpy() / 1e9) / 1e9)
    assert sin["roof_share"].to_numpy() == pytest.approx(sin["achieved_gbs"].to_numpy() / 3350.0)


def test_tiny_and_starved_kernels_are_latency_bound() -> None:
    k = _view("clean_sdpa_attention")
    fill = k[k["op_name"] == "aten::fill_"]
    assert len(fill) and (fill["roof_time_ns"] < view.LATENCY_FLOOR_NS).all() and (fill["bound"] == "latency").all()
    scans = _view("planted_low_occupancy")
    starved = scans[(scans["blocks"] > 0) & (scans["blocks"] < 66)]  # under half of 132 SMs
    assert len(starved) and (starved["bound"] == "latency").all()


def test_the_models_run_once_per_distinct_op(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = view.op_work

    def counting(name: str, *args: Any) -> Any:
        calls.append(name)
        return real(name, *args)

    monkeypatch.setattr(view, "op_work", counting)
    t = load_file(TRACES / "planted_unfused_elementwise.json.gz")
    k = roofline.of(t).kernels
    ops = t.host.loc[k["op"].unique()]
    distinct = ops[["name", "input_dims", "input_types", "concrete_inputs"]].astype(str).drop_duplicates()
    assert len(k) == 162 and len(calls) <= len(distinct) < 40


def test_unknown_gpu_has_no_roofline_but_keeps_flops_and_bytes(tmp_path: Path) -> None:
    src = TRACES / "planted_fp32_matmul.json.gz"
    with gzip.open(src, "rt") as fh:
        doc = json.load(fh)
    doc["deviceProperties"][0]["name"] = "NVIDIA A10G"
    doc["deviceProperties"][0]["numSms"] = 80
    path = tmp_path / "a10g.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    t = load_file(path)
    assert roofline.of(t).peaks is None and "A10G" in roofline.of(t).reason
    k = roofline.of(t).kernels
    assert (k["flops"] == 2 * 4096**3).all() and (k["bound"] == "unknown").all() and k["roof_share"].isna().all()
    report = analyze_traces([t]).to_dict()
    section = report["traces"][0]["roofline"]
    assert section["available"] is False and section["peaks"] is None and "A10G" in section["reason"]
    skipped = {s["rule"]: s["reason"] for s in report["skipped"]}
    for rule in ("memory-bound", "fp32-matmul", "unfused-attention"):
        assert "gpu_peaks" in skipped[rule] and "calibrate" in skipped[rule]


# -- the report -----------------------------------------------------------------------------------


def test_report_roofline_section() -> None:
    t = load_file(TRACES / "clean_sdpa_attention.json.gz")
    report = analyze_traces([t])
    r = report.traces[0].roofline
    assert r.available and r.peaks is not None and r.peaks.model == "NVIDIA H100 SXM5 80GB"
    assert r.peaks.memory_bandwidth_gbs == 3350.0 and r.peaks.tflops["bf16"] == 989.5
    assert all(s.startswith("datasheet: NVIDIA H100") for s in r.peaks.sources.values())
    assert sum(b.share_pct for b in r.by_bound) == pytest.approx(100.0)
    assert r.modelled_time_us <= r.kernel_time_us
    top = r.top_kernels[0]
    assert top.op == "aten::_cudnn_attention_backward" and top.bound == "compute"
    assert top.gflop is not None
    assert top.achieved_tflops == pytest.approx(top.gflop / 1e3 / (top.time_us / 1e6))
    times = [k.time_us for k in r.top_kernels]
    assert times == sorted(times, reverse=True)
    json.dumps(report.to_dict(), allow_nan=False)  # no NaN leaks into the JSON


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceadvisor", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_cli_reports_configured_peaks_in_every_format(tmp_path: Path) -> None:
    cfg = tmp_path / "traceadvisor.toml"
    cfg.write_text("[gpu]\nmemory-bandwidth-gbs = 3000\n[gpu.tflops]\nfp32 = 60\n")
    trace = str(TRACES / "planted_fp32_matmul.json.gz")
    env = {"TRACEADVISOR_HOME": str(tmp_path / "home")}
    out = tmp_path / "r.json"
    proc = _cli("analyze", trace, "--config", str(cfg), "-f", "json", "-o", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    peaks = json.loads(out.read_text())["traces"][0]["roofline"]["peaks"]
    assert peaks["memory_bandwidth_gbs"] == 3000.0 and peaks["tflops"]["fp32"] == 60.0
    assert peaks["sources"]["fp32"] == f"configuration: {cfg}" and peaks["sources"]["bf16"].startswith("datasheet")
    text = _cli("analyze", trace, "--config", str(cfg), env=env).stdout
    assert "roofline peaks (NVIDIA H100 SXM5 80GB): 3000 GB/s" in text
    assert "memory_bandwidth, fp32: configuration:" in text
    assert "aten::mm" in text and "compute" in text
    md = _cli("analyze", trace, "--config", str(cfg), "-f", "markdown", env=env).stdout
    assert "**Roofline** (NVIDIA H100 SXM5 80GB): 3000 GB/s" in md and "| aten::mm | fp32 |" in md
    bad = tmp_path / "bad.toml"
    bad.write_text('[gpu]\nname = "h900"\n')
    proc = _cli("analyze", trace, "--config", str(bad), env=env)
    assert proc.returncode == 2 and "h900" in proc.stderr and "Traceback" not in proc.stderr


def test_causal_fraction() -> None:
    assert causal_fraction(4, 4) == 10 / 16
    assert causal_fraction(2, 4) == 3 / 8
    assert causal_fraction(4, 2) == (3 + 2 * 2) / 8
    assert causal_fraction(4096, 4096) == pytest.approx(0.5, abs=1e-3)
    assert math.isclose(causal_fraction(0, 5), 0.0)


def test_table_keys_are_the_documented_ones() -> None:
    assert gpus.FIGURES[0] == "memory_bandwidth" and set(gpus.FIGURES[1:]) == set(DTYPES)
    assert Config().gpu is None


def test_kernel_dtype_is_the_first_type_named() -> None:
    """The functor's first template argument is the element type; scalars named later (an fp32
    fused AdamW takes lr and betas as doubles) do not make it fp64."""
    from traceadvisor.roofline.models import kernel_dtype

    adamw = (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
        "(at::native::ADAM_MODE)1, false>, float const*, double, double, double, double, double, bool>"
    )
    assert kernel_dtype(adamw) == ("fp32", 4)
    assert kernel_dtype("void kernel<c10::BFloat16, float, double>") == ("bf16", 2)
    assert kernel_dtype("void reduce_kernel<double, float>") == ("fp64", 8)
    assert kernel_dtype("CatArrayBatchedCopy<OpaqueType<2u>, unsigned int, 4, 64, 64>") == ("16-bit", 2)


def test_fused_adamw_on_a_real_trace_is_fp32_and_below_the_bandwidth_peak() -> None:
    trace = load_file(Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "train_step.json.gz")
    k = roofline.of(trace).kernels
    adamw = k[k["op_name"].astype(str) == "aten::_fused_adamw_"]
    assert len(adamw) == 3
    assert set(adamw["dtype"]) == {"fp32"}
    assert (adamw["roof_share"] < 1.0).all() and (adamw["roof_share"] > 0.5).all()


def test_report_explains_kernels_above_the_roof() -> None:
    """Shares above 100% of the bandwidth peak are physically impossible from DRAM: the report says
    why they show (L2 residency, broadcast inputs counted at full size) instead of leaving a bare 138%."""
    from traceadvisor.report.format import ABOVE_ROOF_NOTE
    from traceadvisor.report.render_text import render as render_text

    root = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
    above = analyze_traces([load_file(root / "planted_unfused_elementwise.json.gz")])
    rows = above.traces[0].roofline.top_kernels
    assert any(r.bound == "memory" and (r.roof_pct or 0.0) > 100 for r in rows)
    assert ABOVE_ROOF_NOTE in " ".join(render_text(above).split())
    below = analyze_traces([load_file(root / "train_step.json.gz")])
    assert all(r.roof_pct is None or r.roof_pct <= 100 for r in below.traces[0].roofline.top_kernels)
    assert ABOVE_ROOF_NOTE not in " ".join(render_text(below).split())


def test_the_kernels_of_a_tf32_op_share_its_tf32_peak() -> None:
    """An op's work is split over its kernels by duration, so every kernel runs at the op's rate.
    cuDNN runs fp32 convolutions on TF32 tensor cores (torch.backends.cudnn.allow_tf32 defaults to
    True) and launches layout transposes around them (nchwToNhwcKernel): at the fp32 CUDA-core peak
    those came out at 108% of their roof (convolution_backward at 72 TFLOP/s against the H200's
    67). Every kernel of an op that has a TF32 kernel takes the TF32 peak, and no compute-bound
    kernel is above its roof."""
    path = REPO / "fixtures" / "pairs12_runs" / "run_21" / "traces" / "p12_conv_cl_before_stack.json.gz"
    k = view.of(load_file(path)).kernels
    names = k["name"].astype(str)
    tf32_ops = set(k.loc[names.str.contains("tf32"), "op"])
    transposes = k[names.str.contains("nchwToNhwc|nhwcToNchw") & k["op"].isin(tf32_ops)]
    assert len(transposes) > 0
    assert (transposes["peak_figure"] == "tf32").all()
    shared = k[k["op"].isin(tf32_ops)]
    assert (shared["peak_figure"] == "tf32").all()
    compute = k[k["bound"] == "compute"]
    assert len(compute) > 0 and (compute["roof_share"] <= 1.0).all()
