"""SY101: the host blocks on the GPU inside the steady state (explicit or op-induced syncs)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceadvisor.rules_api import (
    BLOCKING_CALLS,
    POWER_KEPT_SPAN_MEASURED,
    Capability,
    ClaimedIdle,
    Finding,
    IdleCause,
    Location,
    Overrides,
    Rule,
    Saving,
    Severity,
    Trace,
    at_source,
    evidence_of,
    fmt_ns,
    gpu_power_state,
    idle_of,
    in_steps,
    leaves_gpu_bound,
    per_step,
    plural,
    power_capped_unprofiled,
    power_give_back,
    replay_basis,
    saving_of,
    share_of_steps_text,
    sync_location,
    us,
)

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

RECOMMENDATION = (
    "Remove the sync in {}: keep values on the device, call .item()/log only every N steps, "
    "copy with .to('cpu', non_blocking=True) into pinned memory, avoid data-dependent shapes "
    "(boolean-mask indexing, nonzero); find every sync with torch.cuda.set_sync_debug_mode('warn')."
)
BASIS = "the blocking syncs in the steps no longer wait (the GPU work they waited for stays)"

# What a GPU held at its power limit gives back of the idle a sync leaves, as faster kernels on
# the side that idles, is rules_api.power_give_back's (whatif/power_limit.py): a line in how far
# below its top clock the program ran unprofiled, fitted on two fit loops and inside its band on
# four of eight validation loops (fixtures/gpu_segment_probe/, ``python bench/power_give_back.py``).
# The saving stays the replay's either way (whatif/savings.py, ``power_limited``: taken off, the
# give-back made more validation savings miss than it mended). Where the trace holds that clock, the
# message gives the model's give-back and the range down to it; where it does not, the span
# measured on all six loops (rules_api.POWER_KEPT_SPAN_MEASURED: 44-99% of the replayed saving came
# true).


@dataclass(frozen=True)
class Options:
    min_idle_pct: float = 0.5  # report when the replayed saving is at least this share of the unprofiled step
    min_per_step: float = 1.0  # ... or when there are at least this many syncs per step
    profiler_event_us: float | None = None  # a flat profiler cost per recorded event (idle figures); None: fitted


class SyncPoint(Rule[Options]):
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
    boolean mask, `aten::to`/`aten::copy_` to the CPU...). The rule claims the idle gaps the
    attribution gives to these calls: the drain after each one (a call in flight when the GPU
    went idle, or returning inside the gap) and the rest of the op that synchronized (e.g.
    `aten::nonzero` sizing its output, a masked `aten::index` launching its gather). The saving
    is a what-if replay: the trace replayed without the profiler's host cost, then again with
    these calls no longer waiting (the GPU work they waited for stays, what the host did after
    them moves earlier); a sync in a GPU-bound loop, whose host is far ahead anyway, saves little
    however long it blocks. Where the fix leaves the step GPU-bound on a GPU held at its power
    limit, the kernels run slower once the GPU idles less, the more the further below its top clock
    the program runs (H200 loops at the 700 W limit: 1-15% of the idle given back at 1,860-1,980
    MHz, 28-96% at 1,650-1,785). The saving stays the replayed idle: the clock does not predict
    the give-back's size across machines (taken off the saving, the model made more of the GPU
    pairs' validation savings miss than it mended). Where capture read the clock the program ran at
    without the profiler, the message gives the model's share at that clock
    (`whatif/power_limit.py`) and a range down to the saving less it; without that reading, the
    measured span (44-99% of the idle saved). The single
    `cudaDeviceSynchronize` the profiler adds after the last step, and non-blocking
    `cudaEventQuery`, are not counted. With `with_stack` the finding
    names the Python function that synchronized (the trace gives only its first line); a trace
    from `traceadvisor capture` or the in-loop advisor on a GPU also holds each sync's call site,
    and the finding then gives the exact line.

    ## How to fix
    Keep values on the device (accumulate losses and metrics in tensors), call `.item()` or log
    only every N steps, copy with `.to("cpu", non_blocking=True)` into pinned memory, pass output
    sizes (`repeat_interleave(output_size=)`) and avoid data-dependent shapes (`torch.where` instead
    of boolean-mask indexing). `torch.cuda.set_sync_debug_mode("warn")` reports every sync with
    its stack.

    ## Options
    - `min_idle_pct`: report when the replayed saving is at least this share of the predicted
      unprofiled step (%).
    - `min_per_step`: report also when there are at least this many syncs per step.
    - `profiler_event_us`: a flat host cost per recorded op, annotation or Python frame for the idle
      figures of the message, instead of the fitted cost of each kind (default: unset, the fitted
      costs the replay uses; `0` gives the raw idle).

    ## References
    - https://pytorch.org/docs/stable/generated/torch.cuda.set_sync_debug_mode.html
    - https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization
    - https://docs.nvidia.com/nsight-systems/UserGuide/index.html#cuda-synchronization-apis
    """

    code = "SY101"
    name = "sync-point"
    severity = Severity.medium
    requires = frozenset({Capability.gpu})
    claims = frozenset({IdleCause.sync})

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        rt = trace.runtime
        calls = rt[rt["name"].isin(BLOCKING_CALLS).to_numpy()]
        if not len(calls):
            return
        mine = in_steps(trace, calls.drop(index=_profiler_final_sync(trace, calls)))
        if not len(mine):
            return
        # The idle this rule claims: gaps the attribution gave to one of these calls (the drain after
        # it, or the host still inside the op that synchronized), not to the profiler's final sync.
        gaps = idle_of(trace, IdleCause.sync)
        gaps = gaps[np.isin(gaps["blocking_row"].to_numpy(), mine.index.to_numpy())]
        idle = ClaimedIdle.of(gaps, opts.profiler_event_us, trace)
        per_step_count = len(mine) / max(len(trace.steps.table), 1)
        # The saving: the trace replayed without the profiler, then with these syncs' waits removed
        # (the GPU work they waited for stays; what the host did after them moves earlier).
        # Without steps there is no step to replay (a trace of one window): the finding has no saving.
        has_steps = len(trace.steps.table) > 0
        replayed = saving_of(trace, "no-sync", Overrides(no_wait=frozenset(int(r) for r in mine.index)))
        if replayed.share_pct < opts.min_idle_pct and per_step_count < opts.min_per_step:
            return
        mine = mine.assign(cause=_causes(trace, mine))
        by_cause = _by_cause(mine)
        top_cause = str(by_cause.index[0])
        # Its first call: at the exact line where capture recorded the sync's call site.
        location = sync_location(trace, int(mine.index[(mine["cause"] == top_cause).to_numpy()][0]))
        worst = mine.nlargest(5, "dur_ns")
        labels = (f"{n} under {c}" for n, c in zip(worst["name"].astype(str), worst["cause"], strict=True))
        yield self.finding(
            trace,
            message=_message(trace, mine, by_cause, location, idle, replayed) + _power_note(trace, replayed),
            recommendation=RECOMMENDATION.format(top_cause),
            per_step=per_step(replayed) if has_steps else None,
            basis=replay_basis(replayed, BASIS) if has_steps else "",
            evidence=evidence_of(worst, labels),
            location=location,
            data={
                "syncs": len(mine),
                "per_step": per_step_count,
                "blocked_us": us(int(mine["dur_ns"].sum())),
                "idle_us": us(idle.raw_ns),
                "recoverable_us": us(idle.recoverable_ns),
                "top_cause": top_cause,
            },
        )


