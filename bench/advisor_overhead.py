#!/usr/bin/env python3
"""Step time of a training loop while the advisor analyses a big trace in the background.

Target (issue 5): the step time while an analysis runs stays within 5% of the step time without one.

How it is measured:

* A training loop (an MLP: forward, backward, SGD; on CUDA each step ends with a synchronize so
  that its time is the real step time) is timed step by step, ``advisor.poll()`` included, as it
  runs inside ``prof.step()`` in real use.
* Process mode (the default): analyses run back to back for the configuration's share of the
  time budget (``Advisor.submit_trace``: the job an on_trace_ready cycle runs, minus the gzip)
  while the worker is paused (SIGSTOP) and resumed (SIGCONT) every ``--block`` seconds (0.25):
  steps in running blocks are **busy**, steps in paused blocks **idle** (a stopped process uses no
  CPU). The two kinds alternate a few times a second, so the machine's other load, which drifts
  over seconds, falls on both alike. Only busy steps that ended with an analysis still pending
  count. Each busy block is compared with the idle block next to it (ratio of median steps).
* Thread mode (a thread cannot be paused): rounds of a busy phase during one analysis and an idle
  phase of as many steps, the order alternating.
* The result is the median of the comparisons' ratios, with their 10th-90th percentiles and the
  ratio of the pooled medians.
* First the worker is started and runs one analysis with the loop stopped (not compared):
  interpreter start-up is a one-time cost; that analysis time is shown as "first".

The trace: ``--trace``, else ``bench/.cache/nccl_data.100MB.json`` when present (``bench/make_traces.py``),
else a ~100 MB trace made from ``fixtures/traces/train_step.json.gz`` by ``bench/make_traces.py``
(needs orjson), else a trace of 150 steps of this benchmark's own loop (shapes and stacks on),
else that fixture itself.

Examples::

    .venv/bin/python bench/advisor_overhead.py --out bench/advisor_overhead.cpu.json
    .venv/bin/python bench/advisor_overhead.py --threads 2 --priority idle,19,0 --modes process
    python bench/advisor_overhead.py --device cuda --out advisor_overhead.gpu.json   # GPU machine, < 3 min
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CACHE = ROOT / "bench" / ".cache"
FIXTURE = ROOT / "fixtures" / "traces" / "train_step.json.gz"
TARGET = 1.05


def pick_trace(given: Path | None, step: Any, device: str) -> Path:
    """The trace to analyse: given, cached, built by make_traces, or captured from this loop."""
    if given is not None:
        return given
    cached = CACHE / "nccl_data.100MB.json"
    if cached.is_file():
        return cached
    try:
        sys.path.insert(0, str(ROOT / "bench"))
        import make_traces

        path, _ = make_traces.ensure_trace(100, CACHE, FIXTURE)
        return Path(path)
    except Exception as exc:
        print(f"[advisor_overhead] make_traces could not build a 100 MB trace ({exc})", file=sys.stderr)
    try:
        return capture_own_trace(step, device)
    except Exception as exc:
        print(f"[advisor_overhead] could not profile the loop ({exc}); using {FIXTURE.name}", file=sys.stderr)
        return FIXTURE


def capture_own_trace(step: Any, device: str, steps: int = 150) -> Path:
    """Profile this benchmark's own loop (shapes and stacks on) into a plain JSON trace."""
    import torch.profiler

    acts = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    path = Path(tempfile.mkdtemp(prefix="advisor-bench-trace-")) / "own_loop.json"
    with torch.profiler.profile(
        activities=acts,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
        record_shapes=True,
        with_stack=True,
    ) as prof:
        for _ in range(steps + 1):
            step()
            prof.step()
    print(
        f"[advisor_overhead] profiled {steps} steps of the loop: {path} ({path.stat().st_size / 1e6:.1f} MB)",
        file=sys.stderr,
    )
    return path


def make_loop(device: str, threads: int | None) -> Any:
    import torch

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    if device == "cuda":
        width, depth, batch = 4096, 8, 512
    else:
        width, depth, batch = 512, 3, 64
    layers: list[Any] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    y = torch.randn(batch, 1, device=device)

    def step() -> None:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()

    return step


def timed(step: Any, advisor: Any) -> float:
    t0 = time.perf_counter()
    step()
    advisor.poll()
    return time.perf_counter() - t0


