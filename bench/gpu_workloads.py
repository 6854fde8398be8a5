#!/usr/bin/env python3
"""Run every reference workload on a GPU under torch.profiler with the Triton launch hooks, then analyse.

For the owner, on the GPU machine (torch + triton + CUDA, no network), from the repository root::

    python bench/gpu_workloads.py --out /tmp/gpu-workloads

Per workload (``traceadvisor workloads``), in a child process of its own so that a crash, a CUDA
error or a hang in one does not stop the others (``--timeout-s`` each):

1. build it at its default GPU sizes (this compiles its Triton kernels and checks its result
   against torch), then run ``wait + warmup + active + 1`` iterations under
   ``torch.profiler.profile(activities=[CPU, CUDA], schedule(wait=1, warmup=1, active=3),
   record_shapes=True, with_stack=True, cuda sync events on)`` inside
   ``traceadvisor.workloads.triton_hooks.recording()``, and export ``traces/<name>.json.gz``;
2. ``traceadvisor analyze`` it (``reports/<name>.json``, and ``.txt`` rendered from that JSON);
3. check what the registry says analyze should show (top kernel, bottleneck annotation, rule
   codes) and read the Triton launch records back (``traceadvisor.analyses.triton_launches``): every
   Triton kernel of the workload must have records whose grid equals the kernel's grid in the
   trace; achieved GB/s and TFLOP/s per Triton kernel come from those records.

Then ``traceadvisor calibrate --quick --out device-profile.json``, and, when the capture command
exists, ``traceadvisor capture --workload vector-add`` as an end-to-end smoke test. Everything
lands under ``--out``: ``traces/``, ``reports/``, ``logs/``, ``device-profile.json``,
``summary.json`` and ``summary.md`` (rewritten after each workload, so a cut-off run keeps what it
finished). The run stays within ``--budget-s`` (default 230 s): workloads that would start too
late to finish are listed as skipped.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WAIT, WARMUP, ACTIVE = 1, 1, 3
CALIBRATE_RESERVE_S = 45.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", type=Path, required=True, help="output folder (created)")
    p.add_argument("--only", nargs="*", default=None, help="run only these workloads")
    p.add_argument("--budget-s", type=float, default=230.0, help="total time budget in seconds (default 230)")
    p.add_argument("--timeout-s", type=float, default=75.0, help="time limit of one workload (default 75)")
    p.add_argument("--no-calibrate", action="store_true", help="skip calibrate --quick")
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: a dry run of this script on a machine without GPU",
    )
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # child mode: run one workload
    args = p.parse_args()
    if args.one is not None:
        return run_one(args.one, args.out, args.device)
    return run_all(args)


# -- child: one workload under the profiler ---------------------------------------------------------
def run_one(name: str, out: Path, device: str) -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from traceadvisor.workloads import registry, triton_hooks

    workload = registry.get(name)
    module = importlib.import_module(workload.module)
    t0 = time.perf_counter()
    step = module.build(module.parser().parse_args(["--device", device]))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    build_s = time.perf_counter() - t0
    trace = out / "traces" / f"{workload.name}.json.gz"
    gpu = device == "cuda"
    experimental = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True) if gpu else None
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if gpu else [ProfilerActivity.CPU]
    step_s: list[float] = []
    with triton_hooks.recording():
        with profile(
            activities=activities,
            schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
            record_shapes=True,
            # Python stacks of Triton's interpreter (CPU dry runs) would be millions of frames.
            with_stack=gpu,
            experimental_config=experimental,
            on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace)),
        ) as prof:
            for _ in range(WAIT + WARMUP + ACTIVE + 1):
                t = time.perf_counter()
                step()
                prof.step()
                step_s.append(time.perf_counter() - t)
    sync()
    info = {
        "build_s": build_s,
        "host_step_ms": [round(s * 1e3, 3) for s in step_s],
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "max_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if gpu else None,
    }
    print("RESULT " + json.dumps(info), flush=True)
    return 0


# -- parent --------------------------------------------------------------------------------------
def run_all(args: argparse.Namespace) -> int:
    from traceadvisor.workloads import registry

    out: Path = args.out
    for sub in ("traces", "reports", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    summary: dict[str, Any] = {"environment": environment(), "workloads": [], "calibrate": None, "capture": None}
    chosen = [registry.get(n) for n in args.only] if args.only else registry.all()
    reserve = 0.0 if args.no_calibrate else CALIBRATE_RESERVE_S
    for w in chosen:
        left = args.budget_s - reserve - (time.monotonic() - start)
        if left < 20:
            summary["workloads"].append({"name": w.name, "status": "skipped", "reason": "time budget"})
            continue
        print(f"[{time.monotonic() - start:6.1f}s] {w.name}", flush=True)
        try:
            entry = one_workload(w, out, min(args.timeout_s, left), args.device)
        except Exception as exc:  # a bug here must not stop the other workloads
            entry = {"name": w.name, "status": "error", "error": "".join(traceback.format_exception_only(exc)).strip()}
        summary["workloads"].append(entry)
        write_summary(out, summary)
    if not args.no_calibrate:
        print(f"[{time.monotonic() - start:6.1f}s] calibrate --quick", flush=True)
        summary["calibrate"] = calibrate(out, max(30.0, args.budget_s - (time.monotonic() - start)))
        write_summary(out, summary)
    left = args.budget_s - (time.monotonic() - start)
    if left > 25:
        print(f"[{time.monotonic() - start:6.1f}s] capture --workload vector-add", flush=True)
        summary["capture"] = capture_smoke(out, left)
    summary["total_s"] = round(time.monotonic() - start, 1)
    write_summary(out, summary)
    print(f"[{summary['total_s']:6.1f}s] done: {out / 'summary.md'}", flush=True)
    return 0


def one_workload(w: Any, out: Path, timeout: float, device: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": w.name, "status": "ok"}
    log = out / "logs" / f"{w.name}.log"
    t0 = time.monotonic()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", w.name, "--out", str(out), "--device", device]
    proc = _run(cmd, log, timeout)
    entry["run_s"] = round(time.monotonic() - t0, 1)
    if proc is None:
        return {**entry, "status": "timeout", "log": str(log.relative_to(out))}
    if proc != 0:
        return {**entry, "status": f"failed (exit {proc})", "log": str(log.relative_to(out)), "tail": _tail(log)}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("RESULT "):
            entry.update(json.loads(line[len("RESULT ") :]))
    trace = out / "traces" / f"{w.name}.json.gz"
    report_path = out / "reports" / f"{w.name}.json"
    t1 = time.monotonic()
    rc = _run(
        [sys.executable, "-m", "traceadvisor", "analyze", str(trace), "--format", "json", "-o", str(report_path)],
        out / "logs" / f"{w.name}.analyze.log",
        120,
    )
    entry["analyze_s"] = round(time.monotonic() - t1, 1)
    if rc != 0 or not report_path.exists():
        return {**entry, "status": f"analyze failed (exit {rc})", "tail": _tail(out / "logs" / f"{w.name}.analyze.log")}
    report = json.loads(report_path.read_text())
    (out / "reports" / f"{w.name}.txt").write_text(render_text(report))
    entry.update(describe(report, trace))
    entry["checks"] = checks(w.expect, entry)
    if any(not c["ok"] for c in entry["checks"]):
        entry["status"] = "ok, expectation not met"
    return entry


def describe(report: dict[str, Any], trace: Path) -> dict[str, Any]:
    """What the report and the Triton launch records say, in brief."""
    import traceadvisor
    from traceadvisor.analyses import triton_launches

    t = report["traces"][0]
    ann = t.get("annotations") or {}
    out: dict[str, Any] = {
        "trace_bytes": trace.stat().st_size,
        "kernels": t["kernel_count"],
        "gpu_busy_pct": round(t["gpu_busy_pct"], 1),
        "top_kernel": t["top_kernels"][0]["name"] if t["top_kernels"] else None,
        "top_kernel_share_pct": round(t["top_kernels"][0]["share_pct"], 1) if t["top_kernels"] else None,
        "bottleneck": (ann.get("bottleneck") or {}).get("name"),
        "bottleneck_message": (ann.get("bottleneck") or {}).get("message"),
        "annotation_rows": [[r["name"], round(r["share_pct"], 1)] for r in ann.get("rows", [])],
        "findings": sorted({f["code"] for f in report["findings"]}),
    }
    loaded = traceadvisor.load_file(str(trace))
    kernels = triton_launches.kernels(loaded)
    per = triton_launches.by_kernel(loaded)
    records = triton_launches.launches(loaded)
    rows = []
    for name, r in per.iterrows():
        mine = kernels[kernels["kernel"] == name]
        secs = int(r["gpu_time_ns"]) / 1e9
        rows.append(
            {
                "kernel": name,
                "launches_with_kernel": int(r["launches"]),
                "records": int((records["kernel"] == name).sum()),
                "grid_matches": bool(mine["grid_matches"].all()) if len(mine) else False,
                "trace_kernel_names": sorted(set(mine["name"])),
                "bytes_per_launch": int(r["bytes"] // max(int(r["launches"]), 1)) if r["bytes"] >= 0 else None,
                "gbs": round(int(r["bytes"]) / secs / 1e9, 1) if secs > 0 and r["bytes"] >= 0 else None,
                "tflops": round(int(r["flops"]) / secs / 1e12, 1) if secs > 0 and r["flops"] >= 0 else None,
                "mean_kernel_us": round(int(r["gpu_time_ns"]) / max(int(r["launches"]), 1) / 1e3, 3),
            }
        )
    out["triton_records"] = rows
    out["triton_records_total"] = len(records)
    return out


def checks(expect: Any, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The registry's expectations against what analyze and the launch records showed."""
    out = []
    if expect.top_kernel:
        got = entry.get("top_kernel") or ""
        out.append({"check": f"top kernel contains {expect.top_kernel}", "ok": expect.top_kernel in got, "got": got})
    if expect.bottleneck:
        got = entry.get("bottleneck")
        out.append({"check": f"bottleneck in {expect.bottleneck}", "ok": got in expect.bottleneck, "got": got})
    if expect.findings:
        got = entry.get("findings", [])
        ok = any(c in got for c in expect.findings)
        out.append({"check": f"one of {', '.join(expect.findings)} fires", "ok": ok, "got": got})
    for code in expect.no_findings:
        got = entry.get("findings", [])
        out.append({"check": f"{code} does not fire", "ok": code not in got, "got": got})
    by_name = {r["kernel"]: r for r in entry.get("triton_records", [])}
    for k in expect.triton_kernels:
        r = by_name.get(k)
        ok = bool(r) and r["launches_with_kernel"] > 0 and r["grid_matches"] and (r["bytes_per_launch"] or 0) > 0
        out.append({"check": f"{k} has launch records tied to its kernels, grid matching", "ok": ok, "got": r})
    return out


