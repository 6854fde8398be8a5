#!/usr/bin/env python3
"""A/B: the same ``traceadvisor analyze`` by two code trees, side by side in one run.

Shows that a change which should not change speed (a restructure) did not: for each trace size
(the replicated traces of ``make bench``, bench/make_traces.py) and each repetition, interleaved
and with the order alternated, it runs::

    PYTHONPATH=TREE python -m traceadvisor analyze FILE --format json --output TMP/report.json

for tree A (``--baseline``, e.g. a worktree of the commit before the change) and tree B (this
checkout), and reports the median wall time and peak RSS of each, and B/A. Both trees run with
the same interpreter and packages; each tree must hold its own built native decoder
(``traceadvisor/trace/_kineto*.so``), else both would not be measuring the same thing (checked).

    python bench/ab.py --baseline /tmp/base [--sizes 10,100] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import DEFAULT_CACHE_DIR, MB, REPO, default_python, ensure_traces, measure, warm


def _native(py: str, tree: Path) -> str:
    probe = "from traceadvisor.trace import native; print(native.available())"
    r = subprocess.run([py, "-c", probe], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)})
    return r.stdout.strip() or r.stderr.strip()[-200:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="tree A: a checkout of the commit before the change")
    ap.add_argument("--tree", type=Path, default=REPO, help="tree B (default: this checkout)")
    ap.add_argument("--sizes", default="10,100")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--python", default=default_python())
    args = ap.parse_args()
    trees = {"A": args.baseline.resolve(), "B": args.tree.resolve()}
    for label, tree in trees.items():
        native = _native(args.python, tree)
        print(f"[ab] {label}: {tree} (git {_rev(tree)}; native decoder: {native})", flush=True)
        if native != "True":
            raise SystemExit(f"[ab] tree {label} has no native decoder: copy traceadvisor/trace/_kineto*.so into it")
    sizes = sorted(int(x) for x in args.sizes.split(","))
    traces = ensure_traces(args.python, sizes, DEFAULT_CACHE_DIR, None)
    runs: dict[tuple[int, str], list[dict]] = {}
    for s in sizes:
        warm(traces[s]["path"])
    for rep in range(args.repeat):
        for s in sizes:
            for label in "AB" if rep % 2 == 0 else "BA":
                out = Path(tempfile.mkdtemp(prefix="ta-ab-"))
                cmd = [args.python, "-m", "traceadvisor", "analyze", str(traces[s]["path"]), "--format", "json"]
                r = measure([*cmd, "--output", str(out / "report.json")], 600, env={"PYTHONPATH": str(trees[label])})
                ok = r["rc"] == 0 and (out / "report.json").stat().st_size > 0
                shutil.rmtree(out, ignore_errors=True)
                if not ok:
                    raise SystemExit(f"[ab] {label} failed on {s} MB: rc={r['rc']} {r.get('stderr_tail', '')[-300:]}")
                runs.setdefault((s, label), []).append(r)
                peak = r["peak_rss_bytes"] / MB
                print(f"[ab] rep {rep + 1} {s:>5} MB {label} {r['wall_s']:.3f} s {peak:.0f} MB", flush=True)
    print()
    a_tree, b_tree = (f"{trees[k]} ({_rev(trees[k])})" for k in "AB")
    print(f"Median of {args.repeat} interleaved runs; A = {a_tree}, B = {b_tree}")
    print()
    print("| size | A s | B s | B/A time | A peak MB | B peak MB | B/A peak | A spread s | B spread s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in sizes:
        a, b = runs[(s, "A")], runs[(s, "B")]
        ta, tb = (statistics.median(r["wall_s"] for r in x) for x in (a, b))
        ma, mb = (statistics.median(r["peak_rss_bytes"] for r in x) / MB for x in (a, b))
        sa, sb = (max(r["wall_s"] for r in x) - min(r["wall_s"] for r in x) for x in (a, b))
        times = f"{ta:.3f} | {tb:.3f} | {tb / ta:.3f}"
        print(f"| {s} MB | {times} | {ma:.0f} | {mb:.0f} | {mb / ma:.3f} | {sa:.3f} | {sb:.3f} |")
    return 0


def _rev(tree: Path) -> str:
    r = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    status = ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"]
    dirty = subprocess.run(status, capture_output=True, text=True)
    return r.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


if __name__ == "__main__":
    sys.exit(main())
