"""One-off host stalls: host time one profiled step spent where the same code took next to none in
the window's other steps.

A loop's steps run the same code, so their host events come in the same order. Where one step's
event holds far more time of its own (its duration less its children's: ops, Python frames, runtime
calls) than the same event in every other step, that step's thread stopped for something outside
the loop's work: a garbage collection, page faults, the host descheduled. Run 31's first capture of
p12_gpt_loss_after: the compiled loss's ``## Call CompiledFxGraph`` wrapper held 16.8 ms between two
kernel launches in ProfilerStep#3 against 0.15 ms in ProfilerStep#2, and the step replayed without
the profiler at 28.8 ms where the steps timed around the window took 12.3 ms.

The median step time a user measures rarely holds such a stall, and a window of a few steps whose
later step the steady-state replay repeats (``replay._Window``) would repeat it every step; so the
unprofiled baseline takes each stall's excess out (``profiler_cost.unprofiled_overrides``) and the
report names it. Only windows of fewer than ``replay.STEADY_STEPS`` steps are read: a longer one's
own step ends are the estimate, where a stall weighs one step in many.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceadvisor.analyses.cache import memoised
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.host_time import Region, thread_key

# A stall is an event's own time this much (ns) over the least the same event took in the window's
# other steps, and ``STALL_RATIO`` times that least.
STALL_MIN_NS = 1_000_000
STALL_RATIO = 4.0
# A thread's step of more host records than this is not read (the walk over its records is Python).
MAX_EVENTS = 200_000


@dataclass(frozen=True)
class HostStall:
    """One step's stall: the event (``name``) whose own time held it, the longest stretch of that
    time with nothing recorded (``start_ns``-``end_ns``, where the replay takes it out), and how
    much more it held than the same event's least in the other steps (``excess_ns``, which
    ``usual_ns`` is)."""

    step: str
    thread: int
    name: str
    start_ns: int
    end_ns: int
    excess_ns: int
    usual_ns: int

    @property
    def removed_ns(self) -> int:
        """What the unprofiled baseline takes out: the excess, within the stretch that held it."""
        return min(self.excess_ns, self.end_ns - self.start_ns)

    def region(self) -> Region:
        """The stretch shrunk by the excess (``Region``'s removal starts at its start)."""
        return Region(self.thread, self.start_ns, self.end_ns, self.end_ns - self.start_ns - self.removed_ns)


def _events(trace: Trace) -> pd.DataFrame:
    """Every host record with a duration (ops and annotations, Python frames, runtime calls):
    thread key, start, end, name, and whether it may hold a stall (``candidate``). A runtime call
    never does: a launch that waits for room in the launch queue, or a synchronize, waits for the
    GPU (item_gpu_deep's cudaStreamSynchronize: 0.7 to 3.8 ms from step to step), and the replay
    moves it with the GPU."""
    parts = []
    for table, candidate in ((trace.host, True), (trace.frames, True), (trace.runtime, False)):
        if len(table):
            parts.append(
                pd.DataFrame(
                    {
                        "key": thread_key(table["pid"].to_numpy(), table["tid"].to_numpy()),
                        "ts": table["ts_ns"].to_numpy(np.int64),
                        "end": table["end_ns"].to_numpy(np.int64),
                        "name": table["name"].astype(str).to_numpy(),
                        "candidate": candidate,
                    }
                )
            )
    if not parts:
        return pd.DataFrame({"key": [], "ts": [], "end": [], "name": [], "candidate": []})
    ev = pd.concat(parts, ignore_index=True)
    # ProfilerStep#N differs by N only: one name, so the steps' sequences compare
    ev.loc[ev["name"].str.startswith("ProfilerStep#"), "name"] = "ProfilerStep#"
    return ev


def _own_time(ts: list[int], end: list[int]) -> tuple[list[int], list[tuple[int, int]]]:
    """Per event (sorted by start, longest first on ties): its time outside the events it contains,
    and the longest stretch of it with none of them running. One thread's records nest but for a
    few: a ``record_function`` annotation opens inside a Python frame of its ``__enter__`` and
    closes after it, so an event is the child of the innermost open event that outlasts it, and an
    open event it outlasts is closed (it contains nothing that starts after)."""
    n = len(ts)
    own = [e - s for s, e in zip(ts, end, strict=True)]
    cursor = ts[:]  # where each event's uncovered time resumes
    gap = [(0, 0)] * n
    stack: list[int] = []

    def close(j: int) -> None:
        if end[j] - cursor[j] > gap[j][1] - gap[j][0]:
            gap[j] = (cursor[j], end[j])

    for i in range(n):
        while stack and end[stack[-1]] < end[i]:
            close(stack.pop())
        if stack:
            p = stack[-1]
            covered_from = max(ts[i], cursor[p])
            own[p] -= max(0, end[i] - covered_from)
            if ts[i] - cursor[p] > gap[p][1] - gap[p][0]:
                gap[p] = (cursor[p], ts[i])
            cursor[p] = max(cursor[p], end[i])
        stack.append(i)
    while stack:
        close(stack.pop())
    return own, gap


@memoised
def one_off_stalls(trace: Trace) -> tuple[HostStall, ...]:
    """The stalls of the window's steps (``STALL_MIN_NS``, ``STALL_RATIO``), in time order; none
    without two steps, with ``replay.STEADY_STEPS`` or more, or where a thread's steps did not run
    the same events in the same order (nothing to compare)."""
    from traceadvisor.whatif.replay import STEADY_STEPS

    t = trace.steps.table
    if len(t) < 2 or len(t) >= STEADY_STEPS:
        return ()
    ev = _events(trace)
    if not len(ev):
        return ()
    starts, ends = t["cpu_start_ns"].to_numpy(np.int64), t["cpu_end_ns"].to_numpy(np.int64)
    names = t["name"].astype(str).tolist()
    ts, end = ev["ts"].to_numpy(), ev["end"].to_numpy()
    step = np.full(len(ev), -1, dtype=np.int64)
    for s, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        # whole inside the step: a record the profiler closed only at the trace's end (a frame left
        # open when the window stopped) crosses the steps and nests in nothing
        step[(ts >= a) & (end <= b)] = s
    ev = ev[step >= 0].assign(step=step[step >= 0])
    out: list[HostStall] = []
    for key, mine in ev.groupby("key", sort=False):
        per_step = [
            mine[mine["step"] == s].sort_values(["ts", "end"], ascending=[True, False], kind="stable")
            for s in range(len(t))
        ]
        if any(not len(one) or len(one) > MAX_EVENTS for one in per_step):
            continue
        own = [_own_time(one["ts"].tolist(), one["end"].tolist()) for one in per_step]
        # an event is the same in two steps where it is the same name's same occurrence: a step may
        # hold a few records the other lacks (run 31's p12_gpt_loss_after: 48 more in its second
        # step, the timing loop's CUDA event and a gzip frame), which moves no other name's count
        nth = [one.groupby("name", sort=False).cumcount().to_numpy() for one in per_step]
        index = [
            {(n, int(k)): i for i, (n, k) in enumerate(zip(one["name"].tolist(), ks.tolist(), strict=True))}
            for one, ks in zip(per_step, nth, strict=True)
        ]
        for s, one in enumerate(per_step):
            mine_own = np.array(own[s][0], dtype=np.int64)
            big = np.flatnonzero((mine_own >= STALL_MIN_NS) & one["candidate"].to_numpy(bool))
            names_s = one["name"].tolist()
            for i in big.tolist():
                seen = [
                    own[o][0][j]
                    for o in range(len(t))
                    if o != s and (j := index[o].get((names_s[i], int(nth[s][i])))) is not None
                ]
                if not seen:  # an event no other step ran compares with nothing
                    continue
                least = max(0, min(seen))
                excess = int(mine_own[i]) - least
                if excess >= STALL_MIN_NS and mine_own[i] >= STALL_RATIO * least:
                    a, b = own[s][1][i]
                    out.append(HostStall(names[s], int(key), names_s[i], a, b, excess, least))
    return tuple(sorted(out, key=lambda x: x.start_ns))
