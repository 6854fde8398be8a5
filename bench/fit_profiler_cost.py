"""Fit the profiler's host cost per event kind on the ``fit`` half of the GPU pairs.

    python bench/fit_profiler_cost.py [--pairs FILE ...] [--write]

By default on runs 14 and 16 (stack traces) and 15 (nostack traces) of ``fixtures/pairs12_runs/``:
the first runs timed with CUPTI detached after each capture. Every earlier run (and the main fixture,
``fixtures/pairs12.json``) timed each pair after its first with CUPTI still attached, its callbacks
slowing every unprofiled round of a host-bound program (fixtures/traces/PROVENANCE.md).

Each profiled trace of a ``fit`` pair (both sides, every capture variant) is one equation: its
unprofiled replay's step time (``traceadvisor.whatif.profiler_cost``) must equal the step time the
same program ran at without the profiler (CUDA events, the rounds right before and after its
capture), with every cost scaled by the trace's host speed (its median kernel-launch call against
the fit traces' median, ``profiler_cost.host_speed``: the host's speed drifts 1.5-2.5x between
captures seconds apart, and the profiler's costs are host instructions). The step time
is a piecewise-linear function of the per-kind costs (linear while the host is the bottleneck, flat
once the GPU is), so the fit is Gauss-Newton on relative errors with a numeric Jacobian from the
replay itself, each step a non-negative least squares (costs cannot be negative). Kinds that no fit
trace recorded are left at 0 and named. ``--write`` stores the costs in
``traceadvisor/whatif/profiler_cost.json`` with what they were fitted on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "fixtures" / "traces"
RUNS = ROOT / "fixtures" / "pairs12_runs"
DEFAULT_PAIRS = [RUNS / "run_14" / "pairs12.json", RUNS / "run_15" / "pairs12.json", RUNS / "run_16" / "pairs12.json"]

sys.path.insert(0, str(ROOT))

from traceadvisor.trace.load import load_file  # noqa: E402
from traceadvisor.trace.model import Trace  # noqa: E402
from traceadvisor.whatif.profiler_cost import (  # noqa: E402
    KINDS,
    ProfilerCost,
    event_counts,
    median_launch_ns,
    unprofiled_overrides,
)
from traceadvisor.whatif.replay import replay  # noqa: E402
from traceadvisor.whatif.scenarios import runs_compiled, step_time_ns  # noqa: E402


def traces_dir(pairs_file: Path) -> Path:
    """Where a pairs file's traces are: the main fixture's in fixtures/traces, a run's beside it (run_N/traces)."""
    return pairs_file.resolve().parent / "traces"


# Fit pairs the profiler cost is not fitted on. mlp_compile (the compile scenario's fit pair, added
# in the session that built it) records torch.compile'd code with stacks: refitted with it, the
# Python frame cost doubled (3.8 µs against 1.7) because Inductor's launcher runs its slow, traced
# path under the profiler (profiler_cost.INDUCTOR_LAUNCH_PREFIX), and pair_cuda_graph (H200, eager)
# fell from within 30% to -44% (tests/test_rules_real.py). Its frames are a kind of their own, not
# modelled yet; until they are, the costs stay fitted on the seven eager-dominated pairs.
# tfm_compile (the compile scenario's second fit pair) records compiled code the same way: held out
# for the same reason (refitted with it, the Python frame cost went to 5.3 µs and builtins to 0), and
# so is mlp_infer_compile (the compile scenario's third fit pair, its inference forward).
HELD_OUT = frozenset({"mlp_compile", "tfm_compile", "mlp_infer_compile"})


