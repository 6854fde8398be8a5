"""The dependency graph of a trace (networkx), and the critical path of a step.

Nodes are ``(table, row)`` pairs: ``("host", i)`` CPU ops and annotations, ``("runtime", i)``
runtime/driver calls, ``("gpu", i)`` kernels, copies and memsets. Each node carries ``start``,
``end`` (ns), ``name`` and ``kind``. Edges carry ``kind``:

* ``nesting``: a host event to the events nested inside it (ops, and the runtime calls they make);
* ``host_order``: consecutive top-level events of one host thread (a thread runs one thing at a time);
* ``launch``: a runtime call to the GPU work it enqueued (one ``cudaGraphLaunch`` → many kernels);
* ``stream_order``: consecutive GPU work on one stream (a stream executes in order);
* ``sync``: the GPU work a blocking synchronize call waited for, to that call;
* ``event_wait``: cross-stream ``cudaStreamWaitEvent`` dependencies, when the trace resolves them
  (``cuda_sync`` events with ``wait_on_cuda_event_record_corr_id``, format doc §4.8).

Building it costs time on big traces, so ``dependency_graph(trace)`` builds it on first use only
(memoised per trace), and ``TraceGraph.build(trace, window)`` limits it to one window (a step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd

from traceadvisor.analyses.cache import memoised
from traceadvisor.trace.cuda_api import BLOCKING_CALLS
from traceadvisor.trace.model import Trace

Node = tuple[str, int]


@dataclass
class CriticalPath:
    """The chain of events that bounded a step, and how its time splits by kind."""

    nodes: list[Node]
    time_by_kind_ns: dict[str, int]
    length_ns: int


class TraceGraph:
    """A networkx ``DiGraph`` over the trace's events plus the queries rules need."""

    def __init__(self, g: nx.DiGraph) -> None:
        self.g = g

    @classmethod
    def build(cls, trace: Trace, window: tuple[int, int] | None = None) -> TraceGraph:
        """Build the graph for the whole trace, or for events overlapping ``window``."""
        g: nx.DiGraph = nx.DiGraph()
        host = _clip(trace.host, window)
        rt = _clip(trace.runtime, window)
        gpu = _clip(trace.gpu, window)
        _add_nodes(g, "host", host, lambda r: "annotation" if r.is_annotation else "cpu_op")
        _add_nodes(g, "runtime", rt, lambda r: "runtime")
        _add_nodes(g, "gpu", gpu, lambda r: ("kernel", "memcpy", "memset")[int(r.kind)])
        nest = trace.nesting
        for row, parent in zip(host.index, nest.loc[host.index, "parent"], strict=True):
            if parent >= 0 and ("host", parent) in g:
                g.add_edge(("host", int(parent)), ("host", int(row)), kind="nesting")
        for row, op in zip(rt.index, rt["op"], strict=True):
            if op >= 0 and ("host", op) in g:
                g.add_edge(("host", int(op)), ("runtime", int(row)), kind="nesting")
        for row, launch in zip(gpu.index, gpu["launch"], strict=True):
            if launch >= 0 and ("runtime", launch) in g:
                g.add_edge(("runtime", int(launch)), ("gpu", int(row)), kind="launch")
        _order_edges(g, "gpu", gpu, ["device", "stream"], "stream_order")
        _sibling_edges(g, host, nest.loc[host.index, "parent"].to_numpy(), rt)
        _sync_edges(g, trace, rt, gpu)
        _event_wait_edges(g, trace, gpu)
        return cls(g)

    def edges_of_kind(self, kind: str) -> list[tuple[Node, Node]]:
        """All edges of one kind."""
        return [(u, v) for u, v, k in self.g.edges(data="kind") if k == kind]

    def critical_path(self, end_node: Node | None = None, start_bound: int | None = None) -> CriticalPath:
        """Walk back from the last-ending GPU node along the predecessor that finished last.

        Each step back follows the dependency that released the node latest (the classic
        last-arrival critical path); time between a predecessor's end and its successor's start
        is counted as ``wait``. ``start_bound`` stops the walk at a window's start (a step).
        """
        g = self.g
        if end_node is None:
            gpu_nodes = [n for n in g if n[0] == "gpu"] or list(g)
            if not gpu_nodes:
                return CriticalPath([], {}, 0)
            end_node = max(gpu_nodes, key=lambda n: g.nodes[n]["end"])
        lower = -(2**63) if start_bound is None else start_bound
        path = [end_node]
        by_kind: dict[str, int] = {}
        node = end_node
        until = g.nodes[node]["end"]
        seen = {node}

        def add(kind: str, ns: int) -> None:
            if ns > 0:
                by_kind[kind] = by_kind.get(kind, 0) + ns

        while True:
            data = g.nodes[node]
            preds = [p for p in g.predecessors(node) if p not in seen]
            if not preds:
                add(data["kind"], until - max(data["start"], lower))
                break
            start = data["start"]

            end = data["end"]

            # When a predecessor let this node proceed: an enclosing parent when it started;
            # GPU work a blocking call waited for when that work ended (the call returns then);
            # anything else when it ended (or when this node started, if earlier).
            def released(p: Node, start: int = start, end: int = end, node: Node = node) -> int:
                kind = g.edges[p, node]["kind"]
                if kind == "nesting":
                    return int(g.nodes[p]["start"])
                if kind == "sync":
                    return int(min(g.nodes[p]["end"], end))
                return int(min(g.nodes[p]["end"], start))

            best = max(preds, key=released)
            rel = released(best)
            if rel < lower:
                add(data["kind"], until - max(start, lower))
                break
            add(data["kind"], until - max(start, rel))
            add("wait", start - rel)
            until = rel
            node = best
            seen.add(node)
            path.append(node)
        path.reverse()
        length = sum(by_kind.values())
        return CriticalPath(path, by_kind, int(length))