def _by_cause(mine: pd.DataFrame) -> pd.DataFrame:
    """Count and blocked time of the calls per causing op, most calls first."""
    return mine.groupby("cause")["dur_ns"].agg(["size", "sum"]).sort_values("size", ascending=False)


def _message(
    trace: Trace,
    mine: pd.DataFrame,
    by_cause: pd.DataFrame,
    location: Location | None,
    idle: ClaimedIdle,
    replayed: Saving,
) -> str:
    top_cause = str(by_cause.index[0])
    parts = ", ".join(f"{c} ×{int(r['size'])}" for c, r in by_cause.head(4).iterrows())
    per_step = len(mine) / max(len(trace.steps.table), 1)
    return (
        f"{plural(len(mine), 'host-device synchronization')} in the steps ({per_step:.1f} per step), "
        f"most caused by {top_cause}{at_source(location)}; by cause: {parts}. The host "
        f"blocked {fmt_ns(int(mine['dur_ns'].sum()))} and the GPU idled {fmt_ns(idle.raw_ns)} "
        f"({share_of_steps_text(trace, idle.raw_ns)}) draining and refilling its queue around them. "
        + (
            _replayed_text(trace, replayed)
            if len(trace.steps.table)
            else "The trace has no steps: no step to replay, so no saving is estimated."
        )
        + _line_note(location)
    )


