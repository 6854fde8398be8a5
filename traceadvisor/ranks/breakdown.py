"""Per (rank, step) breakdown that adds up, and the exposed parts of each collective.

One step's span (CPU start to the later of its CPU end and its GPU work's end) splits into
``compute + comm_exposed + memcpy_exposed + idle = step`` (the Ascend ``cluster_time_summary`` schema,
TraceLens' assertion; docs/multirank.md):

* on a GPU trace, over the main device: compute = the union of non-communication kernels;
  communication = the union of NCCL/RCCL kernels (``analyses/communication.py``) and of the
  collectives' spans (gloo runs those of CUDA tensors on the host), exposed where no compute runs;
  memcpy/memset exposed where neither runs; idle the rest;
* on a CPU trace (gloo), over the thread that records the steps: compute = the union of its ops
  and annotations (not the step marker, not the DataLoader fetch, not the c10d enqueue ops);
  communication = the union of the collectives' spans (gloo's worker annotations cover the
  collective, waiting for peers included: ``ranks/collectives.py``), exposed where the thread runs
  no op (DDP waits for its buckets outside any op); idle the rest, DataLoader fetches included.

Informational columns beside the sum: ``input_ns`` (DataLoader ``__next__`` time on the step's
thread), ``host_ns`` (the step's CPU time outside every op and annotation on that thread), ``h2d_ns``
(host-to-device copies on the GPU); and the same split of the step's *lead*, from its start to its
first collective (``lead_ns``, ``lead_input_ns``, ``lead_host_ns``, ``lead_compute_ns``,
``lead_h2d_ns``): a straggler arrives late at the first collective because of what it did in its
lead, while the other ranks' later waits for it land in their own host time, so only the lead
names the straggler's class (input, host, compute, H2D: traceml's classes).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.analyses.communication import communication_kernels
from traceadvisor.trace import intervals
from traceadvisor.trace.columns import KERNEL
from traceadvisor.trace.model import Trace

I64 = npt.NDArray[np.int64]

BREAKDOWN_COLUMNS = (
    "step",
    "start_ns",
    "step_ns",
    "compute_ns",
    "comm_ns",
    "comm_exposed_ns",
    "memcpy_exposed_ns",
    "idle_ns",
    "input_ns",
    "host_ns",
    "h2d_ns",
    "lead_ns",
    "lead_input_ns",
    "lead_host_ns",
    "lead_compute_ns",
    "lead_h2d_ns",
)
# DataLoader fetches as the profiler names them (torch/utils/data/dataloader.py: record_function
# "enumerate(DataLoader)#{name}.__next__").
DATALOADER_PREFIX = "enumerate(DataLoader)#"
# Host ops that only enqueue a collective (the work runs on NCCL's stream or gloo's worker threads).
_COMM_HOST_OPS = ("c10d::", "record_param_comms", "nccl:", "gloo:")


def step_spans(trace: Trace) -> pd.DataFrame:
    """``steps`` table of a summary: each step's span and the thread that recorded it."""
    t = trace.steps.table
    if not len(t):
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("step", "start_ns", "end_ns", "cpu_end_ns")})
    end = np.maximum(t["cpu_end_ns"].to_numpy(), t["gpu_end_ns"].to_numpy())
    return pd.DataFrame(
        {
            "step": t["step"].to_numpy(dtype=np.int64),
            "start_ns": t["cpu_start_ns"].to_numpy(dtype=np.int64),
            "end_ns": end.astype(np.int64),
            "cpu_end_ns": t["cpu_end_ns"].to_numpy(dtype=np.int64),
        }
    )


def step_thread(trace: Trace) -> tuple[int, int] | None:
    """(pid, tid) of the thread whose ProfilerStep annotations define the steps."""
    t = trace.steps.table
    if not len(t):
        return None
    ann = trace.annotations
    first = t.iloc[0]
    hit = ann[(ann["name"].astype(str) == str(first["name"])) & (ann["ts_ns"] == int(first["cpu_start_ns"]))]
    if not len(hit):
        return None
    return int(hit["pid"].iat[0]), int(hit["tid"].iat[0])