@memoised
def dependency_graph(trace: Trace) -> TraceGraph:
    """The dependency graph of the whole trace (built on first use; large traces pay only if asked)."""
    return TraceGraph.build(trace)


@memoised
def step_critical_path(trace: Trace, step: int) -> CriticalPath | None:
    """Critical path of one step: from the step's last GPU work back to its CPU start."""
    t = trace.steps.table
    row = t[t["step"] == step]
    if not len(row):
        return None
    r = row.iloc[0]
    lo = int(r["cpu_start_ns"])
    hi = int(max(r["cpu_end_ns"], r["gpu_end_ns"]))
    g = TraceGraph.build(trace, (lo, hi))
    end_nodes = [n for n in g.g if n[0] == "gpu" and int(r["gpu_start_ns"]) <= g.g.nodes[n]["start"] < hi]
    if not end_nodes:
        return g.critical_path(start_bound=lo)
    last = max(end_nodes, key=lambda n: g.g.nodes[n]["end"])
    return g.critical_path(last, start_bound=lo)


def _clip(df: pd.DataFrame, window: tuple[int, int] | None) -> pd.DataFrame:
    if window is None:
        return df
    lo, hi = window
    return df[(df["end_ns"] > lo) & (df["ts_ns"] < hi)]


def _add_nodes(g: nx.DiGraph, table: str, df: pd.DataFrame, kind_of: Any) -> None:
    names = df["name"].astype(str).to_numpy()
    for i, r in enumerate(df.itertuples()):
        g.add_node((table, int(r.Index)), start=int(r.ts_ns), end=int(r.end_ns), name=names[i], kind=kind_of(r))


def _order_edges(g: nx.DiGraph, table: str, df: pd.DataFrame, keys: list[str], kind: str) -> None:
    if not len(df):
        return
    ordered = df.sort_values([*keys, "ts_ns"], kind="stable")
    rows = ordered.index.to_numpy()
    same = np.ones(len(rows) - 1, dtype=bool)
    for k in keys:
        v = ordered[k].to_numpy()
        same &= v[1:] == v[:-1]
    for a, b in zip(rows[:-1][same], rows[1:][same], strict=True):
        g.add_edge((table, int(a)), (table, int(b)), kind=kind)


