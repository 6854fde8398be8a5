"""Exact sync sites at capture (issue 12 item 5).

Capture side: the recorder (traceadvisor/capture/sync_sites.py) sets torch's sync debug mode to
"warn" for the recorded steps and records the user's line of each warning torch then raises. This
machine has no GPU, where ``torch.cuda.set_sync_debug_mode`` cannot run, so: a real capture on the
CPU must record and change nothing; the interception itself is driven by the warning torch raises,
with its exact text, from the user's function, through a stand-in for the debug-mode switch (the one
part that needs CUDA), in process, under ``traceadvisor capture`` and under the in-loop advisor.

Analyze side: a recorded ``sync_sites`` block added to a copy of a real GPU trace
(pair_sync_before, made by fixtures/capture_gpu.py's ``pair_sync``, whose ``before`` is unchanged
since) moves SY101's location to the exact line; without it the location stays the function's first
line. A trace captured on a GPU with recorded sites (``fixtures/traces/capture_sync_sites.json.gz``,
docs/capture.md) is checked when it is there.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixture_paths import FIXTURE_TRACES, REPO

from traceadvisor.analyses.sync_sites import recorded_sync_sites, sync_site_matches
from traceadvisor.capture.sync_sites import MODE_OFF, MODE_WARN, SyncSiteRecorder
from traceadvisor.capture.unprofiled import with_key
from traceadvisor.pipeline import analyze
from traceadvisor.report.finding import Location
from traceadvisor.trace.load import load_file

torch = pytest.importorskip("torch")

# The warning exactly as torch 2.11.0+cu130 raised it on an H100 for ``x.item()``, ``nonzero`` and
# ``.cpu()``: c10/cuda/CUDAFunctions.cpp ``warn_or_error_on_sync`` calls
# ``TORCH_WARN("called a synchronizing CUDA operation")`` and torch/csrc/Exceptions.cpp
# (``PyWarningHandler``) raises it as ``"{msg} (Triggered internally at {file}:{line}.)"`` with
# ``PyErr_WarnEx(UserWarning, ..., 1)``: attributed to the Python line that called the op (the H100
# run showed the script's own lines), as ``warnings.warn`` at stacklevel 1 does from ``user_sync``.
TORCH_SYNC_WARNING = (
    "called a synchronizing CUDA operation (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:162.)"
)

NO_CUDA = not torch.cuda.is_available()
SITES_FIXTURE = FIXTURE_TRACES / "capture_sync_sites.json.gz"
SITES_SCRIPT = REPO / "fixtures" / "capture_sync_sites.py"


class DebugMode:
    """torch's sync debug mode as the recorder drives it (``unavailable``/``get``/``set``), for a
    machine without CUDA; ``level`` is what torch would hold, ``sets`` every change asked for."""

    def __init__(self, level: int = MODE_OFF) -> None:
        self.level = level
        self.sets: list[int] = []

    def unavailable(self) -> str | None:
        return None

    def get(self) -> int:
        return self.level

    def set(self, level: int) -> None:
        self.level = level
        self.sets.append(level)


def user_sync(mode: DebugMode) -> int:
    """A user's function with a sync: torch warns only while the mode is "warn"."""
    if mode.level == MODE_WARN:
        warnings.warn(TORCH_SYNC_WARNING, UserWarning)  # noqa: B028 (torch warns at stacklevel 1): the sync's line
    return 1


SYNC_LINE = user_sync.__code__.co_firstlineno + 3


