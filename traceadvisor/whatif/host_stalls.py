"""Host stalls removed: the main process no longer waits for its data loader.

``data-workers`` (answers data-loader-bound, DL101): each ``DataLoader.__next__`` the main process
runs inside a step (the ``enumerate(DataLoader)#..._next__`` annotation PyTorch records) takes no
host time: with worker processes (``num_workers > 0``, ``pin_memory=True``) the next batch is loaded
while the step runs and ``next()`` hands over a batch already made. This is the best case: ``next()``
still dequeues and, without pinned memory, copies the batch (tens to hundreds of µs for a typical
batch), and workers that load slower than the step leave a stall of their own. No GPU pair measured
this fix yet, so its saving is an upper bound, and the rule says so.
"""

from __future__ import annotations

import numpy as np

from traceadvisor.trace.model import Trace
from traceadvisor.whatif.host_time import HostTimeMap, Region, thread_key
from traceadvisor.whatif.refused import Refused
from traceadvisor.whatif.replay import Overrides

LOADER_MARK = "DataLoader"  # in the annotation PyTorch records around each __next__


def data_workers(trace: Trace) -> Overrides:
    """The DataLoader fetches inside the steps collapse to nothing on their process's timeline."""
    ann = trace.annotations
    loader = ann[ann["name"].astype(str).str.contains(LOADER_MARK, regex=False).to_numpy()]
    t = trace.steps.table
    if not len(loader) or not len(t):
        raise Refused("no DataLoader fetch inside the steps")
    ts, end = loader["ts_ns"].to_numpy(), loader["end_ns"].to_numpy()
    inside = np.zeros(len(loader), dtype=bool)
    for cs, ce in zip(t["cpu_start_ns"].tolist(), t["cpu_end_ns"].tolist(), strict=True):
        inside |= (ts >= cs) & (ts < ce)
    if not inside.any():
        raise Refused("no DataLoader fetch inside the steps")
    keys = thread_key(loader["pid"].to_numpy(), loader["tid"].to_numpy())[inside]
    order = np.argsort(ts[inside], kind="stable")
    regions = tuple(
        Region(int(k), int(a), int(b), 0)
        for k, a, b in zip(keys[order].tolist(), ts[inside][order].tolist(), end[inside][order].tolist(), strict=True)
    )
    return Overrides(host_removed=HostTimeMap(regions=regions))
