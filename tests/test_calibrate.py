"""``traceadvisor calibrate`` where it cannot measure (no GPU, no torch), and its plan and rendering.

The measurements themselves need a CUDA GPU: ``bench/gpu_workloads.py`` runs ``calibrate --quick``
on the GPU machine and checks that the profile it writes loads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from traceadvisor import calibrate

BLOCK_TORCH = (
    "import sys, runpy\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('torch', 'triton'):\n"
    "            raise ImportError('blocked')\n"
    "sys.meta_path.insert(0, Block())\n"
    "sys.argv = ['traceadvisor', 'calibrate', *sys.argv[1:]]\n"
    "runpy.run_module('traceadvisor', run_name='__main__')\n"
)


def run(*args: str, block_torch: bool = False, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", BLOCK_TORCH, *args] if block_torch else [sys.executable, "-m", "traceadvisor", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def test_without_a_gpu_it_exits_2_with_one_line(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "profile.json"
    for args in (["calibrate"], ["calibrate", "--quick", "--out", str(out)]):
        p = run(*args)
        assert p.returncode == 2, p.stderr
        assert p.stderr == "traceadvisor: error: calibrate needs a CUDA GPU\n"
        assert p.stdout == ""
    assert not out.exists()


def test_without_torch_it_says_what_to_install() -> None:
    p = run(block_torch=True)
    assert p.returncode == 2
    assert p.stderr == "traceadvisor: error: calibrate needs torch (pip install 'traceadvisor[capture]')\n"


def test_plan_keeps_buffers_far_beyond_l2_and_within_memory() -> None:
    full = calibrate.Plan.make(quick=False, total_memory=80 << 30)
    quick = calibrate.Plan.make(quick=True, total_memory=80 << 30)
    assert full.copy_bytes == 1 << 30 and quick.copy_bytes == 1 << 28
    assert quick.copy_bytes > 4 * (50 << 20)  # the H100's L2 is 50 MiB: the copy must stream from HBM
    assert (full.matmul_n, quick.matmul_n) == (8192, 4096)
    assert full.triton_matmul and not quick.triton_matmul
    small = calibrate.Plan.make(quick=False, total_memory=4 << 30)
    assert small.copy_bytes == (4 << 30) // 16  # three buffers and the matmul operands still fit


def test_best_backend_per_dtype_ignores_failed_ones() -> None:
    assert calibrate._best({"cublas": {"flops": 7.0e14}, "triton": {"flops": 6.5e14}}) == 7.0e14
    assert calibrate._best({"cublas": {"flops": 4.0e14}, "triton": {"error": "OutOfResources"}}) == 4.0e14
    assert calibrate._best({"error": "no fp8 matmul on compute capability 8.0"}) is None


def test_render_shows_every_figure_and_what_was_not_measured() -> None:
    doc = {
        "device": {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "compute_capability": "9.0"},
        "measured": {
            "memory_bandwidth_gbs": 3012.4,
            "flops": {"fp32": 5.1e13, "tf32": 3.9e14, "bf16": 7.4e14, "fp16": 7.5e14, "fp8": None},
        },
        "method": {"bandwidth": {"copy": {"gbs": 2950.2}, "triton_vector_add": {"gbs": 3012.4}}},
    }
    text = calibrate.render(doc)
    assert text.splitlines()[0] == "NVIDIA H100 80GB HBM3 (132 SMs, compute capability 9.0)"
    assert "memory bandwidth      3012 GB/s  (copy 2950, triton_vector_add 3012)" in text
    assert "bf16                 740.0 TFLOP/s" in text
    assert "fp8                      - (not measured)" in text
    assert "(TF32 off: CUDA cores)" in text


def test_written_profiles_load_with_the_roofline_loader(tmp_path: Path) -> None:
    profile_mod = pytest.importorskip("traceadvisor.roofline.profile")
    # what measure() returns, filled with figures instead of measurements
    prof = profile_mod.DeviceProfile(
        name="NVIDIA H100 80GB HBM3",
        sm_count=132,
        compute_capability="9.0",
        total_memory_bytes=85017853952,
        memory_bandwidth_gbs=3012.4,
        flops={"fp32": 5.1e13, "tf32": 3.9e14, "bf16": 7.4e14, "fp16": 7.5e14, "fp8": None},
        method={"quick": True},
        torch="2.11.0+cu130",
        created="2026-11-21T19:44:38+00:00",
    )
    path = profile_mod.save_device_profile(prof, tmp_path / "p.json")
    doc = json.loads(path.read_text())
    assert doc["schema"] == "traceadvisor-device-profile/1"
    assert profile_mod.load_device_profile(path).flops["bf16"] == 7.4e14
    assert "NVIDIA H100 80GB HBM3" in calibrate.render(doc)
