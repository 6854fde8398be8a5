#!/usr/bin/env python3
"""What the HTML report costs over the JSON one, and how large its page is (issue 14).

For each trace, ``python -m traceadvisor analyze TRACE -f json -o OUT`` and the same with ``-f html``
(which also builds the sampled timeline the page draws), interleaved, ``--repeat`` times each, the
order alternating; wall time of the whole process, start-up and imports included. Printed per
trace: the medians, the ratio html/json (side by side in one run, since the machine is noisy), and
the page's size against the issue's limits (under 2 MB for typical traces, under 8 MB always).

    .venv/bin/python bench/html_report.py
    .venv/bin/python bench/html_report.py --repeat 5 --trace bench/.cache/nccl_data.100MB.json
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACES = [
    REPO / "fixtures" / "traces" / "train_step.json.gz",
    REPO / "fixtures" / "traces" / "p12_decode_before_stack.json.gz",
    REPO / "fixtures" / "traces" / "multirank" / "input_delay_4r",
]
TYPICAL_LIMIT = 2 * 1024 * 1024
HARD_LIMIT = 8 * 1024 * 1024


def timed(trace: Path, fmt: str, out: Path) -> float:
    cmd = [sys.executable, "-m", "traceadvisor", "analyze", str(trace), "-f", fmt, "-o", str(out), "--no-cache"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, action="append", help="a trace or a folder of ranks (repeatable)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    traces = a.trace or DEFAULT_TRACES
    print(f"{'trace':44} {'json s':>8} {'html s':>8} {'html/json':>9} {'page':>10}  limit")
    worst = 0
    with tempfile.TemporaryDirectory() as tmp:
        for trace in traces:
            times: dict[str, list[float]] = {"json": [], "html": []}
            for r in range(a.repeat):
                for fmt in ("json", "html") if r % 2 == 0 else ("html", "json"):
                    times[fmt].append(timed(trace, fmt, Path(tmp) / f"out.{fmt}"))
            size = (Path(tmp) / "out.html").stat().st_size
            worst = max(worst, size)
            j, h = statistics.median(times["json"]), statistics.median(times["html"])
            verdict = "ok (< 2 MB)" if size < TYPICAL_LIMIT else "ok (< 8 MB)" if size < HARD_LIMIT else "OVER 8 MB"
            name = str(trace.relative_to(REPO) if trace.is_relative_to(REPO) else trace)
            print(f"{name[-44:]:44} {j:8.2f} {h:8.2f} {h / j:9.2f} {size / 1e3:8.0f} kB  {verdict}")
    return 0 if worst < HARD_LIMIT else 1


if __name__ == "__main__":
    raise SystemExit(main())
