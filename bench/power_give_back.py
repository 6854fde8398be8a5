"""Fit the power-limit give-back line (traceadvisor/whatif/power_limit.py) on the fit loops and check
it on the validation loops.

    python bench/power_give_back.py

The share of the idle a GPU at its power limit gives back (the before side's kernels ran faster by
that much of the idle it had) is read off the segment probe (fixtures/gpu_segment_probe/): per step
segment, before minus after; the positive differences are the before side's idle, the negative ones
its kernels' speed-up. The clock is the busy clock the same loop ran at without the profiler: the
median SM clock of the before side's interleaved rounds (``gpu_state`` of a pairs run; the run on
the probe's own machine where there is one, else the median over every H200 run that has it).

The line ``share = SLOPE * (d - ONSET)`` in the clock's deficit ``d = 1 - clock / top clock`` goes
through the two fit loops (item_gpu_wide, item_gpu_short) of run_b; the spread is the larger
half-range of a fit loop's repeated measures (run_a and run_b for item_gpu_wide; run_b's two calls
for item_gpu_short). The validation loops were never used to fit anything.

What a finding states is a saving, so the replay's own error on the same loops comes in too: for
each fit loop, the measured saving over the replayed no-sync saving times the share the model keeps
(the replayed saving from the loop's stack traces: fixtures/host_phase_probe/ for run_a's loops,
run 28's three captures, median, for run_b's); the largest factor either way is the band the
finding widens its range by (``REPLAY_SAVING_FACTOR``).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpu_segments import TRACES, replayed_idle_us  # noqa: E402

from traceadvisor.capture.gpu_power import POWER_REASONS  # noqa: E402
from traceadvisor.whatif import power_limit  # noqa: E402

PROBE = ROOT / "fixtures" / "gpu_segment_probe"
RUNS = ROOT / "fixtures" / "pairs12_runs"
FIT = ("item_gpu_wide", "item_gpu_short")
# the pairs run captured on each probe run's machine (run_b came right after run 28, on its machine)
SAME_MACHINE = {"run_b": "run_28", "run_c": "run_29"}
FIT_PROBE = "run_b"
# every probe run; run_c (run 29's machine, 2026-12-03) came after the fit and checks it
PROBE_RUNS = ("run_a", "run_b", "run_c")


def share_of(differences: list[float]) -> float | None:
    """The share of the before side's idle (positive segment differences) given back as faster
    kernels (negative ones); None for a loop that does not idle (host-bound on both sides)."""
    idle = sum(d for d in differences if d > 0)
    faster = -sum(d for d in differences if d < 0)
    return faster / idle if idle >= 10.0 else None


def probe_shares(run: str) -> dict[str, float]:
    doc = json.loads((PROBE / run / "segments.json").read_text())
    out = {}
    for name, p in doc["pairs"].items():
        s = share_of([seg["difference_us"] for seg in p["summary"].values()])
        if s is not None:
            out[name] = s
    return out


def stdout_shares(path: Path) -> dict[str, float]:
    """The same shares from a probe's printed lines (``name: before/after µs per segment: ... (+d)``)."""
    out = {}
    for line in path.read_text().splitlines():
        m = re.search(r"\] (\w+): before/after", line)
        if m:
            s = share_of([float(x) for x in re.findall(r"\(([+-][0-9.]+)\)", line)])
            if s is not None:
                out[m.group(1)] = s
    return out


def busy_clock(run: str, pair: str) -> tuple[float, bool] | None:
    """The before side's median SM clock over its rounds and whether most rounds were power capped."""
    path = RUNS / run / "pairs12.json"
    if not path.exists():
        return None
    p = json.loads(path.read_text())["pairs"].get(pair)
    # rounds whose state holds the clock's event reasons (run 27 on): whether the cap held is read
    # from them, not guessed from the power
    states = [s for s in ((p or {}).get("gpu_state") or {}).get("before", []) if s and "clock_event_reasons" in s]
    if not states:
        return None
    capped = [bool(int(s["clock_event_reasons"]) & POWER_REASONS) for s in states]
    return statistics.median(s["sm_clock_mhz"] for s in states), sum(capped) * 2 > len(capped)


# run_a's machine had no pairs run of its own: its loops take the median over the runs of the same
# days that recorded the cap (27, 28); later runs (29 on) are other machines' and check the model
CLOCK_RUNS = ("run_27", "run_28")


