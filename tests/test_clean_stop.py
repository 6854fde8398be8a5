"""After the last profiling window, capture and the advisor are out of the program's way (issue 12 item 6).

A real training loop (torch CPU) runs under ``traceadvisor capture`` and under ``traceadvisor.profile()``;
once the schedule's last window is written the loop inspects its own process: the profiler must be
exited (its ``ProfilerStep`` step tracking erased, no ``record_function`` left open per step), and
nothing capture installed but the step clock may remain (no forward pre-hook, DataLoader and kineto
entry points back to torch's own functions, SIGALRM back to the default, no Triton import hook). The
step counts and unprofiled step times must still cover the steps after the window. Behaviour only;
what it saves in time is measured by ``bench/after_window_overhead.py``.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from traceadvisor.capture import cupti

torch = pytest.importorskip("torch")

STEPS = 16  # skip 2, warm up 1, record 2: the window ends at step 5, eleven steps come after it

# What the loop reports about its own process; each field is what capture could leave behind.
PROBE = """
def probe():
    import signal, sys
    import torch
    import torch.autograd.profiler as ap
    from torch.nn.modules import module
    from torch.optim import optimizer
    from torch.utils.data.dataloader import _BaseDataLoaderIter
    return {
        "kineto_enabled": bool(torch._C._autograd._profiler_enabled()),
        "python_flag": bool(ap._is_profiler_enabled),
        "step_tracked": "ProfilerStep" in ap.KinetoStepTracker._step_dict,
        "forward_pre_hooks": len(module._global_forward_pre_hooks),
        "optimizer_pre_hooks": len(optimizer._global_optimizer_pre_hooks),
        "optimizer_post_hooks": len(optimizer._global_optimizer_post_hooks),
        "dataloader_next_wrapped": hasattr(_BaseDataLoaderIter.__dict__["__next__"], "__wrapped__"),
        "kineto_entry_wrapped": [
            hasattr(getattr(ap, n), "__wrapped__") for n in ("_prepare_profiler", "_enable_profiler")
        ],
        "sigalrm_default": signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None),
        "import_hooks": [type(f).__name__ for f in sys.meta_path if type(f).__module__.startswith("traceadvisor")],
        "teardown_cupti": __import__("os").environ.get("TEARDOWN_CUPTI"),
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
    }
"""

# A loop with a DataLoader (so the batch-fetch trigger is in play) and an optimizer (so its hooks fire).
# ``after(i)`` runs right after each optimizer step: the moment a step is pending and the forward
# pre-hook would be armed.
LOOP = """
import json, sys, time
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
data = DataLoader(TensorDataset(torch.randn({steps} * 4, 8), torch.randn({steps} * 4, 1)), batch_size=4)
seen = {{}}
for i, (x, y) in enumerate(data):
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
    AFTER
    if i in (2, {steps} - 2):
        seen[i] = probe()
