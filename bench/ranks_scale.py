"""Scale-out of the multi-rank analysis (issue 13): cached rank summaries and the map step's executors.

Two measurements, one table each:

1. **1,000 synthetic ranks from cached summaries.** The summaries of a few real traces
   (the ranks of the largest run in ``fixtures/traces/multirank/``, else HTA's sampled pair and
   ``nccl_data``) are
   built once, then written as N summary files, one per rank, each beside its own "trace" (a hard
   link to the real trace, so the key (path, size, mtime) is the link's own and a cache miss
   would rebuild a real summary). Each rank's copy is varied: its rank, host, a clock offset of up
   to ±2 ms, and a jitter of 0-5 µs on each collective's start and end and on each step's length.
   A fresh process then reads them all with ``summaries(..., use_cache=True)`` (and calls
   ``--combine module:function`` on the list when given: the lead's combine step) and reports its
   wall time and peak RSS (``ru_maxrss``).
2. **64 ranks of ~50 MB raw traces.** ``nccl_data`` (9.8 MB of JSON: 3 steps, 48 collectives)
   repeated with shifted times, renumbered steps, correlation and External ids until ~50 MB, one
   uncompressed file per rank under /tmp (``distributedInfo.rank`` set). The summaries are built
   from scratch (cache files removed before each run) with ``jobs=1``, ``jobs=2`` and a Dask
   ``LocalCluster`` of 2 single-threaded worker processes, in one run, and must be identical.

``--build``: ``full`` (the default) is the real builder, ``pipeline.rank_summary``; ``light`` the
small one the scale-out tests use too (``tests/small_rank_summary.py``: collectives, steps, a
busy/idle breakdown and kernel classes from ``load_file``, no report); or any ``module:function``.

    .venv/bin/python bench/ranks_scale.py            # 1,000 + 64 x 50 MB (about 3 minutes here)
    .venv/bin/python bench/ranks_scale.py --quick    # 100 + 8 x 10 MB
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # small_rank_summary: the light builder, shared with the tests

from small_rank_summary import build_small  # noqa: E402

from traceadvisor.ranks.executor import summaries  # noqa: E402
from traceadvisor.ranks.summary import RankSummary, TraceKey  # noqa: E402
from traceadvisor.ranks.summary_io import (  # noqa: E402
    beside_path,
    decode_summary,
    encode_summary,
    trace_key,
    write_summary,
)

HTA = REPO / "fixtures" / "external" / "hta"
MULTIRANK = REPO / "fixtures" / "traces" / "multirank"
INFLATE_SOURCE = HTA / "nccl_data.json.gz"
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def build_full(path: str) -> RankSummary:
    """The real builder (``pipeline.rank_summary``): every table of the contract and the trace's
    single-rank report (most of a summary's bytes and of its time)."""
    from traceadvisor.pipeline import rank_summary

    return rank_summary(path)


BUILDERS: dict[str, Callable[[str], RankSummary]] = {"full": build_full, "light": build_small}


def _builder(spec: str) -> Callable[[str], RankSummary]:
    return BUILDERS[spec] if spec in BUILDERS else _function(spec)


def _function(spec: str) -> Callable[..., Any]:
    module, _, name = spec.partition(":")
    if not name:
        raise SystemExit(f"expected module:function, not {spec!r}")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return fn


# -- 1. synthetic ranks from cached summaries ------------------------------------------------------


def _sources() -> list[Path]:
    """The ranks of one real multi-rank run (the ``multirank`` fixture run with the most ranks: the
    synthetic rank r copies its rank r mod n, so collectives still pair across ranks), else HTA's."""
    runs = [d for d in sorted(MULTIRANK.iterdir()) if d.is_dir()] if MULTIRANK.is_dir() else []
    traces = [[p for p in sorted(d.glob("*.json*")) if not p.name.endswith(".tasummary")] for d in runs]
    best = max(traces, key=len, default=[])
    if best:
        return sorted(best, key=lambda p: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", p.name)])
    return [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz", INFLATE_SOURCE]


def _jittered(base: RankSummary, rank: int, world: int, key: TraceKey, rng: np.random.Generator) -> RankSummary:
    """``base`` as rank ``rank``: a clock offset of up to ±2 ms on every time, 0-5 µs of jitter on
    each collective's start and end and on each step's length (its idle time takes it)."""
    offset = int(rng.integers(-2_000_000, 2_000_001))
    tables = {name: df.copy() for name, df in base.tables.items()}
    c = tables["collectives"]
    j_start = rng.integers(0, 5_001, len(c))
    c["start_ns"] += offset + j_start
    c["end_ns"] += offset + j_start + rng.integers(0, 5_001, len(c))
    s = tables["steps"]
    j_step = rng.integers(0, 5_001, len(s))
    s["start_ns"] += offset
    s["cpu_end_ns"] += offset
    s["end_ns"] += offset + j_step
    b = tables["breakdown"]
    b["step_ns"] += j_step
    b["idle_ns"] += j_step
    e = tables["comm_exposed"]
    e["start_ns"] += offset
    e["end_ns"] += offset
    return replace(
        base,
        key=key,
        rank=rank,
        rank_source="file name",
        world_size=world,
        host=f"node{rank // 8:04d}",
        tables=tables,
    )


def make_synthetic(folder: Path, n: int, build: Callable[[str], RankSummary]) -> dict[str, Any]:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    sources = []
    for i, src in enumerate(_sources()):  # source-i: no rank in the name, the summary's rank is set
        dst = folder / f"source-{i}{''.join(src.suffixes)}"
        shutil.copyfile(src, dst)
        sources.append((dst, build(str(dst))))
    rng = np.random.default_rng(13)
    t0 = time.perf_counter()
    total = 0
    for rank in range(n):
        src, base = sources[rank % len(sources)]
        link = folder / f"rank-{rank:05d}{''.join(src.suffixes)}"
        os.link(src, link)
        summary = _jittered(base, rank, n, trace_key(link), rng)
        write_summary(summary, beside_path(link))
        total += beside_path(link).stat().st_size
    return {
        "write_s": time.perf_counter() - t0,
        "mean_kb": total / n / 1024,
        "sources": len(sources),
        "from": str(_sources()[0].parent.relative_to(REPO)),
    }


def read_phase(folder: Path, n: int, combine: str | None, build: str) -> None:
    """In a fresh process: read every rank's cached summary, then combine (prints one JSON line)."""
    paths = sorted(str(p) for p in folder.glob("rank-*") if not p.name.endswith(".tasummary"))
    assert len(paths) == n, (len(paths), n)
    rss_before = _rss_mb()
    t0 = time.perf_counter()
    out = summaries(paths, _builder(build), jobs=1, use_cache=True)
    t1 = time.perf_counter()
    assert out.cached == n and not out.errors, (out.cached, out.errors[:3])
    assert [s.rank for s in out.summaries] == list(range(n))
    combine_s = None
    if combine:
        _function(combine)(out.summaries)
        combine_s = time.perf_counter() - t1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"read_s": t1 - t0, "combine_s": combine_s, "rss_before_mb": rss_before, "peak_rss_mb": peak}))


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- 2. raw traces: jobs=1 vs jobs=2 vs Dask -------------------------------------------------------