def interleaved(advisor: Any, trace: Path, step: Any, block_s: float, duration: float) -> list[dict[str, Any]]:
    """Process mode: analyses back to back for ``duration`` seconds, the worker paused (SIGSTOP) and
    resumed (SIGCONT) every ``block_s`` seconds; one record per block.

    Steps in running blocks are "busy", steps in paused blocks "idle" (a stopped process uses no
    CPU: that is the training loop without an analysis). The two kinds alternate a few times a
    second, so the machine's other load, which drifts over seconds, falls on both alike.
    """
    blocks: list[dict[str, Any]] = []
    advisor.submit_trace(trace)
    while advisor.status()["worker_pid"] is None:
        advisor.poll()
        time.sleep(0.001)
    pid = advisor.status()["worker_pid"]
    running = True
    end = time.perf_counter() + duration
    try:
        while time.perf_counter() < end:
            steps: list[float] = []
            block_end = time.perf_counter() + block_s
            while time.perf_counter() < block_end:
                if not advisor.pending:
                    advisor.submit_trace(trace)  # keep the worker busy: the next analysis starts
                dt = timed(step, advisor)
                if not running or advisor.pending:  # a busy step must end with the analysis still going
                    steps.append(dt)
            blocks.append({"busy": running, "steps_ms": [x * 1e3 for x in steps]})
            os.kill(pid, signal.SIGSTOP if running else signal.SIGCONT)
            running = not running
    finally:
        os.kill(pid, signal.SIGCONT)
    return blocks


def block_pairs(blocks: list[dict[str, Any]]) -> list[float]:
    """Median busy step / median idle step of each busy block and the idle block next to it."""
    ratios = []
    for b0, b1 in zip(blocks[0::2], blocks[1::2], strict=False):
        busy, idle = (b0, b1) if b0["busy"] else (b1, b0)
        if len(busy["steps_ms"]) >= 3 and len(idle["steps_ms"]) >= 3:
            ratios.append(statistics.median(busy["steps_ms"]) / statistics.median(idle["steps_ms"]))
    return ratios


def round_phases(advisor: Any, trace: Path, step: Any, busy_first: bool, min_steps: int, cap: float) -> dict:
    """Thread mode (a thread cannot be paused): a busy phase during one analysis, then (or before)
    an idle phase of as many steps."""
    busy: list[float] = []
    idle: list[float] = []
    for phase in ("busy", "idle") if busy_first else ("idle", "busy"):
        if phase == "busy":
            advisor.submit_trace(trace)
            started = time.perf_counter()
            while advisor.pending and time.perf_counter() - started < cap:
                dt = timed(step, advisor)
                if advisor.pending:
                    busy.append(dt)
            while advisor.pending:
                advisor.poll()
                time.sleep(0.01)
        else:
            idle = [timed(step, advisor) for _ in range(max(len(busy), min_steps))]
    return {"order": "busy-first" if busy_first else "idle-first", "busy": busy, "idle": idle}


def run_config(
    mode: str,
    priority: str,
    trace: Path,
    step: Any,
    rounds: int,
    min_steps: int,
    block_s: float,
    phase_cap: float,
    deadline: float,
) -> dict[str, Any]:
    from traceadvisor.advisor import Advisor

    out = Path(tempfile.mkdtemp(prefix="advisor-bench-"))
    # report=False: nothing is printed per analysis; the job is the same.
    advisor = Advisor(
        out,
        mode=mode,
        worker_priority="idle" if priority in ("idle", "-") else int(priority),
        report=False,
        analysis_timeout=3600,
        config=None,
    )
    t0 = time.perf_counter()
    advisor.submit_trace(trace)
    while advisor.pending:
        advisor.poll()
        time.sleep(0.01)
    first = time.perf_counter() - t0
    done_before = len(advisor.reports)
    busy: list[float] = []
    idle: list[float] = []
    detail: dict[str, Any] = {}
    if mode == "process":
        blocks = interleaved(advisor, trace, step, block_s, max(deadline - time.perf_counter(), 5 * block_s))
        ratios = block_pairs(blocks)
        busy = [x for b in blocks if b["busy"] for x in b["steps_ms"]]
        idle = [x for b in blocks if not b["busy"] for x in b["steps_ms"]]
        detail = {"blocks": blocks}
    else:
        ratios, rows, last_round = [], [], 0.0
        for r in range(rounds):
            if time.perf_counter() + last_round > deadline:
                break  # the next round (about as long as the last) would overrun the time budget
            round_start = time.perf_counter()
            got = round_phases(advisor, trace, step, r % 2 == 0, min_steps, phase_cap)
            last_round = time.perf_counter() - round_start
            if len(got["busy"]) >= 5 and len(got["idle"]) >= 5:
                ratios.append(statistics.median(got["busy"]) / statistics.median(got["idle"]))
                busy += [x * 1e3 for x in got["busy"]]
                idle += [x * 1e3 for x in got["idle"]]
                rows.append({"order": got["order"], "ratio": ratios[-1]})
        detail = {"rounds": rows}
    advisor.close(timeout=5)  # an analysis cut short by the time budget is abandoned
    analyses = [r.timings.get("analysis_s") for r in list(advisor.reports)[done_before:]]
    q = statistics.quantiles(ratios, n=10) if len(ratios) >= 2 else [float("nan")] * 9
    summary = {
        "mode": mode,
        "priority": priority if mode == "process" else None,
        "method": f"interleaved {block_s:g} s blocks (worker paused/resumed)" if mode == "process" else "phases",
        "comparisons": len(ratios),
        "busy_steps": len(busy),
        "idle_steps": len(idle),
        "analyses": len(analyses),
        "first_analysis_s": first,
        "analysis_s_median": statistics.median([a for a in analyses if a] or [float("nan")]),
        "ratio_median": statistics.median(ratios) if ratios else float("nan"),
        "ratio_p10": q[0],
        "ratio_p90": q[-1],
        "busy_median_ms": statistics.median(busy) if busy else float("nan"),
        "idle_median_ms": statistics.median(idle) if idle else float("nan"),
    }
    summary["pooled_ratio"] = summary["busy_median_ms"] / summary["idle_median_ms"] if busy and idle else float("nan")
    summary["meets_target"] = bool(ratios) and summary["ratio_median"] <= TARGET
    return {"summary": summary, "ratios": ratios, **detail}


