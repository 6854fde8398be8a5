#!/usr/bin/env python3
"""Step time after the last profiling window: ``traceadvisor capture`` and the advisor against no profiler.

Issue 12 item 6: once the schedule's last window is written, the program's step time must be back
within 2 % of an uncaptured run. What can stay behind: a profiler left in its schedule's NONE state
(it still opens a ``ProfilerStep#N`` ``record_function`` per step), capture's step triggers (a forward
pre-hook armed per step, DataLoader/GradScaler wrappers, optimizer hooks), and on CUDA, CUPTI, which
kineto leaves attached to the process after a trace unless ``TEARDOWN_CUPTI=1``.

The loop: a host-bound training step of many tiny ops (20 x Linear(16) + ReLU, 20 elementwise ops, the
backward, an SGD step: ~200 ops, ~0.8 ms on one CPU thread; ~400 kernels, ~5 ms on an H100 VM), each
step timed inside the loop with ``time.perf_counter_ns`` (after ``torch.cuda.synchronize()`` on CUDA)
and ``time.thread_time_ns`` (the loop thread's CPU time). Modes, each a fresh process, interleaved
``--repeats`` times (order rotated every repeat):

  plain     the loop alone;
  capture   the same loop under ``python -m traceadvisor capture --no-analyze`` (its default schedule:
            skip 5, warm up 2, record 5, once: the last window ends at step 12);
  advisor   the loop with ``traceadvisor.profile(analyze=False)`` and ``prof.step()`` per step (its
            default window: skip 10, wait 1, warm up 2, record 5, once: ends at step 18); analysis off.

Every mode pauses ``--settle-s`` seconds at step 30 (the advisor first waits for its trace's job, the
compression in its worker process): the helper processes (capture's watcher, the advisor's worker) are
Python start-ups of ~1 s of CPU that would otherwise run beside the first measured steps; on a
2-core machine they cost those steps several percent, and they are not what stays after the window.

Measured: the median step time of the steps after the last window (from step ``--after`` on) in each
run; the overhead of a mode is the median over repeats of (mode / plain of the same repeat - 1).
``--tree PATH`` runs capture and the advisor from another checkout of traceadvisor as well (the commit
before a fix), as modes ``capture@tree`` and ``advisor@tree``. Also printed, in-process and so
independent of the machine's load (min of blocks of 20,000 calls): one ``prof.step()`` of a profiler
left in its NONE state, and per mode what stays called once per step after the loop (capture's
optimizer post-hook, the advisor's ``prof.step()``). ``--out`` is rewritten after every run, so a run
cut short still leaves its data; ``--report FILE`` prints the tables of such a file.

  .venv/bin/python bench/after_window_overhead.py --repeats 3      # CPU here, ~1.5 minutes
  .venv/bin/python bench/after_window_overhead.py --tree /tmp/base12b --repeats 7 --out /tmp/aw.json
  python3 bench/after_window_overhead.py --python python3 --repeats 4 --out $OUT/aw_gpu.json   # GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TARGET_PCT = 2.0

LOOP = textwrap.dedent(
    """
    import json, os, sys, time
    import torch
    from torch import nn

    mode, steps, timings, settle_s = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    dev = torch.device("cuda" if torch.cuda.is_available() and os.environ.get("AW_DEVICE") != "cpu" else "cpu")
    torch.set_num_threads(1)  # one thread: steadier timings next to other processes
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(20) for m in (nn.Linear(16, 16), nn.ReLU())]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(4, 16, device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    prof = None
    if mode == "advisor":
        import traceadvisor

        prof = traceadvisor.profile(os.environ["AW_OUT"], analyze=False)
        prof.__enter__()
    times, cpu_times = [], []
    last, last_cpu = time.perf_counter_ns(), time.thread_time_ns()
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        y = model(x)
        for _ in range(10):
            y = y * 0.999 + 0.001
        y.square().mean().backward()
        opt.step()
        if prof is not None:
            prof.step()
        if i == 30:
            # Both windows are over. Let the helper processes finish their work before the measured
            # steps: the advisor's job (the trace's compression in its worker process), and the start
            # of capture's watcher process (a Python start-up, ~1 s of CPU beside the loop).
            if prof is not None:
                prof.advisor.wait(120)
            time.sleep(settle_s)
        sync()
        now, now_cpu = time.perf_counter_ns(), time.thread_time_ns()
        times.append(now - last)
        cpu_times.append(now_cpu - last_cpu)
        last, last_cpu = now, now_cpu
    # What stays per step, in-process (min of 5 blocks of 20,000 calls), after the loop: under capture
    # its optimizer post-hooks (each call is one more step to its clock), in the advisor prof.step()
    # once the trace's job is done (until then each step also polls the worker).
    from torch.optim import optimizer as optim_module

    def per_call_us(call):
        best = None
        for _ in range(5):
            t = time.perf_counter_ns()
            for _ in range(20000):
                call()
            us = (time.perf_counter_ns() - t) / 20000 / 1e3
            best = us if best is None else min(best, us)
        return best

    kept = list(optim_module._global_optimizer_post_hooks.values())
    kept_us = sum(per_call_us(lambda h=h: h(opt, (), {})) for h in kept) if kept else None
    if prof is not None:
        prof.advisor.wait(60)
        kept_us = per_call_us(prof.step)
        prof.__exit__(None, None, None)
    out = {"device": dev.type, "times_ns": times, "cpu_times_ns": cpu_times, "kept_us": kept_us}
    json.dump(out, open(timings, "w"))
    """
)

NONE_STEP_COST = textwrap.dedent(
    """
    import json, time, torch
    from torch.profiler import ProfilerActivity, profile, schedule
    torch.set_num_threads(1)
    sch = schedule(skip_first=0, wait=0, warmup=1, active=1, repeat=1)
    p = profile(activities=[ProfilerActivity.CPU], schedule=sch, on_trace_ready=lambda p: None,
                record_shapes=True, with_stack=True)
    p.start()
    for _ in range(4):
        torch.ones(2).add_(1)
        p.step()
    assert p.current_action.name == "NONE"

    def block():
        t = time.perf_counter_ns()
        for _ in range(20000):
            p.step()
        return (time.perf_counter_ns() - t) / 20000 / 1e3

    best = min(block() for _ in range(7))
    p.__exit__(None, None, None)
    print(json.dumps({"none_step_us": best}))
    """
)


def _run(
    python: str, loop: Path, tmp: Path, mode: str, steps: int, tree: Path, device: str, settle_s: float
) -> dict[str, Any]:
    timings = tmp / f"{mode.replace('@', '_')}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEADVISOR_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    env["AW_OUT"] = str(tmp / "advisor")
    env["AW_DEVICE"] = device
    base = mode.split("@")[0]
    loop_args = [str(loop), "advisor" if base == "advisor" else "plain", str(steps), str(timings), str(settle_s)]
    if base == "capture":
        out = tmp / "capture"
        cmd = [python, "-m", "traceadvisor", "capture", "--no-analyze", "--overwrite", "--out", str(out), *loop_args]
    else:
        cmd = [python, *loop_args]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    data = json.loads(timings.read_text())
    timings.unlink()
    return {"mode": mode, "wall_s": time.monotonic() - started, **data}


def _none_step_us(python: str) -> float:
    proc = subprocess.run([python, "-c", NONE_STEP_COST], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"the prof.step() measurement failed:\n{proc.stderr[-2000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["none_step_us"])


def _machine(python: str) -> dict[str, Any]:
    probe = (
        "import json, torch; print(json.dumps({'torch': torch.__version__, "
        "'gpu': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))"
    )
    proc = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    info = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}
    cpu = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if "model name" in line]
        cpu = names[0] if names else cpu
    return {"cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version(), **info}


def summarise(runs: list[dict[str, Any]], after: int, key: str = "times_ns") -> dict[str, dict[str, Any]]:
    """Per mode: the median after-window step (ms) of each repeat, and the overhead against plain."""
    by_repeat: dict[int, dict[str, float]] = {}
    for run in runs:
        after_steps = run[key][after:]
        by_repeat.setdefault(run["repeat"], {})[run["mode"]] = statistics.median(after_steps) / 1e6
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    table: dict[str, dict[str, Any]] = {}
    for mode in modes:
        medians = [rep[mode] for rep in by_repeat.values() if mode in rep]
        ratios = [rep[mode] / rep["plain"] - 1 for rep in by_repeat.values() if mode in rep and "plain" in rep]
        table[mode] = {
            "step_ms": statistics.median(medians),
            "overhead_pct": 100 * statistics.median(ratios),
            "per_repeat_pct": [round(100 * r, 1) for r in ratios],
        }
    return table


def _print_table(what: str, table: dict[str, dict[str, Any]]) -> None:
    print(f"| mode | {what} step ms (median of runs) | overhead vs plain (median of repeats) | per repeat % | target |")
    print("|---|---:|---:|---|---|")
    for mode, row in table.items():
        verdict = "" if mode == "plain" else ("≤ 2% ✓" if row["overhead_pct"] <= TARGET_PCT else "≤ 2% ✗")
        pct = "" if mode == "plain" else f"{row['overhead_pct']:+.2f}%"
        per = "" if mode == "plain" else ", ".join(f"{p:+.1f}" for p in row["per_repeat_pct"])
        print(f"| {mode} | {row['step_ms']:.3f} | {pct} | {per} | {verdict} |")


def report(doc: dict[str, Any]) -> None:
    """Print the tables of a run (``doc`` as ``--out`` writes it, complete or cut short)."""
    runs, after, machine = doc["runs"], int(doc["args"]["after"]), doc["machine"]
    table = summarise(runs, after)
    device = runs[0]["device"]
    where = machine.get("gpu") if device == "cuda" else f"{machine['cpu']}, {machine['cpus']} CPUs"
    repeats = len({r["repeat"] for r in runs})
    print(
        f"after-window step time, {device} ({where}), torch {machine.get('torch')}, {repeats} interleaved "
        f"repeats, steps {after}-{int(doc['args']['steps']) - 1} of {doc['args']['steps']}, {doc['wall_s']:.0f} s\n"
    )
    _print_table("wall", table)
    if device == "cpu":
        # The loop's own thread's CPU time: what other processes on a shared machine take from the
        # loop (preemption) drops out; what capture adds to the loop's thread stays in.
        print()
        _print_table("thread CPU", summarise(runs, after, "cpu_times_ns"))
    if doc.get("none_step_us") is not None:
        none_us = doc["none_step_us"]
        print(f"\none prof.step() of a profiler left in NONE: {none_us:.2f} µs (in-process, min of 7 x 20,000)")
    for mode in table:
        kept = [r["kept_us"] for r in runs if r["mode"] == mode and r.get("kept_us") is not None]
        if kept and mode.startswith("capture"):
            print(f"{mode}: its optimizer post-hook after the loop: {statistics.median(kept):.2f} µs a call")
        elif kept:
            print(f"{mode}: prof.step() after the loop, its job done: {statistics.median(kept):.2f} µs a call")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="interleaved repeats of every mode (default 5)")
    ap.add_argument("--steps", type=int, default=600, help="steps per run (default 600)")
    ap.add_argument("--after", type=int, default=60, help="first step counted as after the window (default 60)")
    ap.add_argument("--tree", type=Path, help="another traceadvisor checkout to run as well (modes NAME@tree)")
    ap.add_argument("--device", choices=["auto", "cpu"], default="auto", help="cpu: stay off the GPU")
    ap.add_argument("--settle-s", type=float, default=3.0, help="pause at step 30, every mode (default 3 s)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", type=Path, help="write the runs as JSON here (after every run)")
    ap.add_argument("--report", type=Path, help="only print the tables of an --out file")
    args = ap.parse_args()
    if args.report is not None:
        report(json.loads(args.report.read_text()))
        return 0
    if args.after < 20 or args.after >= args.steps:
        ap.error("--after must be at least 20 (past both windows and the export) and less than --steps")
    modes: list[tuple[str, Path]] = [("plain", REPO), ("capture", REPO), ("advisor", REPO)]
    if args.tree is not None:
        modes += [("capture@tree", args.tree.resolve()), ("advisor@tree", args.tree.resolve())]
    started = time.monotonic()
    doc: dict[str, Any] = {"machine": _machine(args.python), "args": {k: str(v) for k, v in vars(args).items()}}
    doc.update(runs=[], none_step_us=None, wall_s=0.0)
    with tempfile.TemporaryDirectory(prefix="after-window-") as tmp_name:
        tmp = Path(tmp_name)
        loop = tmp / "loop.py"
        loop.write_text(LOOP)
        for repeat in range(args.repeats):
            shift = repeat % len(modes)
            for mode, tree in modes[shift:] + modes[:shift]:
                run = _run(args.python, loop, tmp, mode, args.steps, tree, args.device, args.settle_s)
                run["repeat"] = repeat
                doc["runs"].append(run)
                doc["wall_s"] = time.monotonic() - started
                _save(args.out, doc)
                print(f"  repeat {repeat} {mode:13s} {run['wall_s']:5.1f} s", file=sys.stderr, flush=True)
    doc["none_step_us"] = _none_step_us(args.python)
    doc["wall_s"] = time.monotonic() - started
    _save(args.out, doc)
    report(doc)
    return 0


def _save(path: Path | None, doc: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(path)


if __name__ == "__main__":
    raise SystemExit(main())
