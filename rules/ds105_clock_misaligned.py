"""DS105: the hosts' clocks could not be aligned, so cross-host waits include a clock offset."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from traceadvisor.rules_api import IMPLICIT_SYNC, Finding, RankRule, RankRun, Severity, fmt_ns

MEANING = (
    "Waits, start and end skews, the last arriver and the straggler between ranks on different hosts "
    "then include the clocks' offset and are not measurements; each rank's own durations, the transfer "
    "times (min over ranks of each rank's duration) and bus bandwidths are unaffected."
)
FIX = (
    "Synchronise the hosts' clocks before profiling (chrony/NTP reaches tens of µs on a LAN, PTP with "
    "hardware timestamps - ptp4l and phc2sys - under a µs), or compare ranks of one host only; profile "
    "several steps with the same schedule on every rank so that the alignment has collectives to use."
)


@dataclass(frozen=True)
class Options:
    # without alignment: report when cross-host ends differ by this share of the collective (%)
    max_end_skew_pct: float = 10.0


class ClockMisaligned(RankRule[Options]):
    """The ranks' hosts have clocks that disagree and that traceadvisor could not align.

    ## Why it matters
    Kineto writes host time; ranks on one host share a clock, ranks on different hosts differ by
    an NTP-class offset (one to tens of ms, Nsight Systems' user guide). Everything that compares
    times across hosts (who arrived last at a collective, how long the others waited, the
    straggler and its cost) is then off by that offset. traceadvisor aligns the hosts on the ends
    of implicit-sync collectives, which end at nearly the same instant on every member; when that
    fails, the cross-host numbers of the report are not measurements, and this finding says so.

    ## How it shows up in a trace
    The alignment (`ranks/align.py`, the nsys-jax recipe) takes, per host, the median over
    collectives spanning hosts of its ranks' end minus the collective's mean end; the residual is
    the MAD of what remains. The rule fires when the alignment was refused (the residual is more
    than 10% of the median collective: the ends disagree by more than one offset explains), or
    when no alignment was possible (no implicit-sync collective spans hosts after the first
    profiled step) while the implicit-sync collectives that do span hosts end more than
    `max_end_skew_pct` of their median duration apart. It is a finding about the report, with no
    saving.

    ## How to fix
    Synchronise the hosts' clocks (chrony/NTP, or PTP with hardware timestamps: `ptp4l`,
    `phc2sys`), or analyse the ranks of one host; profile several steps with the same schedule
    on every rank so that the alignment has collectives to work with.

    ## Options
    - `max_end_skew_pct`: when no alignment was possible, report when the median end skew of the
      implicit-sync collectives spanning hosts is at least this share of their median duration (%).

    ## References
    - https://docs.nvidia.com/nsight-systems/UserGuide/index.html#multi-report-analysis
    - https://github.com/NVIDIA/JAX-Toolbox/pull/926
    - https://chrony-project.org/doc/4.5/chrony.conf.html
    - https://linuxptp.nwtime.org/documentation/ptp4l/
    """

    code = "DS105"
    name = "clock-misaligned"
    severity = Severity.medium

    def check_ranks(self, run: RankRun) -> Iterator[Finding]:
        a = run.alignment
        host_of = {int(r): str(h) for r, h in zip(run.ranks["rank"], run.ranks["host"], strict=True)}
        others = [r for r, h in host_of.items() if h != a.reference_host]
        hosts = sorted(set(host_of.values()))
        if a.method == "collective-end" and a.refused:
            offsets = {h: float(v) for h, v in a.offsets_ns.items()}
            shown = ", ".join(f"{h or '(unnamed)'} {fmt_ns(v)}" for h, v in offsets.items())
            yield self.rank_finding(
                run,
                message=(
                    f"the clocks of hosts {', '.join(h or '(unnamed)' for h in hosts)} could not be aligned: after "
                    f"the best per-host offset ({shown}) the collectives' ends still disagree by "
                    f"{fmt_ns(a.residual_ns)} "
                    f"(MAD over {a.n_instances} collectives), more than 10% of the median collective "
                    f"({fmt_ns(a.median_dur_ns)}); times are left on each host's clock. {MEANING}"
                ),
                recommendation=FIX,
                ranks=others,
                data={
                    "method": a.method,
                    "refused": True,
                    "residual_ns": float(a.residual_ns),
                    "median_dur_ns": float(a.median_dur_ns),
                    "n_instances": int(a.n_instances),
                    "estimated_offsets_ns": offsets,
                    "hosts": hosts,
                },
            )
            return
        if a.method != "none" or len(hosts) < 2:
            return
        skew, dur, n = _cross_host_end_skew(run, host_of)
        if n == 0 or not dur > 0 or 100.0 * skew / dur < self.options.max_end_skew_pct:
            return
        yield self.rank_finding(
            run,
            message=(
                f"the clocks of hosts {', '.join(h or '(unnamed)' for h in hosts)} are not aligned (no collective "
                f"to align on after the first step) and the {n} implicit-sync collectives spanning hosts end "
                f"{fmt_ns(skew)} apart (median), {100.0 * skew / dur:.0f}% of their median duration "
                f"({fmt_ns(dur)}). {MEANING}"
            ),
            recommendation=FIX,
            ranks=others,
            data={
                "method": a.method,
                "refused": False,
                "median_end_skew_ns": skew,
                "median_dur_ns": dur,
                "n_instances": n,
                "hosts": hosts,
            },
        )


def _cross_host_end_skew(run: RankRun, host_of: dict[int, str]) -> tuple[float, float, int]:
    """Median end skew and median duration of the implicit-sync instances whose ranks span hosts
    (every step, the first included: it is all there is when the alignment found nothing)."""
    pr = run.metrics.per_rank
    pr = pr[pr["op"].isin(IMPLICIT_SYNC)]
    if not len(pr):
        return 0.0, 0.0, 0
    hosts = pr["rank"].map(lambda r: host_of.get(int(r), ""))
    spans = hosts.groupby(pr["instance"]).transform("nunique").to_numpy() > 1
    pr = pr[spans]
    if not len(pr):
        return 0.0, 0.0, 0
    g = pr.groupby("instance")
    skew = (g["end_ns"].max() - g["end_ns"].min()).to_numpy(dtype=np.int64)
    return float(np.median(skew)), float(np.median(pr["dur_ns"].to_numpy())), len(skew)
