"""SY101: the host blocks on the GPU inside the steady state (explicit or op-induced syncs)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from traceadvisor import Finding, Rule, Severity, Trace
from traceadvisor.rules_api import BLOCKING_CALLS, Capability, Evidence, location_of

# Blocking calls: traceadvisor.rules_api.BLOCKING_CALLS (shared with the idle attribution).
# Ops that force a sync because the host needs a value (or a shape) computed on the GPU.
CAUSING_OPS = (
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::masked_select",
    "aten::index",
    "aten::index_put_",
    "aten::is_nonzero",
    "aten::unique",
    "aten::_unique2",
    "aten::repeat_interleave",
    "aten::multinomial",
    "aten::tolist",
    "aten::to",
    "aten::copy_",
    "aten::_to_copy",
    "aten::cpu",
)
MAX_DEPTH = 8


@dataclass(frozen=True)
class Options:
    min_idle_pct: float = 0.5  # report only when sync-caused GPU idle is at least this share of the steps
    min_per_step: float = 1.0  # ... or when there are at least this many syncs per step


class SyncPoint(Rule):
    """The host waits for the GPU inside the steps: explicit synchronizes or ops that need a GPU value.

    ## Why it matters
    A synchronization blocks the host until the GPU has drained its queue. The host then cannot
    queue work ahead, and after the sync returns the GPU idles until the host launches again: the
    pipeline between CPU and GPU collapses once per sync. `.item()`, `.cpu()`, `.tolist()`,
    `nonzero` and boolean-mask indexing do this implicitly.

    ## How it shows up in a trace
    Blocking runtime calls (`cudaDeviceSynchronize`, `cudaStreamSynchronize`,
    `cudaEventSynchronize`, synchronous `cudaMemcpy`) inside the steps, nested under the op that
    caused them (`aten::item`/`aten::_local_scalar_dense`, `aten::nonzero`, `aten::index` with a
    boolean mask, `aten::to`/`aten::copy_` to the CPU...). The impact is the GPU idle time
    attributed to these syncs (the drain after each one). The single `cudaDeviceSynchronize` the
    profiler adds after the last step, and non-blocking `cudaEventQuery`, are not counted. With
    `with_stack` the finding points at the Python line that triggered the sync.

    ## How to fix
    Keep values on the device (accumulate losses and metrics in tensors), call `.item()` or log
    only every N steps, copy with `.to("cpu", non_blocking=True)` into pinned memory, pass output
    sizes (`repeat_interleave(output_size=)`) and avoid data-dependent shapes (`torch.where` instead
    of boolean-mask indexing). `torch.cuda.set_sync_debug_mode("warn")` reports every sync with
    its stack.

    ## Options
    - `min_idle_pct`: report when the GPU idle caused by syncs is at least this share of the steps.
    - `min_per_step`: report also when there are at least this many syncs per step.

    ## References
    - https://pytorch.org/docs/stable/generated/torch.cuda.set_sync_debug_mode.html
    - https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization
    - https://docs.nvidia.com/nsight-systems/UserGuide/index.html#cuda-synchronization-apis
    """

    code = "SY101"
    name = "sync-point"
    severity = Severity.medium
    requires = frozenset({Capability.gpu})
    Options = Options

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts: Options = self.options
        rt = trace.runtime
        names = rt["name"].astype(str)
        calls = rt[names.isin(BLOCKING_CALLS).to_numpy()]
        if not len(calls):
            return
        steps = trace.steps.table
        excluded = _profiler_final_sync(trace, calls)
        mine = calls.drop(index=excluded)
        if len(steps):
            in_step = trace.step_of(mine["ts_ns"].to_numpy()) >= 0
            mine = mine[in_step]
        if not len(mine):
            return
        # GPU idle caused by syncs: the gaps idle.py attributed to a blocking call, minus those
        # caused by an excluded call (the profiler's final synchronize).
        gaps = trace.idle_attribution
        gaps = gaps[gaps["cause"] == "sync"]
        idle = 0
        if len(gaps):
            be = calls["end_ns"].to_numpy()
            bs = calls["ts_ns"].to_numpy()
            rows = calls.index.to_numpy()
            order = np.argsort(be)
            k = np.searchsorted(be[order], gaps["start_ns"].to_numpy(), side="left")
            keep = np.ones(len(gaps), dtype=bool)
            mine_rows = set(mine.index.tolist())
            for i, kk in enumerate(k.tolist()):
                if kk < len(order):
                    j = order[kk]
                    if bs[j] < int(gaps["end_ns"].iloc[i]) and rows[j] not in mine_rows:
                        keep[i] = False
            idle = int(gaps["dur_ns"].to_numpy()[keep].sum())
        blocked = int(mine["dur_ns"].sum())
        n_steps = max(len(steps), 1)
        per_step = len(mine) / n_steps
        window = trace.analysed_ns
        share = 100.0 * idle / window if window > 0 else 0.0
        if share < opts.min_idle_pct and per_step < opts.min_per_step:
            return
        causes = [self._cause(trace, int(op)) for op in mine["op"].to_numpy()]
        mine = mine.assign(cause=causes)
        by_cause = mine.groupby("cause")["dur_ns"].agg(["size", "sum"]).sort_values("size", ascending=False)
        top_cause = str(by_cause.index[0])
        parts = ", ".join(f"{c} ×{int(r['size'])}" for c, r in by_cause.head(4).iterrows())
        first = mine[mine["cause"] == top_cause].iloc[0]
        location = location_of(trace, int(first["pid"]), int(first["tid"]), int(first["ts_ns"]))
        where = f" at {location.file}:{location.line}" if location else ""
        worst = mine.nlargest(5, "dur_ns")
        evidence = [
            Evidence(name=f"{n} under {c}", ts_us=s / 1000, dur_us=d / 1000)
            for n, c, s, d in zip(
                worst["name"].astype(str), worst["cause"], worst["ts_ns"], worst["dur_ns"], strict=True
            )
        ]
        yield self.finding(
            trace,
            message=(
                f"{len(mine)} host-device synchronizations in the steps ({per_step:.1f} per step), "
                f"most caused by {top_cause}{where}; by cause: {parts}. The host blocked "
                f"{blocked / 1e3:.1f} µs and the GPU then idled {idle / 1e3:.1f} µs ({share:.1f}% of the steps) "
                "waiting for new work."
            ),
            recommendation=(
                f"Remove the sync in {top_cause}: keep values on the device, call .item()/log only every N steps, "
                "copy with .to('cpu', non_blocking=True) into pinned memory, avoid data-dependent shapes "
                "(boolean-mask indexing, nonzero); find every sync with torch.cuda.set_sync_debug_mode('warn')."
            ),
            impact_ns=idle,
            basis="GPU idle after blocking synchronize calls in the steps (drain and refill of the launch queue)",
            evidence=evidence,
            location=location,
            data={
                "syncs": len(mine),
                "per_step": per_step,
                "blocked_us": blocked / 1e3,
                "idle_us": idle / 1e3,
                "top_cause": top_cause,
            },
        )

    @staticmethod
    def _cause(trace: Trace, op: int) -> str:
        """The outermost sync-causing op above a runtime call (e.g. ``aten::item``), else its op."""
        if op < 0:
            return "host code (outside any op)"
        nest = trace.nesting
        found = str(trace.host.at[op, "name"])
        cur = op
        for _ in range(MAX_DEPTH):
            if cur < 0:
                break
            name = str(trace.host.at[cur, "name"])
            if name in CAUSING_OPS:
                found = name
            cur = int(nest.at[cur, "parent"])
        return found


def _profiler_final_sync(trace: Trace, calls) -> list[int]:
    """Row of the device synchronize the profiler issues after the last step (if any)."""
    dev = calls[calls["name"].astype(str).isin(["cudaDeviceSynchronize", "hipDeviceSynchronize", "cuCtxSynchronize"])]
    if not len(dev):
        return []
    last = dev.loc[dev["ts_ns"].idxmax()]
    steps = trace.steps.table
    after_steps = not len(steps) or int(last["ts_ns"]) >= int(steps["cpu_end_ns"].max())
    later = calls[calls["ts_ns"] > last["ts_ns"]]
    if after_steps and not len(later) and int(last["op"]) < 0:
        return [int(dev["ts_ns"].idxmax())]
    return []