def _replayed_text(trace: Trace, replayed: Saving) -> str:
    """The saving, as the replay gives it, and (at the power limit) what the GPU may give back of it."""
    share = f"{replayed.share_pct:.1f}% of the {fmt_ns(replayed.before_ns)} predicted unprofiled step"
    given = replayed.give_back
    if given is None:
        return (
            f"Replayed without the profiler and without these waits, the step takes {fmt_ns(replayed.saving_ns)} "
            f"less ({share})."
        )
    state = gpu_power_state(trace) or {}
    unprofiled = state.get("unprofiled") or {}
    sampled = isinstance(unprofiled.get("clock_samples"), int) and "sm_clock_mhz_median" in unprofiled
    power = unprofiled.get("power_w_median", unprofiled.get("power_w"))
    drawn = ""
    if isinstance(power, int | float) and isinstance(unprofiled.get("power_limit_w"), int | float):
        drawn = f", {power:.0f} of {unprofiled['power_limit_w']:.0f} W"
    clock = (
        f"median SM clock {given.clock_mhz:.0f} of {given.top_clock_mhz:.0f} MHz over "
        f"{unprofiled['clock_samples']} readings{drawn}"
        if sampled
        else f"SM clock {given.clock_mhz:.0f} of {given.top_clock_mhz:.0f} MHz{drawn}"
    )
    return (
        f"Replayed without the profiler and without these waits, the step takes {fmt_ns(replayed.saving_ns)} "
        f"less ({share}), and the GPU is then busy through it. Without the profiler it ran at its power limit "
        f"(NVML: {clock}), where a GPU that idles less runs its kernels slower and gives part of the idle "
        f"back: at that clock the power-limit model gives back {given.share * 100:.0f}% "
        f"({given.low * 100:.0f}-{given.high * 100:.0f}%), {fmt_ns(replayed.power_give_back_ns)} a step."
    )