def machine(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
    }
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    try:
        with Path("/proc/cpuinfo").open() as fh:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=None, help="trace to analyse in the background")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--modes", default="process,thread", help="process and/or thread")
    ap.add_argument(
        "--priority",
        default="idle",
        help="worker priorities to compare (process mode): idle and/or nice values, e.g. idle,19,0",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads of the training loop")
    ap.add_argument("--rounds", type=int, default=6, help="busy/idle rounds per configuration (thread mode)")
    ap.add_argument("--block", type=float, default=0.25, help="seconds per running/paused block (process mode)")
    ap.add_argument("--min-steps", type=int, default=50, help="fewest idle steps per round")
    ap.add_argument("--phase-cap", type=float, default=20.0, help="longest busy phase (s)")
    ap.add_argument("--max-seconds", type=float, default=150.0, help="time budget of the whole run (s)")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)

    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    started = time.perf_counter()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    step = make_loop(device, args.threads)
    for _ in range(30):  # warm up: allocator, kernels, caches
        step()
    trace = pick_trace(args.trace, step, device)
    configs = [(m, p) for m in args.modes.split(",") for p in (args.priority.split(",") if m == "process" else ["-"])]
    budget = args.max_seconds - (time.perf_counter() - started)
    results = []
    for i, (mode, priority) in enumerate(configs):
        # Each configuration gets an equal share of what is left of the time budget.
        share = (args.max_seconds - (time.perf_counter() - started)) / (len(configs) - i)
        deadline = time.perf_counter() + max(share, 0.0)
        print(f"[advisor_overhead] {mode} priority={priority}: ~{share:.0f} s", file=sys.stderr)
        results.append(
            run_config(
                mode,
                priority,
                trace,
                step,
                args.rounds,
                args.min_steps,
                args.block,
                min(args.phase_cap, share / 4),
                deadline,
            )
        )
    info = machine(device)
    info["loadavg_start"] = load_start
    info["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    size_mb = trace.stat().st_size / 1e6

    print(f"\nAdvisor overhead: {device}, trace {trace.name} ({size_mb:.1f} MB), torch threads {info['torch_threads']}")
    load = info["loadavg_start"], info["loadavg_end"]
    gpu = f", {info['gpu']}" if "gpu" in info else ""
    print(
        f"machine: {info['cpu']}, {info['cpus']} CPUs{gpu}"
        + (f"; load {load[0][0]:.2f} -> {load[1][0]:.2f}" if load[0] else "")
    )
    print()
    print(
        "| mode | worker priority | comparisons | busy / idle steps | idle step ms | busy step ms "
        f"| busy/idle: median (p10-p90) | pooled | analysis s (first) | ≤ {TARGET:.2f} |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for res in results:
        s = res["summary"]
        print(
            f"| {s['mode']} | {s['priority'] or '-'} | {s['comparisons']} | {s['busy_steps']} / {s['idle_steps']} "
            f"| {s['idle_median_ms']:.3f} | {s['busy_median_ms']:.3f} "
            f"| {s['ratio_median']:.3f} ({s['ratio_p10']:.2f}-{s['ratio_p90']:.2f}) | {s['pooled_ratio']:.3f} "
            f"| {s['analysis_s_median']:.2f} ({s['first_analysis_s']:.2f}) | {'✓' if s['meets_target'] else '✗'} |"
        )
    total = time.perf_counter() - started
    print(f"\ntotal {total:.0f} s (budget {args.max_seconds:.0f} s, {budget:.0f} s of it for the rounds)")
    if args.out is not None:
        doc = {
            "target_ratio": TARGET,
            "trace": str(trace),
            "trace_mb": size_mb,
            "machine": info,
            "args": {k: str(v) for k, v in vars(args).items()},
            "results": results,
        }
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