def breakdown(trace: Trace, colls: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(``breakdown`` table, ``comm_exposed`` table) of a summary; ``colls``: ``rank_collectives``."""
    steps = step_spans(trace)
    thread = step_thread(trace)
    host = trace.host
    on_thread = (
        (host["pid"].to_numpy() == thread[0]) & (host["tid"].to_numpy() == thread[1])
        if thread is not None
        else np.zeros(len(host), dtype=bool)
    )
    names = host["name"].astype(str)
    is_step = names.str.startswith("ProfilerStep#").to_numpy()
    is_input = names.str.startswith(DATALOADER_PREFIX).to_numpy()
    is_comm_op = names.str.startswith(_COMM_HOST_OPS).to_numpy()
    hs, he = host["ts_ns"].to_numpy(), host["end_ns"].to_numpy()
    busy_s, busy_e = intervals.merge(hs[on_thread & ~is_step], he[on_thread & ~is_step])
    in_s, in_e = intervals.merge(hs[on_thread & is_input], he[on_thread & is_input])

    gpu = trace.gpu
    main = trace.device_ids[0] if trace.device_ids else None
    if main is not None:
        g = gpu[gpu["device"] == main]
        comm_rows = g.index.isin(communication_kernels(trace))
        kernel = g["kind"].to_numpy() == KERNEL
        gs, ge = g["ts_ns"].to_numpy(), g["end_ns"].to_numpy()
        comp_s, comp_e = intervals.merge(gs[kernel & ~comm_rows], ge[kernel & ~comm_rows])
        # the communication kernels and every collective's own span: on gloo the collectives of
        # CUDA tensors run on the host (staged through it) while the GPU waits
        comm_s, comm_e = intervals.merge(
            np.concatenate((gs[comm_rows], colls["start_ns"].to_numpy(dtype=np.int64))),
            np.concatenate((ge[comm_rows], colls["end_ns"].to_numpy(dtype=np.int64))),
        )
        copy = ~kernel
        cp_s, cp_e = intervals.merge(gs[copy], ge[copy])
        h2d = copy & g["name"].astype(str).str.contains("HtoD", regex=False).to_numpy()
        h2d_s, h2d_e = intervals.merge(gs[h2d], ge[h2d])
    else:
        work = on_thread & ~is_step & ~is_input & ~is_comm_op
        comp_s, comp_e = intervals.merge(hs[work], he[work])
        c = colls
        comm_s, comm_e = intervals.merge(c["start_ns"].to_numpy(dtype=np.int64), c["end_ns"].to_numpy(dtype=np.int64))
        cp_s = cp_e = h2d_s = h2d_e = np.empty(0, dtype=np.int64)

    c_start = colls["start_ns"].to_numpy(dtype=np.int64)
    c_step = colls["step"].to_numpy(dtype=np.int64)
    rows: list[dict[str, int]] = []
    for step, lo, hi, cpu_end in zip(
        steps["step"].tolist(),
        steps["start_ns"].tolist(),
        steps["end_ns"].tolist(),
        steps["cpu_end_ns"].tolist(),
        strict=True,
    ):
        span = hi - lo
        compute = _cover(comp_s, comp_e, lo, hi)
        comm = _cover(comm_s, comm_e, lo, hi)
        cs_, ce_ = intervals.merge(np.concatenate((comp_s, comm_s)), np.concatenate((comp_e, comm_e)))
        compute_or_comm = _cover(cs_, ce_, lo, hi)
        all_s, all_e = intervals.merge(np.concatenate((cs_, cp_s)), np.concatenate((ce_, cp_e)))
        busy_any = _cover(all_s, all_e, lo, hi)
        rows.append(
            {
                "step": int(step),
                "start_ns": int(lo),
                "step_ns": int(span),
                "compute_ns": compute,
                "comm_ns": comm,
                "comm_exposed_ns": compute_or_comm - compute,
                "memcpy_exposed_ns": busy_any - compute_or_comm,
                "idle_ns": span - busy_any,
                "input_ns": _cover(in_s, in_e, lo, cpu_end),
                "host_ns": (cpu_end - lo) - _cover(busy_s, busy_e, lo, cpu_end),
                "h2d_ns": _cover(h2d_s, h2d_e, lo, hi),
                **_lead(lo, c_start[c_step == step], (in_s, in_e), (busy_s, busy_e), (comp_s, comp_e), (h2d_s, h2d_e)),
            }
        )
    table = pd.DataFrame(rows, columns=list(BREAKDOWN_COLUMNS)).astype("int64")
    return table, _comm_exposed(colls, comp_s, comp_e)


def _lead(
    lo: int,
    starts: I64,
    inputs: tuple[I64, I64],
    busy: tuple[I64, I64],
    compute: tuple[I64, I64],
    h2d: tuple[I64, I64],
) -> dict[str, int]:
    """The split of a step's lead (its start to its first collective's start)."""
    if not len(starts):
        return dict.fromkeys(("lead_ns", "lead_input_ns", "lead_host_ns", "lead_compute_ns", "lead_h2d_ns"), 0)
    hi = max(int(starts.min()), lo)
    return {
        "lead_ns": hi - lo,
        "lead_input_ns": _cover(*inputs, lo, hi),
        "lead_host_ns": (hi - lo) - _cover(*busy, lo, hi),
        "lead_compute_ns": _cover(*compute, lo, hi),
        "lead_h2d_ns": _cover(*h2d, lo, hi),
    }


def _cover(s: I64, e: I64, lo: int, hi: int) -> int:
    return int(intervals.covered(s, e, lo, hi)[0]) if hi > lo else 0


def _comm_exposed(colls: pd.DataFrame, comp_s: I64, comp_e: I64) -> pd.DataFrame:
    """The parts of each collective outside compute: one row per interval (``coll`` = row position)."""
    out_c: list[int] = []
    out_s: list[int] = []
    out_e: list[int] = []
    starts = colls["start_ns"].to_numpy(dtype=np.int64)
    ends = colls["end_ns"].to_numpy(dtype=np.int64)
    for i, (lo, hi) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        gs, ge = intervals.gaps(comp_s, comp_e, lo, hi)
        for a, b in zip(gs.tolist(), ge.tolist(), strict=True):
            if b > a:
                out_c.append(i)
                out_s.append(a)
                out_e.append(b)
    return pd.DataFrame(
        {
            "coll": np.array(out_c, dtype=np.int64),
            "start_ns": np.array(out_s, dtype=np.int64),
            "end_ns": np.array(out_e, dtype=np.int64),
        }
    )


def host_gaps(trace: Trace, top: int = 3) -> pd.DataFrame:
    """Per step, the longest spans of the step's thread outside every op and annotation (host code
    the profiler records no op for: Python preprocessing, a sleep, a wait), with the user's source
    line there when the trace has stacks: what a host-bound straggler does in its extra time."""
    cols = ("step", "start_ns", "end_ns", "file", "line", "function", "line_kind")
    thread = step_thread(trace)
    steps = step_spans(trace)
    if thread is None or not len(steps):
        return pd.DataFrame({c: [] for c in cols})
    host = trace.host
    names = host["name"].astype(str)
    mine = (
        (host["pid"].to_numpy() == thread[0])
        & (host["tid"].to_numpy() == thread[1])
        & ~names.str.startswith("ProfilerStep#").to_numpy()
    )
    bs, be = intervals.merge(host["ts_ns"].to_numpy()[mine], host["end_ns"].to_numpy()[mine])
    rows: list[dict[str, object]] = []
    for step, lo, cpu_end in zip(
        steps["step"].tolist(), steps["start_ns"].tolist(), steps["cpu_end_ns"].tolist(), strict=True
    ):
        gs, ge = intervals.gaps(bs, be, lo, cpu_end)
        order = np.argsort(gs - ge, kind="stable")[:top]  # longest first
        for k in order.tolist():
            a, b = int(gs[k]), int(ge[k])
            src = trace.source_of(np.array([thread[0]]), np.array([thread[1]]), np.array([(a + b) // 2]))[0]
            rows.append(
                {
                    "step": int(step),
                    "start_ns": a,
                    "end_ns": b,
                    "file": str(src["file"]) if src else "",
                    "line": int(src["line"]) if src else -1,
                    "function": str(src["function"]) if src else "",
                    "line_kind": str(src["line_kind"]) if src else "",
                }
            )
    out = pd.DataFrame(rows, columns=list(cols))
    return out.astype({"step": "int64", "start_ns": "int64", "end_ns": "int64", "line": "int64"})