# -- the interception, in process --------------------------------------------------------------
@pytest.mark.parametrize("action", ["ignore", "error", "default"])
def test_recorder_takes_the_exact_line_and_hides_the_warning(action: str) -> None:
    """Whatever the program's filters say (ignore would hide it, error would raise it, default shows
    it once per line), a sync warning is recorded at its line and never shown; other warnings still
    reach the program's showwarning; afterwards the filters, showwarning and mode are the program's."""
    mode = DebugMode()
    with warnings.catch_warnings():
        warnings.simplefilter(action)
        warnings.filterwarnings("always", category=DeprecationWarning)
        shown: list[str] = []

        def program_showwarning(message: Any, category: Any, filename: str, lineno: int, *rest: Any) -> None:
            shown.append(str(message))

        warnings.showwarning = program_showwarning
        filters = list(warnings.filters)
        recorder = SyncSiteRecorder("capture", mode=mode)
        user_sync(mode)  # before the recorded steps: the mode is off, torch says nothing
        recorder.step(7, recording=True)
        assert mode.level == MODE_WARN
        before = time.time_ns()
        user_sync(mode)
        user_sync(mode)
        after = time.time_ns()
        warnings.warn("unrelated", DeprecationWarning, stacklevel=1)
        recorder.step(8, recording=False)
        user_sync(mode)  # after them: off again
        assert mode.sets == [MODE_WARN, MODE_OFF]
        assert warnings.filters == filters
        assert warnings.showwarning is program_showwarning
    assert shown == ["unrelated"]
    assert [(s["step"], s["order"]) for s in recorder.sites] == [(7, 0), (7, 1)]
    for site in recorder.sites:
        assert site["line"] == SYNC_LINE
        assert site["first_line"] == user_sync.__code__.co_firstlineno
        assert site["function"] == "user_sync"
        assert site["path"] == __file__ and __file__.endswith("/" + site["file"])
        assert before <= site["ts_ns"] <= after
    key = recorder.key([6, 7, 8])["sync_sites"]
    assert key["steps"] == [7] and key["sites"] == recorder.sites and key["source"] == "capture"
    assert recorder.key([8, 9]) == {}


def test_a_program_wrapping_showwarning_meanwhile_keeps_it_and_no_loop(recwarn: pytest.WarningsRecorder) -> None:
    """The program wraps showwarning during a recorded step (logging.captureWarnings does): the
    wrapper stays after the window; at the next window the recorder hands other warnings to that
    wrapper, which hands them back to the recorder: shown once, no endless loop."""
    mode = DebugMode()
    logged: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        recorder = SyncSiteRecorder("capture", mode=mode)
        recorder.step(1, recording=True)
        inner = warnings.showwarning

        def wrapper(message: Any, *rest: Any) -> None:
            logged.append(str(message))
            inner(message, *rest)

        warnings.showwarning = wrapper
        recorder.step(2, recording=False)
        assert warnings.showwarning is wrapper
        recorder.step(3, recording=True)
        warnings.warn("other", DeprecationWarning, stacklevel=1)
        user_sync(mode)
        recorder.stop()
    # Shown once: by the wrapper's log, then by Python's own showwarning (which pytest records here).
    assert logged == ["other"] and [str(w.message) for w in recwarn] == ["other"]
    assert [(s["step"], s["line"]) for s in recorder.sites] == [(3, SYNC_LINE)]


def test_program_own_debug_mode_is_kept_and_nothing_recorded() -> None:
    mode = DebugMode(level=MODE_WARN)  # the program called torch.cuda.set_sync_debug_mode("warn")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        shown: list[str] = []
        warnings.showwarning = lambda message, *rest: shown.append(str(message))
        filters, show = list(warnings.filters), warnings.showwarning
        recorder = SyncSiteRecorder("capture", mode=mode)
        recorder.step(7, recording=True)
        assert warnings.filters == filters and warnings.showwarning is show
        user_sync(mode)
        recorder.stop()
    assert shown == [TORCH_SYNC_WARNING]  # the program asked to see them: it does
    assert mode.sets == [] and mode.level == MODE_WARN
    assert recorder.sites == [] and recorder.key([7]) == {} and recorder.summary() is None
    assert recorder.skipped == "the program set torch.cuda.set_sync_debug_mode itself"


