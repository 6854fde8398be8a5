#!/usr/bin/env python3
"""Time of each rule of the pack on a ~100 MB trace with recorded shapes, against the load time.

The rules that read ``Input Dims`` (fp32-matmul, unfused-attention, memory-bound, ...) do nothing on
the default benchmark trace (``nccl_data``: no shapes), so their cost only shows on a trace that
has them. This benchmark replicates the steps of the largest external trace with ``Input Dims``
(HTA's ``rank0.json.gz``: a 16-rank recommendation model on A100-SXM4-80GB, 25.8 MB of JSON,
24,100 ops with shapes, ProfilerStep#550-554) to about ``--size`` MB with
``bench/make_traces.py`` (shifted times, ids unique per copy) into ``bench/.cache/``.

How it is measured, in one process:

1. ``traceadvisor.load_file(TRACE)``, timed once (**load**), after a warm-up on a small fixture
   trace (load, summary, every rule; not timed) so that lazy imports do not count.
2. The per-trace summary of the report (``pipeline.summarize``), timed: ``analyze`` runs it
   before the rules, and it builds the shared views (steps, idle attribution, the roofline
   table) that rules reuse. ``--no-summary`` leaves it out, so the first rule to read a shared
   view pays for it.
3. Every rule of the pack (``engine.registry.discover`` → ``runner.select`` →
   ``runner.instantiate``, built-in rules plus installed entry points, default configuration)
   in the pack's order, each ``check`` timed on that trace (**first**: what ``analyze`` pays for
   the rule). Rules whose capabilities the trace lacks are listed as skipped, as ``run`` skips them.
4. Then ``--repeat`` more times (default 3) each rule again (**again**, the median): the shared
   views are cached by now, so this is the rule's own work.

Each time is also shown as a share of the load time; the last line is the sum over the pack
against issue 3's budget (the rules and summary add at most 20% to loading).

    .venv/bin/python bench/rules_shapes_bench.py
    .venv/bin/python bench/rules_shapes_bench.py --select PR101,OP101 --repeat 5
    .venv/bin/python bench/rules_shapes_bench.py \\
        --source fixtures/external/tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz
    .venv/bin/python bench/rules_shapes_bench.py --trace fixtures/traces/planted_naive_attention.json.gz
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO))
DEFAULT_SOURCE = REPO / "fixtures" / "external" / "hta" / "rank0.json.gz"
TARGET = 0.20
WARM_UP = REPO / "fixtures" / "traces" / "planted_naive_attention.json.gz"


def make_trace(source: Path, size_mb: int, cache_dir: Path) -> Path:
    """The replicated trace (made by ``bench/make_traces.py`` when missing or stale)."""
    sys.path.insert(0, str(BENCH_DIR))
    import make_traces  # bench/make_traces.py: stdlib + orjson

    path, _ = make_traces.ensure_trace(size_mb, cache_dir, source)
    return path


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _check_all(rule: Any, trace: Any) -> list[Any]:
    return list(rule.check(trace))


def measure(path: Path, selectors: list[str], repeat: int, summary: bool) -> tuple[float, list[dict[str, Any]]]:
    """Load seconds and one row per rule (plus the summary): first-run and repeated seconds."""
    import traceadvisor
    from traceadvisor.config import Config
    from traceadvisor.engine.registry import discover
    from traceadvisor.engine.runner import instantiate, run, select
    from traceadvisor.pipeline import capabilities, summarize

    config = Config(select=selectors) if selectors else Config()
    rules = instantiate(select(discover(config.rules_dirs), config), config)
    # Warm-up on a small trace, not timed: the loader, the summary and the rules import modules
    # lazily on first use (about 0.7 s), which would otherwise count as load time.
    small = traceadvisor.load_file(WARM_UP)
    summarize(small, {})
    run(rules, [small], capabilities=capabilities([small]))
    t_load, trace = timed(lambda: traceadvisor.load_file(path))
    rows: list[dict[str, Any]] = []
    if summary:
        t, _ = timed(lambda: summarize(trace, {}))
        rows.append({"label": "summary (shared views)", "first": t, "again": None, "findings": None})
    caps = capabilities([trace])[0]
    runnable = []
    for rule in rules:
        label = f"{rule.code} {rule.name}"
        missing = sorted(c.value for c in type(rule).requires - caps)
        if missing:
            rows.append({"label": f"{label} (skipped: no {', '.join(missing)})", "first": None, "again": None})
            continue
        t, found = timed(partial(_check_all, rule, trace))
        runnable.append((rule, len(rows)))
        rows.append({"label": label, "first": t, "again": [], "findings": len(found)})
    for _ in range(repeat):  # interleaved, so a slow period of a shared machine hits every rule alike
        for rule, i in runnable:
            t, _ = timed(partial(_check_all, rule, trace))
            rows[i]["again"].append(t)
    for row in rows:
        if row["again"]:
            row["again"] = statistics.median(row["again"])
        elif row["again"] == []:
            row["again"] = None
    return t_load, rows


def _cell(secs: float | None, load: float) -> str:
    if secs is None:
        return f"{'':>9s} {'':>7s}"
    return f"{secs:8.3f}s {100 * secs / load:6.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, help="time this trace as it is (no replication)")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="trace whose steps are replicated")
    ap.add_argument("--size", type=int, default=100, help="size of the replicated trace in MB (10**6 bytes)")
    ap.add_argument("--cache-dir", type=Path, default=BENCH_DIR / ".cache")
    ap.add_argument("--repeat", type=int, default=3, help="repeated runs of each rule (median shown)")
    ap.add_argument("--select", default="", help="comma-separated rule codes, prefixes or names (default: all)")
    ap.add_argument("--no-summary", action="store_true", help="do not run the report summary before the rules")
    args = ap.parse_args(argv)
    path = args.trace or make_trace(args.source, args.size, args.cache_dir)
    selectors = [s.strip() for s in args.select.split(",") if s.strip()]
    load, rows = measure(path, selectors, max(args.repeat, 0), not args.no_summary)
    print(f"trace: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    print(f"load {load:.3f} s; 'first' = the rule's check on the fresh trace in pack order, 'again' = median of")
    print(f"{args.repeat} more runs (shared views cached); % = share of the load time")
    width = max(len(r["label"]) for r in [*rows, {"label": "summary + rules (first)"}])
    print(f"  {'':{width}s} {'first':>17s} {'again':>17s} findings")
    for row in rows:
        found = "" if row.get("findings") is None else f"{row['findings']:8d}"
        print(f"  {row['label']:{width}s} {_cell(row['first'], load)} {_cell(row['again'], load)} {found}")
    rules_only = sum(r["first"] for r in rows if r["first"] is not None and not r["label"].startswith("summary"))
    print(f"  {'rules (first)':{width}s} {_cell(rules_only, load)}")
    if not args.no_summary:
        total = sum(r["first"] for r in rows if r["first"] is not None)
        verdict = "✓" if total / load <= TARGET else "✗"
        label = "summary + rules (first)"
        print(f"  {label:{width}s} {_cell(total, load)}   issue 3 target: ≤ {TARGET:.0%} of load {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