def traces_of(
    pairs: dict[str, Any], split: str | None, reference: str = "adjacent", traces: Path = TRACES
) -> list[tuple[str, str, Trace, float]]:
    """(pair, side_variant, trace, measured unprofiled step ns) for every trace of the split's ok pairs.

    ``reference``: ``adjacent`` compares a trace with the unprofiled rounds run right before and after
    its capture (the host's speed on the capture machine drifted by up to 1.8x between runs minutes
    apart: fixtures/pairs12_runs/), ``pair`` with the pair's interleaved median."""
    out = []
    for name, p in pairs["pairs"].items():
        if p.get("status") != "ok" or (split and p.get("split") != split) or name in HELD_OUT:
            continue
        for key, rec in p["traces"].items():
            trace = load_file(traces / rec["file"])
            out.append((name, key, trace, measured_ns(p, key, reference)))
    return out


def measured_ns(pair: dict[str, Any], key: str, reference: str) -> float:
    """The unprofiled step a trace (``key``: side_variant) is compared with, ns (``traces_of``)."""
    rec = pair["traces"][key]
    if reference == "adjacent" and "adjacent_unprofiled_us" in rec:
        return float(rec["adjacent_unprofiled_us"]["median"]) * 1000.0
    return float(pair[f"{key.split('_')[0]}_step_us"]["median"]) * 1000.0


# An annotation (record_function, ProfilerStep#N) is one RecordFunction like an op recorded without
# shapes: the same callback path, so it shares that cost rather than getting a free parameter (too
# few annotations per step to identify one: fitted freely it soaked up each pair's noise).
# An op recorded without shapes is the same record less the shapes copied: tied to the op with
# shapes (an upper bound), since the clean pairs record every op with shapes (stack and nostack
# traces) and the few records without (Dynamo's wrapper records in compiled code) cannot pin it down:
# fitted freely on them it took 39 µs. Resolved in order: op first, then what is tied to it.
TIED = {"op": "op_shapes", "annotation": "op", "step": "op"}
# Costs taken from the microbenchmark, never fitted on the pairs: the runtime call (in the pairs
# every runtime call comes with its op, and fitted freely the two traded off) and Inductor's launch
# records (only the compiled side of one fit pair has a few: the pairs cannot pin them down).
FROM_MICROBENCH = ("runtime", "inductor_launch", "inductor_launch_shapes", "compiled_region")
# Inductor's launch records with shapes cost a multiple of their own recorded duration
# (profiler_cost.ProfilerCost.per_recorded), fitted on the compiled traces of the held-out pairs
# recorded without stacks: with stacks, the wrapper's own Python frames cost the profiler more the
# further into the (generated, thousands of lines long) wrapper a call sits (fixtures/wrapper_length/:
# 20-42 ns more per earlier call, self time 13-19 ns x calls^2), which per-event costs cannot hold.
PER_RECORDED = ("inductor_launch_shapes",)
PER_RECORDED_START = 1.5


def tied(ns: dict[str, float]) -> dict[str, float]:
    out = dict(ns)
    for k, v in TIED.items():
        out[k] = out[v]
    return out


# The fit traces' median kernel-launch call (ns): each trace's costs are scaled by its host's speed
# against it (profiler_cost.host_speed), as the tool does for a trace without measured steps.
REFERENCE: dict[str, float | None] = {"launch_ns": None}


def predict(trace: Trace, ns: dict[str, float], per: dict[str, float] | None = None) -> float:
    cost = ProfilerCost(tied(ns), {}, dict(per or {}), REFERENCE["launch_ns"]).for_trace(trace)
    return step_time_ns(replay(trace, unprofiled_overrides(trace, cost)))


def reference_launch_ns(rows: list[tuple[str, str, Trace, float]]) -> float | None:
    """The median over the fit traces of each one's median kernel-launch call."""
    values = [m for _, _, t, _ in rows if (m := median_launch_ns(t)) is not None]
    return float(np.median(values)) if values else None


def compiled_rows(
    pairs: dict[str, Any], reference: str = "adjacent", traces: Path = TRACES
) -> list[tuple[str, str, Trace, float]]:
    """The traces of the held-out (compile) fit pairs that run compiled code, recorded without stacks."""
    rows = []
    for name in sorted(HELD_OUT):
        p = pairs["pairs"].get(name, {})
        if p.get("status") != "ok" or p.get("split") != "fit":
            continue
        for key, rec in p["traces"].items():
            if rec.get("flags", {}).get("with_stack"):
                continue
            trace = load_file(traces / rec["file"])
            if runs_compiled(trace):
                rows.append((name, key, trace, measured_ns(p, key, reference)))
    return rows