def _power_note(trace: Trace, replayed: Saving) -> str:
    """Where the fix leaves the step GPU-bound: the share of the saving a GPU at its power limit
    keeps. Where the model places the give-back (the trace's ``gpu_power.unprofiled`` reading:
    capture/gpu_power.py), the range from the saving less it (with the replay's own error on such
    loops) to the saving; the measured
    span where the trace has only the profiled window's reading, or none (then as a condition);
    empty where the GPU was below its limit, where at its clock nothing comes back, otherwise, or
    without steps."""
    if replayed.refused or not len(trace.steps.table) or replayed.saving_ns <= 0:
        return ""
    if replayed.give_back is not None:
        # the saving stated is the replayed idle: the model's give-back, with the replay's own error
        # on such loops, is the low end (whatif/savings.py power_limited says why it is not taken off)
        lo_ns, _ = replayed.give_back.expected_ns(replayed.saving_ns)
        return (
            f" The clock does not predict the give-back's size across machines, so the saving stated is the "
            f"replayed one: expect {fmt_ns(lo_ns)} to {fmt_ns(replayed.saving_ns)}."
        )
    if not leaves_gpu_bound(trace, replayed):
        return ""
    state = gpu_power_state(trace)
    capped_unprofiled = power_capped_unprofiled(state)
    if capped_unprofiled is False or (
        capped_unprofiled is None and state is not None and not state.get("power_capped")
    ):
        return ""
    if power_give_back(state) is not None:
        return ""  # near its top clock the GPU gives (almost) nothing back: the replayed saving stands

    lo, hi = POWER_KEPT_SPAN_MEASURED
    expect = f"expect {fmt_ns(lo * replayed.saving_ns)} to {fmt_ns(hi * replayed.saving_ns)}"
    why = (
        "a GPU that idles less runs its kernels slower there, the more the further below its top clock it runs "
        f"({lo * 100:.0f}-{hi * 100:.0f}% of the idle was saved on six H200 loops at the limit)"
    )
    if state is not None:
        drawn = ""
        if isinstance(state.get("power_w"), int | float) and isinstance(state.get("power_limit_w"), int | float):
            drawn = f", {state['power_w']:.0f} of {state['power_limit_w']:.0f} W"
        return (
            f" Without these waits the GPU is busy through the step, and it ran at its power limit when the "
            f"window ended (NVML{drawn}): {expect}: {why}."
        )
    return (
        f" Without these waits the GPU is busy through the step. If it runs at its power limit "
        f"(nvidia-smi -q -d PERFORMANCE: SW Power Cap active), {expect}: {why}."
    )


def _line_note(location: Location | None) -> str:
    """Say so when the location's line is not the sync's: the profiler names a Python frame by its
    function's first line (or where it was when profiling began), never by the line of the call."""
    if location is None or location.line_kind == "exact":
        return ""
    return (
        " The trace names the function of a sync, not its line: "
        "torch.cuda.set_sync_debug_mode('warn') prints the line of each."
    )


def _causes(trace: Trace, calls: pd.DataFrame) -> list[str]:
    """For each runtime call: the outermost sync-causing op around it on its thread (e.g. ``aten::item``),
    else the op that issued it."""
    host = trace.host
    names = host["name"]
    cats = np.asarray(names.cat.categories.astype(str), dtype=object)
    codes = names.cat.codes.to_numpy()
    causing = np.flatnonzero(np.isin(cats, CAUSING_OPS)[codes] & ~host["is_annotation"].to_numpy())
    h_pid, h_tid = host["pid"].to_numpy()[causing], host["tid"].to_numpy()[causing]
    h_ts, h_end = host["ts_ns"].to_numpy()[causing], host["end_ns"].to_numpy()[causing]
    h_rows = host.index.to_numpy()[causing]
    ts = calls["ts_ns"].to_numpy()
    row = calls["op"].to_numpy().copy()
    pid, tid = calls["pid"].to_numpy(), calls["tid"].to_numpy()
    threads = pd.DataFrame({"pid": pid, "tid": tid}).drop_duplicates()
    for p, t in zip(threads["pid"].tolist(), threads["tid"].tolist(), strict=True):
        sel = np.flatnonzero((pid == p) & (tid == t))
        mine = np.flatnonzero((h_pid == p) & (h_tid == t))
        order = mine[np.lexsort((h_ts[mine] - h_end[mine], h_ts[mine]))]
        start, end = h_ts[order], h_end[order]
        if not len(order):
            continue
        outer = np.ones(len(order), dtype=bool)  # not inside an earlier causing op
        outer[1:] = start[1:] >= np.maximum.accumulate(end)[:-1]
        start, end, rows = start[outer], end[outer], h_rows[order][outer]
        j = np.searchsorted(start, ts[sel], side="right") - 1
        ok = j >= 0
        ok[ok] = end[j[ok]] > ts[sel][ok]
        row[sel[ok]] = rows[j[ok]]
    out = np.where(row >= 0, cats[codes[np.maximum(row, 0)]], "host code (outside any op)")
    return [str(x) for x in out]


def _profiler_final_sync(trace: Trace, calls: pd.DataFrame) -> list[int]:
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