def _inflate(target_bytes: int) -> tuple[dict[str, Any], int]:
    """``nccl_data`` repeated until about ``target_bytes`` of JSON: each copy's times shifted past
    the previous copy's end, its step numbers, correlation, External and flow ids made unique."""
    with gzip.open(INFLATE_SOURCE, "rb") as fh:
        raw = fh.read()
    doc = json.loads(raw)
    events = doc["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M"]
    starts = [e["ts"] for e in timed if "ts" in e]
    span = math.ceil(max(e["ts"] + e.get("dur", 0) for e in timed if "ts" in e) - min(starts)) + 1000
    compact = len(json.dumps(doc, separators=(",", ":")))  # as written below: no spaces
    copies = max(1, round(target_bytes / compact))
    steps = [int(m.group(1)) for e in timed if (m := _STEP.match(str(e.get("name", ""))))]
    step_span = (max(steps) - min(steps) + 1) if steps else 0
    out = list(meta)
    for r in range(copies):
        for e in timed:
            e2 = dict(e)
            if "ts" in e2:
                e2["ts"] = e["ts"] + r * span
            if "id" in e2 and isinstance(e2["id"], int):
                e2["id"] = e["id"] + r * 10_000_000
            if (m := _STEP.match(str(e.get("name", "")))) is not None:
                e2["name"] = f"ProfilerStep#{int(m.group(1)) + r * step_span}"
            args = e.get("args")
            if isinstance(args, dict):
                a2 = dict(args)
                for k in ("correlation", "External id"):
                    if isinstance(a2.get(k), int) and a2[k] > 0:
                        a2[k] = a2[k] + r * 10_000_000
                e2["args"] = a2
            out.append(e2)
    doc["traceEvents"] = out
    return doc, copies


def make_raw(folder: Path, n: int, mb: float) -> dict[str, float]:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    doc, copies = _inflate(int(mb * 1e6))
    size = 0
    for rank in range(n):
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": n}
        data = json.dumps(doc, separators=(",", ":")).encode()
        (folder / f"rank-{rank:03d}.json").write_bytes(data)
        size += len(data)
    return {"copies": copies, "mean_mb": size / n / 1e6}