def test_records_at_most_max_per_step_and_counts_the_rest() -> None:
    mode = DebugMode()
    recorder = SyncSiteRecorder("capture", max_per_step=3, mode=mode)
    with warnings.catch_warnings():
        recorder.step(4, recording=True)
        for _ in range(5):
            user_sync(mode)
        recorder.step(5, recording=True)
        user_sync(mode)
        recorder.stop()
    assert [(s["step"], s["order"]) for s in recorder.sites] == [(4, 0), (4, 1), (4, 2), (5, 0)]
    assert recorder.key([4, 5])["sync_sites"]["dropped"] == {"4": 2}
    assert recorder.key([5])["sync_sites"]["dropped"] == {}


@pytest.mark.skipif(not NO_CUDA, reason="checks the CPU-only path")
def test_without_cuda_the_recorder_does_nothing() -> None:
    with warnings.catch_warnings():
        filters, show = list(warnings.filters), warnings.showwarning
        recorder = SyncSiteRecorder("capture")  # torch's own debug mode
        recorder.step(7, recording=True)
        assert warnings.filters == filters and warnings.showwarning is show
    assert recorder.skipped == "no CUDA device" and not recorder.recording
    assert recorder.key([7]) == {}


# -- under traceadvisor capture and the advisor ------------------------------------------------
# A program whose step calls a function with a sync (torch warns while the mode says so) and has a
# sync in the loop body; it prints the debug-mode level it saw in each step.
PROGRAM = """
import json, warnings
import torch
from torch import nn
import debug_mode

def train_step(model, opt, x):
    loss = model(x).pow(2).mean()
    loss.backward()
    if debug_mode.MODE.level == 1:
        warnings.warn(debug_mode.TEXT, UserWarning)  # SYNC in train_step
    opt.step()
    opt.zero_grad()

def main():
    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4, 8)
    seen = []
    for i in range(10):
        train_step(model, opt, x)
        if debug_mode.MODE.level == 1:
            warnings.warn(debug_mode.TEXT, UserWarning)  # SYNC in the loop body
        seen.append(debug_mode.MODE.level)
    print(json.dumps(seen))

main()
"""

# The stand-in switch, shared by the program and the capture's recorder.
DEBUG_MODE = f"""
TEXT = {TORCH_SYNC_WARNING!r}

class DebugMode:
    level = 0
    def unavailable(self): return None
    def get(self): return self.level
    def set(self, level): self.level = level

MODE = DebugMode()
"""

# ``traceadvisor capture`` with the sync-sites extension given the stand-in switch.
CAPTURE = """
import sys
import debug_mode
from traceadvisor.capture import session, sync_sites

at = session.extra_contexts.index(session._sync_site_records)
session.extra_contexts[at] = lambda s: sync_sites.capture_context(s, mode=debug_mode.MODE)
from traceadvisor.cli import run
sys.argv = ["traceadvisor", *sys.argv[1:]]
run()
"""


def _lines(source: str, mark: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if mark in line)