def fit_per_recorded(rows: list[tuple[str, str, Trace, float]], ns: dict[str, float]) -> float:
    """The multiple of a launch record's duration that minimises the root-mean-square relative error
    of ``rows`` (the other costs fixed): golden-section search over [0, 4] (the step time falls
    monotonically in it, so the squared error has one minimum where the host is the bottleneck)."""

    def loss(k: float) -> float:
        per = dict.fromkeys(PER_RECORDED, k)
        return float(np.mean([((predict(t, ns, per) - m) / m) ** 2 for *_, t, m in rows]))

    lo, hi = 0.0, 4.0
    g = (5**0.5 - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = loss(a), loss(b)
    while hi - lo > 0.002:
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = loss(b)
    return round((lo + hi) / 2, 3)


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares by an active set: drop negative coefficients until none is left."""
    free = np.ones(a.shape[1], dtype=bool)
    x = np.zeros(a.shape[1])
    while free.any():
        sol, *_ = np.linalg.lstsq(a[:, free], b, rcond=None)
        if (sol >= 0).all():
            x[:] = 0
            x[free] = sol
            return x
        idx = np.flatnonzero(free)
        free[idx[int(np.argmin(sol))]] = False
    return x


def fit(
    rows: list[tuple[str, str, Trace, float]],
    iterations: int = 8,
    start: dict[str, float] | None = None,
    fixed: dict[str, float] | None = None,
    per: dict[str, float] | None = None,
) -> tuple[dict[str, float], list[str]]:
    counts = np.array([[event_counts(t)[k] for k in KINDS] for _, _, t, _ in rows], dtype=float)
    fixed = fixed or {}
    seen = [k for i, k in enumerate(KINDS) if counts[:, i].sum() > 0 and k not in TIED and k not in fixed]
    ns = dict(start) if start else dict.fromkeys(KINDS, 0.0)
    ns.update(fixed)
    measured = np.array([m for *_, m in rows])

    def residuals(ns: dict[str, float]) -> np.ndarray:
        return (np.array([predict(t, ns, per) for _, _, t, _ in rows]) - measured) / measured

    base = residuals(ns)
    for it in range(iterations):
        jac = np.zeros((len(rows), len(seen)))
        for j, k in enumerate(seen):
            h = 200.0  # ns: large enough to move a host-bound step by whole events' worth
            jac[:, j] = (residuals(dict(ns, **{k: ns[k] + h})) - base) / h
        x0 = np.array([ns[k] for k in seen])
        target = nnls(jac, jac @ x0 - base)  # the linearised problem, costs >= 0
        # damped: halve the step until the squared relative error falls (the step time is only
        # piecewise linear in the costs: host-bound steps respond, GPU-bound ones do not)
        for _ in range(8):
            trial = dict(ns, **{k: float(v) for k, v in zip(seen, target, strict=True)})
            res = residuals(trial)
            if (res**2).sum() < (base**2).sum():
                break
            target = (target + x0) / 2
        else:
            break
        moved = float(np.abs(target - x0).max())
        ns, base = trial, res
        err = np.abs(base) * 100
        print(
            f"iteration {it}: median |error| {np.median(err):.1f}%, max {err.max():.1f}%, costs "
            + ", ".join(f"{k} {ns[k]:.0f}" for k in seen),
            flush=True,
        )
        if moved < 5:
            break
    return tied(ns), [k for k in KINDS if k not in seen and k not in TIED and k not in fixed]


def _events(row: dict[str, Any]) -> dict[str, float]:
    """A microbenchmark row's events per iteration in this model's kinds: a launch record counted
    with shapes under a config that records them."""
    ev = dict(row["events_per_iter"])
    if row["config"] != "plain" and "inductor_launch" in ev:
        ev["inductor_launch_shapes"] = ev.pop("inductor_launch")
    return ev


def microbench_costs(path: Path) -> dict[str, float]:
    """Per-kind costs from fixtures/profiler_cost_bench.json (interleaved blocks a few ms apart:
    immune to the host's drift). The runtime call first, directly: the ``op`` loop and the same op
    on CPU tensors (``cpu_op``) differ by one runtime call and nothing else, so its cost is the
    median over (run, config) of their difference; solved jointly, it traded off against the op
    (it always comes with one) and fell to 0. The rest by non-negative least squares over the loop
    x config rows, with the runtime calls' cost taken off."""
    rows = json.loads(path.read_text())["rows"]
    cost = {(r.get("run", ""), r["config"], r["loop"]): r["cost_ns_per_iter"] for r in rows}
    diffs = [
        v - cost[(run, cfg, "cpu_op")]
        for (run, cfg, loop), v in cost.items()
        if loop == "op" and (run, cfg, "cpu_op") in cost
    ]
    runtime = float(np.median(diffs))
    kinds = [k for k in KINDS if k not in ("step", "runtime")]
    a = np.array([[_events(r).get(k, 0.0) for k in kinds] for r in rows])
    b = np.array([r["cost_ns_per_iter"] - runtime * _events(r).get("runtime", 0.0) for r in rows])
    x = nnls(a, b)
    ns = {k: float(v) for k, v in zip(kinds, x, strict=True)}
    ns["runtime"] = runtime
    ns["step"] = ns["op"]  # prof.step() records one annotation, like an op without shapes
    return ns


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--pairs",
        type=Path,
        action="append",
        help="a pairs file (repeatable; its traces in the traces/ folder beside it); default: runs 14-16, "
        "the first timed with CUPTI detached after each capture (fixtures/traces/PROVENANCE.md)",
    )
    ap.add_argument(
        "--tie",
        action="append",
        default=[],
        metavar="KIND=OTHER",
        help="fit KIND at OTHER's cost (repeatable), e.g. python_builtin=python: a built-in call's record "
        "costs what a Python frame's does (fixtures/host_phase_probe/: 0.8-1.0 µs a frame either way)",
    )
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--reference", choices=("adjacent", "pair"), default="adjacent")
    ap.add_argument(
        "--microbench",
        type=Path,
        default=ROOT / "fixtures" / "profiler_cost_bench.json",
        help="the interleaved microbenchmark (fixtures/profiler_cost_bench.py) that fixes the runtime-call cost",
    )
    args = ap.parse_args()
    for tie in args.tie:
        kind, _, other = tie.partition("=")
        if kind not in KINDS or other not in KINDS:
            ap.error(f"--tie {tie}: kinds are {', '.join(KINDS)}")
        TIED[kind] = other
    files = args.pairs or DEFAULT_PAIRS
    docs = [json.loads(f.read_text()) for f in files]
    rows = [r for f, d in zip(files, docs, strict=True) for r in traces_of(d, "fit", args.reference, traces_dir(f))]
    REFERENCE["launch_ns"] = reference_launch_ns(rows)
    print(f"host speed reference: median kernel-launch call {REFERENCE['launch_ns']} ns over the fit traces")
    pairs = docs[0]
    t0 = time.monotonic()
    # The runtime-call cost comes from the microbenchmark, where a CUDA op and the same op on the CPU
    # differ by that call alone; in the pairs every runtime call comes with its op, and fitted freely
    # the two traded off (11.4 µs per runtime call, more than the 8 µs such a call lasts).
    base = microbench_costs(args.microbench)
    print("microbenchmark costs (ns): " + ", ".join(f"{k} {v:.0f}" for k, v in base.items()))
    # The eager kinds on the fit pairs, then the launch records' multiple on the compiled traces with
    # those fixed, alternately until the multiple settles (the elementwise pair's compiled side has a
    # few launch records, the compiled traces many eager ops).
    crows = [r for f, d in zip(files, docs, strict=True) for r in compiled_rows(d, args.reference, traces_dir(f))]
    per = dict.fromkeys(PER_RECORDED, PER_RECORDED_START)
    for _ in range(4):
        ns, unseen = fit(rows, fixed={k: base[k] for k in FROM_MICROBENCH}, per=per)
        k = fit_per_recorded(crows, ns)
        settled = abs(k - per[PER_RECORDED[0]]) < 0.01
        per = dict.fromkeys(PER_RECORDED, k)
        print(f"launch records: {k:.3f} x their recorded duration", flush=True)
        if settled:
            break
    carried: dict[str, float] = {}
    if unseen:
        # a kind no fit trace recorded (memory events: the clean runs have no profile_memory traces)
        # keeps the cost it was last fitted at, rather than none
        before = json.loads((ROOT / "traceadvisor" / "whatif" / "profiler_cost.json").read_text())["ns_per_event"]
        carried = {k: float(before.get(k, 0.0)) for k in unseen}
        ns.update(carried)
        print("not fitted (no fit trace recorded them), kept at their last fitted cost: " + str(carried))
    print(f"\nfitted on {len(rows)} traces of {len({r[0] for r in rows})} pairs in {time.monotonic() - t0:.0f} s")
    print(f"{'pair':12s} {'trace':16s} {'measured µs':>12s} {'predicted µs':>12s} {'error %':>8s}")
    errs = []
    for name, key, trace, measured in rows:
        p = predict(trace, ns, per)
        errs.append((p - measured) / measured * 100)
        print(f"{name:12s} {key:16s} {measured / 1e3:12.1f} {p / 1e3:12.1f} {errs[-1]:8.1f}")
    cerrs = []
    print("compiled traces (the launch records' multiple):")
    for name, key, trace, measured in crows:
        p = predict(trace, ns, per)
        cerrs.append((p - measured) / measured * 100)
        print(f"{name:12s} {key:16s} {measured / 1e3:12.1f} {p / 1e3:12.1f} {cerrs[-1]:8.1f}")
    print("costs (ns per event): " + ", ".join(f"{k} {v:.0f}" for k, v in ns.items()))
    print("costs (ns per recorded ns): " + ", ".join(f"{k} {v:.3f}" for k, v in per.items()))
    if args.write:
        doc = {
            "ns_per_event": {k: round(v, 1) for k, v in ns.items()},
            "per_recorded_ns": per,
            "reference_launch_ns": REFERENCE["launch_ns"],
            "fitted": {
                "script": "bench/fit_profiler_cost.py",
                "pairs_files": [str(f.resolve().relative_to(ROOT)) for f in files],
                "pairs": sorted({r[0] for r in rows}),
                "traces": len(rows),
                "reference": args.reference,
                "fixed_from_microbench": {k: round(base[k], 1) for k in FROM_MICROBENCH},
                "microbench": "fixtures/profiler_cost_bench.json",
                "not_fitted": unseen,
                "not_fitted_kept_from": "the previous fit (fixtures/pairs12.json, CUPTI left attached)",
                "per_recorded": {
                    "kinds": list(PER_RECORDED),
                    "overrides": "ns_per_event for these kinds (kept: the microbenchmark's constant)",
                    "traces": [f"{n}/{k}" for n, k, _, _ in crows],
                    "errors_pct": [round(e, 1) for e in cerrs],
                },
                "tied": TIED,
                "median_abs_error_pct": round(float(np.median(np.abs(errs))), 2),
                "max_abs_error_pct": round(float(np.max(np.abs(errs))), 2),
                "gpu": pairs.get("env", {}).get("gpu_name"),
                "torch": pairs.get("env", {}).get("torch_version"),
            },
        }
        path = ROOT / "traceadvisor" / "whatif" / "profiler_cost.json"
        path.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
