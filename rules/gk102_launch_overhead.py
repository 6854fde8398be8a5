"""GK102: launch-bound steps: many tiny kernels, each shorter than its own launch call."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from traceadvisor import Finding, Rule, Severity, Trace
from traceadvisor.rules_api import Capability, location_of

KERNEL = 0
GRAPH_LAUNCH = ("cudaGraphLaunch", "hipGraphLaunch")


@dataclass(frozen=True)
class Options:
    min_short_pct: float = 50.0  # share of kernels shorter than their launch call that makes a step launch-bound
    max_busy_pct: float = 70.0  # ... while the GPU is busy less than this share of the step
    min_launch_pct: float = 3.0  # ... and launch calls take at least this share of the step


class LaunchOverhead(Rule):
    """Steps are launch-bound: the host spends longer launching kernels than the GPU runs them.

    ## Why it matters
    Each kernel launch costs the host a few microseconds. When kernels are shorter than that, the
    GPU finishes each one before the next arrives and starves, however fast the kernels are.

    ## How it shows up in a trace
    Per step: most kernels (≥ 50%) run shorter than their `cudaLaunchKernel` call, the GPU is busy
    less than 70% of the step, and launch calls take ≥ 3% of it. Kernels replayed from a CUDA
    graph (`cudaGraphLaunch`) are not counted. The estimated saving from CUDA Graphs is the
    launch-latency idle inside those steps plus the host launch-call time beyond the GPU time of
    the short kernels. GPU idle while the host runs other CPU work belongs to `idle-gap`.

    ## How to fix
    Capture the step in a CUDA graph (`torch.cuda.graphs`, `torch.cuda.make_graphed_callables`)
    or compile it with `torch.compile(mode="reduce-overhead")`; fuse small ops with
    `torch.compile`, use foreach/fused optimizers, or increase the batch size so each kernel does
    more work.

    ## Options
    - `min_short_pct`: share of kernels shorter than their launch call that marks a step (%).
    - `max_busy_pct`: a step is starved when the GPU is busy less than this share of it (%).
    - `min_launch_pct`: launch calls must take at least this share of the step (%).

    ## References
    - https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs
    - https://pytorch.org/docs/stable/generated/torch.compile.html
    - https://hta.readthedocs.io/en/latest/source/features/cuda_kernel_launch_stats.html
    """

    code = "GK102"
    name = "launch-overhead"
    severity = Severity.medium
    requires = frozenset({Capability.gpu, Capability.steps})
    Options = Options

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts: Options = self.options
        steps = trace.steps.table
        dev = trace.device_ids[0]
        rt = trace.runtime
        k = trace.kernels
        k = k[(k["device"] == dev) & (k["launch"] >= 0)]
        if not len(k) or not len(steps):
            return
        lrows = k["launch"].to_numpy()
        lnames = rt["name"].astype(str).to_numpy()[lrows]
        k = k[~np.isin(lnames, GRAPH_LAUNCH) & (k["graph_id"].to_numpy() <= 0)]
        if not len(k):
            return
        lrows = k["launch"].to_numpy()
        launch_dur = rt["dur_ns"].to_numpy()[lrows]
        launch_ts = rt["ts_ns"].to_numpy()[lrows]
        kdur = k["dur_ns"].to_numpy()
        step_no = trace.step_of(launch_ts)
        gaps = trace.idle_attribution
        lat = gaps[gaps["cause"] == "launch_latency"]
        bound = []
        saving = 0.0
        n_kernels = n_short = 0
        launch_total = 0.0
        for r in steps.itertuples():
            if r.gpu_start_ns < 0:
                continue
            sel = step_no == r.step
            if not sel.any():
                continue
            span = max(r.cpu_end_ns, r.gpu_end_ns) - min(r.cpu_start_ns, r.gpu_start_ns)
            busy = trace.busy_ns(dev, int(r.gpu_start_ns), int(r.gpu_end_ns))
            short = kdur[sel] < launch_dur[sel]
            short_pct = 100.0 * short.mean()
            busy_pct = 100.0 * busy / span if span > 0 else 100.0
            launch_pct = 100.0 * launch_dur[sel].sum() / span if span > 0 else 0.0
            if short_pct < opts.min_short_pct or busy_pct >= opts.max_busy_pct or launch_pct < opts.min_launch_pct:
                continue
            in_step = (lat["start_ns"] >= r.gpu_start_ns) & (lat["end_ns"] <= r.gpu_end_ns)
            host_excess = max(float(launch_dur[sel][short].sum() - kdur[sel][short].sum()), 0.0)
            saving += float(lat.loc[in_step, "dur_ns"].sum()) + host_excess
            n_kernels += int(sel.sum())
            n_short += int(short.sum())
            launch_total += float(launch_dur[sel].sum())
            bound.append((int(r.step), busy_pct, short_pct))
        if not bound:
            return
        n = len(bound)
        busy_avg = sum(b for _, b, _ in bound) / n
        med = float(np.median(kdur[np.isin(step_no, [s for s, _, _ in bound])])) / 1e3
        sel_all = np.isin(step_no, [s for s, _, _ in bound])
        first = int(np.flatnonzero(sel_all)[0])
        lr = rt.loc[int(lrows[first])]
        location = location_of(trace, int(lr["pid"]), int(lr["tid"]), int(lr["ts_ns"]))
        top = k[sel_all]["name"].astype(str).value_counts().head(3)
        tops = ", ".join(f"{nm[:60]} ×{c}" for nm, c in top.items())
        yield self.finding(
            trace,
            message=(
                f"{n} of {len(steps)} steps are launch-bound: {n_kernels / n:.0f} kernels per step, "
                f"{100 * n_short / max(n_kernels, 1):.0f}% shorter than their launch call (median kernel "
                f"{med:.1f} µs), GPU busy {busy_avg:.0f}% of the step, launch calls {launch_total / 1e3:.1f} µs. "
                f"CUDA Graphs would save about {saving / 1e3:.1f} µs. Most launched: {tops}."
            ),
            recommendation=(
                'Capture the step with CUDA Graphs (torch.cuda.graphs / torch.compile(mode="reduce-overhead")), '
                "fuse small ops with torch.compile, use foreach/fused optimizers, or raise the batch size."
            ),
            impact_ns=saving,
            basis=(
                "launch-latency GPU idle in launch-bound steps plus host launch-call time beyond the GPU time of "
                "short kernels (idle while the host ran other CPU work is idle-gap's)"
            ),
            location=location,
            data={
                "launch_bound_steps": n,
                "kernels_per_step": n_kernels / n,
                "short_pct": 100 * n_short / max(n_kernels, 1),
                "busy_pct": busy_avg,
                "median_kernel_us": med,
                "saving_us": saving / 1e3,
            },
        )
