"""Triton launch records: the hooks that write them (triton 3.9 here) and the reader that joins them to kernels.

Launch hooks do not fire under ``TRITON_INTERPRET=1`` (the interpreter runs kernels in Python and
never reaches the driver launcher), so on this CPU machine the records of real kernel runs come
from the interpreter path of the hooks; the compiled-kernel path is exercised through Triton's own
hook chains and ``LazyDict``, and end to end on the GPU by ``bench/gpu_workloads.py``. The join of
records to GPU kernels is tested on GPU-shaped traces written with ``traceadvisor.testing``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import traceadvisor
from traceadvisor.analyses import triton_launches
from traceadvisor.testing import write_case_trace

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (see harness.triton_for)


def _profile_cpu(path: Path, body: Any, steps: int) -> traceadvisor.Trace:
    from torch.profiler import ProfilerActivity, profile, schedule

    from traceadvisor.workloads import triton_hooks

    with triton_hooks.recording():
        with profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            schedule=schedule(wait=1, warmup=1, active=steps),
            on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
        ) as prof:
            for _ in range(steps + 2):
                body()
                prof.step()
    return traceadvisor.load_file(str(path))


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> traceadvisor.Trace:
    """Vector add (n=3000) and an fp16 matmul (48×40×32) under the hooks, 3 recorded steps."""
    from traceadvisor.workloads import matmul, vector_add

    step_add = vector_add.build(vector_add.parser().parse_args(["--device", "cpu", "--n", "3000"]))
    step_mm = matmul.build(matmul.parser().parse_args(["--device", "cpu", "--m", "48", "--n", "40", "--k", "32"]))

    def body() -> None:
        step_add()
        step_mm()

    return _profile_cpu(tmp_path_factory.mktemp("triton") / "cpu.json.gz", body, steps=3)


# -- the record names ------------------------------------------------------------------------------
def test_parse_reads_every_field_and_marks_missing_ones() -> None:
    assert triton_launches.parse("triton::add_kernel grid=(3,1,1) bytes=36000 flops=3000") == {
        "kernel": "add_kernel",
        "grid_x": 3,
        "grid_y": 1,
        "grid_z": 1,
        "bytes": 36000,
        "flops": 3000,
    }
    assert triton_launches.parse("triton::k") == {
        "kernel": "k",
        "grid_x": -1,
        "grid_y": -1,
        "grid_z": -1,
        "bytes": -1,
        "flops": -1,
    }
    bad_grid = triton_launches.parse("triton::k grid=(a,1) bytes=12")
    assert bad_grid is not None and bad_grid["grid_x"] == -1 and bad_grid["bytes"] == 12
    assert triton_launches.parse("aten::add") is None
    assert triton_launches.parse("triton::") is None


def test_label_and_parse_round_trip() -> None:
    from traceadvisor.workloads.triton_hooks import label

    text = label("_attn_fwd", (16, 64, 1), 1 << 33, 10**15)
    assert text == "triton::_attn_fwd grid=(16,64,1) bytes=8589934592 flops=1000000000000000"
    assert triton_launches.parse(text) == {
        "kernel": "_attn_fwd",
        "grid_x": 16,
        "grid_y": 64,
        "grid_z": 1,
        "bytes": 8589934592,
        "flops": 10**15,
    }


# -- records of interpreted kernels (CPU) -----------------------------------------------------------
def test_interpreted_launches_are_recorded_with_grid_bytes_and_declared_flops(cpu_trace: traceadvisor.Trace) -> None:
    recs = triton_launches.launches(cpu_trace)
    add = recs[recs["kernel"] == "add_kernel"]
    mm = recs[recs["kernel"] == "matmul_kernel"]
    assert len(add) == 3 and len(mm) == 3  # one per recorded step
    # vector add: ceil(3000 / 1024) programs; x, y, out of 3000 fp32; one add per element
    assert set(zip(add["grid_x"], add["grid_y"], add["grid_z"], strict=True)) == {(3, 1, 1)}
    assert set(add["bytes"]) == {3 * 3000 * 4} and set(add["flops"]) == {3000}
    # matmul on the CPU: 16×16 tiles, so ceil(48/16)·ceil(40/16) programs; A, B, C in fp16; 2·M·N·K
    assert set(mm["grid_x"]) == {3 * 3} and set(mm["bytes"]) == {(48 * 32 + 32 * 40 + 48 * 40) * 2}
    assert set(mm["flops"]) == {2 * 48 * 40 * 32}
    assert (recs["dur_ns"] > 0).all()


def test_records_are_cpu_ops_that_hold_the_kernels_work(cpu_trace: traceadvisor.Trace) -> None:
    recs = triton_launches.launches(cpu_trace)
    assert not cpu_trace.host.loc[recs.index, "is_annotation"].any()  # ops, not user annotations
    # the interpreter's own work (copies to and from the host) happens inside the record
    nest = cpu_trace.nesting
    children = nest[nest["parent"].isin(recs.index)]
    assert len(children) > 0


def test_by_kernel_totals_on_a_cpu_trace(cpu_trace: traceadvisor.Trace) -> None:
    per = triton_launches.by_kernel(cpu_trace)
    assert per.loc["add_kernel", "launches"] == 3
    assert per.loc["add_kernel", "bytes"] == 3 * 3 * 3000 * 4
    assert per.loc["matmul_kernel", "flops"] == 3 * 2 * 48 * 40 * 32
    assert (per["gpu_time_ns"] == 0).all()
    assert len(triton_launches.kernels(cpu_trace)) == 0


def test_analysis_of_a_trace_without_records_is_empty() -> None:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "planted_low_occupancy.json.gz"
    t = traceadvisor.load_file(str(fixture))  # a Triton kernel captured without the hooks
    assert len(triton_launches.launches(t)) == 0
    assert len(triton_launches.kernels(t)) == 0
    assert len(triton_launches.by_kernel(t)) == 0


# -- the hooks of compiled kernels --------------------------------------------------------------------
def test_hooks_join_tritons_hook_chains_and_leave_them_as_they_were() -> None:
    import triton
    from triton.compiler import CompiledKernel
    from triton.runtime.interpreter import InterpretedFunction

    from traceadvisor.workloads import triton_hooks

    chain = triton.knobs.runtime.launch_enter_hook
    exit_chain = triton.knobs.runtime.launch_exit_hook
    metadata_before = CompiledKernel.__dict__["launch_metadata"]
    run_before = InterpretedFunction.__dict__["run"]
    with triton_hooks.recording():
        assert triton_hooks._enter_hook in chain.calls and triton_hooks._exit_hook in exit_chain.calls
        with triton_hooks.recording():  # nested: one installation
            assert chain.calls.count(triton_hooks._enter_hook) == 1
        assert triton_hooks._enter_hook in chain.calls
        assert CompiledKernel.__dict__["launch_metadata"] is not metadata_before
        assert InterpretedFunction.__dict__["run"] is not run_before
    assert triton_hooks._enter_hook not in chain.calls and triton_hooks._exit_hook not in exit_chain.calls
    assert CompiledKernel.__dict__["launch_metadata"] is metadata_before
    assert InterpretedFunction.__dict__["run"] is run_before


def test_hook_chain_calls_open_and_close_one_op_per_launch(tmp_path: Path) -> None:
    import triton
    from torch.profiler import ProfilerActivity, profile
    from triton.compiler import LazyDict

    from traceadvisor.workloads import triton_hooks

    enter, leave = triton.knobs.runtime.launch_enter_hook, triton.knobs.runtime.launch_exit_hook
    first = LazyDict({"name": "first_kernel", "function": None, "stream": 0})
    x = torch.ones(8)
    enter(first)  # outside recording: nobody listens, nothing breaks
    leave(first)
    with triton_hooks.recording(), profile(activities=[ProfilerActivity.CPU]) as prof:
        enter(first)
        x.add_(1)  # stands for the launch: it runs between the hooks
        leave(first)
        enter(LazyDict({"name": "failed_kernel", "function": None, "stream": 0}))  # its exit hook never runs
        enter(LazyDict({"name": "next_kernel", "function": None, "stream": 0}))
        leave(None)
    prof.export_chrome_trace(str(tmp_path / "hooks.json"))
    t = traceadvisor.load_file(str(tmp_path / "hooks.json"))
    recs = triton_launches.launches(t)
    assert list(recs.sort_values("ts_ns")["kernel"]) == ["first_kernel", "failed_kernel", "next_kernel"]
    assert (recs[["grid_x", "bytes", "flops"]] == -1).all().all()  # launched outside Triton's launcher: name only
    by_name = recs.set_index("kernel")
    add = t.ops[t.ops["name"].astype(str) == "aten::add_"]
    assert len(add) == 1 and t.nesting.loc[add.index[0], "parent"] == recs.index[recs["kernel"] == "first_kernel"][0]
    # the scope left open by the failed launch was closed when the next launch began
    assert by_name.loc["failed_kernel", "end_ns"] <= by_name.loc["next_kernel", "ts_ns"]


# -- joining records to GPU kernels --------------------------------------------------------------------
def _gpu_case() -> dict[str, Any]:
    return {
        "steps": [[0, 100]],
        "events": [
            # a record (cpu_op) around the driver launch of add_kernel: linked by External id 5
            {
                "cat": "op",
                "name": "triton::add_kernel grid=(4,1,1) bytes=49152 flops=4096",
                "ts": 10,
                "dur": 20,
                "ext": 5,
            },
            {"cat": "driver", "name": "cuLaunchKernelEx", "ts": 12, "dur": 5, "corr": 9, "ext": 5},
            {"cat": "kernel", "name": "add_kernel", "ts": 40, "dur": 8, "corr": 9, "ext": 5, "grid": [4, 1, 1]},
            # a record written as a user annotation (torch < 2.2): linked by time on the launching thread
            {"cat": "annotation", "name": "triton::softmax_kernel grid=(64,1,1) bytes=65536", "ts": 50, "dur": 20},
            {"cat": "driver", "name": "cuLaunchKernelEx", "ts": 55, "dur": 5, "corr": 10},
            {"cat": "kernel", "name": "softmax_kernel", "ts": 70, "dur": 6, "corr": 10, "grid": [64, 1, 1]},
            # a record whose kernel ran with another grid than recorded: the cross-check says so
            {"cat": "op", "name": "triton::odd_kernel grid=(2,1,1) bytes=64", "ts": 80, "dur": 10, "ext": 7},
            {"cat": "driver", "name": "cuLaunchKernelEx", "ts": 82, "dur": 3, "corr": 11, "ext": 7},
            {"cat": "kernel", "name": "odd_kernel", "ts": 90, "dur": 2, "corr": 11, "ext": 7, "grid": [3, 1, 1]},
            # an ordinary kernel: no record
            {"cat": "op", "name": "aten::mul", "ts": 92, "dur": 5, "ext": 8},
            {"cat": "launch", "name": "cudaLaunchKernel", "ts": 93, "dur": 2, "corr": 12, "ext": 8},
            {"cat": "kernel", "name": "mul_kernel", "ts": 95, "dur": 3, "corr": 12, "ext": 8},
        ],
    }


def test_kernels_join_their_records_by_launching_op_or_by_time(tmp_path: Path) -> None:
    t = traceadvisor.load_file(str(write_case_trace(_gpu_case(), tmp_path)))
    k = triton_launches.kernels(t).set_index("name")
    assert sorted(k.index) == ["add_kernel", "odd_kernel", "softmax_kernel"]
    assert k.loc["add_kernel", "bytes"] == 49152 and k.loc["add_kernel", "flops"] == 4096
    assert k.loc["add_kernel", "dur_ns"] == 8000 and bool(k.loc["add_kernel", "grid_matches"])
    assert k.loc["softmax_kernel", "kernel"] == "softmax_kernel" and k.loc["softmax_kernel", "flops"] == -1
    assert bool(k.loc["softmax_kernel", "grid_matches"])
    assert not bool(k.loc["odd_kernel", "grid_matches"])
    per = triton_launches.by_kernel(t)
    assert list(per.index) == ["add_kernel", "softmax_kernel", "odd_kernel"]  # most GPU time first
    assert per.loc["softmax_kernel", "gpu_time_ns"] == 6000 and per.loc["softmax_kernel", "flops"] == -1


# -- end to end through the capture command's hook point ------------------------------------------------
def test_capture_with_the_hooks_writes_records_into_its_trace(tmp_path: Path) -> None:
    pytest.importorskip("traceadvisor.capture.session")
    out = tmp_path / "run"
    code = (  # every capture records Triton launches (capture/session.py registers the hooks)
        "import sys\n"
        "from traceadvisor.cli import main\n"
        f"sys.argv = ['traceadvisor', 'capture', '--out', {str(out)!r}, '--no-analyze', '--no-with-stack',\n"
        "            '--workload', 'vector-add', '--steps', '14', '--n', '2048']\n"
        "main()\n"
    )
    # A fresh process without TRITON_INTERPRET: the hooks must wait for the workload to import triton.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    traces = sorted(out.glob("*/*.json.gz"))  # cycle1/rank0.json.gz
    assert traces, p.stderr[-2000:]
    t = traceadvisor.load_file(str(traces[0]))
    recs = triton_launches.launches(t)
    steps = len(t.steps)
    assert steps > 0 and len(recs) == steps  # one launch per step, each recorded
    assert set(recs["bytes"]) == {3 * 2048 * 4} and set(recs["grid_x"]) == {2}
