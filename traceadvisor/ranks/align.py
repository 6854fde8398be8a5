"""Clock alignment across hosts from the ends of implicit-sync collectives (doc multirank §1.5).

Kineto's timestamps are host time (CUPTI converts GPU times to the CPU clock): ranks on one host
share a clock, ranks on different hosts differ by an NTP-class offset (1-10s of ms, Nsight Systems'
user guide; "hundreds of µs" in attention-gym PR #487). An all-reduce, all-gather, reduce-scatter,
all-to-all or barrier ends on every member at nearly the same instant: no member can finish before
the last one's data has arrived. So, as nsys-jax's ``align_profiler_data_timestamps`` does:

* per instance spanning more than one host (the first profiled step left out: launch skew, the
  nsys-jax warm-up heuristic), ``skew_h`` = mean over host h's ranks of (end - mean end over all
  members);
* ``offset_h`` = median over instances of ``skew_h``, minus the reference host's (the host of the
  lowest rank gets 0); a time on host h is corrected by subtracting ``offset_h``;
* ``residual`` = MAD of the corrected skews: how far the ends still disagree.

``method``: ``shared-host`` (one host: nothing to do, offsets 0), ``none`` (several hosts, no
usable collective), ``collective-end``. The estimate is refused (``refused``, a warning, offsets not
applied) when the residual exceeds 10% of the median duration of the collectives used: the ends
then disagree by more than the collectives last, and an offset would move events by noise.

The residual measures how much the ends scatter, not a bias that repeats in every instance. Gloo's
(CPU) worker annotations end up to milliseconds apart on ranks of one host: on the multi-rank
fixtures, with the ranks split into two "hosts" of one clock (true offset 0), the estimate was off
by 3 µs to 1.2 ms with residuals of 35 to 570 µs when this was written (tests/test_ranks_align.py;
two captures of the same runs gave 65 µs to 3 ms). The anchor is the one
nsys-jax and attention-gym PR #487 use on GPU (NCCL kernel) ends; no multi-host NCCL pair is among
the fixtures to measure its error here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceadvisor.ranks.match import Matching

IMPLICIT_SYNC = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"})
MAX_RESIDUAL_SHARE = 0.10  # of the median collective duration


@dataclass(frozen=True)
class Alignment:
    method: str  # "none" | "shared-host" | "collective-end"
    offsets_ns: dict[str, int]  # estimated, per host (reference host 0); applied unless refused
    reference_host: str | None
    residual_ns: float  # MAD of the corrected skews (NaN without usable collectives)
    median_dur_ns: float  # median duration of the collectives used
    n_instances: int
    refused: bool = False
    warnings: tuple[str, ...] = field(default_factory=tuple)
    skews: pd.DataFrame = field(default_factory=pd.DataFrame)  # instance, host, skew_ns, corrected_ns

    @property
    def applied_offsets_ns(self) -> dict[str, int]:
        if self.refused:
            return dict.fromkeys(self.offsets_ns, 0)
        return dict(self.offsets_ns)

    def describe(self) -> str:
        """``alignment: none | shared-host | collective-end (residual X µs)``, as reports say it."""
        if self.method != "collective-end":
            return f"alignment: {self.method}"
        text = f"alignment: collective-end (residual {self.residual_ns / 1e3:.1f} µs)"
        return text + (" refused" if self.refused else "")


def align_clocks(colls: pd.DataFrame, matching: Matching, host_of: Mapping[int, str]) -> Alignment:
    """One clock offset per host from ``colls`` (all ranks' collectives, ``rank`` column) and their
    matching. ``host_of`` maps each rank to its host; a rank it does not name is its own host."""
    ranks = colls["rank"].to_numpy(dtype=np.int64)
    hosts_arr = np.array([host_of.get(int(r), f"rank{int(r)}") for r in ranks], dtype=object)
    all_hosts = sorted(set(hosts_arr.tolist()))
    reference = host_of.get(int(ranks.min()), f"rank{int(ranks.min())}") if len(ranks) else None
    if len(all_hosts) <= 1:
        return Alignment("shared-host", dict.fromkeys(all_hosts, 0), reference, 0.0, np.nan, 0)

    df = pd.DataFrame(
        {
            "instance": matching.instance,
            "host": hosts_arr,
            "op": colls["op"].astype(str).to_numpy(),
            "end_ns": colls["end_ns"].to_numpy(dtype=np.int64),
            "dur_ns": (colls["end_ns"] - colls["start_ns"]).to_numpy(dtype=np.int64),
            "step": colls["step"].to_numpy(dtype=np.int64),
        }
    )
    df = df[(df["instance"] >= 0) & df["op"].isin(IMPLICIT_SYNC)]
    stepped = df["step"][df["step"] >= 0]
    if len(stepped):
        first = int(stepped.min())
        in_first = df.groupby("instance")["step"].transform(lambda s: bool((s == first).any()))
        df = df[~in_first.to_numpy(dtype=bool)]
    n_hosts = df.groupby("instance")["host"].transform("nunique")
    df = df[n_hosts.to_numpy() > 1]
    if not len(df):
        return Alignment(
            "none",
            dict.fromkeys(all_hosts, 0),
            reference,
            np.nan,
            np.nan,
            0,
            warnings=("no implicit-sync collective spans more than one host: clocks not aligned",),
        )

    # ends relative to the instance's mean end, in float64 after subtracting an int64 origin (the
    # absolute ns are ~2^61: a float64 of them would be 256 ns coarse)
    origin = df.groupby("instance")["end_ns"].transform("min").to_numpy(dtype=np.int64)
    rel = (df["end_ns"].to_numpy(dtype=np.int64) - origin).astype(np.float64)
    df = df.assign(rel=rel)
    df["dev"] = df["rel"] - df.groupby("instance")["rel"].transform("mean")
    skews = df.groupby(["instance", "host"], sort=True)["dev"].mean().rename("skew_ns").reset_index()
    raw = skews.groupby("host")["skew_ns"].median()
    ref_raw = float(raw.get(reference, 0.0)) if reference in raw.index else 0.0
    offsets = {h: round(float(raw.get(h, ref_raw)) - ref_raw) if h in raw.index else 0 for h in all_hosts}
    skews["corrected_ns"] = skews["skew_ns"] - raw.reindex(skews["host"]).to_numpy()
    c = skews["corrected_ns"].to_numpy()
    residual = float(np.median(np.abs(c - np.median(c))))
    median_dur = float(np.median(df["dur_ns"].to_numpy()))
    n_inst = int(skews["instance"].nunique())
    refused = residual > MAX_RESIDUAL_SHARE * median_dur
    warnings: tuple[str, ...] = ()
    if refused:
        warnings = (
            f"clock alignment refused: residual {residual / 1e3:.1f} µs exceeds 10% of the median collective "
            f"({median_dur / 1e3:.1f} µs) over {n_inst} collectives; times left on each host's own clock",
        )
    missing = [h for h in all_hosts if h not in raw.index]
    if missing:
        warnings += (f"no collective spanning hosts involves {', '.join(missing)}: offset 0 assumed",)
    return Alignment("collective-end", offsets, reference, residual, median_dur, n_inst, refused, warnings, skews)


def apply_offsets(colls: pd.DataFrame, alignment: Alignment, host_of: Mapping[int, str]) -> pd.DataFrame:
    """A copy of ``colls`` with ``start_ns``/``end_ns`` on the reference host's clock (unchanged
    when the alignment was refused)."""
    offsets = alignment.applied_offsets_ns
    shift = np.array(
        [offsets.get(host_of.get(int(r), f"rank{int(r)}"), 0) for r in colls["rank"].to_numpy()], dtype=np.int64
    )
    out = colls.copy()
    out["start_ns"] = colls["start_ns"].to_numpy(dtype=np.int64) - shift
    out["end_ns"] = colls["end_ns"].to_numpy(dtype=np.int64) - shift
    return out
