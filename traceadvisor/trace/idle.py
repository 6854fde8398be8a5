"""Why the GPU was idle: each idle gap attributed to exactly one primary cause.

Causes, in priority order (the first that applies wins, so no gap is counted twice):

1. ``sync``: the host sat in a blocking synchronize call or blocking copy when the gap began, or
   such a call returned inside the gap (the GPU drained its queue, then waited for new work);
2. ``data_loading``: the host was inside a DataLoader ``__next__`` during most of the gap;
3. ``cpu_op``: the next GPU work was launched late because the host was busy in a CPU op (named);
4. ``launch_latency``: a short gap (≤ ``LAUNCH_LATENCY_NS``) between back-to-back work, the cost of
   launching itself;
5. ``unknown``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceadvisor.trace.cuda_api import BLOCKING_CALLS
from traceadvisor.trace.model import Trace

# Back-to-back kernels on an idle stream start ~2-5 µs apart on recent GPUs (launch latency);
# HTA calls gaps under its 30 ns cut-off "kernel-kernel"; the rule catalog proposes up to ~2 µs.
LAUNCH_LATENCY_NS = 2_000
DATA_LOADER_MARK = "DataLoader"
CAUSES = ("sync", "data_loading", "cpu_op", "launch_latency", "unknown")


def blocking_calls(trace: Trace) -> pd.DataFrame:
    """Runtime calls that block the host until the GPU catches up."""
    rt = trace.runtime
    names = rt["name"].astype(str)
    return rt[names.isin(BLOCKING_CALLS).to_numpy()]


def loader_spans(trace: Trace) -> pd.DataFrame:
    """DataLoader ``__next__`` spans (annotations and Python frames)."""
    ann = trace.annotations
    mask = ann["name"].astype(str).str.contains(DATA_LOADER_MARK, regex=False).to_numpy()
    return ann[mask]


def attribute(trace: Trace, device: int, lo: int, hi: int) -> pd.DataFrame:
    """Idle gaps of ``device`` inside ``[lo, hi)`` with ``cause``, ``detail`` and ``host_row``."""
    gaps = trace.idle_gaps(device, lo, hi)
    n = len(gaps)
    cause = np.full(n, "unknown", dtype=object)
    detail = np.full(n, "", dtype=object)
    host_row = np.full(n, -1, dtype=np.int64)
    if not n:
        return gaps.assign(cause=cause, detail=detail, host_row=host_row)
    gs, ge = gaps["start_ns"].to_numpy(), gaps["end_ns"].to_numpy()
    todo = np.ones(n, dtype=bool)

    # 1. sync: a blocking call overlapping the gap's start, or returning inside it.
    bc = blocking_calls(trace)
    if len(bc):
        bs, be = bc["ts_ns"].to_numpy(), bc["end_ns"].to_numpy()
        names = bc["name"].astype(str).to_numpy()
        order = np.argsort(be)
        be_sorted = be[order]
        k = np.searchsorted(be_sorted, gs, side="left")  # first call ending at or after the gap start
        for i in np.flatnonzero(todo & (k < len(be_sorted))):
            j = order[k[i]]
            if bs[j] < ge[i]:
                cause[i], detail[i], host_row[i] = "sync", names[j], int(bc["op"].to_numpy()[j])
                todo[i] = False

    # 2. data loading: inside a DataLoader __next__ for most of the gap.
    dl = loader_spans(trace)
    if len(dl):
        for i in np.flatnonzero(todo):
            ov = np.minimum(dl["end_ns"].to_numpy(), ge[i]) - np.maximum(dl["ts_ns"].to_numpy(), gs[i])
            if ov.max(initial=0) * 2 >= ge[i] - gs[i]:
                j = int(np.argmax(ov))
                cause[i], detail[i], host_row[i] = "data_loading", str(dl["name"].iloc[j]), int(dl.index[j])
                todo[i] = False

    # 3./4. the work that ended the gap: launched after the gap began → the host was late.
    g = trace.gpu[(trace.gpu["device"] == device) & (trace.gpu["launch"] >= 0)].sort_values("ts_ns")
    if len(g):
        starts = g["ts_ns"].to_numpy()
        nxt = np.searchsorted(starts, ge[todo], side="left")
        idx = np.flatnonzero(todo)
        rt = trace.runtime
        late: list[int] = []
        late_pid: list[int] = []
        late_tid: list[int] = []
        g_launch = g["launch"].to_numpy()
        rt_ts, rt_pid, rt_tid = rt["ts_ns"].to_numpy(), rt["pid"].to_numpy(), rt["tid"].to_numpy()
        for gi, k in zip(idx.tolist(), nxt.tolist(), strict=True):
            if ge[gi] - gs[gi] <= LAUNCH_LATENCY_NS:
                cause[gi] = "launch_latency"
                continue
            if k >= len(g):
                continue
            launch = int(g_launch[k])
            if rt_ts[launch] > gs[gi]:
                late.append(gi)
                late_pid.append(int(rt_pid[launch]))
                late_tid.append(int(rt_tid[launch]))
        if late:
            # One batched lookup: the op each launching thread was in when the gap began.
            ops = trace.innermost_op_at(np.array(late_pid), np.array(late_tid), gs[np.array(late)])
            names = trace.host["name"]
            for gi, op in zip(late, ops.tolist(), strict=True):
                cause[gi] = "cpu_op"
                if op >= 0:
                    detail[gi], host_row[gi] = str(names.at[op]), op
                else:
                    detail[gi] = "host (outside any op)"
    return gaps.assign(cause=cause, detail=detail, host_row=host_row)


def breakdown(trace: Trace) -> dict[str, int]:
    """Idle nanoseconds per cause over the analysis window of the busiest device."""
    if not trace.device_ids:
        return {}
    lo, hi, _ = trace.analysis_window
    df = attribute(trace, trace.device_ids[0], lo, hi)
    out = dict.fromkeys(CAUSES, 0)
    for c, v in df.groupby("cause")["dur_ns"].sum().items():
        out[str(c)] = int(v)
    return out
