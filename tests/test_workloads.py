"""The reference workloads on the CPU: registry, command line, results checked against torch, step marking.

Triton kernels run under ``TRITON_INTERPRET=1`` (the workloads set it when they run on the CPU);
sizes are the workloads' CPU defaults or smaller, so the whole file stays well under a minute.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from traceadvisor.errors import UsageError
from traceadvisor.workloads import registry

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)
if not torch.cuda.is_available():
    # Before anything imports triton: it decides then whether its library functions are interpreted.
    os.environ["TRITON_INTERPRET"] = "1"

NAMES = [
    "vector-add",
    "softmax",
    "matmul",
    "layer-norm",
    "attention-naive",
    "attention-sdpa",
    "attention-flash",
    "mlp-train",
]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceadvisor", *args], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture
def marker_calls() -> Iterator[list[int]]:
    """Counts ``traceadvisor.step()`` calls, through the marker's handler (as ``capture`` routes them)."""
    from traceadvisor.capture import marker

    calls: list[int] = []
    marker.set_handler(lambda: calls.append(1))
    try:
        yield calls
    finally:
        marker.set_handler(None)


# -- registry and command line ------------------------------------------------------------------
def test_registry_lists_every_workload_with_its_lesson_and_expected_analysis() -> None:
    assert registry.names() == NAMES
    for w in registry.all():
        assert w.summary and not w.summary.startswith("#"), w.name
        assert len(w.lesson) > 80, w.name
        assert len(w.analysis) > 80, w.name
        assert "##" not in w.lesson and "##" not in w.analysis, w.name


def test_get_accepts_underscores_and_rejects_unknown_names_with_the_list() -> None:
    assert registry.get("attention_naive").name == "attention-naive"
    assert registry.get(" Vector-Add ").name == "vector-add"
    with pytest.raises(UsageError) as err:
        registry.get("conv2d")
    assert "conv2d" in str(err.value) and "mlp-train" in str(err.value)


def test_workloads_command_lists_them_without_importing_torch() -> None:
    blocker = (
        "import sys, runpy\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'triton'):\n"
        "            raise ImportError('blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "sys.argv = ['traceadvisor', 'workloads', '--format', 'json']\n"
        "runpy.run_module('traceadvisor', run_name='__main__')\n"
    )
    p = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert [r["name"] for r in rows] == NAMES
    assert {r["steps_by"] for r in rows} == {"marker", "optimizer"}
    assert all(r["command"] == f"traceadvisor capture --workload {r['name']}" for r in rows)


def test_workloads_command_table_detail_and_errors() -> None:
    table = run_cli("workloads")
    assert table.returncode == 0, table.stderr
    assert all(name in table.stdout for name in NAMES)
    assert "``" not in table.stdout
    detail = run_cli("workloads", "attention_naive")
    assert detail.returncode == 0, detail.stderr
    assert detail.stdout.startswith("# attention-naive")
    assert (
        "## Lesson" in detail.stdout and registry.get("attention-naive").lesson[:40].replace("``", "`") in detail.stdout
    )
    unknown = run_cli("workloads", "conv2d")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1
    assert unknown.stderr.startswith("traceadvisor: error: no workload 'conv2d'")
    bad = run_cli("workloads", "--format", "yaml")
    assert bad.returncode == 2 and "unknown format 'yaml'" in bad.stderr


# -- running them ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_workload_runs_on_the_cpu_and_marks_its_steps(name: str, marker_calls: list[int]) -> None:
    # build() checks the result against torch and raises WorkloadError on a mismatch.
    registry.get(name).main(["--steps", "3", "--device", "cpu"])
    expected = 0 if registry.get(name).steps_by == "optimizer" else 3
    assert len(marker_calls) == expected
    assert os.environ.get("TRITON_INTERPRET") == (
        "1" if registry.get(name).uses_triton else os.environ.get("TRITON_INTERPRET")
    )


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        ("vector-add", ["--n", "3001"]),  # a partial last block
        ("softmax", ["--rows", "5", "--cols", "130", "--impl", "naive"]),
        ("softmax", ["--rows", "3", "--cols", "33"]),
        ("matmul", ["--m", "50", "--n", "40", "--k", "33"]),  # ragged tiles on every side
        ("matmul", ["--dtype", "fp32", "--m", "32", "--n", "48", "--k", "40"]),
        ("matmul", ["--impl", "torch", "--dtype", "fp32"]),
        ("layer-norm", ["--rows", "4", "--cols", "1000"]),
        ("attention-naive", ["--causal", "--seq", "20"]),
        ("attention-sdpa", ["--causal"]),
        ("attention-flash", ["--causal", "--seq", "37", "--head-dim", "32"]),  # masked tail block
        ("attention-flash", ["--batch", "1", "--heads", "3", "--seq", "16"]),
    ],
)
def test_workload_variants_match_torch(name: str, argv: list[str], marker_calls: list[int]) -> None:
    registry.get(name).main([*argv, "--steps", "1", "--device", "cpu"])
    assert len(marker_calls) == 1


def test_a_wrong_result_is_an_error_not_a_silent_run() -> None:
    from traceadvisor.workloads import harness

    good = torch.arange(6.0)
    harness.check("same", good, good.clone(), atol=0.0, rtol=0.0)
    with pytest.raises(harness.WorkloadError, match=r"differs from the torch reference \(max abs error 0.5\)"):
        harness.check("off by one half", good + torch.tensor([0, 0, 0.5, 0, 0, 0]), good, atol=1e-3, rtol=0.0)
    with pytest.raises(harness.WorkloadError, match="shape"):
        harness.check("shape", good, good.view(2, 3), atol=0.0, rtol=0.0)


def test_bad_arguments_exit_like_a_script() -> None:
    from traceadvisor.workloads import vector_add

    with pytest.raises(SystemExit) as exc:
        vector_add.main(["--n", "0"])
    assert exc.value.code == 2
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit) as exc:
            vector_add.main(["--device", "cuda"])
        assert exc.value.code == 1


def test_mlp_training_step_learns_its_batch() -> None:
    from traceadvisor.workloads import mlp_train

    step = mlp_train.build(mlp_train.parser().parse_args(["--device", "cpu", "--lr", "0.01"]))
    losses = [float(step()) for _ in range(40)]  # type: ignore[arg-type]
    assert losses[-1] < 0.01 * losses[0]  # it memorises its one fixed batch


def test_mlp_train_steps_are_optimizer_steps_under_the_profiler() -> None:
    from torch.profiler import ProfilerActivity, profile

    from traceadvisor.workloads import mlp_train

    step = mlp_train.build(mlp_train.parser().parse_args(["--device", "cpu"]))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
    names = [e.name for e in prof.events()]
    assert names.count("Optimizer.step#AdamW.step") == 3
    assert names.count("Optimizer.zero_grad#AdamW.zero_grad") == 3


def _fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_a_cpu_run_turns_the_triton_interpreter_on_before_importing_triton() -> None:
    p = _fresh_python(
        "from traceadvisor.workloads import registry\n"
        "registry.get('softmax').main(['--steps', '1', '--device', 'cpu'])\n"
        "import os; print(os.environ['TRITON_INTERPRET'])\n"
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "1"


def test_triton_imported_before_the_interpreter_was_asked_for_is_a_clear_error() -> None:
    p = _fresh_python(
        "import triton\nfrom traceadvisor.workloads import registry\n"
        "registry.get('softmax').main(['--steps', '1', '--device', 'cpu'])\n"
    )
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1, p.stderr
    assert "triton was imported before TRITON_INTERPRET=1 was set" in p.stderr
