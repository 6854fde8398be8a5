#!/usr/bin/env python3
"""Peak memory of ``traceadvisor analyze`` against the trace's inflated size (issue 10).

The default ``--max-size`` is the machine's memory divided by this factor's bound
(``traceadvisor/limits.py``). A real trace's events are repeated until the JSON is about ``--mb``
MB (plain, and gzip with ``--gzip``); ``analyze`` runs on it with the native decoder and with the
pure-Python path (``TRACEADVISOR_NATIVE=0``). Peak = the larger of the process's ru_maxrss and the
summed RSS of its process tree (the Python path forks a reader), sampled every 10 ms.

    .venv/bin/python bench/peak_memory.py fixtures/traces/planted_launch_storm.json.gz --mb 300 --gzip
    .venv/bin/python bench/peak_memory.py bench/.cache/nccl_data.1000MB.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def replicate(src: Path, dst: Path, mb: int) -> int:
    """Write ``src``'s events repeated to about ``mb`` MB of JSON; returns its size in bytes."""
    raw = src.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = json.dumps(doc.pop("traceEvents"))[1:-1].encode()
    copies = max(1, mb * 10**6 // len(events))
    with dst.open("wb") as fh:
        fh.write(b"{" + json.dumps(doc)[1:-1].encode() + b', "traceEvents": [')
        fh.write(b", ".join([events] * copies))
        fh.write(b"]}")
    return dst.stat().st_size


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError):
        return 0


def _tree(pid: int) -> list[int]:
    pids = [pid]
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            pids += [q for c in (task / "children").read_text().split() for q in _tree(int(c))]
    except OSError:
        pass
    return pids


def peak_of_analyze(trace: Path, native: bool, report: Path) -> tuple[float, int]:
    """(wall seconds, peak bytes) of one ``analyze`` of ``trace``: the larger of its own ru_maxrss
    and the largest summed RSS of its process tree seen."""
    env = {**os.environ, "TRACEADVISOR_NATIVE": "1" if native else "0"}
    cmd = [sys.executable, "-m", "traceadvisor", "analyze", str(trace), "-f", "json", "-o", str(report)]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env)
    peak = 0
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, sum(_rss(q) for q in _tree(p.pid)))
        time.sleep(0.01)
    seconds = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"analyze failed ({p.returncode}) on {trace}")
    return seconds, max(peak, usage.ru_maxrss * 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path, help="a trace (.json or .json.gz); with --mb, the source to repeat")
    ap.add_argument("--mb", type=int, help="repeat the trace's events to about this many MB of JSON")
    ap.add_argument("--gzip", action="store_true", help="also measure a gzip copy (level 1)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain = args.trace
        if args.mb:
            plain = Path(tmp) / "trace.json"
            replicate(args.trace, plain, args.mb)
        inflated = plain.stat().st_size
        traces = [plain]
        if args.gzip:
            packed = Path(tmp) / "trace.json.gz"
            with plain.open("rb") as src, gzip.open(packed, "wb", compresslevel=1) as dst:
                while block := src.read(1 << 24):
                    dst.write(block)
            traces.append(packed)
        print(f"{args.trace.name}: {inflated / 1e6:.0f} MB of JSON")
        for trace in traces:
            for native in (True, False):
                seconds, peak = peak_of_analyze(trace, native, Path(tmp) / "report.json")
                kind = "native" if native else "python"
                ratio = peak / inflated
                print(f"  {trace.name:16} {kind:6} {seconds:6.2f} s  peak {peak / 1e6:6.0f} MB = {ratio:.2f} x")


if __name__ == "__main__":
    main()
