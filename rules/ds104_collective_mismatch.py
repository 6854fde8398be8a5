"""DS104: collectives that differ across ranks (type, dtype, size) or that some ranks did not run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd

from traceadvisor.rules_api import Finding, RankRule, RankRun, Severity, plural

# Flight Recorder's MatchState names (torch/distributed/flight_recorder/components/types.py), so a
# finding reads like `torchfrtrace` output and can be joined with a Flight Recorder dump.
FR_STATE = {
    "type": "COLLECTIVE_TYPE_MISMATCH",
    "dtype": "COLLECTIVE_DTYPE_MISMATCH",
    "size": "SIZE_OR_SYNTAX_MISMATCH",
    "missing": "missing ranks",
}
DESYNC_KINDS = ("type", "dtype", "size")
MAX_LISTED = 20  # mismatches kept in data (the count says how many there were)

DESYNC_FIX = (
    "Make every rank issue the same collectives in the same order with the same shapes and dtypes "
    "(look for rank-dependent branches, uneven batches, layers skipped on some ranks); "
    "TORCH_DISTRIBUTED_DEBUG=DETAIL checks each collective's shapes across ranks, and Flight Recorder "
    "(TORCH_NCCL_TRACE_BUFFER_SIZE=2000, TORCH_NCCL_DUMP_ON_TIMEOUT=1, then torchfrtrace) names the "
    "rank and Python stack where they diverge."
)
MISSING_FIX = (
    "Profile the same steps on every rank (one torch.profiler.schedule, started at the same step "
    "everywhere): a collective missing from some traces is most often outside their capture window. "
    "If the windows match, a rank skipped a collective: with NCCL that hangs or desynchronises the "
    "group; Flight Recorder reports it as 'Not all ranks joining collective'."
)


@dataclass(frozen=True)
class Options:
    min_count: int = 1  # report a kind of mismatch when at least this many collectives show it


class CollectiveMismatch(RankRule[Options]):
    """Matched collectives disagree across ranks, or some ranks of the group did not run them.

    ## Why it matters
    A collective is one operation of all the ranks of its process group: each must call it in the
    same order, with the same type, dtype and element count. When they do not, NCCL either hangs
    (ranks waiting in different collectives), corrupts data (an all-reduce of different sizes
    reads past a buffer) or fails with a watchdog timeout; PyTorch's Flight Recorder exists to find
    these desyncs after the fact. In a profile, a mismatch also makes every wait, skew and
    bandwidth computed from that collective meaningless.

    ## How it shows up in a trace
    Collectives are matched across ranks by (process group, `Seq`) when Kineto writes `Seq`, else
    by (process group, order in the group), else by order on each rank (no process-group
    metadata). A matched collective whose ranks disagree on the op, the dtype or the in/out
    element counts is a `COLLECTIVE_TYPE_MISMATCH`, `COLLECTIVE_DTYPE_MISMATCH` or
    `SIZE_OR_SYNTAX_MISMATCH` (Flight Recorder's names): a desync risk, severity high; matched
    by order alone, a mismatch may also be two different collectives paired by position, and the
    severity is medium. A collective that some ranks of its group did not run is reported as
    missing ranks, severity medium: most often the ranks' profiling windows differ (the finding
    says when the ranks profiled different steps). The coverage is the share of collective rows
    matched on every rank of their group.

    ## How to fix
    For type, dtype and size mismatches: make every rank issue the same collectives in the same
    order with the same shapes (rank-dependent branches, uneven batches, layers skipped on some
    ranks); run with `TORCH_DISTRIBUTED_DEBUG=DETAIL`, and enable Flight Recorder
    (`TORCH_NCCL_TRACE_BUFFER_SIZE`, `TORCH_NCCL_DUMP_ON_TIMEOUT=1`, then `torchfrtrace`). For
    missing ranks: profile the same steps on every rank; if the windows match, a rank skipped a
    collective.

    ## Options
    - `min_count`: report a kind of mismatch (desync or missing) when at least this many
      collectives show it.

    ## References
    - https://docs.pytorch.org/tutorials/unstable/flight_recorder_tutorial.html
    - https://pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-applications
    - https://pytorch.org/docs/stable/profiler.html#torch.profiler.schedule
    """

    code = "DS104"
    name = "collective-mismatch"
    severity = Severity.high

    def check_ranks(self, run: RankRun) -> Iterator[Finding]:
        mm = run.matching.mismatches
        if not len(mm):
            return
        coverage = 100.0 * run.matching.coverage
        desync = mm[mm["kind"].isin(DESYNC_KINDS)]
        if len(desync) and _collectives(desync) >= self.options.min_count:
            by_order = bool((desync["key_kind"] == "stream order").all())
            caveat = (
                "; matched by order alone (no process group or Seq in the trace), so two different "
                "collectives may have been paired"
                if by_order
                else ""
            )
            yield self.rank_finding(
                run,
                message=(
                    f"{plural(_collectives(desync), 'collective')} differ across ranks ({_counts(desync)}): "
                    f"a desync risk{caveat}; coverage {coverage:.1f}% of collectives matched on all ranks"
                ),
                recommendation=DESYNC_FIX,
                ranks=_ranks(desync),
                data=_data(run, desync),
                severity=Severity.medium if by_order else Severity.high,
            )
        missing = mm[mm["kind"] == "missing"]
        if len(missing) and _collectives(missing) >= self.options.min_count:
            windows = _windows_differ(run.breakdown)
            why = (
                "the ranks profiled different steps, so this is most likely the capture windows"
                if windows
                else "often the ranks' capture windows differ"
            )
            yield self.rank_finding(
                run,
                message=(
                    f"{plural(_collectives(missing), 'collective')} not run by every rank of its group "
                    f"(missing ranks {_ranks(missing)}): {why}; coverage {coverage:.1f}% of collectives "
                    "matched on all ranks"
                ),
                recommendation=MISSING_FIX,
                ranks=_ranks(missing),
                data={**_data(run, missing), "windows_differ": windows},
                severity=Severity.medium,
            )


def _collectives(mm: pd.DataFrame) -> int:
    """Distinct collectives (a collective with both a dtype and a size mismatch counts once)."""
    return len(mm[["pg", "key_kind", "key", "instance"]].drop_duplicates())


def _counts(mm: pd.DataFrame) -> str:
    counts = mm["kind"].value_counts()
    return ", ".join(f"{FR_STATE[str(k)]} x{int(v)}" for k, v in counts.items())


def _ranks(mm: pd.DataFrame) -> list[int]:
    return sorted({int(r) for rs in mm["ranks"] for r in rs})


def _data(run: RankRun, mm: pd.DataFrame) -> dict[str, object]:
    rows = [
        {
            "instance": int(r.instance),
            "pg": str(r.pg),
            "key_kind": str(r.key_kind),
            "key": int(r.key),
            "state": FR_STATE[str(r.kind)],
            "ranks": [int(x) for x in r.ranks],
            "detail": str(r.detail),
        }
        for r in mm.head(MAX_LISTED).itertuples()
    ]
    return {
        "count": len(mm),
        "collectives": _collectives(mm),
        "by_state": {FR_STATE[str(k)]: int(v) for k, v in mm["kind"].value_counts().items()},
        "coverage": float(run.matching.coverage),
        "key_kind": run.matching.key_kind,
        "mismatches": rows,
    }


def _windows_differ(breakdown: pd.DataFrame) -> bool:
    """Whether the ranks' profiled step numbers differ (different capture windows)."""
    if not len(breakdown):
        return False
    sets = {tuple(sorted(g["step"].tolist())) for _, g in breakdown.groupby("rank")}
    return len(sets) > 1