def calibrate(out: Path, timeout: float) -> dict[str, Any]:
    path = out / "device-profile.json"
    log = out / "logs" / "calibrate.log"
    t0 = time.monotonic()
    rc = _run([sys.executable, "-m", "traceadvisor", "calibrate", "--quick", "--out", str(path)], log, timeout)
    entry: dict[str, Any] = {"exit": rc, "run_s": round(time.monotonic() - t0, 1)}
    if rc == 0 and path.exists():
        doc = json.loads(path.read_text())
        entry["measured"] = doc["measured"]
    else:
        entry["tail"] = _tail(log)
    return entry


def capture_smoke(out: Path, timeout: float) -> dict[str, Any]:
    """``traceadvisor capture --workload vector-add`` end to end, where the capture command exists."""
    log = out / "logs" / "capture-vector-add.log"
    folder = out / "capture-vector-add"
    probe = subprocess.run(
        [sys.executable, "-m", "traceadvisor", "capture", "--help"], capture_output=True, text=True, timeout=60
    )
    if probe.returncode != 0 or "--workload" not in probe.stdout:
        return {"status": "skipped", "reason": "no 'traceadvisor capture --workload' in this tree"}
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "traceadvisor", "capture", "--out", str(folder), "--workload", "vector-add"]
    rc = _run(cmd, log, timeout)
    entry: dict[str, Any] = {"exit": rc, "run_s": round(time.monotonic() - t0, 1), "log": str(log.relative_to(out))}
    try:
        import traceadvisor
        from traceadvisor.analyses import triton_launches

        traces = sorted(folder.glob("*.json.gz"))
        entry["traces"] = [t.name for t in traces]
        if traces:
            loaded = traceadvisor.load_file(str(traces[0]))
            entry["kernels"] = len(loaded.kernels)
            entry["triton_records"] = len(triton_launches.launches(loaded))
            entry["triton_kernels_linked"] = len(triton_launches.kernels(loaded))
    except Exception as exc:
        entry["error"] = "".join(traceback.format_exception_only(exc)).strip()
    return entry


