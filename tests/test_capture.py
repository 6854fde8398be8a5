"""``traceadvisor capture``: real runs of ``python -m traceadvisor capture`` on small CPU scripts.

Each scenario writes a script to ``tmp_path`` and runs the real command in a subprocess (torch 2.13
CPU), then checks the run folder, ``run.json``, the ``ProfilerStep#N`` annotations inside the traces
and the exit status. The step clock and the option splitting are also checked directly.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import capture_run
import pytest

from traceadvisor.capture.command import end_options_at_program
from traceadvisor.capture.stepon import insert_wrappers, parse
from traceadvisor.capture.steps import StepClock, StepSource
from traceadvisor.errors import UsageError

pytest.importorskip("torch")

# A small schedule: step 0 skipped, one warm-up step, then the active steps.
SMALL = ["--skip-first", "1", "--warmup", "1", "--active", "2"]

TRAIN = capture_run.TRAIN


def run_capture(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """capture_run.run_capture with the probe's output file set (PROBE)."""
    return capture_run.run_capture(cwd, *args, env={"PROBE": str(cwd / "probe.json"), **(env or {})})


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def events(trace: Path) -> list[dict[str, Any]]:
    with gzip.open(trace, "rt") as fh:
        return list(json.load(fh)["traceEvents"])


def step_names(trace: Path) -> list[str]:
    """The CPU ``ProfilerStep#N`` annotations in a trace, in time order."""
    found = [
        e for e in events(trace) if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")
    ]
    return [e["name"] for e in sorted(found, key=lambda e: float(e["ts"]))]


def run_json(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "run.json").read_text()))


def files_by_name(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["path"]: f for f in record["files"]}


# -- real runs ------------------------------------------------------------------------------------------