def _top(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    assert isinstance(doc, dict)
    return doc


def _capture(tmp_path: Path, launcher: list[str]) -> tuple[subprocess.CompletedProcess[str], Path]:
    (tmp_path / "train.py").write_text(PROGRAM)
    (tmp_path / "debug_mode.py").write_text(DEBUG_MODE)
    (tmp_path / "capture.py").write_text(CAPTURE)
    out = tmp_path / "run"
    args = ["capture", "--out", str(out), "--no-analyze", "--skip-first", "2", "--warmup", "1", "--active", "3"]
    env = {k: v for k, v in os.environ.items() if k != "TRACEADVISOR_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    proc = subprocess.run(
        [*launcher, *args, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return proc, out


@pytest.mark.skipif(not NO_CUDA, reason="checks the CPU-only path")
def test_capture_on_cpu_records_nothing_and_says_nothing(tmp_path: Path) -> None:
    proc, out = _capture(tmp_path, [sys.executable, "-m", "traceadvisor"])
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [0] * 10  # nobody set the mode
    run = json.loads((out / "run.json").read_text())
    assert "sync_sites" not in run
    assert "synchroniz" not in proc.stderr.lower()
    [trace] = sorted(out.glob("*/*.json.gz"))
    key = _top(trace)["traceadvisor"]
    assert key["profiled_steps"] == [3, 4, 5] and "sync_sites" not in key


def test_capture_records_each_sync_of_the_recorded_steps_only(tmp_path: Path) -> None:
    proc, out = _capture(tmp_path, [sys.executable, str(tmp_path / "capture.py")])
    # A step ends when the next iteration's first forward begins after an optimizer step
    # (capture/steps.py), so iteration i runs in step i: 0-1 skipped, 2 warms up, 3-5 recorded.
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    run = json.loads((out / "run.json").read_text())
    [trace] = sorted(out.glob("*/*.json.gz"))
    block = _top(trace)["traceadvisor"]["sync_sites"]
    assert block == run["sync_sites"]
    assert block["steps"] == [3, 4, 5] and block["dropped"] == {} and block["source"] == "capture"
    in_step, in_loop = _lines(PROGRAM, "SYNC in train_step"), _lines(PROGRAM, "SYNC in the loop body")
    got = [(s["step"], s["order"], s["function"], s["line"]) for s in block["sites"]]
    assert got == [
        (3, 0, "train_step", in_step),
        (3, 1, "main", in_loop),
        (4, 0, "train_step", in_step),
        (4, 1, "main", in_loop),
        (5, 0, "train_step", in_step),
        (5, 1, "main", in_loop),
    ]
    assert "synchroniz" not in proc.stderr.lower()  # recorded, never shown
    # Each site names its frame as the profiler does, so analyze can match them: file and first line.
    trace_frames = load_file(trace).frame_locations
    for site in block["sites"]:
        frames = trace_frames[(trace_frames["function"] == site["function"]) & (trace_frames["file"] == site["file"])]
        assert site["file"] == "train.py" and len(frames) and frames["is_user"].all()
        if site["function"] == "train_step":  # also on the stack when tracing began, at its forward line
            named_by_def = frames[frames["line_kind"] == "function_start"]
            assert set(named_by_def["line"]) == {site["first_line"]} == {_lines(PROGRAM, "def train_step")}


# The advisor's thread mode runs in a fresh interpreter (as tests/test_advisor_reliability.py does):
# in the suite's one process, after the Lightning and transformers tests, this case hung in the
# profiler's start; a test of one behaviour must not be able to break another.
FRESH = "TRACEADVISOR_FRESH_INTERPRETER"


def test_advisor_records_the_syncs_in_a_fresh_interpreter() -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            f"{__file__}::test_advisor_records_the_syncs_of_its_window",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, FRESH: "1"},
        cwd=REPO,
    )
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]


@pytest.mark.skipif(os.environ.get(FRESH) != "1", reason="runs in a fresh interpreter (the test above)")
def test_advisor_records_the_syncs_of_its_window(tmp_path: Path) -> None:
    import traceadvisor

    mode = DebugMode()
    prof = traceadvisor.profile(
        out_dir=tmp_path, skip_first=1, wait=0, warmup=1, active=2, analyze=False, mode="thread"
    )
    prof.advisor.sync_sites = SyncSiteRecorder("advisor", mode=mode)
    seen = []
    with warnings.catch_warnings(), prof:
        for _ in range(6):
            torch.ones(4).sum()
            user_sync(mode)
            seen.append(mode.level)
            prof.step()
    assert seen == [0, 0, 1, 1, 0, 0]
    [trace] = sorted(tmp_path.glob("cycle*/rank*.json.gz"))
    block = _top(trace)["traceadvisor"]["sync_sites"]
    assert block["steps"] == [2, 3] and block["source"] == "advisor"
    assert [(s["step"], s["line"], s["function"]) for s in block["sites"]] == [
        (2, SYNC_LINE, "user_sync"),
        (3, SYNC_LINE, "user_sync"),
    ]
    assert mode.level == MODE_OFF


