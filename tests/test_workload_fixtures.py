"""The reference workloads' real GPU traces (H200, bench/gpu_workloads.py; fixtures/traces/workload_*).

The Triton kernels have no aten op; their launch records (traceadvisor.workloads.triton_hooks) must
tie each kernel to its grid and argument bytes, and the roofline must use them. Expected values are
computed here from the workloads' tensor sizes, not read from the analysis.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from traceadvisor import load_file, roofline
from traceadvisor.analyses import triton_launches

TRACES = Path(__file__).resolve().parent.parent / "fixtures" / "traces"

# workload -> (Triton kernel, bytes of its tensor arguments per launch, computed from the sizes the
# GPU run used: bench/gpu_workloads.py defaults)
TRITON = {
    "vector_add": ("add_kernel", 3 * (1 << 26) * 4),  # x, y, out: 2^26 fp32 each
    "softmax": ("softmax_kernel", 2 * 8192 * 4096 * 4),  # in and out: 8192 x 4096 fp32
    "matmul": ("matmul_kernel", 3 * 8192 * 8192 * 2),  # a, b, c: 8192 x 8192 fp16
}


def _trace(name: str):  # type: ignore[no-untyped-def]
    return load_file(TRACES / f"workload_{name}.json.gz")


@pytest.mark.parametrize("workload", sorted(TRITON))
def test_triton_kernels_are_tied_to_their_launch_records(workload: str) -> None:
    kernel, nbytes = TRITON[workload]
    t = _trace(workload)
    records = triton_launches.kernels(t)
    assert len(records) == 3  # one per active step of the schedule (active=3)
    assert set(records["name"]) == {kernel}
    assert records["grid_matches"].all()  # the record's grid is the grid the GPU ran
    assert (records["bytes"] == nbytes).all()


@pytest.mark.parametrize("workload", sorted(TRITON))
def test_roofline_uses_the_records_for_triton_kernels(workload: str) -> None:
    kernel, nbytes = TRITON[workload]
    rows = roofline.of(_trace(workload)).kernels
    rows = rows[rows["name"] == kernel]
    assert len(rows) == 3
    # softmax declares no FLOPs: judged against the memory roof only, and the basis says so
    assert set(rows["basis"]) == {"triton-record" if workload != "softmax" else "triton-record-memory-only"}
    assert (rows["op_name"] == f"triton::{kernel}").all()
    gbs = nbytes / (rows["dur_ns"].to_numpy() * 1e-9) / 1e9
    assert np.allclose(rows["achieved_gbs"].to_numpy(), gbs, rtol=1e-9)
    # An H200 moves at most 4.8 TB/s (datasheet): the achieved figure must be physically possible.
    assert (rows["achieved_gbs"] < 4800).all()


def test_matmul_record_declares_its_flops() -> None:
    records = triton_launches.kernels(_trace("matmul"))
    assert (records["flops"] == 2 * 8192**3).all()  # 2·M·N·K


def test_vector_add_is_memory_bound_and_matmul_compute_bound() -> None:
    add = roofline.of(_trace("vector_add")).kernels
    mm = roofline.of(_trace("matmul")).kernels
    assert set(add[add["name"] == "add_kernel"]["bound"]) == {"memory"}
    assert set(mm[mm["name"] == "matmul_kernel"]["bound"]) == {"compute"}