def clock_over_runs(pair: str) -> tuple[float, bool] | None:
    rows = [c for r in CLOCK_RUNS if (c := busy_clock(r, pair)) is not None]
    if not rows:
        return None
    return statistics.median(c for c, _ in rows), all(capped for _, capped in rows)


def top_clock(run: str) -> float:
    text = (RUNS / run / "nvidia_smi.txt").read_text()
    m = re.search(r"Max Clocks\s*\n\s*Graphics\s*:\s*\d+ MHz\s*\n\s*SM\s*:\s*(\d+) MHz", text)
    if not m:
        raise SystemExit(f"no max SM clock in {run}/nvidia_smi.txt")
    return float(m.group(1))


def fit() -> dict[str, float]:
    """The line through the fit loops (run_b, clocks of its machine's pairs run) and the spread."""
    top = top_clock(SAME_MACHINE[FIT_PROBE])
    shares = probe_shares(FIT_PROBE)
    pts = []
    for name in FIT:
        clock = busy_clock(SAME_MACHINE[FIT_PROBE], name)
        assert clock is not None, name
        pts.append((1.0 - clock[0] / top, shares[name]))
    (d1, g1), (d2, g2) = pts
    slope = (g1 - g2) / (d1 - d2)
    onset = d2 - g2 / slope
    repeats: dict[str, list[float]] = {n: [] for n in FIT}
    for shares_of_call in (probe_shares("run_a"), shares, stdout_shares(PROBE / "run_b" / "first_call_stdout.txt")):
        for n in FIT:
            if n in shares_of_call:
                repeats[n].append(shares_of_call[n])
    spread = max((max(v) - min(v)) / 2 for v in repeats.values() if len(v) > 1)
    return {"slope": slope, "onset": onset, "spread": spread, "top_clock_mhz": top}


def probe_savings(run: str) -> dict[str, float]:
    """Each loop's measured saving per step (µs): the sum of its segments' differences."""
    doc = json.loads((PROBE / run / "segments.json").read_text())
    return {n: sum(seg["difference_us"] for seg in p["summary"].values()) for n, p in doc["pairs"].items()}


def replayed_saving_us(run: str, name: str) -> float | None:
    """The replay's no-sync saving per step on the loop's own stack traces (median over captures)."""
    if run == "run_a":
        with tarfile.open(TRACES) as tar, tempfile.TemporaryDirectory() as tmp:
            member = tar.extractfile(f"{name}_stack.json.gz")
            if member is None:
                return None
            path = Path(tmp) / f"{name}.json.gz"
            path.write_bytes(member.read())
            return replayed_idle_us(path)[2]
    traces = sorted((RUNS / SAME_MACHINE[run] / "traces").glob(f"p12_{name}_before_stack*.json.gz"))
    return statistics.median(replayed_idle_us(t)[2] for t in traces) if traces else None


def replay_factor(f: dict[str, float]) -> float:
    """The largest factor, either way, between a fit loop's measured saving and its replayed
    saving times the share the model keeps at its clock."""
    factors = []
    for run in ("run_a", "run_b"):  # the fit's probe runs (run_c checks it)
        measured = probe_savings(run)
        for name in FIT:
            if name not in measured:
                continue
            clock = busy_clock(SAME_MACHINE[run], name) if run in SAME_MACHINE else clock_over_runs(name)
            replayed = replayed_saving_us(run, name)
            if clock is None or not replayed:
                continue
            kept = 1.0 - power_limit.give_back_share(1.0 - clock[0] / f["top_clock_mhz"])
            ratio = measured[name] / (replayed * kept)
            print(
                f"  {run} {name}: measured {measured[name]:.0f} µs, "
                f"replayed {replayed:.0f} x kept {kept:.2f}: {ratio:.2f}"
            )
            factors.append(max(ratio, 1.0 / ratio))
    return max(factors)