# -- analyze: matching recorded sites to the trace's syncs -------------------------------------
PAIR_SYNC = FIXTURE_TRACES / "pair_sync_before.json.gz"
CAPTURE_GPU = REPO / "fixtures" / "capture_gpu.py"
# pair_sync's ``before`` (fixtures/capture_gpu.py): per micro-batch, in this order, a boolean-mask
# index (aten::index -> nonzero), a .cpu() (aten::to) and a .item(); four micro-batches per step.
BEFORE_FIRST_LINE = 1101
LINE_OF = {"aten::index": 1106, "aten::to": 1107, "aten::item": 1108}
PER_BATCH = ["aten::index", "aten::to", "aten::item"]


def test_the_chosen_lines_are_the_syncs_of_pair_sync() -> None:
    lines = CAPTURE_GPU.read_text().splitlines()
    assert lines[BEFORE_FIRST_LINE - 1].strip() == "def before():"
    assert "[valid]" in lines[LINE_OF["aten::index"] - 1]
    assert ".cpu()" in lines[LINE_OF["aten::to"] - 1]
    assert ".item()" in lines[LINE_OF["aten::item"] - 1]


def _pair_sync_sites(drop: frozenset[tuple[int, int]] = frozenset()) -> dict[str, Any]:
    """The sites capture would have recorded for pair_sync_before (steps 2-4, 12 syncs each), less
    ``drop`` ((step, order) pairs: warnings the program hid); each site's host time is its sync's
    end on the trace's clock plus 20 µs (the op returning), as measured on an H100."""
    trace = load_file(PAIR_SYNC)
    rt = trace.runtime
    calls = rt[rt["name"].astype(str) == "cudaStreamSynchronize"].sort_values("ts_ns")
    steps = trace.step_of(calls["ts_ns"].to_numpy())
    base = trace.meta.base_time_ns or 0
    sites, order = [], dict.fromkeys(range(2, 5), 0)
    for step, end in zip(steps.tolist(), calls["end_ns"].tolist(), strict=True):
        k = order[step]
        order[step] += 1
        if (step, k) in drop:
            continue
        line = LINE_OF[PER_BATCH[k % 3]]
        sites.append(
            {
                "file": "capture_gpu.py",
                "path": "/home/user/traceadvisor/fixtures/capture_gpu.py",
                "line": line,
                "function": "before",
                "first_line": BEFORE_FIRST_LINE,
                "step": step,
                "order": k,
                "ts_ns": base + end + 20_000,
            }
        )
    return {"source": "capture", "steps": [2, 3, 4], "max_per_step": 1000, "dropped": {}, "sites": sites}


def _with_block(tmp_path: Path, block: Any, name: str = "pair_sync_before.json.gz") -> Path:
    """A copy of pair_sync_before with ``"traceadvisor": {"sync_sites": block}`` written in front,
    as capture writes it."""
    out = tmp_path / name
    body = with_key(gzip.decompress(PAIR_SYNC.read_bytes()), {"sync_sites": block})
    out.write_bytes(gzip.compress(body))
    return out


def _sy101(path: Path) -> Any:
    report = analyze([path])
    return next(f for f in report.findings if f.code == "SY101")


def test_sync_point_gives_the_exact_line_of_a_recorded_site(tmp_path: Path) -> None:
    finding = _sy101(_with_block(tmp_path, _pair_sync_sites()))
    top = finding.data["top_cause"]
    assert finding.location == Location("capture_gpu.py", LINE_OF[top], "before", line_kind="exact")
    assert f"most caused by {top} at capture_gpu.py:{LINE_OF[top]};" in finding.message
    assert "The trace names the function of a sync, not its line" not in finding.message


def test_without_recorded_sites_the_location_stays_the_functions_first_line(tmp_path: Path) -> None:
    plain, malformed = _sy101(PAIR_SYNC), _sy101(_with_block(tmp_path, {"steps": [2], "sites": [{"line": "x"}]}))
    for finding in (plain, malformed):
        assert finding.location == Location("capture_gpu.py", BEFORE_FIRST_LINE, "before", line_kind="function_start")
        assert "The trace names the function of a sync, not its line" in finding.message


