"""Per-stream launch queues: when each GPU op was launched, started and ended, and how long it waited."""

from __future__ import annotations

import pandas as pd

from traceadvisor.analyses.cache import memoised
from traceadvisor.trace.model import Trace


@memoised
def stream_queues(trace: Trace, device: int) -> pd.DataFrame:
    """For each launched GPU op of ``device``: ``stream``, ``launch_ns``, ``launch_end_ns``,
    ``start_ns``, ``end_ns`` and ``queue_delay_ns`` (start - launch end), by stream then start."""
    gpu = trace.gpu
    g = gpu[(gpu["device"] == device) & (gpu["launch"] >= 0)]
    rt = trace.runtime
    launch = g["launch"].to_numpy()
    df = pd.DataFrame(
        {
            "stream": g["stream"].to_numpy(),
            "launch_ns": rt["ts_ns"].to_numpy()[launch],
            "launch_end_ns": rt["end_ns"].to_numpy()[launch],
            "start_ns": g["ts_ns"].to_numpy(),
            "end_ns": g["end_ns"].to_numpy(),
        },
        index=g.index,
    )
    df["queue_delay_ns"] = df["start_ns"] - df["launch_end_ns"]
    return df.sort_values(["stream", "start_ns"], kind="stable")
