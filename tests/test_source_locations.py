"""Source locations (issue 12 items 5 and 8): library frames are never the user's location, and a
location from a profiler frame says what its line is (the function's first line, or where the
frame was when profiling began), never passing it off as the line that did the work."""

from __future__ import annotations

import ast
import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixture_paths import FIXTURE_TRACES, REPO, TRACELENS, external_traces

from traceadvisor.pipeline import analyze
from traceadvisor.report import render
from traceadvisor.report.finding import Finding, Location, Severity, problem_with
from traceadvisor.rule_helpers import at_source
from traceadvisor.trace.load import load_file
from traceadvisor.trace.model import Trace

CAPTURE_SCRIPT = REPO / "fixtures" / "capture_gpu.py"
# Captured by fixtures/capture_gpu.py as it is in the repository now (commit 6a75b41, unchanged
# since), so their frame lines can be checked against its source.
CURRENT_SCRIPT_TRACES = ("pair_sync_before", "pair_sync_after", "pair_launch_storm_before", "pair_launch_storm_after")
# Where a library location was reported as the user's before issue 12 (transformers, vllm,
# traceadvisor's own workloads), and a conv net with torchvision frames.
LIBRARY_LOCATION_TRACES = (
    TRACELENS / "h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    TRACELENS / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz",
    TRACELENS / "b200" / "eager_trace.json.gz",
    TRACELENS / "mi300" / "resnet_act_checkpoint.json.gz",
    FIXTURE_TRACES / "workload_mlp_train.json.gz",
    FIXTURE_TRACES / "workload_attention_naive.json.gz",
)
# The user's own files in every real trace with Python frames: the fixtures' capture scripts, the
# training script of TraceLens's ResNet trace and the harness of its Hugging Face traces.
USER_FILES = (
    "capture_gpu.py",
    "capture_pairs.py",
    "capture_sync_sites.py",
    "cpu_slow_getitem.py",
    "gpu_loop.py",  # fixtures/capture_power_capped_loop.py, run as /tmp/gpu_loop.py
    "gpu_workloads.py",
    "train_ddp.py",
    "moca/",
)


@cache
def _trace(path: Path) -> Trace:
    return load_file(path)


def _with_frames() -> list[Path]:
    return [p for p in [*sorted(FIXTURE_TRACES.glob("*.json.gz")), *external_traces()] if len(_trace(p).frames)]


# -- which files are the user's ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "library"),
    [
        # The profiler strips the sys.path / site-packages prefix: library paths arrive relative.
        ("torchvision/models/resnet.py", True),
        ("traceadvisor/capture/hooks.py", True),
        ("torch/nn/modules/module.py", True),
        ("transformers/models/bert/modeling_bert.py", True),
        ("lightning/pytorch/loops/fit_loop.py", True),
        ("pytorch_lightning/trainer/trainer.py", True),
        ("triton/runtime/jit.py", True),
        ("numpy/_core/fromnumeric.py", True),
        ("threading.py", True),  # the standard library, relative to its own sys.path entry
        ("logging/__init__.py", True),
        ("/usr/lib/python3.11/contextlib.py", True),
        ("/home/u/.venv/lib/python3.12/site-packages/mylib/core.py", True),  # any installed package
        ("/usr/lib/python3/dist-packages/yaml/loader.py", True),
        ("/tmp/torchinductor_root/ar/carmsngcj.py", True),  # TorchInductor's generated code
        ("<frozen os>", True),
        ("<built-in method item of Tensor object at 0x7f>", True),
        ("<string>", True),
        ("C:\\Python311\\Lib\\site-packages\\torch\\nn\\functional.py", True),
        # a library's console script (pip's stub in the environment's bin folder)
        (".venv/bin/traceadvisor", True),
        ("/usr/local/bin/torchrun", True),
        ("/opt/conda/bin/python", True),
        # A package name inside a segment, or a folder of the user's named like one, is not a library.
        ("train.py", False),
        ("my_torch_utils.py", False),
        ("./torchy/train.py", False),
        ("torchy.py", False),
        ("/home/u/torch/train.py", False),
        ("/home/u/my-site-packages-notes/train.py", False),
        ("profile.py", False),  # a user's script sharing a stdlib module's name the loop never calls
        ("moca/library/profiling/profile.py", False),
        ("bin/train", False),  # the user's own script in a bin folder
        ("/home/u/bin/train.py", False),
    ],
)
def test_library_files_by_path_segment(path: str, library: bool) -> None:
    from traceadvisor.trace.source import is_library_file  # here: the other tests run on the code before it

    assert is_library_file(path) is library