def test_training_script_stepped_by_its_optimizer(tmp_path: Path) -> None:
    import torch

    script = write(tmp_path / "train.py", TRAIN)
    # Two cycles of 3 active steps; the script's own "--active 9" must reach the script, not us.
    proc = run_capture(
        tmp_path, "--skip-first", "1", "--warmup", "1", "--active", "3", "--repeat", "2", "--format", "json",
        "train.py", "10", "--active", "9",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr

    probe = json.loads((tmp_path / "probe.json").read_text())
    assert probe["argv"] == ["train.py", "10", "--active", "9"]
    assert probe["path0"] == str(tmp_path.resolve())
    assert probe["file"] == str(script)
    assert probe["name"] == "__main__"

    folders = list((tmp_path / "traceadvisor-runs").glob("train-*"))
    assert len(folders) == 1, folders
    folder = folders[0]
    record = run_json(folder)
    files = files_by_name(record)
    assert sorted(files) == ["cycle1/rank0.json.gz", "cycle2/rank0.json.gz"]
    assert files["cycle1/rank0.json.gz"]["steps"] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert files["cycle2/rank0.json.gz"]["steps"] == ["ProfilerStep#6", "ProfilerStep#7", "ProfilerStep#8"]
    for name, entry in files.items():
        assert not entry["partial"]
        assert step_names(folder / name) == entry["steps"]
        assert entry["bytes"] == (folder / name).stat().st_size
    assert record["exit"] == {"status": "ok", "code": 0, "exception": None}
    assert record["steps"]["source"] == "optimizer"
    assert record["steps"]["optimizer_steps"] == 10
    assert record["steps"]["count"] == 10  # 9 deferred to the next forward, the last one at the end
    assert record["schedule"] == {"skip_first": 1, "wait": 0, "warmup": 1, "active": 3, "repeat": 2}
    assert record["flags"]["record_shapes"] and record["flags"]["with_stack"]
    assert record["versions"]["torch"] == torch.__version__
    assert record["activities"] == (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    assert record["target"] == {"kind": "script", "name": "train.py", "args": ["10", "--active", "9"]}

    # The deferred step: every Optimizer.step annotation lies inside one ProfilerStep (trace-format §10.4).
    assert optimizer_steps_nest_in_profiler_steps(folder / "cycle2/rank0.json.gz", "Adam") == 3

    # analyze ran on the last complete cycle and printed its report.
    report = json.loads(proc.stdout)
    assert [t["path"] for t in report["traces"]] == [str(folder / "cycle2/rank0.json.gz")]
    assert [s["name"] for s in report["traces"][0]["steps"]] == ["ProfilerStep#6", "ProfilerStep#7", "ProfilerStep#8"]
    assert "analysing cycle2/rank0.json.gz" in proc.stderr


def test_script_raising_at_step_9_keeps_completed_cycles(tmp_path: Path) -> None:
    script = write(
        tmp_path / "boom.py",
        """
        import torch
        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def train_step(i):
            opt.zero_grad()
            loss = model(torch.randn(4, 8)).sum()
            if i == 9:
                raise ValueError(f"bad batch {i}")
            loss.backward()
            opt.step()

        for i in range(20):
            train_step(i)
        """,
    )
    proc = run_capture(tmp_path, "--out", "run", "--no-analyze", *SMALL, "--repeat", "0", "boom.py")
    assert proc.returncode == 1, proc.stderr
    # The script's traceback, as python prints it: no frame of ours.
    assert "Traceback (most recent call last):" in proc.stderr
    assert f'File "{script}", line 10, in train_step' in proc.stderr
    assert "ValueError: bad batch 9" in proc.stderr
    assert "traceadvisor/capture" not in proc.stderr
    record = run_json(tmp_path / "run")
    assert record["exit"] == {"status": "exception", "code": 1, "exception": "ValueError: bad batch 9"}
    files = files_by_name(record)
    assert [(n, f["steps"], f["partial"]) for n, f in sorted(files.items())] == [
        ("cycle1/rank0.json.gz", ["ProfilerStep#2", "ProfilerStep#3"], False),
        ("cycle2/rank0.json.gz", ["ProfilerStep#5", "ProfilerStep#6"], False),
        # The active window the exception cut short is kept, marked partial.
        ("cycle3/rank0.json.gz", ["ProfilerStep#8", "ProfilerStep#9"], True),
    ]
    for name, entry in files.items():
        assert step_names(tmp_path / "run" / name) == entry["steps"]


def test_exit_code_of_sys_exit_passes_through(tmp_path: Path) -> None:
    write(
        tmp_path / "exits.py",
        """
        import sys, torch
        m = torch.nn.Linear(4, 4); o = torch.optim.SGD(m.parameters(), lr=0.1)
        for i in range(6):
            m(torch.randn(2, 4)).sum().backward(); o.step()
        sys.exit(3)
        """,
    )
    proc = run_capture(tmp_path, "--out", "run", "--no-analyze", *SMALL, "exits.py")
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    record = run_json(tmp_path / "run")
    assert record["exit"] == {"status": "exit", "code": 3, "exception": None}
    assert files_by_name(record)["cycle1/rank0.json.gz"]["steps"] == ["ProfilerStep#2", "ProfilerStep#3"]


def test_keyboard_interrupt_gives_130_and_keeps_traces(tmp_path: Path) -> None:
    write(
        tmp_path / "interrupted.py",
        """
        import os, signal, torch
        # A job started in the background inherits SIGINT ignored: make Ctrl-C raise, as in a terminal.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        m = torch.nn.Linear(4, 4); o = torch.optim.SGD(m.parameters(), lr=0.1)
        for i in range(10):
            m(torch.randn(2, 4)).sum().backward(); o.step()
            if i == 5:
                os.kill(os.getpid(), signal.SIGINT)
        """,
    )
    proc = run_capture(tmp_path, "--out", "run", "--no-analyze", *SMALL, "interrupted.py")
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.rstrip().endswith("KeyboardInterrupt") or "\nKeyboardInterrupt\n" in proc.stderr
    record = run_json(tmp_path / "run")
    assert record["exit"]["status"] == "interrupted"
    assert files_by_name(record)["cycle1/rank0.json.gz"]["partial"] is False


INFER = """
import torch
model = torch.nn.Linear(16, 16).eval()

@torch.no_grad()
def predict(x):
    return model(x).relu()

def main():
    for i in range(8):
        predict(torch.randn(4, 16))
        torch.randn(4, 4).sum()  # between calls: not a linear

if __name__ == "__main__":
    main()
"""


def test_step_on_a_function_of_the_script(tmp_path: Path) -> None:
    script = write(tmp_path / "infer.py", INFER)
    proc = run_capture(tmp_path, "--out", "run", "--no-analyze", *SMALL, "--step-on", "predict", str(script))
    assert proc.returncode == 0, proc.stderr
    record = run_json(tmp_path / "run")
    assert record["steps"]["source"] == "step-on"
    assert record["steps"]["step_on_calls"] == 8
    trace = tmp_path / "run" / "cycle1/rank0.json.gz"
    assert step_names(trace) == ["ProfilerStep#2", "ProfilerStep#3"]
    # Each recorded step holds exactly one call of predict: one aten::linear.
    evs = events(trace)
    for step in (e for e in evs if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") == "user_annotation"):
        lo, hi = float(step["ts"]), float(step["ts"]) + float(step["dur"])
        linears = [e for e in evs if e.get("name") == "aten::linear" and lo <= float(e["ts"]) <= hi]
        assert len(linears) == 1, step["name"]


def test_step_on_unknown_function_is_our_error(tmp_path: Path) -> None:
    write(tmp_path / "infer.py", INFER)
    proc = run_capture(tmp_path, "--out", "run", "--step-on", "nothere", "infer.py")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "defines no function 'nothere' at module level" in proc.stderr


def test_module_run_as_python_m_with_step_on_module_function(tmp_path: Path) -> None:
    write(tmp_path / "app" / "__init__.py", "")
    write(
        tmp_path / "app" / "lib.py",
        """
        def infer(model, x):
            return model(x)
        """,
    )
    write(
        tmp_path / "app" / "main.py",
        """
        import json, os, sys
        import torch
        from app.lib import infer
        with open(os.environ["PROBE"], "w") as fh:
            json.dump({"argv": sys.argv, "path0": sys.path[0], "name": __name__, "spec": __spec__.name}, fh)
        m = torch.nn.Linear(4, 4)
        for i in range(int(sys.argv[1])):
            infer(m, torch.randn(2, 4))
        """,
    )
    proc = run_capture(
        tmp_path, "--out", "run", "--no-analyze", *SMALL, "--step-on", "app.lib:infer", "-m", "app.main", "6",
        "--out", "theirs",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert probe["argv"] == [str(tmp_path / "app" / "main.py"), "6", "--out", "theirs"]
    assert probe["path0"] == str(tmp_path)
    assert (probe["name"], probe["spec"]) == ("__main__", "app.main")
    record = run_json(tmp_path / "run")
    assert record["steps"]["step_on_calls"] == 6
    assert step_names(tmp_path / "run" / "cycle1/rank0.json.gz") == ["ProfilerStep#2", "ProfilerStep#3"]
    assert not (tmp_path / "theirs").exists()


def optimizer_steps_nest_in_profiler_steps(trace: Path, optimizer: str) -> int:
    """Assert every ``Optimizer.step`` annotation lies inside one ``ProfilerStep``; return how many."""
    evs = [e for e in events(trace) if e.get("cat") == "user_annotation"]
    steps = [e for e in evs if e["name"].startswith("ProfilerStep#")]
    optim = [e for e in evs if e["name"] == f"Optimizer.step#{optimizer}.step"]
    for o in optim:
        start, end = float(o["ts"]), float(o["ts"]) + float(o["dur"])
        inside = [s for s in steps if float(s["ts"]) <= start and end <= float(s["ts"]) + float(s["dur"])]
        assert len(inside) == 1, o
    return len(optim)


def test_lightning_closure_loop_gets_steps_between_iterations(tmp_path: Path) -> None:
    # Lightning runs the forward inside Optimizer.step (a closure): the step boundary comes from the
    # next DataLoader batch, outside the optimizer's annotation.
    pytest.importorskip("lightning")
    write(
        tmp_path / "lit.py",
        """
        import torch, lightning as L
        from torch.utils.data import DataLoader, TensorDataset

        class Model(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(16, 4)
            def training_step(self, batch, i):
                x, y = batch
                return torch.nn.functional.mse_loss(self.net(x), y)
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        data = DataLoader(TensorDataset(torch.randn(128, 16), torch.randn(128, 4)), batch_size=16)
        trainer = L.Trainer(max_epochs=1, limit_train_batches=8, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
        trainer.fit(Model(), data)
        """,
    )
    proc = run_capture(tmp_path, "--out", "run", "--no-analyze", *SMALL, "lit.py")
    assert proc.returncode == 0, proc.stderr
    record = run_json(tmp_path / "run")
    assert record["steps"]["optimizer_steps"] == 8
    trace = tmp_path / "run" / "cycle1/rank0.json.gz"
    assert step_names(trace) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert optimizer_steps_nest_in_profiler_steps(trace, "SGD") == 2


def test_step_markers_take_over_from_the_optimizer(tmp_path: Path) -> None:
    write(
        tmp_path / "marked.py",
        """
        import torch, traceadvisor
        m = torch.nn.Linear(4, 4); o = torch.optim.SGD(m.parameters(), lr=0.1)
        for i in range(8):
            for micro in range(2):  # two optimizer steps per marked iteration
                m(torch.randn(2, 4)).sum().backward(); o.step()
            traceadvisor.step()
        """,
    )
    proc = run_capture(tmp_path, "--out", "run", "--no-analyze", *SMALL, "marked.py")
    assert proc.returncode == 0, proc.stderr
    record = run_json(tmp_path / "run")
    # Before the first marker the optimizer paced the steps: its first step was taken at the second
    # micro-batch's forward, its second was pending and dropped by the marker. Then markers only.
    assert record["steps"]["source"] == "marker"
    assert (record["steps"]["markers"], record["steps"]["optimizer_steps"]) == (8, 2)
    assert record["steps"]["count"] == 9
    trace = tmp_path / "run" / "cycle1/rank0.json.gz"
    names = step_names(trace)
    assert names == files_by_name(record)["cycle1/rank0.json.gz"]["steps"] and len(names) == 2
    # Each marked step holds the iteration's two optimizer steps.
    evs = events(trace)
    for step in (e for e in evs if e.get("name") in names and e.get("cat") == "user_annotation"):
        lo, hi = float(step["ts"]), float(step["ts"]) + float(step["dur"])
        inner = [e for e in evs if e.get("name") == "Optimizer.step#SGD.step" and lo <= float(e["ts"]) <= hi]
        assert len(inner) == 2, step["name"]


def test_grad_scaler_skipped_steps_do_not_stall_the_schedule(tmp_path: Path) -> None:
    # Iterations 0-4 all skipped (no optimizer step at all while the schedule passes its first active
    # steps), then every other one: skipped steps must count once, stepped ones must not count twice.
    write(
        tmp_path / "amp.py",
        """
        import torch
        m = torch.nn.Linear(8, 8); o = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        before = m.weight.detach().clone()
        for i in range(10):
            o.zero_grad()
            loss = m(torch.randn(4, 8)).sum()
            if i < 5 or i % 2:
                loss = loss * float("inf")  # inf gradients: scaler.step() skips optimizer.step()
            scaler.scale(loss).backward()
            scaler.step(o)
            scaler.update()
            if i == 4:
                assert torch.equal(before, m.weight), "a step was not skipped"
        """,
    )
    proc = run_capture(tmp_path, "--out", "run", "--no-analyze", *SMALL, "amp.py")
    assert proc.returncode == 0, proc.stderr
    record = run_json(tmp_path / "run")
    assert record["steps"]["scaler_skipped_steps"] == 8  # 0-4, 5, 7, 9
    assert record["steps"]["optimizer_steps"] == 2  # 6, 8
    assert record["steps"]["count"] == 10
    trace = tmp_path / "run" / "cycle1/rank0.json.gz"
    assert step_names(trace) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert not any(e.get("name") == "Optimizer.step#SGD.step" for e in events(trace))  # skipped, really


def test_program_without_steps_gets_a_time_window_and_a_warning(tmp_path: Path) -> None:
    write(
        tmp_path / "nosteps.py",
        """
        import time, torch
        a = torch.randn(64, 64)
        t = time.monotonic()
        while time.monotonic() - t < 4.0:
            b = a @ a
        """,
    )
    proc = run_capture(
        tmp_path, "--out", "run", "--no-analyze", "--window-delay", "0.2", "--window-s", "0.5", "nosteps.py"
    )
    assert proc.returncode == 0, proc.stderr
    assert "traceadvisor: warning: no step was seen: recorded one time window" in proc.stderr
    record = run_json(tmp_path / "run")
    (entry,) = record["files"]
    assert (entry["path"], entry["kind"], entry["steps"]) == ("window/rank0.json.gz", "window", [])
    trace = tmp_path / "run" / "window/rank0.json.gz"
    assert step_names(trace) == []
    assert any(e.get("name") == "aten::mm" for e in events(trace))
    assert any("no step was seen" in w for w in record["warnings"])


def test_short_program_without_steps_captures_nothing_and_says_why(tmp_path: Path) -> None:
    write(tmp_path / "quick.py", "import torch\ntorch.randn(4).sum()\n")
    proc = run_capture(tmp_path, "--out", "run", "quick.py")
    assert proc.returncode == 2
    assert "before --window-delay 30 s" in proc.stderr
    assert proc.stderr.rstrip().endswith("traceadvisor: error: no trace was captured (see the warnings above)")
    assert run_json(tmp_path / "run")["files"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope.py"], "traceadvisor: error: nope.py: no such file"),
        (["--active", "0", "nope.py"], "traceadvisor: error: --active must be 1 or more, not 0"),
        (["--bogus", "x.py"], "traceadvisor: error: No such option: --bogus"),
        (["-m", "no_such_module_here"], "traceadvisor: error: -m no_such_module_here: no module named"),
        (["--step-on", "a:b:c", "x.py"], "traceadvisor: error: --step-on 'a:b:c'"),
        ([], "traceadvisor: error: missing SCRIPT"),
    ],
)
def test_our_errors_are_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    proc = run_capture(tmp_path, *args)
    assert proc.returncode == 2
    assert proc.stderr.startswith(message), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "traceadvisor-runs").exists()


def test_existing_capture_is_not_overwritten(tmp_path: Path) -> None:
    write(tmp_path / "train.py", TRAIN)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")
    proc = run_capture(tmp_path, "--out", "run", "train.py", "3")
    assert proc.returncode == 2
    assert "already holds a capture of rank 0; use another --out or --overwrite" in proc.stderr
    assert (tmp_path / "run" / "run.json").read_text() == "{}"


def test_workload_runs_under_capture(tmp_path: Path) -> None:
    proc = run_capture(tmp_path, "--out", "run", "--no-analyze", *SMALL, "--workload", "mlp-train", "--steps", "5")
    assert proc.returncode == 0, proc.stderr
    record = run_json(tmp_path / "run")
    assert record["target"] == {"kind": "workload", "name": "mlp-train", "args": ["--steps", "5"]}
    assert step_names(tmp_path / "run" / "cycle1/rank0.json.gz") == ["ProfilerStep#2", "ProfilerStep#3"]


HOOKED = """
import json, sys
from contextlib import contextmanager
from pathlib import Path
from traceadvisor.capture import session

seen = []

@contextmanager
def recorder(s):
    seen.append(("enter", s.recording, s.rank))
    def listener(s, trace):
        side = trace.path.with_name(trace.path.name.replace(".json.gz", ".extra.json"))
        side.write_text(json.dumps({"steps": trace.step_names, "recording": s.recording}))
        trace.sidecars.append(side.name)
    s.trace_listeners.append(listener)
    yield
    seen.append(("exit", s.recording, len(s.files)))
    Path(sys.argv[-1]).with_name("seen.json").write_text(json.dumps(seen))

session.extra_contexts.append(recorder)
sys.argv = ["traceadvisor", "capture", "--out", "run", "--no-analyze", "--skip-first", "1", "--warmup", "1",
            "--active", "2", "train.py", "5"]
from traceadvisor.cli import main
main()
"""


def test_extra_contexts_and_trace_listeners(tmp_path: Path) -> None:
    write(tmp_path / "train.py", TRAIN)
    write(tmp_path / "driver.py", HOOKED)
    proc = capture_run.run_driver(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "seen.json").read_text()) == [["enter", False, 0], ["exit", False, 1]]
    record = run_json(tmp_path / "run")
    assert files_by_name(record)["cycle1/rank0.json.gz"]["sidecars"] == ["rank0.extra.json"]
    side = json.loads((tmp_path / "run" / "cycle1" / "rank0.extra.json").read_text())
    assert side == {"steps": ["ProfilerStep#2", "ProfilerStep#3"], "recording": False}


# -- the pieces, directly --------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.steps = 0
        self.armed: list[bool] = []
        self.marker_switches = 0

    def clock(self, source: StepSource = StepSource.optimizer) -> StepClock:
        c = StepClock(self.advance, source)
        c.on_pending = self.armed.append
        c.on_markers = self.switched
        return c

    def advance(self) -> None:
        self.steps += 1

    def switched(self) -> None:
        self.marker_switches += 1


def test_optimizer_steps_are_deferred_to_the_next_iteration() -> None:
    r = Recorder()
    c = r.clock()
    c.optimizer_stepped(1)
    assert (r.steps, c.pending, r.armed) == (0, True, [True])
    c.optimizer_stepped(1)  # no forward in between: still one pending step
    c.iteration_starting()
    c.iteration_starting()
    assert (r.steps, c.pending, r.armed) == (1, False, [True, False])


def test_only_the_lead_optimizer_ends_an_iteration() -> None:
    r = Recorder()
    c = r.clock()
    for _ in range(3):  # a GAN: D then G each iteration
        c.optimizer_stepped(10)
        c.iteration_starting()
        c.optimizer_stepped(20)
        c.iteration_starting()
    assert r.steps == 3
    # The lead (10) goes quiet; 20 stepping twice in a row takes over.
    c.optimizer_stepped(20)  # its second step since the lead's last: it leads from here
    c.iteration_starting()
    c.optimizer_stepped(20)
    c.iteration_starting()
    assert r.steps == 5
    assert c.counts["lead_changes"] == 1


def test_scaler_update_without_optimizer_step_is_a_skipped_step() -> None:
    r = Recorder()
    c = r.clock()
    c.scaler_updated()  # skipped (no lead yet)
    c.iteration_starting()
    c.optimizer_stepped(1)
    c.scaler_updated()  # not skipped: counted once, by the optimizer
    c.iteration_starting()
    c.scaler_updated()  # skipped
    c.iteration_starting()
    assert r.steps == 3
    assert c.counts["scaler_skipped"] == 2 and c.counts["optimizer"] == 1


def test_markers_switch_off_optimizer_steps_and_step_on_ignores_markers() -> None:
    r = Recorder()
    c = r.clock()
    c.optimizer_stepped(1)
    c.marker()  # the pending optimizer step is dropped, markers rule from now on
    c.optimizer_stepped(1)
    c.iteration_starting()
    c.marker()
    assert (r.steps, r.marker_switches, c.source) == (2, 1, StepSource.marker)
    r2 = Recorder()
    c2 = r2.clock(StepSource.call)
    c2.marker()
    c2.call_started()
    c2.call_started()  # recursion: only the outermost call is a step
    c2.call_finished()
    c2.call_finished()
    c2.call_started()
    assert (r2.steps, c2.counts["markers_ignored"]) == (2, 1)


def test_options_after_the_program_belong_to_it() -> None:
    values = {"--out", "--active", "-m", "--module", "--workload"}
    assert end_options_at_program(["--active", "3", "t.py", "--active", "7"], values) == [
        "--active", "3", "t.py", "--active", "7",
    ]  # fmt: skip
    assert end_options_at_program(["--active", "3", "-m", "pkg.mod", "--active", "7"], values) == [
        "--active", "3", "-m", "pkg.mod", "--", "--active", "7",
    ]  # fmt: skip
    assert end_options_at_program(["--workload=mlp", "--steps", "3"], values) == [
        "--workload=mlp", "--", "--steps", "3",
    ]  # fmt: skip
    assert end_options_at_program(["-mpkg", "-x"], values) == ["-mpkg", "--", "-x"]
    assert end_options_at_program(["-m"], values) == ["-m"]


def test_step_on_rewrites_only_module_level_bindings() -> None:
    import ast

    source = textwrap.dedent(
        """
        import os
        from mylib import infer as predict
        if True:
            def step(x):
                def step(y):
                    return y
                return step(x)
        class Engine:
            def run(self):
                pass
        """
    )
    tree = insert_wrappers(ast.parse(source), "step", "s.py")
    assert ast.unparse(tree).count("step = __traceadvisor_step_on__(step)") == 1
    tree = insert_wrappers(ast.parse(source), "predict", "s.py")
    assert "predict = __traceadvisor_step_on__(predict)" in ast.unparse(tree)
    tree = insert_wrappers(ast.parse(source), "Engine.run", "s.py")
    assert "__traceadvisor_step_on_attribute__(Engine, 'run')" in ast.unparse(tree)
    with pytest.raises(UsageError, match="defines no function 'os'"):
        insert_wrappers(ast.parse(source), "os", "s.py")
    assert parse("pkg.mod:Cls.fn").module == "pkg.mod" and parse("fn").module is None
    with pytest.raises(UsageError):
        parse("a.b.c")


def test_capture_modules_import_without_torch() -> None:
    code = (
        "import sys, traceadvisor.capture.command, traceadvisor.capture.session, traceadvisor.capture.target,"
        "traceadvisor.capture.runinfo, traceadvisor.capture.window, traceadvisor.capture.hooks;"
        "print(any(m == 'torch' or m.startswith('torch.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_step_marker_is_a_no_op_outside_capture() -> None:
    code = "import sys, traceadvisor; traceadvisor.step(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_each_rank_of_a_multi_rank_run_writes_its_summary_beside_its_trace(tmp_path: Path) -> None:
    """Under a launcher (WORLD_SIZE > 1) every rank writes ``<trace>.tasummary`` (docs/multirank.md):
    ``analyze --jobs`` then reads it instead of the trace. Here rank 1 of 2, without analysis."""
    from traceadvisor.ranks.summary_io import read_summary, trace_key

    write(tmp_path / "train.py", TRAIN)
    proc = run_capture(
        tmp_path, "--no-analyze", "--skip-first", "1", "--warmup", "1", "--active", "2", "train.py", "6",
        env={"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (folder,) = list((tmp_path / "traceadvisor-runs").glob("train-*"))
    traces = sorted(folder.glob("*/*.json.gz"))
    assert traces
    for trace in traces:
        got = read_summary(trace.with_name(trace.name + ".tasummary"), trace_key(trace))
        assert got is not None, f"no summary beside {trace.name}"
        assert got.rank == 1 and got.rank_source == "file name"
        steps = got.tables["steps"]["step"].tolist()
        assert steps == [int(s.split("#")[1]) for s in step_names(trace)]


def test_the_captured_program_never_has_pandas_imported(tmp_path: Path) -> None:
    """Capture runs inside the user's process: its hooks, the window's export and the sync-site hook
    must not import the analysis stack. Importing pandas alone slowed a 0.8 ms training step by 1-3%
    for the rest of the run (bench/after_window_overhead.py), past the 2% issue 12 allows after the
    last window."""
    write(
        tmp_path / "loop.py",
        """
        import json, sys
        import torch
        from torch import nn
        model = nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(12):
            opt.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
        with open("modules.json", "w") as f:
            json.dump(sorted(m for m in sys.modules if m.split(".")[0] in ("pandas", "traceadvisor")), f)
        """,
    )
    proc = run_capture(tmp_path, "--no-analyze", "--skip-first", "1", "--warmup", "1", "--active", "3", "loop.py")
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads((tmp_path / "modules.json").read_text())
    assert any(m.startswith("traceadvisor.capture") for m in loaded)  # the probe sees capture's modules
    assert not [m for m in loaded if m == "pandas" or m.startswith("pandas.")], loaded
