#!/usr/bin/env python3
"""traceadvisor load benchmark: orjson vs HTA vs `traceadvisor analyze`, side by side.

For each trace size (made by bench/make_traces.py) and each repetition, in one run and
interleaved (rep -> size -> tool, tool order rotated every repetition), this runs:

  orjson         fresh `python -c` process: read the file's bytes + orjson.loads; the time
                 is measured inside the process around read+loads only (no interpreter
                 start, no import).
  HTA            fresh process: `TraceAnalysis(trace_dir=DIR)` (HTA 0.5.0, optional); time
                 measured inside the process around the constructor only (no imports).
                 DIR holds only a hard link to the trace.
  traceadvisor   `python -m traceadvisor analyze FILE --format json --output TMP/report.json`;
                 the time is the wall time of the whole process, start-up, imports and the
                 report write included. The report is checked to be JSON, then deleted.
                 (Not --output /dev/null: the CLI writes atomically, temp file + rename, and
                 that replaces /dev/null with a regular file.) This is the default install:
                 the native decoder (traceadvisor/trace/_kineto.c) where it is built.
  traceadvisor   the same command with TRACEADVISOR_NATIVE=0 in its environment: the pure-Python
  (pure Python)  path, what a user without a C compiler gets; measured and checked the same way.
                 The machine info records whether the native decoder is available to the
                 measured interpreter at all (if not, both rows read with the Python path).

Peak memory: every measured command is a direct child of this runner, started with
subprocess.Popen and reaped with os.wait4(pid), which returns the rusage of that one
child (Linux: ru_maxrss = peak RSS of the child, or of a descendant it waited for, in
KiB). With the native decoder traceadvisor reads a large uncompressed trace with two threads
in one process, so ru_maxrss covers it; the RSS includes the resident pages of the
memory-mapped trace, which the decoder releases slice by slice. The pure-Python path forks a
second process for a large uncompressed trace, and ru_maxrss is a maximum over processes, not
a sum; so a sampler thread also sums the RSS of the process and all its descendants
(/proc/PID/statm, every 20 ms; pages shared by a forked child are counted in both, so the sum
errs high), and the peak reported is the larger of the two. It includes the interpreter and
imports. (PSS from smaps_rollup would split shared pages fairly, but reading it walks the page
tables and costs a core on multi-GB processes.)

Reported: median over --repeat runs. MB = 10**6 bytes everywhere. The page cache is warmed
(each file read once) before measuring, so all figures are warm-cache. Linearity: besides the
seconds per 100 MB at each size, a least-squares fit t = a + b * size over the measured sizes
(a: the fixed cost, start-up and imports; b: seconds per 100 MB) and its largest relative
residual, for traceadvisor (both paths) and orjson.

The runner itself uses only the standard library (the probes run orjson/HTA in child
processes, the generator is run as a child process) and never imports traceadvisor; whether the
native decoder is available is asked of a child process too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
DEFAULT_CACHE_DIR = BENCH_DIR / ".cache"
MB = 1_000_000
RESULT_TAG = "BENCH_RESULT "

DEFAULT_TA_CMD = "{python} -m traceadvisor analyze {trace} --format json --output {output}"
STANDIN_TA_CMD = (
    "{python} "
    + shlex.quote(str(Path(__file__).resolve()))
    + " _standin analyze {trace} --format json --output {output}"
)

TARGET_TA_ORJSON = 0.6  # traceadvisor wall / orjson read+loads  <=
TARGET_HTA_TA = 10.0  # HTA load / traceadvisor wall             >=
TARGET_PEAK_RATIO = 2.0  # traceadvisor peak RSS / JSON bytes      <=

ORJSON_PROBE = r"""
import json, os, sys, time
import orjson
t0 = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    data = f.read()
doc = orjson.loads(data)
t1 = time.perf_counter()
print("BENCH_RESULT " + json.dumps({"inner_s": t1 - t0, "events": len(doc["traceEvents"])}), flush=True)
os._exit(0)  # skip freeing the object graph at exit
"""

HTA_PROBE = r"""
import json, os, sys, time
t_imp = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
rows = sum(len(df) for df in analyzer.t.traces.values())
print("BENCH_RESULT " + json.dumps({"inner_s": t1 - t0, "import_s": t0 - t_imp, "rows": rows}), flush=True)
os._exit(0)
"""

TOOLS = ("orjson", "hta", "ta", "ta_py")
TOOL_LABEL = {"orjson": "orjson", "hta": "HTA", "ta": "traceadvisor", "ta_py": "traceadvisor (pure Python)"}
# The traceadvisor command, timed as a whole process, its JSON report checked.
TA_TOOLS = ("ta", "ta_py")
# Variables set on top of the child environment, per tool: "ta_py" is "ta" with the native decoder
# turned off (traceadvisor/trace/native.py reads TRACEADVISOR_NATIVE).
TOOL_ENV = {"ta_py": {"TRACEADVISOR_NATIVE": "0"}}
NATIVE_PROBE = "from traceadvisor.trace import native; print(native.available())"


# --------------------------------------------------------------------------- measuring


# Measured commands run as on a user's machine, where Python caches compiled modules: a sandbox's
# PYTHONDONTWRITEBYTECODE=1 would make every run recompile traceadvisor's and the rules' sources.
_CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def measure(cmd: list[str], timeout: float, cwd: Path = REPO, env: dict[str, str] | None = None) -> dict:
    """Run cmd as a direct child; wall time, exit code and that child's own peak RSS.

    env: variables set (or overridden) on top of the runner's child environment.
    """
    child_env = {**_CHILD_ENV, **env} if env else _CHILD_ENV
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        killed = threading.Event()
        done = threading.Event()
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd, start_new_session=True, env=child_env)

        def _kill():
            if not done.is_set():
                killed.set()
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

        timer = threading.Timer(timeout, _kill)
        timer.start()
        tree_peak = [0]
        sampler = threading.Thread(target=_sample_tree_rss, args=(p.pid, done, tree_peak), daemon=True)
        sampler.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        except BaseException:  # Ctrl-C / SIGTERM: do not leave the measured process behind
            _kill()
            os.waitpid(p.pid, 0)
            raise
        finally:
            done.set()
            timer.cancel()
        wall = time.perf_counter() - t0
        sampler.join()
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    res = {
        "rc": p.returncode,
        "timed_out": killed.is_set(),
        "wall_s": wall,
        "peak_rss_bytes": max(ru.ru_maxrss * 1024, tree_peak[0]),  # Linux: KiB
        "maxrss_bytes": ru.ru_maxrss * 1024,
        "tree_rss_peak_bytes": tree_peak[0],
        "user_s": ru.ru_utime,
        "sys_s": ru.ru_stime,
    }
    for line in stdout.splitlines():
        if line.startswith(RESULT_TAG):
            res.update(json.loads(line[len(RESULT_TAG) :]))
    if p.returncode != 0:
        res["stderr_tail"] = (stderr or stdout)[-2000:]
    return res


def _tree(pid: int) -> list[int]:
    """pid and all its descendants (Linux /proc children lists)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError):
            pass
    return out


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _sample_tree_rss(pid: int, done: threading.Event, peak: list[int]) -> None:
    while not done.is_set():
        peak[0] = max(peak[0], sum(_rss(p) for p in _tree(pid)))
        done.wait(0.02)