def test_every_user_frame_of_the_real_traces_is_a_user_file() -> None:
    seen: set[str] = set()
    for path in _with_frames():
        loc = _trace(path).frame_locations
        files = set(loc.loc[loc["is_user"], "file"])
        assert all(f.startswith(USER_FILES) for f in files), (path.name, files)
        # vLLM's server stack is library code from the thread's root down (vllm, torch, flashinfer).
        assert files or path.name == "eager_trace.json.gz", path.name
        seen |= {next(u for u in USER_FILES if f.startswith(u)) for f in files}
    assert seen == set(USER_FILES)


def test_findings_on_real_traces_point_at_user_files() -> None:
    report = analyze(LIBRARY_LOCATION_TRACES)
    located = [f for f in report.findings if f.location is not None]
    assert len(located) >= 5
    for f in located:
        assert f.location is not None and f.location.file.startswith(USER_FILES), (f.code, f.trace, f.location)
    by_trace = {(Path(f.trace).name, f.code): f.location for f in located}
    # GK101 used to name traceadvisor/workloads/mlp_train.py: now the script that ran it.
    assert by_trace[("workload_mlp_train.json.gz", "GK101")] == Location(
        "gpu_workloads.py",
        102,
        "run_one",
        line_kind="trace_start",
    )
    # SY101 used to name transformers/modeling_attn_mask_utils.py: now the harness's call.
    assert by_trace[("gaunernst_bert-small-uncased__1016001.json.gz", "SY101")] == Location(
        "moca/library/model_hub/huggingface/model/adapters/text_base_model.py", 28, "run_on_input", "function_start"
    )