json.dump(seen, open(sys.argv[1], "w"))
"""

ADVISOR_START = (
    "prof = traceadvisor.profile(OUT, skip_first=2, wait=0, warmup=1, active=2, analyze=False)\nprof.__enter__()"
)
OPEN_RANGE = "seen['open_step_range'] = prof.profiler.step_rec_fn is not None"
CAPTURE_SCRIPT = PROBE + LOOP.format(steps=STEPS).replace("AFTER", "pass")
ADVISOR_SCRIPT = (
    PROBE
    + "import traceadvisor\n"
    + LOOP.format(steps=STEPS)
    .replace("for i, (x, y)", f"{ADVISOR_START}\nfor i, (x, y)")
    .replace("AFTER", "prof.step()")
    .replace("json.dump(seen", f"{OPEN_RANGE}\nprof.__exit__(None, None, None)\njson.dump(seen")
)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRACEADVISOR_DEBUG"}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def _capture(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    script = tmp_path / "loop.py"
    script.write_text(CAPTURE_SCRIPT)
    out, seen = tmp_path / "run", tmp_path / "seen.json"
    args = ["--skip-first", "2", "--warmup", "1", "--active", "2", "--no-analyze", "--out", str(out)]
    proc = _run([sys.executable, "-m", "traceadvisor", "capture", *args, str(script), str(seen)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(seen.read_text()), json.loads((out / "run.json").read_text())


def test_capture_exits_the_profiler_after_the_last_window(tmp_path: Path) -> None:
    seen, _ = _capture(tmp_path)
    before, after = seen["2"], seen[str(STEPS - 2)]
    # Before the window capture is installed (the probe can tell): the check is not vacuous.
    assert before["step_tracked"] and before["forward_pre_hooks"] == 1 and before["dataloader_next_wrapped"]
    assert before["kineto_entry_wrapped"] == [True, True]
    assert not after["kineto_enabled"] and not after["python_flag"]
    assert not after["step_tracked"]  # __exit__ ran: kineto's step tracking of ProfilerStep is erased


def test_capture_removes_what_it_installed_after_the_last_window(tmp_path: Path) -> None:
    after = _capture(tmp_path)[0][str(STEPS - 2)]
    assert after["forward_pre_hooks"] == 0  # a step is pending here: the trigger would be armed
    assert not after["dataloader_next_wrapped"]
    assert after["kineto_entry_wrapped"] == [False, False]  # the program may start its own profiler
    assert after["sigalrm_default"]
    assert after["import_hooks"] == []  # the Triton import hook (Triton is not imported here)
    # The step clock stays: capture's optimizer post-hook (steps are taken there now), no pre-hook.
    assert (after["optimizer_pre_hooks"], after["optimizer_post_hooks"]) == (0, 1)


def test_capture_detaches_cupti_only_with_cuda(tmp_path: Path) -> None:
    # CUPTI stays attached after a CUDA trace unless kineto is told to detach it (TEARDOWN_CUPTI=1,
    # set before the last window ends, CUDA >= 12.6). Without a GPU nothing is set in the program.
    seen = _capture(tmp_path)[0]
    before, after = seen["2"], seen[str(STEPS - 2)]
    assert before["teardown_cupti"] is None
    if after["cuda"] is None:
        assert after["teardown_cupti"] is None
    else:
        expected = "1" if cupti.cuda_at_least(after["cuda"], (12, 6)) else None
        assert after["teardown_cupti"] == expected


def test_cupti_is_detached_at_the_last_cycle_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.profiler import ProfilerActivity, profile, schedule

    sched = schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=2)
    cycles: list[int] = []
    ending = []
    cpu = [ProfilerActivity.CPU]
    prof = profile(activities=cpu, schedule=sched, on_trace_ready=lambda p: cycles.append(p.step_num))
    with prof:
        for step in range(12):
            if cupti.last_cycle_ending(prof, len(cycles), 2):
                ending.append(step)
            torch.ones(2).add_(1)
            prof.step()
    # Cycles: wait 1, warm-up 2, record 3-4 (written at step 5), wait 5, warm-up 6, record 7-8.
    assert cycles == [5, 9] and ending == [8]
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)  # restored after the test
    assert cupti.teardown_when_trace_ends(prof) is False  # a CPU-only profiler: no CUPTI to detach
    assert "TEARDOWN_CUPTI" not in os.environ
    assert cupti.cuda_at_least("12.6", (12, 6)) and cupti.cuda_at_least("13.0", (12, 6))
    assert not cupti.cuda_at_least("12.4", (12, 6)) and not cupti.cuda_at_least(None, (12, 6))
    assert not cupti.cuda_at_least("rocm", (12, 6))


def test_capture_still_counts_and_times_the_steps_after_the_window(tmp_path: Path) -> None:
    _, run = _capture(tmp_path)
    assert run["steps"]["count"] == STEPS and run["steps"]["optimizer_steps"] == STEPS
    unprofiled = run["unprofiled_steps"]
    # Step 0 is never timed (it begins at the program's start), step 2 warms the profiler up, 3-4 are
    # recorded; every other step but the last is timed, those after the window too. (The last, ended
    # by the DataLoader's final fetch, was timed too while capture wrapped the fetch; see docs/capture.md.)
    assert unprofiled["unprofiled_steps"][: STEPS - 5] == [1, *range(5, STEPS - 1)]
    assert all(us > 0 for us in unprofiled["unprofiled_step_us"])
    assert [f["steps"] for f in run["files"]] == [["ProfilerStep#3", "ProfilerStep#4"]]
    assert not run.get("warnings")


FUNCTIONAL = """
import json, sys
import torch

w = torch.zeros(8, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for i in range({steps}):
    opt.zero_grad()
    (w * torch.randn(8)).sum().backward()
    opt.step()
    if i == {steps} - 2:
        json.dump(probe(), open(sys.argv[1], "w"))
"""


def test_capture_stands_down_inside_an_optimizer_pre_hook(tmp_path: Path) -> None:
    # No module and no DataLoader: the step that ends the window is taken in the next optimizer
    # pre-hook, while Optimizer.step iterates its pre-hooks; the clean-up must not break that step.
    script = tmp_path / "functional.py"
    script.write_text(PROBE + FUNCTIONAL.format(steps=STEPS))
    out, seen = tmp_path / "run", tmp_path / "seen.json"
    args = ["--skip-first", "2", "--warmup", "1", "--active", "2", "--no-analyze", "--out", str(out)]
    proc = _run([sys.executable, "-m", "traceadvisor", "capture", *args, str(script), str(seen)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    after = json.loads(seen.read_text())
    assert (after["optimizer_pre_hooks"], after["optimizer_post_hooks"]) == (0, 1)
    assert not after["step_tracked"]
    run = json.loads((out / "run.json").read_text())
    assert run["steps"]["count"] == STEPS and not run.get("warnings")
    assert run["unprofiled_steps"]["unprofiled_steps"] == [1, *range(5, STEPS - 1)]


def test_advisor_exits_its_profiler_after_the_last_window(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    out, seen_path = tmp_path / "adv", tmp_path / "seen.json"
    script.write_text(ADVISOR_SCRIPT.replace("OUT", repr(str(out))))
    proc = _run([sys.executable, str(script), str(seen_path)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(seen_path.read_text())
    before, after = seen["2"], seen[str(STEPS - 2)]
    assert before["step_tracked"]
    assert not after["kineto_enabled"] and not after["python_flag"] and not after["step_tracked"]
    assert seen["open_step_range"] is False  # no ProfilerStep record_function opened per step any more
    assert (out / "cycle1" / "rank0.json.gz").exists()
    with gzip.open(out / "cycle1" / "rank0.json.gz", "rt") as fh:
        head = json.load(fh)["traceadvisor"]
    assert head["profiled_steps"] == [3, 4]