def test_every_sync_pairs_with_its_own_line_in_order_and_by_time(tmp_path: Path) -> None:
    """Equal counts pair in order; a step where a site is missing (a warning the program hid) pairs
    by time, and the sync without a site keeps its frame's line."""
    drop = frozenset({(3, 4), (4, 0)})  # step 3's second .cpu(), step 4's first boolean-mask index
    for block, missing in ((_pair_sync_sites(), frozenset()), (_pair_sync_sites(drop), drop)):
        trace = load_file(_with_block(tmp_path, block))
        matches = sync_site_matches(trace)
        rt = trace.runtime
        calls = rt[rt["name"].astype(str) == "cudaStreamSynchronize"].sort_values("ts_ns")
        steps = trace.step_of(calls["ts_ns"].to_numpy())
        k = dict.fromkeys(range(2, 5), 0)
        for row, step in zip(calls.index.tolist(), steps.tolist(), strict=True):
            if (step, k[step]) in missing:
                assert row not in matches.index
            else:
                assert matches.loc[row, "line"] == LINE_OF[PER_BATCH[k[step] % 3]], (step, k[step])
                assert matches.loc[row, "function"] == "before" and matches.loc[row, "file"] == "capture_gpu.py"
            k[step] += 1
        assert len(matches) == 36 - len(missing)
        assert recorded_sync_sites(trace) is not None


def test_without_python_frames_the_sites_pair_in_order(tmp_path: Path) -> None:
    """A trace recorded without ``with_stack`` has no frame to group by: each step's syncs pair with
    its sites in order, so the finding still gets the exact line (it had no location at all)."""
    doc = json.loads(gzip.decompress(PAIR_SYNC.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    plain = tmp_path / "nostack.json.gz"
    plain.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert _sy101(plain).location is None
    body = with_key(gzip.decompress(plain.read_bytes()), {"sync_sites": _pair_sync_sites()})
    (tmp_path / "nostack_sites.json.gz").write_bytes(gzip.compress(body))
    finding = _sy101(tmp_path / "nostack_sites.json.gz")
    top = finding.data["top_cause"]
    assert finding.location == Location("capture_gpu.py", LINE_OF[top], "before", line_kind="exact")


def test_sites_of_an_unrecorded_step_or_another_function_pair_with_nothing(tmp_path: Path) -> None:
    block = _pair_sync_sites()
    for site in block["sites"]:
        if site["step"] == 3:
            site["function"] = "after"  # another frame: none of the trace's syncs is in it
    block["steps"] = [2, 3]  # step 4 was not recorded (its sites, if any, are not trusted)
    trace = load_file(_with_block(tmp_path, block))
    paired_steps = set(trace.step_of(trace.runtime.loc[sync_site_matches(trace).index, "ts_ns"].to_numpy()).tolist())
    assert paired_steps == {2}


# -- a trace captured on a GPU with recorded sites ---------------------------------------------
@pytest.mark.skipif(not SITES_FIXTURE.exists(), reason="captured on a GPU by the command in docs/capture.md")
def test_gpu_capture_pairs_every_warned_sync_with_a_marked_line() -> None:
    trace = load_file(SITES_FIXTURE)
    sites = recorded_sync_sites(trace)
    assert sites is not None and len(sites)
    lines = SITES_SCRIPT.read_text().splitlines()
    matches = sync_site_matches(trace)
    rt = trace.runtime
    warned = rt[(rt["name"].astype(str) == "cudaStreamSynchronize").to_numpy()]
    in_recorded = warned[np.isin(trace.step_of(warned["ts_ns"].to_numpy()), sites.attrs["steps"])]
    assert set(matches.index) == set(in_recorded.index)
    assert all("# sync:" in lines[line - 1] for line in matches["line"].tolist())
    finding = _sy101(SITES_FIXTURE)
    assert finding.location is not None and finding.location.line_kind == "exact"
    assert "# sync:" in lines[finding.location.line - 1]
