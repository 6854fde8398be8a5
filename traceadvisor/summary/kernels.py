"""The report's top kernels: the kernel names with the most GPU time in the analysis window."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceadvisor.report.model import KernelSummary
from traceadvisor.summary.units import pct, us
from traceadvisor.trace.model import Trace, name_codes

TOP_KERNELS = 10


def top_kernels(trace: Trace, n: int = TOP_KERNELS) -> tuple[KernelSummary, ...]:
    """``traces[].top_kernels``: the ``n`` names with the most time among the kernels overlapping the
    window (all kernels when none does), with their share of that time."""
    k = trace.kernels
    if not len(k):
        return ()
    lo, hi, _ = trace.analysis_window
    inside = k[(k["end_ns"] > lo) & (k["ts_ns"] < hi)]
    if not len(inside):
        inside = k
    total = int(inside["dur_ns"].sum())
    grp = sum_and_count_by_name(inside).sort_values("sum", ascending=False).head(n)
    return tuple(
        KernelSummary(str(name), int(r["count"]), us(r["sum"]), pct(r["sum"], total)) for name, r in grp.iterrows()
    )


def sum_and_count_by_name(kernels: pd.DataFrame) -> pd.DataFrame:
    """Total ``dur_ns`` (``sum``) and ``count`` of each kernel name, names in order of first appearance:
    ``groupby("name", observed=True, sort=False)["dur_ns"].agg(["sum", "count"])`` on the name codes."""
    codes, categories = name_codes(kernels["name"])
    dur = kernels["dur_ns"].to_numpy()
    named = codes >= 0
    codes, dur = codes[named], dur[named]
    sums = np.zeros(len(categories), dtype=np.int64)
    np.add.at(sums, codes, dur)
    counts = np.bincount(codes, minlength=len(categories)).astype(np.int64)
    seen, first = np.unique(codes, return_index=True)
    order = seen[np.argsort(first, kind="stable")]
    return pd.DataFrame({"sum": sums[order], "count": counts[order]}, index=pd.Index(categories[order], name="name"))
