"""Snapshot the JSON report of every bundled trace, or compare two snapshots.

Used to show that a change of the code's structure changes no report (issue 11)::

    python bench/compare_reports.py snapshot OUT_DIR [--tree PATH] [--extra DIR]  # reports by the code in PATH
    python bench/compare_reports.py compare BEFORE_DIR AFTER_DIR

``snapshot`` runs ``python -m traceadvisor analyze -f json`` once per trace: each file under
``fixtures/`` (the vendored third-party traces included), each under every ``--extra`` folder
(e.g. the third-party collection the vendored ones came from), and HTA's two sampled ranks
together (a multi-rank analysis); with ``PYTHONPATH`` set to ``--tree`` (default: this checkout), so an older
commit checked out in a worktree can be run on the same files. ``compare`` lists every report
that differs, with the first differing JSON path, and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def inputs(root: Path = ROOT, extra: tuple[Path, ...] = ()) -> list[list[Path]]:
    """Every trace file the comparison covers (absolute), each alone, and the two ranks of HTA's
    sampled trace together (a multi-rank analysis)."""
    found: list[list[Path]] = []
    for base in (root / "fixtures", *extra):
        if base.is_dir():
            found += [[p] for p in sorted(base.rglob("*")) if p.name.endswith((".json.gz", ".json")) and _is_trace(p)]
    ranks = sorted((root / "fixtures" / "external" / "hta").glob("sampled_rank-*.json.gz"))
    if len(ranks) > 1:
        found.append(ranks)
    return found


def _is_trace(p: Path) -> bool:
    return p.name not in ("manifest.json", "pairs.json", "run.json") and "rules" not in p.parts[-4:-1]


def _key(paths: list[Path]) -> str:
    return "+".join("__".join(p.parts[-4:]) for p in paths)


def snapshot(out: Path, tree: Path, root: Path, extra: tuple[Path, ...] = ()) -> int:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}

    def one(p: list[Path]) -> str:
        r = subprocess.run(
            [sys.executable, "-m", "traceadvisor", "analyze", "-f", "json", *map(str, p)],
            capture_output=True,
            env=env,
            cwd=tree,
        )
        (out / f"{_key(p)}.json").write_bytes(r.stdout)
        (out / f"{_key(p)}.meta").write_text(f"rc={r.returncode}\n{r.stderr.decode(errors='replace')}")
        return f"{r.returncode} {_key(p)}"

    with ThreadPoolExecutor(2) as pool:
        for line in pool.map(one, inputs(root, extra)):
            print(line, flush=True)
    return 0


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{path or '/'}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}/{k}: only in {'after' if k not in a else 'before'}"
            d = _first_difference(a[k], b[k], f"{path}/{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _first_difference(x, y, f"{path}/{i}")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r:.120} vs {b!r:.120}"


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    differ = 0
    for name in names:
        a, b = before / name, after / name
        if not a.exists() or not b.exists():
            print(f"MISSING {name} ({'before' if not a.exists() else 'after'})")
            differ += 1
            continue
        if name.endswith(".meta"):
            if a.read_text().splitlines()[:1] != b.read_text().splitlines()[:1]:
                print(f"EXIT    {name}: {a.read_text().splitlines()[0]} vs {b.read_text().splitlines()[0]}")
                differ += 1
            continue
        if a.read_bytes() == b.read_bytes():
            continue
        try:
            d = _first_difference(json.loads(a.read_bytes() or b"null"), json.loads(b.read_bytes() or b"null"))
        except ValueError as exc:
            d = f"not JSON ({exc})"
        if d:
            print(f"DIFFER  {name}: {d}")
            differ += 1
    reports = sum(1 for n in names if n.endswith(".json"))
    print(f"{reports} reports compared, {differ} differ")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snapshot")
    s.add_argument("out", type=Path)
    s.add_argument("--tree", type=Path, default=ROOT, help="the code to run (default: this checkout)")
    s.add_argument("--root", type=Path, default=ROOT, help="the checkout whose traces to read (default: this one)")
    s.add_argument("--extra", type=Path, action="append", default=[], help="another folder of traces (repeatable)")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.cmd == "snapshot":
        return snapshot(args.out, args.tree.resolve(), args.root.resolve(), tuple(p.resolve() for p in args.extra))
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