# -- helpers -------------------------------------------------------------------------------------
def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"python": sys.version.split()[0]}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        env["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except Exception as exc:
        env["torch_error"] = str(exc)
    try:
        from importlib.metadata import version

        env["triton"] = version("triton")
    except Exception:
        env["triton"] = None
    return env


def render_text(report: dict[str, Any]) -> str:
    from traceadvisor.pipeline import Report
    from traceadvisor.report import render_text as rt

    return rt.render(Report(report["traces"], report["findings"], report["skipped"], report["errors"]))


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    from traceadvisor.atomic import write_bytes

    write_bytes(out / "summary.json", (json.dumps(summary, indent=2, default=str) + "\n").encode())
    write_bytes(out / "summary.md", markdown(summary).encode())


def markdown(summary: dict[str, Any]) -> str:
    env = summary["environment"]
    lines = [
        "# Reference workloads on the GPU",
        "",
        f"{env.get('gpu')}, torch {env.get('torch')} (CUDA {env.get('cuda')}), triton {env.get('triton')}, "
        f"python {env.get('python')}; profiler schedule wait={WAIT} warmup={WARMUP} active={ACTIVE}, "
        "record_shapes, with_stack, CUDA sync events, Triton launch hooks.",
        "",
        "| workload | status | run s | kernels | GPU busy | top kernel (share) | bottleneck | findings | checks |",
        "|---|---|---:|---:|---:|---|---|---|---|",
    ]
    for w in summary["workloads"]:
        top = w.get("top_kernel") or "-"
        top = (top[:60] + "…") if len(top) > 60 else top
        share = f" ({w['top_kernel_share_pct']}%)" if w.get("top_kernel_share_pct") is not None else ""
        checks_ok = sum(c["ok"] for c in w.get("checks", []))
        lines.append(
            f"| {w['name']} | {w['status']} | {w.get('run_s', '-')} | {w.get('kernels', '-')} | "
            f"{w.get('gpu_busy_pct', '-')}% | `{top}`{share} | {w.get('bottleneck_message') or '-'} | "
            f"{', '.join(w.get('findings', [])) or '-'} | {checks_ok}/{len(w.get('checks', []))} |"
        )
    lines += [
        "",
        "## Triton launch records",
        "",
        "| workload | kernel | records | launches tied | grid ok | bytes/launch | GB/s | TFLOP/s | mean µs |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for w in summary["workloads"]:
        for r in w.get("triton_records", []):
            lines.append(
                f"| {w['name']} | `{r['kernel']}` | {r['records']} | {r['launches_with_kernel']} | "
                f"{r['grid_matches']} | {r['bytes_per_launch']} | {r['gbs']} | {r['tflops']} | {r['mean_kernel_us']} |"
            )
    failed = [(w["name"], c) for w in summary["workloads"] for c in w.get("checks", []) if not c["ok"]]
    if failed:
        lines += ["", "## Expectations not met", ""]
        lines += [f"- {name}: {c['check']} (got {json.dumps(c['got'], default=str)[:200]})" for name, c in failed]
    problems = [w for w in summary["workloads"] if not str(w["status"]).startswith("ok")]
    if problems:
        lines += ["", "## Failures", ""]
        lines += [f"- {w['name']}: {w['status']} {w.get('error', '')} {w.get('tail', '')}".strip() for w in problems]
    cal = summary.get("calibrate")
    if cal:
        lines += ["", "## calibrate --quick", "", f"exit {cal['exit']}, {cal['run_s']} s"]
        m = cal.get("measured")
        if m:
            lines.append(f"- memory bandwidth: {m['memory_bandwidth_gbs']:.0f} GB/s")
            lines += [f"- {k}: {v / 1e12:.1f} TFLOP/s" if v else f"- {k}: not measured" for k, v in m["flops"].items()]
        else:
            lines.append(f"- {cal.get('tail', '')}")
    cap = summary.get("capture")
    if cap:
        lines += ["", "## capture --workload vector-add", "", "```", json.dumps(cap, indent=1), "```"]
    if "total_s" in summary:
        lines += ["", f"Total {summary['total_s']} s."]
    return "\n".join(lines) + "\n"


def _run(cmd: list[str], log: Path, timeout: float) -> int | None:
    """Run ``cmd`` with stdout and stderr to ``log``; its exit code, or None when it ran out of time."""
    # The repository first, then what the caller set (wheels unpacked into a --target folder).
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            return None


def _tail(log: Path, lines: int = 6) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])[-800:]


if __name__ == "__main__":
    sys.exit(main())