def _sibling_edges(g: nx.DiGraph, host: pd.DataFrame, host_parent: Any, rt: pd.DataFrame) -> None:
    """A host thread runs one thing at a time: order siblings (same thread and parent)."""
    both = pd.DataFrame(
        {
            "table": np.concatenate((np.zeros(len(host), np.int8), np.ones(len(rt), np.int8))),
            "row": np.concatenate((host.index.to_numpy(), rt.index.to_numpy())),
            "pid": np.concatenate((host["pid"].to_numpy(), rt["pid"].to_numpy())),
            "tid": np.concatenate((host["tid"].to_numpy(), rt["tid"].to_numpy())),
            "parent": np.concatenate((host_parent, rt["op"].to_numpy())),
            "ts_ns": np.concatenate((host["ts_ns"].to_numpy(), rt["ts_ns"].to_numpy())),
        }
    )
    if len(both) < 2:
        return
    ordered = both.sort_values(["pid", "tid", "parent", "ts_ns"], kind="stable")
    tab, rows = ordered["table"].to_numpy(), ordered["row"].to_numpy()
    same = np.ones(len(ordered) - 1, dtype=bool)
    for k in ("pid", "tid", "parent"):
        v = ordered[k].to_numpy()
        same &= v[1:] == v[:-1]
    names = ("host", "runtime")
    for i in np.flatnonzero(same).tolist():
        a, b = (names[tab[i]], int(rows[i])), (names[tab[i + 1]], int(rows[i + 1]))
        if a in g and b in g:
            g.add_edge(a, b, kind="host_order")


def _sync_edges(g: nx.DiGraph, trace: Trace, rt: pd.DataFrame, gpu: pd.DataFrame) -> None:
    """A blocking call waits for the GPU work launched before it: link the last such work to it."""
    names = rt["name"].astype(str)
    blocking = rt[names.isin(BLOCKING_CALLS).to_numpy()]
    if not len(blocking) or not len(gpu):
        return
    launched = gpu[gpu["launch"] >= 0]
    launch_ts = trace.runtime["ts_ns"].to_numpy()[launched["launch"].to_numpy()]
    order = np.argsort(launch_ts, kind="stable")
    launch_sorted = launch_ts[order]
    ends = launched["end_ns"].to_numpy()[order]
    rows = launched.index.to_numpy()[order]
    best_end = np.maximum.accumulate(ends) if len(ends) else ends
    # position of the running max: the latest-ending work launched so far
    arg = np.zeros(len(ends), dtype=np.int64)
    cur = 0
    for i in range(len(ends)):
        if ends[i] >= ends[cur]:
            cur = i
        arg[i] = cur
    for row, ts in zip(blocking.index, blocking["ts_ns"], strict=True):
        k = int(np.searchsorted(launch_sorted, ts, side="left")) - 1
        if k >= 0 and best_end[k] > 0:
            g.add_edge(("gpu", int(rows[arg[k]])), ("runtime", int(row)), kind="sync")


def _event_wait_edges(g: nx.DiGraph, trace: Trace, gpu: pd.DataFrame) -> None:
    sy = trace.syncs
    if not len(sy) or not len(gpu):
        return
    waits = sy[(sy["wait_on_event_corr"] >= 0) & (sy["stream"] >= 0)]
    if not len(waits):
        return
    rt = trace.runtime
    rt_by_corr = pd.Series(rt.index.to_numpy(), index=rt["correlation"].to_numpy())
    rt_by_corr = rt_by_corr[~rt_by_corr.index.duplicated()]
    for w in waits.itertuples():
        rec = rt_by_corr.get(int(w.wait_on_event_corr))
        if rec is None:
            continue
        rec_ts = int(rt.at[rec, "ts_ns"])
        src = gpu[(gpu["stream"] == w.wait_on_stream) & (gpu["launch"] >= 0)]
        src = src[trace.runtime["ts_ns"].to_numpy()[src["launch"].to_numpy()] < rec_ts]
        dst = gpu[(gpu["stream"] == w.stream) & (gpu["ts_ns"] >= w.ts_ns)]
        if len(src) and len(dst):
            a = int(src["end_ns"].idxmax())
            b = int(dst["ts_ns"].idxmin())
            g.add_edge(("gpu", a), ("gpu", b), kind="event_wait")