def _check_report(path: Path) -> tuple[int | None, str | None]:
    """(size, error) of the JSON report the traceadvisor command wrote."""
    try:
        data = path.read_bytes()
        json.loads(data)
    except OSError:
        return None, "no report written"
    except ValueError:
        return len(data), "report is not JSON"
    return len(data), None


def run_quiet(cmd: list[str], **kw) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True, **kw).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


# --------------------------------------------------------------------------- machine info


def machine_info(python: str) -> dict:
    info: dict = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
    info["nproc"] = os.cpu_count()
    try:
        info["nproc_usable"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = {}
        for line in Path("/proc/meminfo").read_text().splitlines():
            k, v = line.split(":", 1)
            mem[k] = int(v.split()[0]) * 1024
        info["ram_total_gb"] = round(mem["MemTotal"] / 1e9, 1)
        info["ram_available_gb"] = round(mem["MemAvailable"] / 1e9, 1)
    except (OSError, KeyError, ValueError):
        pass
    info["kernel"] = platform.release()
    info["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    info["python_exe"] = python
    code = (
        "import sys, json, importlib.metadata as m\n"
        "v = {}\n"
        "for p in ('orjson','msgspec','numpy','pandas','holistictraceanalysis','traceadvisor'):\n"
        "    try: v[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: v[p] = None\n"
        "print(json.dumps({'python': sys.version.split()[0], 'packages': v}))\n"
    )
    out = run_quiet([python, "-c", code], cwd=REPO)
    if out:
        d = json.loads(out)
        info["python"] = d["python"]
        info["packages"] = d["packages"]
        if d["packages"].get("traceadvisor") is None:
            info["packages"]["traceadvisor"] = "source tree (not installed)"
    # Asked of the measured interpreter, in the measured commands' environment (the runner never
    # imports traceadvisor): True/False, or None when the probe could not import traceadvisor.
    native = run_quiet([python, "-c", NATIVE_PROBE], cwd=REPO, env=_CHILD_ENV)
    info["native_decoder"] = {"True": True, "False": False}.get(native)
    info["native_disabled_by_env"] = _CHILD_ENV.get("TRACEADVISOR_NATIVE") == "0"
    rev = run_quiet(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    info["git_rev"] = rev or None
    return info


def mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# --------------------------------------------------------------------------- traces


def ensure_traces(python: str, sizes: list[int], cache_dir: Path, source: str | None) -> dict[int, dict]:
    cmd = [
        python,
        str(BENCH_DIR / "make_traces.py"),
        "--sizes",
        ",".join(map(str, sizes)),
        "--cache-dir",
        str(cache_dir),
    ]
    if source:
        cmd += ["--source", source]
    subprocess.run(cmd, check=True, cwd=REPO)
    traces = {}
    for size in sizes:
        markers = list(cache_dir.glob(f"*.{size}MB.json.marker"))
        # Other benchmarks (rules_shapes_bench.py) keep their own replicated traces in the cache.
        stem = Path(source).name.split(".")[0] if source else "nccl_data"
        markers = [m for m in markers if m.name.startswith(stem + ".")]
        if len(markers) != 1:
            raise SystemExit(f"cannot find the trace for {size} MB in {cache_dir}")
        marker = json.loads(markers[0].read_text())
        path = markers[0].with_name(markers[0].name[: -len(".marker")])
        traces[size] = {"path": path, "marker": marker}
    return traces


def hta_dir(trace: Path, cache_dir: Path, size: int) -> Path:
    """A directory holding only this trace (HTA loads every trace file in trace_dir)."""
    d = cache_dir / "hta" / f"{size}MB"
    d.mkdir(parents=True, exist_ok=True)
    for old in d.iterdir():
        if old.name != trace.name:
            old.unlink()
    link = d / trace.name
    if link.exists() and link.samefile(trace):
        return d
    link.unlink(missing_ok=True)
    try:
        os.link(trace, link)
    except OSError:
        link.symlink_to(trace)
    return d


def warm(path: Path) -> None:
    with path.open("rb", buffering=0) as f:
        while f.read(16 << 20):
            pass


# --------------------------------------------------------------------------- report


def _median(runs: list[dict], key: str):
    vals = [r[key] for r in runs if r.get("ok") and key in r]
    return statistics.median(vals) if vals else None


def summarize(size: int, json_bytes: int, runs: dict[str, list[dict]], skipped: dict[str, str]) -> dict:
    s: dict = {"size_mb": size, "json_bytes": json_bytes}
    for tool in TOOLS:
        rs = runs.get(tool, [])
        s[tool] = {
            "n": sum(1 for r in rs if r.get("ok")),
            "failed": sum(1 for r in rs if not r.get("ok")),
            "time_s": _median(rs, "time_s"),
            "wall_s": _median(rs, "wall_s"),
            "peak_rss_bytes": _median(rs, "peak_rss_bytes"),
            "skipped": skipped.get(tool),
        }
        errs = [r.get("error") for r in rs if not r.get("ok")]
        if errs:
            s[tool]["error"] = errs[-1]
    o, h, t, tpy = s["orjson"]["time_s"], s["hta"]["time_s"], s["ta"]["time_s"], s["ta_py"]["time_s"]
    # The targets are checked on "ta", the default install (native decoder where it is built).
    s["ratio_ta_orjson"] = t / o if t and o else None
    s["ratio_hta_ta"] = h / t if h and t else None
    s["ratio_ta_py_ta"] = tpy / t if tpy and t else None  # native speed-up
    tp = s["ta"]["peak_rss_bytes"]
    s["ratio_ta_peak_json"] = tp / json_bytes if tp else None
    s["ta_s_per_100mb"] = t / (json_bytes / (100 * MB)) if t else None
    s["ta_py_s_per_100mb"] = tpy / (json_bytes / (100 * MB)) if tpy else None
    s["orjson_s_per_100mb"] = o / (json_bytes / (100 * MB)) if o else None
    return s


def linear_fit(summary: list[dict], tool: str) -> dict | None:
    """Least-squares t = a + b * size over the measured sizes (size in units of 100 MB).

    a is the fixed cost (interpreter start-up, imports, the report), b the seconds per 100 MB;
    "time grows linearly" holds when the residuals are small at every size. Ordinary least
    squares: the largest size weighs most on b, so the relative residual at the small sizes is
    the telling figure. None with fewer than two sizes.
    """
    pts = [(s["json_bytes"] / (100 * MB), s[tool]["time_s"], s["size_mb"]) for s in summary]
    pts = [pt for pt in pts if pt[1] is not None]
    if len({x for x, _, _ in pts}) < 2:
        return None
    b, a = statistics.linear_regression([x for x, _, _ in pts], [y for _, y, _ in pts])
    rel = [(abs(y - (a + b * x)) / y if y > 0 else float("inf"), size) for x, y, size in pts]
    worst, at = max(rel)
    return {
        "a_s": a,
        "b_s_per_100mb": b,
        "sizes_mb": [size for _, _, size in pts],
        "max_rel_residual": worst,
        "max_rel_residual_at_mb": at,
    }


# What the fixed term a of each fit stands for.
FIT_FIXED = {
    "ta": "fixed: start-up, imports",
    "ta_py": "fixed: start-up, imports",
    "orjson": "fixed: the probe times read + loads only, no start-up",
}


def _fit_line(fit: dict | None, tool: str) -> str:
    name = TOOL_LABEL[tool]
    if fit is None:
        return f"- fit, {name}: needs figures at two sizes or more"
    if len(fit["sizes_mb"]) == 2:
        residual = "no residual (two sizes: the line passes through both; measure three to test linearity)"
    else:
        residual = (
            f"largest relative residual {fit['max_rel_residual'] * 100:.1f}% (at {fit['max_rel_residual_at_mb']} MB)"
        )
    return (
        f"- fit, {name}: t = a + b × size: a = {fit['a_s']:.3f} s ({FIT_FIXED[tool]}), "
        f"b = {fit['b_s_per_100mb']:.3f} s per 100 MB; {residual}"
    )


def _f(v, fmt="{:.2f}", none="–"):
    return none if v is None else fmt.format(v)


def _native_text(info: dict) -> str:
    n = info.get("native_decoder")
    if n is None:
        return "unknown (the probe could not import traceadvisor)"
    if not n and info.get("native_disabled_by_env"):
        return "no (TRACEADVISOR_NATIVE=0 in the environment)"
    return "yes" if n else "no"


def _check(v, target, le: bool):
    if v is None:
        return "–"
    ok = v <= target if le else v >= target
    return f"{v:.2f} {'✓' if ok else '✗'}"


def _cell(s: dict, tool: str, fmt="{:.3f}") -> str:
    d = s[tool]
    if d["time_s"] is not None:
        return fmt.format(d["time_s"])
    if d["skipped"]:
        return f"skipped: {d['skipped']}"
    if d["failed"]:
        return f"FAILED ({d.get('error', '?')})"
    return "–"


def render(summary: list[dict], info: dict, cfg: dict) -> str:
    L = []
    L.append("## traceadvisor benchmark")
    L.append("")
    pk = info.get("packages", {})
    L.append(
        f"Machine: {info.get('cpu', '?')}, nproc {info.get('nproc')}"
        f" (usable {info.get('nproc_usable', '?')}), RAM {info.get('ram_total_gb', '?')} GB"
        f" ({info.get('ram_available_gb', '?')} GB available), Linux {info.get('kernel')}, "
        f"Python {info.get('python', '?')}, native decoder: {_native_text(info)}"
    )
    L.append(
        "Packages: "
        + ", ".join(f"{k} {v}" for k, v in pk.items() if v is not None)
        + f". git rev: {info.get('git_rev') or 'none'}. Date: {info.get('date')}"
    )
    L.append(
        f"Load average (1/5/15 min) at start {info.get('loadavg_start')}, at end {info.get('loadavg_end')}"
        f" (other processes on the machine add noise); total {cfg.get('total_seconds')} s"
    )
    L.append(
        f"Runs: median of {cfg['repeat']}, interleaved; traceadvisor command: `{cfg['ta_cmd']}`; "
        "ta py: the same command with `TRACEADVISOR_NATIVE=0` (pure-Python path)"
    )
    L.append("")
    L.append(
        "| size | JSON MB | orjson s | HTA s | traceadvisor s | ta py s | native speed-up "
        "| ta/orjson (≤ 0.6) | HTA/ta (≥ 10) | ta peak MB | peak/JSON (≤ 2.0) |"
    )
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in summary:
        ta_peak = s["ta"]["peak_rss_bytes"]
        L.append(
            f"| {s['size_mb']} MB | {s['json_bytes'] / MB:.1f} | {_cell(s, 'orjson')} | {_cell(s, 'hta')} "
            f"| {_cell(s, 'ta')} | {_cell(s, 'ta_py')} | {_f(s['ratio_ta_py_ta'], '{:.2f}×')} "
            f"| {_check(s['ratio_ta_orjson'], TARGET_TA_ORJSON, True)} "
            f"| {_check(s['ratio_hta_ta'], TARGET_HTA_TA, False)} "
            f"| {_f(ta_peak / MB if ta_peak else None, '{:.0f}')} "
            f"| {_check(s['ratio_ta_peak_json'], TARGET_PEAK_RATIO, True)} |"
        )
    L.append("")
    lin = [s for s in summary if s["ta_s_per_100mb"] is not None]
    if lin:
        vals = [s["ta_s_per_100mb"] for s in lin]
        spread = max(vals) / min(vals) if min(vals) > 0 else float("nan")
        L.append(
            "Linearity, traceadvisor s per 100 MB: "
            + ", ".join(f"{s['size_mb']} MB → {s['ta_s_per_100mb']:.3f}" for s in lin)
            + f" (max/min {spread:.2f}); orjson s per 100 MB: "
            + ", ".join(f"{s['size_mb']} MB → {_f(s['orjson_s_per_100mb'], '{:.3f}')}" for s in lin)
        )
        base = cfg.get("startup", {}).get("python -m traceadvisor --help")
        if base:
            b = base["wall_s"]
            L.append(
                f"Same without the CLI start-up (`python -m traceadvisor --help`: {b:.3f} s, "
                f"{base['peak_rss_bytes'] / MB:.0f} MB): "
                + ", ".join(
                    f"{s['size_mb']} MB → {(s['ta']['time_s'] - b) / (s['json_bytes'] / (100 * MB)):.3f}" for s in lin
                )
            )
    else:
        L.append("Linearity: no traceadvisor figures.")
    L.append("")
    fits = cfg.get("fits") or {}
    fit_tools = [t for t in ("ta", "ta_py", "orjson") if any(s[t]["time_s"] is not None for s in summary)]
    if fit_tools:
        L.append("Least-squares fit of time against size over the measured sizes:")
        L.append("")
        L.extend(_fit_line(fits.get(t), t) for t in fit_tools)
        L.append("")
    L.append("Details (medians; peak = peak RSS of the process, interpreter and imports included):")
    L.append("")
    L.append(
        "| size | copies | events | orjson peak MB | HTA peak MB | HTA peak/JSON | HTA process s "
        "| HTA import s | ta process s | ta user+sys s | ta py peak MB | ta py user+sys s |"
    )
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in summary:
        op, hp, pyp = s["orjson"]["peak_rss_bytes"], s["hta"]["peak_rss_bytes"], s["ta_py"]["peak_rss_bytes"]
        L.append(
            f"| {s['size_mb']} MB | {s.get('copies', '?')} | {s.get('events') or '?'} "
            f"| {_f(op / MB if op else None, '{:.0f}')} | {_f(hp / MB if hp else None, '{:.0f}')} "
            f"| {_f(hp / s['json_bytes'] if hp else None)} | {_f(s['hta']['wall_s'])} "
            f"| {_f(s.get('hta_import_s'))} | {_f(s['ta']['wall_s'], '{:.3f}')} "
            f"| {_f(s.get('ta_cpu_s'), '{:.3f}')} | {_f(pyp / MB if pyp else None, '{:.0f}')} "
            f"| {_f(s.get('ta_py_cpu_s'), '{:.3f}')} |"
        )
    notes = cfg.get("notes") or []
    if notes:
        L.append("")
        L.extend(f"- {n}" for n in notes)
    L.append("")
    L.append(
        "orjson s = read + orjson.loads inside a fresh process; HTA s = TraceAnalysis(trace_dir=...) "
        "inside a fresh process (imports excluded); traceadvisor s = wall time of the whole "
        "`python -m traceadvisor analyze` process (report written to a temporary file); ta py s = the same "
        "with TRACEADVISOR_NATIVE=0, native speed-up = ta py s / traceadvisor s. "
        "Peak RSS via os.wait4 rusage of each child, or the summed RSS of its process tree if larger. "
        "MB = 10^6 bytes. Warm page cache."
    )
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------- replay overhead
REPLAY_SIZES = (100, 1000)  # issue 12: what the replay adds to analyze at 100 MB and 1 GB


def replay_overheads(py: str, sizes: list[int], traces: dict, repeat: int, timeout: float) -> dict[int, dict]:
    """bench/replay_overhead.py on each of the 100 MB and 1 GB traces benchmarked: analyze with and
    without the replay, interleaved in one process (a separate process per size)."""
    out: dict[int, dict] = {}
    for s in (s for s in sizes if s in REPLAY_SIZES):
        with tempfile.TemporaryDirectory(prefix="ta-replay-") as tmp:
            figures = Path(tmp) / "replay.json"
            cmd = [py, str(REPO / "bench" / "replay_overhead.py"), "--trace", str(traces[s]["path"])]
            cmd += ["--repeat", str(max(1, repeat)), "--max-overhead", "inf", "--json", str(figures)]
            r = measure(cmd, timeout)
            if r["rc"] != 0 or not figures.is_file():
                out[s] = {"error": r.get("error") or f"rc={r['rc']}: {r.get('stderr_tail', '')[-300:]}"}
            else:
                out[s] = {**json.loads(figures.read_text()), "peak_rss_bytes": r["peak_rss_bytes"]}
        print(f"[bench] replay overhead {s} MB: {out[s].get('overhead_pct', out[s].get('error'))}", flush=True)
    return out


def render_replay(replay: dict[int, dict]) -> str:
    """The replay section of the table ('' when not measured)."""
    if not replay:
        return ""
    L = ["", "### What the replay adds to analyze (issue 12: at most +25%)", ""]
    L.append(
        "| Trace | GPU records | analyze without s | analyze with s | overhead | replays in analyze (s) "
        "| unchanged replay alone s | peak MB |"
    )
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for s, f in sorted(replay.items()):
        if "error" in f:
            L.append(f"| {s} MB | failed: {f['error']} |||||||")
            continue
        L.append(
            f"| {s} MB | {f['gpu_records']} | {f['median_without_s']:.3f} | {f['median_with_s']:.3f} "
            f"| {f['overhead_pct']:+.1f}% | {f['replays_in_analyze']} ({f['replays_in_analyze_s']:.3f}) "
            f"| {f['replay_alone_s']:.3f} | {f['peak_rss_bytes'] / MB:.0f} |"
        )
    L.append("")
    L.append(
        "bench/replay_overhead.py in one process per size: `pipeline.analyze` with every replay (the unchanged "
        "trace's replay_error_pct, the unprofiled step, the rules' what-if savings) and with the replay's stages "
        "replaced by the measured times, interleaved, medians of the repeats; unchanged replay alone = one "
        "replay of the loaded trace."
    )
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------- stand-in


def standin_analyze(argv: list[str]) -> int:
    """Stand-in for `traceadvisor analyze` while the real CLI is being written.

    Same contract: analyze TRACE --format json --output FILE, exit 0, JSON report written.
    Does read + orjson.loads + one pass over the events.
    """
    ap = argparse.ArgumentParser(prog="run.py _standin")
    ap.add_argument("cmd", choices=["analyze"])
    ap.add_argument("trace")
    ap.add_argument("--format", default="json")
    ap.add_argument("--output", default="-")
    a = ap.parse_args(argv)
    import orjson  # only in the stand-in child process

    doc = orjson.loads(Path(a.trace).read_bytes())
    cats: dict = {}
    gpu_busy = 0.0
    for e in doc["traceEvents"]:
        c = e.get("cat")
        cats[c] = cats.get(c, 0) + 1
        if c == "kernel":
            gpu_busy += e.get("dur", 0)
    report = {
        "tool": "standin",
        "events": len(doc["traceEvents"]),
        "by_cat": {str(k): v for k, v in cats.items()},
        "kernel_us": gpu_busy,
    }
    data = orjson.dumps(report)
    if a.output == "-":
        sys.stdout.buffer.write(data)
    else:
        Path(a.output).write_bytes(data)
    sys.stdout.flush()
    os._exit(0)


# --------------------------------------------------------------------------- main


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def default_python() -> str:
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _sigterm)
    if argv[:1] == ["_standin"]:
        return standin_analyze(argv[1:])
    ap = argparse.ArgumentParser(
        description="Benchmark orjson vs HTA vs traceadvisor (native and pure Python) on 10 MB / 100 MB / 1 GB traces.",
        epilog="Placeholders in --ta-cmd: {python} {trace} {output} (shell-quoted).",
    )
    ap.add_argument("--sizes", default="10,100,1000", help="trace sizes in MB (10**6 bytes), comma separated")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool and size; the median is reported")
    ap.add_argument("--no-hta", action="store_true", help="do not run HTA")
    ap.add_argument("--no-orjson", action="store_true", help="do not run the orjson baseline")
    ap.add_argument("--no-ta", action="store_true", help="do not run traceadvisor")
    ap.add_argument(
        "--no-ta-py",
        action="store_true",
        help="do not run traceadvisor's pure-Python path (the same command with TRACEADVISOR_NATIVE=0)",
    )
    ap.add_argument("--markdown", type=Path, help="also write the table to this file")
    ap.add_argument("--json", type=Path, help="write raw figures (every run) to this file")
    ap.add_argument(
        "--python", default=default_python(), help="interpreter for all measured commands (default: .venv/bin/python)"
    )
    ap.add_argument(
        "--ta-cmd", default=DEFAULT_TA_CMD, help=f"traceadvisor command template (default: {DEFAULT_TA_CMD!r})"
    )
    ap.add_argument(
        "--ta-standin",
        action="store_true",
        help="use the built-in stand-in (read + orjson.loads + one pass) as the traceadvisor command",
    )
    ap.add_argument(
        "--ta-output",
        default=None,
        help="{output} for the traceadvisor command (default: a fresh temporary folder's report.json, "
        "checked to be JSON, then deleted). Not /dev/null: the CLI's atomic write renames a temporary "
        "file over it and replaces the device with a regular file",
    )
    ap.add_argument(
        "--no-replay",
        action="store_true",
        help="do not measure what the replay adds to analyze (bench/replay_overhead.py on the 100 MB and 1 GB traces)",
    )
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    ap.add_argument("--source", help="source trace for make_traces.py (default: its own default)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds before a measured process is killed")
    ap.add_argument(
        "--hta-max-mb",
        type=float,
        default=500,
        help="skip HTA on traces larger than this many MB (default 500: HTA 0.5.0 takes 3-6 min and 5 GB "
        "per run on the 1 GB trace on a 2-core box); 0 = no limit",
    )
    ap.add_argument(
        "--orjson-gc-off",
        action="store_true",
        help="gc.disable() before read+loads in the orjson probe (a stricter baseline: the cyclic GC "
        "more than doubles orjson.loads time on the 1 GB trace)",
    )
    ap.add_argument(
        "--hta-max-seconds",
        type=float,
        default=300,
        help="skip HTA on a size when its time predicted from a smaller size exceeds this (default 300)",
    )
    ap.add_argument(
        "--hta-mem-fraction",
        type=float,
        default=0.7,
        help="skip HTA on a size when its peak RSS predicted from a smaller size exceeds this fraction of MemAvailable",
    )
    args = ap.parse_args(argv)
    if args.ta_output and Path(args.ta_output).exists() and not Path(args.ta_output).is_file():
        ap.error(
            f"--ta-output {args.ta_output} exists and is not a regular file; traceadvisor's atomic write "
            "would rename a file over it (this is how /dev/null got replaced once)"
        )
    if args.ta_standin:
        args.ta_cmd = STANDIN_TA_CMD

    sizes = sorted(int(x) for x in args.sizes.split(",") if x.strip())
    py = args.python
    info = machine_info(py)
    cfg = {
        "sizes": sizes,
        "repeat": args.repeat,
        "ta_cmd": args.ta_cmd.format(python="python", trace="FILE", output=args.ta_output or "TMP/report.json"),
        "python": py,
        "orjson_gc_off": args.orjson_gc_off,
        "notes": ["orjson probe runs with gc disabled (--orjson-gc-off)."] if args.orjson_gc_off else [],
    }
    print(
        f"[bench] python {info.get('python')} ({py}); {info.get('cpu')}; "
        f"nproc {info.get('nproc')}; RAM {info.get('ram_total_gb')} GB; native decoder: {_native_text(info)}",
        flush=True,
    )

    traces = ensure_traces(py, sizes, args.cache_dir, args.source)

    tools = [t for t in TOOLS if not getattr(args, f"no_{t}")]
    skipped: dict[int, dict[str, str]] = {s: {} for s in sizes}
    if "hta" in tools and not run_quiet([py, "-c", "import hta; print('ok')"], cwd=REPO):
        tools.remove("hta")
        for s in sizes:
            skipped[s]["hta"] = "HTA not installed"
        cfg["notes"].append("HTA not installed (pip install holistictraceanalysis==0.5.0); HTA column empty.")
    if args.no_hta:
        cfg["notes"].append("HTA not run (--no-hta).")
    if args.no_ta_py:
        cfg["notes"].append("traceadvisor's pure-Python path not run (--no-ta-py).")
    elif "ta_py" in tools and args.ta_standin:
        tools.remove("ta_py")
        for s in sizes:
            skipped[s]["ta_py"] = "stand-in"
        cfg["notes"].append("ta py not run: the stand-in (--ta-standin) has no native decoder to turn off.")
    elif "ta_py" in tools and info.get("native_decoder") is False:
        cfg["notes"].append(
            "The native decoder is not available to the measured interpreter: traceadvisor and ta py both "
            "read with the pure-Python path."
        )
    if "hta" in tools and args.hta_max_mb:
        for s in sizes:
            if traces[s]["marker"]["bytes"] > args.hta_max_mb * MB:
                skipped[s]["hta"] = f"> {args.hta_max_mb:g} MB (--hta-max-mb 0 runs it)"

    for s in sizes:
        warm(traces[s]["path"])

    # start-up baselines, to read the small sizes: bare interpreter, and the CLI doing nothing
    startup_cmds = {"python -c pass": [py, "-c", "pass"]}
    if "ta" in tools and args.ta_cmd == DEFAULT_TA_CMD:
        startup_cmds["python -m traceadvisor --help"] = [py, "-m", "traceadvisor", "--help"]
    startup = {}
    for label, cmd in startup_cmds.items():
        rs = [measure(cmd, 120) for _ in range(max(1, args.repeat))]
        if all(r["rc"] == 0 for r in rs):
            startup[label] = {
                "wall_s": statistics.median(r["wall_s"] for r in rs),
                "peak_rss_bytes": statistics.median(r["peak_rss_bytes"] for r in rs),
            }
    cfg["startup"] = startup
    if startup:
        print(
            "[bench] start-up: "
            + ", ".join(f"{k} {v['wall_s']:.3f} s / {v['peak_rss_bytes'] / MB:.0f} MB" for k, v in startup.items()),
            flush=True,
        )

    runs: dict[int, dict[str, list[dict]]] = {s: {t: [] for t in TOOLS} for s in sizes}
    failed: dict[int, set] = {s: set() for s in sizes}
    t_start = time.perf_counter()
    for rep in range(args.repeat):
        order = tools[rep % len(tools) :] + tools[: rep % len(tools)] if tools else []
        for s in sizes:
            path = traces[s]["path"]
            nbytes = traces[s]["marker"]["bytes"]
            for tool in order:
                if tool in skipped[s] or tool in failed[s]:
                    continue
                if tool == "hta" and rep == 0:
                    reason = _predict_hta_skip(s, nbytes, runs, traces, args)
                    if reason:
                        skipped[s]["hta"] = reason
                        print(f"[bench] {s} MB HTA skipped: {reason}", flush=True)
                        continue
                if tool == "orjson":
                    probe = ORJSON_PROBE.replace("import orjson", "import orjson, gc; gc.disable()")
                    cmd = [py, "-c", probe if args.orjson_gc_off else ORJSON_PROBE, str(path)]
                elif tool == "hta":
                    cmd = [py, "-c", HTA_PROBE, str(hta_dir(path, args.cache_dir, s))]
                else:  # ta, ta_py: the same command, ta_py with TOOL_ENV
                    outdir = Path(tempfile.mkdtemp(prefix="ta-bench-"))
                    output = args.ta_output or str(outdir / "report.json")
                    cmd = shlex.split(
                        args.ta_cmd.format(
                            python=shlex.quote(py), trace=shlex.quote(str(path)), output=shlex.quote(output)
                        )
                    )
                r = measure(cmd, args.timeout, env=TOOL_ENV.get(tool))
                r.update(rep=rep, size_mb=s, tool=tool)
                r["ok"] = r["rc"] == 0 and not r["timed_out"] and (tool in TA_TOOLS or "inner_s" in r)
                r["time_s"] = r["wall_s"] if tool in TA_TOOLS else r.get("inner_s")
                if not r["ok"]:
                    r["error"] = "timeout" if r["timed_out"] else f"rc={r['rc']}"
                if tool in TA_TOOLS:
                    if r["ok"] and not args.ta_output:
                        r["report_bytes"], r["report_error"] = _check_report(Path(output))
                        if r["report_error"]:
                            r["ok"] = False
                            r["error"] = r["report_error"]
                    shutil.rmtree(outdir, ignore_errors=True)
                if not r["ok"]:
                    failed[s].add(tool)
                runs[s][tool].append(r)
                print(
                    f"[bench] rep {rep + 1}/{args.repeat} {s:>5} MB {TOOL_LABEL[tool]:<26} "
                    + (
                        f"{r['time_s']:8.3f} s  peak {r['peak_rss_bytes'] / MB:8.0f} MB  (process {r['wall_s']:.2f} s)"
                        if r["ok"]
                        else f"FAILED {r['error']}: {r.get('stderr_tail', '')[-500:]}"
                    ),
                    flush=True,
                )
    total = time.perf_counter() - t_start

    summary = []
    for s in sizes:
        sm = summarize(s, traces[s]["marker"]["bytes"], runs[s], skipped[s])
        sm["copies"] = traces[s]["marker"].get("copies")
        ev = [r.get("events") for r in runs[s]["orjson"] if r.get("events")]
        sm["events"] = ev[0] if ev else None
        sm["hta_import_s"] = _median(runs[s]["hta"], "import_s")
        for tool in TA_TOOLS:
            cpu = [r["user_s"] + r["sys_s"] for r in runs[s][tool] if r.get("ok")]
            sm[f"{tool}_cpu_s"] = statistics.median(cpu) if cpu else None
        summary.append(sm)
    cfg["total_seconds"] = round(total, 1)
    cfg["fits"] = {t: linear_fit(summary, t) for t in ("ta", "ta_py", "orjson")}
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]

    replay = {} if args.no_replay else replay_overheads(py, sizes, traces, args.repeat, args.timeout)
    table = render(summary, info, cfg) + render_replay(replay)
    print()
    print(table)
    if args.markdown:
        args.markdown.write_text(table)
    if args.json:
        raw = {
            "machine": info,
            "config": cfg,
            "traces": {s: {"path": str(traces[s]["path"]), **traces[s]["marker"]} for s in sizes},
            "summary": summary,
            "replay_overhead": replay,
            "runs": [r for s in sizes for t in TOOLS for r in runs[s][t]],
        }
        args.json.write_text(json.dumps(raw, indent=1, default=str) + "\n")
    ta_failed = any(r for s in sizes for t in TA_TOOLS for r in runs[s][t] if not r.get("ok"))
    return 1 if ta_failed else 0


def _predict_hta_skip(size, nbytes, runs, traces, args) -> str | None:
    """Skip HTA on a size when a smaller size predicts too much time or memory."""
    smaller = [s for s in runs if s < size and any(r.get("ok") for r in runs[s]["hta"])]
    if not smaller:
        return None
    ref = max(smaller)
    ok = [r for r in runs[ref]["hta"] if r.get("ok")]
    ref_bytes = traces[ref]["marker"]["bytes"]
    scale = nbytes / ref_bytes
    t_pred = statistics.median(r["wall_s"] for r in ok) * scale
    peak_pred = max(r["peak_rss_bytes"] for r in ok) * scale
    avail = mem_available()
    if avail and peak_pred > args.hta_mem_fraction * avail:
        return f"predicted peak {peak_pred / 1e9:.0f} GB > {args.hta_mem_fraction:g} × {avail / 1e9:.0f} GB available"
    if t_pred > args.hta_max_seconds:
        return f"predicted {t_pred:.0f} s per run > {args.hta_max_seconds:g} s"
    return None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("[bench] interrupted", file=sys.stderr)
        sys.exit(130)