def _event(name: str, ts: int, dur: int, cat: str, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _frames_trace(tmp_path: Path) -> Trace:
    """A trace whose stack at an op is train.py > my_torch_utils.py > torchvision's resnet.py >
    traceadvisor's capture hooks, the way the profiler names them (paths without site-packages)."""
    py = "python_function"
    events = [
        _event("train.py(40): <module>", 0, 1000, py),  # on the stack when tracing began
        _event("<built-in function perf_counter_ns>", 5, 1, py),  # the tracer's first C call
        _event("my_torch_utils.py(12): run_model", 10, 900, py),
        _event("torchvision/models/resnet.py(266): forward", 20, 800, py),
        _event("traceadvisor/capture/hooks.py(88): wrapped", 30, 700, py),
        _event("aten::conv2d", 40, 100, "cpu_op"),
        _event("aten::relu", 950, 10, "cpu_op"),  # after run_model returned: only train.py is active
    ]
    path = tmp_path / "frames.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return load_file(path)


def test_library_frames_are_skipped_for_the_innermost_user_frame(tmp_path: Path) -> None:
    t = _frames_trace(tmp_path)
    conv = t.host[t.host["name"] == "aten::conv2d"].iloc[0]
    relu = t.host[t.host["name"] == "aten::relu"].iloc[0]
    pid, tid = np.array([conv["pid"]] * 2), np.array([conv["tid"]] * 2)
    src = t.source_of(pid, tid, np.array([conv["ts_ns"], relu["ts_ns"]]))
    assert src == [
        {"file": "my_torch_utils.py", "line": 12, "function": "run_model", "line_kind": "function_start"},
        {"file": "train.py", "line": 40, "function": "<module>", "line_kind": "trace_start"},
    ]


# -- what a frame's line is --------------------------------------------------------------------
def _definition_lines(source: Path) -> set[tuple[int, str]]:
    """(first line, name) of every function in a script: the ``def`` line, or its first decorator."""
    tree = ast.parse(source.read_text())
    defs = (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
    return {(min([d.lineno for d in n.decorator_list] + [n.lineno]), n.name) for n in defs}


@pytest.mark.parametrize("name", CURRENT_SCRIPT_TRACES)
def test_frame_lines_are_function_starts_or_where_profiling_began(name: str) -> None:
    """Kineto names a frame called while tracing by its function's first line, and a frame already
    on the stack by the line it was at then: checked against the script that made the trace."""
    defs = _definition_lines(CAPTURE_SCRIPT)
    loc = _trace(FIXTURE_TRACES / f"{name}.json.gz").frame_locations
    mine = loc[loc["file"] == "capture_gpu.py"].drop_duplicates(["line", "function"])
    called = mine[mine["line_kind"] == "function_start"]
    began = mine[mine["line_kind"] == "trace_start"]
    assert len(called) and len(began)
    assert all((int(r.line), r.function) in defs for r in called.itertuples())
    # <module> at `sys.exit(main())`, capture at `prof.step()`: lines inside, not definitions.
    assert not any((int(r.line), r.function) in defs for r in began.itertuples())
    lines = CAPTURE_SCRIPT.read_text().splitlines()
    assert {lines[int(r.line) - 1].strip() for r in began.itertuples() if r.function == "capture"} == {"prof.step()"}


def test_sync_point_says_its_line_is_the_functions_first_line() -> None:
    report = analyze([FIXTURE_TRACES / "planted_sync_in_loop.json.gz"])
    sy = next(f for f in report.findings if f.code == "SY101")
    assert sy.location == Location("capture_gpu.py", 505, "step", line_kind="function_start")
    assert "aten::item in step (defined at capture_gpu.py:505)" in sy.message
    assert "by aten::item at capture_gpu.py" not in sy.message
    assert "The trace names the function of a sync, not its line" in sy.message
    text, markdown = render(report, "text").decode(), render(report, "markdown").decode()
    assert "in: step (defined at capture_gpu.py:505)" in text and "at: capture_gpu.py:505" not in text
    assert "- location: in `step` (defined at `capture_gpu.py:505`)" in markdown
    doc = json.loads(render(report, "json"))
    located = [f["location"] for f in doc["findings"] if f["location"]]
    assert located and all(loc["line_kind"] == "function_start" for loc in located)


# -- the Location field ------------------------------------------------------------------------
def test_location_words_and_round_trip() -> None:
    exact = Location("train.py", 42, "step")
    start = Location("train.py", 30, "step", line_kind="function_start")
    began = Location("train.py", 12, "<module>", line_kind="trace_start")
    assert exact.line_kind == "exact" and at_source(exact) == " at train.py:42"
    assert at_source(start) == " in step (defined at train.py:30)"
    assert at_source(began) == " in <module> (at train.py:12 when profiling began)"
    for loc in (exact, start, began):
        f = Finding("X1", "x", Severity.low, "m", "r", location=loc)
        assert Finding.from_dict(json.loads(json.dumps(f.to_dict()))) == f and problem_with(f) is None
    bad = Finding("X1", "x", Severity.low, "m", "r", location=Location("t.py", 1, "f", line_kind="approximate"))
    assert problem_with(bad) is not None and "line_kind" in str(problem_with(bad))


def test_traceadvisors_own_source_checkout_is_library_code() -> None:
    """Run in place from a checkout (``python -m traceadvisor capture`` on the H200), capture's own
    frames carry an absolute path outside any site-packages: still traceadvisor's, never the
    user's; a user's project folder that is merely named traceadvisor stays the user's."""
    from traceadvisor.trace.source import is_library_file

    assert is_library_file("/opt/checkout/traceadvisor/capture/command.py")
    assert is_library_file("/srv/x/traceadvisor/__main__.py")
    assert not is_library_file("/home/u/traceadvisor/train.py")
    loc = _trace(FIXTURE_TRACES / "capture_power_capped_loop.json.gz").frame_locations
    assert set(loc.loc[loc["is_user"], "file"]) == {"gpu_loop.py"}