def _modes(jobs: int, dask: bool) -> list[tuple[str, dict[str, Any]]]:
    modes: list[tuple[str, dict[str, Any]]] = [("jobs=1", {"jobs": 1}), (f"jobs={jobs}", {"jobs": jobs})]
    if dask:
        modes.append((f"dask LocalCluster ({jobs} workers)", {"jobs": jobs, "executor": "dask"}))
    return modes


def _machine_jiffies() -> tuple[int, int]:
    """(busy, total) CPU jiffies of the whole machine so far (/proc/stat): what every process used,
    ours (pool workers are children of the forkserver, not of this process) and the neighbours'."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - idle, total


def _timed(
    paths: list[str], build: Callable[[str], RankSummary], kw: dict[str, Any]
) -> tuple[float, float, list[bytes]]:
    for p in paths:
        beside_path(p).unlink(missing_ok=True)
    (b0, j0), t0 = _machine_jiffies(), time.perf_counter()
    out = summaries(paths, build, use_cache=True, **kw)
    seconds = time.perf_counter() - t0
    b1, j1 = _machine_jiffies()
    busy = (b1 - b0) / max(1, j1 - j0)  # the machine's busy fraction (1.0: every core busy)
    assert out.cached == 0 and not out.errors, (kw, out.errors[:3])
    return seconds, busy, [encode_summary(s) for s in out.summaries]


def _show_difference(mode: str, reference: list[bytes], encoded: list[bytes]) -> None:
    """Print where the first differing summary differs (a rule cut off by its time limit on a loaded
    machine changes the report, for one)."""
    for i, (a, b) in enumerate(zip(reference, encoded, strict=True)):
        if a != b:
            x, y = decode_summary(a), decode_summary(b)
            where = _differences(x.report, y.report, "report")
            where += [f"tables.{n}" for n in x.tables if not x.tables[n].equals(y.tables.get(n))]
            print(f"{mode}: summary {i} differs from the first run's at {where[:5]}", file=sys.stderr)
            return


def _differences(x: Any, y: Any, path: str) -> list[str]:
    if isinstance(x, dict) and isinstance(y, dict):
        return [d for k in dict.fromkeys([*x, *y]) for d in _differences(x.get(k), y.get(k), f"{path}.{k}")]
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        return [d for i, (u, v) in enumerate(zip(x, y, strict=True)) for d in _differences(u, v, f"{path}[{i}]")]
    same = x == y or (isinstance(x, float) and isinstance(y, float) and x != x and y != y)
    return [] if same else [f"{path}: {str(x)[:60]!r} vs {str(y)[:60]!r}"]


def time_builds(
    folder: Path, build: Callable[[str], RankSummary], jobs: int, dask: bool, rounds: int
) -> list[dict[str, Any]]:
    """Each mode ``rounds`` times, interleaved (the machine is shared: a neighbour's load spreads
    over all modes), cache files removed before each run. Also each mode's fixed cost: the same
    call on ``jobs`` copies of a 67 KB trace (pool or cluster start, imports in the workers)."""
    paths = sorted(str(p) for p in folder.glob("rank-*.json"))
    tiny_dir = folder / "tiny"
    tiny_dir.mkdir(exist_ok=True)
    tiny = []
    for i in range(jobs):
        shutil.copyfile(HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz", tiny_dir / f"t{i}.json.gz")
        tiny.append(str(tiny_dir / f"t{i}.json.gz"))
    modes = _modes(jobs, dask)
    times: dict[str, list[float]] = {name: [] for name, _ in modes}
    cpu: dict[str, list[float]] = {name: [] for name, _ in modes}  # machine busy fraction
    load: dict[str, list[float]] = {name: [] for name, _ in modes}  # 1-min load average after
    startup: dict[str, float] = {}
    reference: list[bytes] | None = None
    identical = {name: True for name, _ in modes}
    for _ in range(rounds):
        for name, kw in modes:
            seconds, busy, encoded = _timed(paths, build, kw)
            times[name].append(seconds)
            cpu[name].append(busy)
            load[name].append(os.getloadavg()[0])
            reference = reference or encoded
            if encoded != reference:
                identical[name] = False
                _show_difference(name, reference, encoded)
    for name, kw in modes:
        startup[name] = _timed(tiny, build, kw)[0]
    base = min(times["jobs=1"])
    return [
        {
            "mode": name,
            "s": min(times[name]),
            "all": times[name],
            "startup": startup[name],
            "cpu": cpu[name][times[name].index(min(times[name]))],
            "load": max(load[name]),
            "speedup": base / min(times[name]),
            "identical": identical[name],
        }
        for name, _ in modes
    ]


def _load() -> str:
    one, five, _ = os.getloadavg()  # other sessions share this machine: their load is in the figures
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 synthetic ranks, 8 raw traces of ~10 MB")
    ap.add_argument("--ranks", type=int, help="synthetic ranks (default 1000; 100 with --quick)")
    ap.add_argument("--raw-ranks", type=int, help="raw traces (default 64; 8 with --quick)")
    ap.add_argument("--raw-mb", type=float, help="MB of JSON per raw trace (default 50; 10 with --quick)")
    ap.add_argument("--jobs", type=int, default=2, help="the pool's and the LocalCluster's workers (default 2)")
    ap.add_argument("--rounds", type=int, help="runs of each executor, interleaved (default 1)")
    ap.add_argument("--no-dask", action="store_true", help="leave out the Dask LocalCluster run")
    ap.add_argument("--combine", help="module:function called on the list of summaries read from the cache")
    ap.add_argument(
        "--build",
        default="full",
        help="full (default: pipeline.rank_summary), light (build_small: no report) or module:function",
    )
    ap.add_argument("--workdir", type=Path, help="where the traces go (default: a new folder under /tmp)")
    ap.add_argument("--keep", action="store_true", help="leave the work folder (GBs of traces) in place")
    ap.add_argument("--read-phase", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    n = a.ranks or (100 if a.quick else 1000)
    if a.read_phase is not None:
        read_phase(a.read_phase, n, a.combine, a.build)
        return
    # A folder of its own: two benches at once (other sessions share this machine) must not
    # remove each other's traces.
    a.workdir = a.workdir or Path(tempfile.mkdtemp(prefix="traceadvisor-ranks-scale-", dir="/tmp"))
    raw_n = a.raw_ranks or (8 if a.quick else 64)
    raw_mb = a.raw_mb or (10.0 if a.quick else 50.0)
    build = _builder(a.build)
    build_name = a.build if a.build in BUILDERS else f"{a.build} (--build)"
    dask = not a.no_dask
    if dask:
        try:
            import distributed  # noqa: F401
        except ImportError:
            print("dask.distributed is not installed (pip install '.[dask]'): the Dask run is left out")
            dask = False
    cpu = os.cpu_count()
    print(f"machine: {cpu} CPUs, Python {sys.version.split()[0]}, pandas {pd.__version__}, {_load()}")
    t_start = time.perf_counter()

    synth = make_synthetic(a.workdir / "synthetic", n, build)
    cmd = [sys.executable, __file__, "--read-phase", str(a.workdir / "synthetic"), "--ranks", str(n)]
    cmd += ["--combine", a.combine] if a.combine else []
    cmd += ["--build", a.build]
    # Run twice; the second is reported (the first also warms the page cache and the imports).
    runs = [json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout) for _ in range(2)]
    r = runs[-1]
    print(f"\n1. {n} synthetic ranks from cached summaries of {synth['sources']} real traces ({synth['from']})")
    print("| ranks | summary KB (mean) | write all s | read all s | combine s | RSS before MB | peak RSS MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    combine = "-" if r["combine_s"] is None else f"{r['combine_s']:.2f}"
    print(
        f"| {n} | {synth['mean_kb']:.1f} | {synth['write_s']:.2f} | {r['read_s']:.2f} (first run"
        f" {runs[0]['read_s']:.2f}) | {combine} | {r['rss_before_mb']:.0f} | {r['peak_rss_mb']:.0f} |"
    )

    raw = make_raw(a.workdir / "raw", raw_n, raw_mb)
    os.sync()  # the GBs just written are flushed now, not during the timed runs
    rows = time_builds(a.workdir / "raw", build, a.jobs, dask, a.rounds or 1)
    what = f"{raw_n} ranks of {raw['mean_mb']:.1f} MB JSON (nccl_data x {raw['copies']})"
    print(f"\n2. {what}, summaries built from scratch by {build_name}")
    print(
        "| executor | seconds (best) | every run | s per trace | speed-up vs jobs=1 | machine busy "
        "| load after | fixed cost s | identical |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---|")
    for row in rows:
        every = " ".join(f"{x:.1f}" for x in row["all"])
        print(
            f"| {row['mode']} | {row['s']:.1f} | {every} | {row['s'] / raw_n:.3f} | {row['speedup']:.2f} | "
            f"{row['cpu']:.0%} | {row['load']:.1f} | {row['startup']:.1f} | "
            f"{'yes' if row['identical'] else 'NO'} |"
        )
    print(f"\ntotal bench time {time.perf_counter() - t_start:.0f} s; {_load()}")
    if not a.keep:
        shutil.rmtree(a.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