def own_clocks() -> None:
    """Where the probe read NVML after each of its rounds (run_c on): each capped loop's median clock
    on both sides, the after side's drop, and the share given back beside it."""
    for run in PROBE_RUNS:
        doc = json.loads((PROBE / run / "segments.json").read_text())
        shares = probe_shares(run)
        rows = []
        for name, p in doc["pairs"].items():
            states = p.get("gpu_state") or {}
            sides = {side: [s for s in states.get(side, []) if s] for side in ("before", "after")}
            if name not in shares or not sides["before"] or not sides["after"]:
                continue
            before, after = (statistics.median(s["sm_clock_mhz"] for s in sides[k]) for k in ("before", "after"))
            temp = statistics.median(s["temperature_c"] for s in sides["before"])
            power = statistics.median(s["power_w"] for s in sides["before"])
            rows.append(
                f"  {run} {name:20s} before {before:6.0f} after {after:6.0f} MHz (drop {before - after:4.0f}), "
                f"{temp:.0f} C, {power:.0f} W; given back {shares[name]:.2f}"
            )
        if rows:
            print(f"the probe's own NVML readings after each round ({run}):")
            print("\n".join(rows))


def main() -> int:
    f = fit()
    print("the replay on the fit loops (measured over replayed x kept):")
    factor = replay_factor(f)
    print(f"replay factor either way: {factor:.2f}; bundled {power_limit.REPLAY_SAVING_FACTOR}")
    print(
        f"fit on {', '.join(FIT)} ({FIT_PROBE}): share = {f['slope']:.2f} x (d - {f['onset']:.3f}), "
        f"spread {f['spread']:.3f}; bundled: {power_limit.GIVE_BACK_SLOPE} x (d - {power_limit.GIVE_BACK_ONSET}), "
        f"spread {power_limit.GIVE_BACK_SPREAD}"
    )
    print(
        f"{'probe':6s} {'loop':20s} {'split':10s} {'clock':>6s} {'capped':>6s} {'measured':>8s} {'model':>11s}  inside"
    )
    inside = total = 0
    for run in PROBE_RUNS:
        for name, measured in probe_shares(run).items():
            same = SAME_MACHINE.get(run)
            clock = busy_clock(same, name) if same else None
            clock = clock or clock_over_runs(name)
            if clock is None:
                continue
            mhz, capped = clock
            # below the limit nothing is given back: the clock is the top's for the model
            given = power_limit.at_clock(mhz if capped else f["top_clock_mhz"], f["top_clock_mhz"])
            share, lo, hi = given.share, given.low, given.high
            split = "fit" if name in FIT else "validation"
            ok = lo - 1e-9 <= measured <= hi + 1e-9
            if split == "validation":
                total += 1
                inside += ok
            print(
                f"{run:6s} {name:20s} {split:10s} {mhz:6.0f} {'yes' if capped else 'no':>6s} {measured:8.2f} "
                f"{share:5.2f}±{power_limit.GIVE_BACK_SPREAD:.2f}  {'yes' if ok else 'no'}"
            )
    print(f"validation loops inside the model's band: {inside} of {total}")
    print("the saving a finding states (replayed saving x kept, widened by the replay factor), validation loops:")
    points: list[tuple[float, float]] = []
    for run in PROBE_RUNS:
        measured = probe_savings(run)
        for name in measured:
            if name in FIT or name == "item_host":
                continue
            clock = busy_clock(SAME_MACHINE[run], name) if run in SAME_MACHINE else clock_over_runs(name)
            replayed = replayed_saving_us(run, name)
            if clock is None or replayed is None:
                continue
            # below the limit nothing is given back: the clock is the top's for the model
            given = power_limit.at_clock(clock[0] if clock[1] else f["top_clock_mhz"], f["top_clock_mhz"])
            lo, hi = given.expected_ns(replayed)
            ok = lo <= measured[name] <= hi
            # the saving the finding states (whatif/savings.power_limited): the replayed idle less the share
            point = replayed * (1.0 - given.share)
            m = measured[name]
            closer = abs(point - m) < abs(replayed - m)
            points.append((abs(point - m), abs(replayed - m)))
            print(
                f"  {run} {name:20s} replayed {replayed:6.0f} µs -> {lo:5.0f}-{hi:5.0f}; "
                f"measured {m:5.0f}: {'inside' if ok else 'outside'}; stated {point:5.0f} µs "
                f"({'closer' if closer else 'not closer' if point != replayed else 'the same'})"
            )
    own_clocks()
    changed = [(a, b) for a, b in points if a != b]
    print(
        f"stated saving (replayed less the give-back) closer to the measured than the replayed idle: "
        f"{sum(a < b for a, b in changed)} of {len(changed)} validation loops where the model gives some back; "
        f"mean error {statistics.mean(a for a, _ in points):.0f} µs against {statistics.mean(b for _, b in points):.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
