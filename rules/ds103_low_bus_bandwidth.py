"""DS103: collectives whose transfer bus bandwidth is far below the best the run reaches."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from traceadvisor.rules_api import Finding, RankRule, RankRun, bandwidth_table, bucket_label, fmt_ns, plural

BASIS = (
    "each slow collective's transfer time (min over ranks of its duration) minus the time it takes "
    "at the best transfer bus bandwidth of its op, size bucket and link in this run, summed and "
    "divided by the profiled steps"
)


@dataclass(frozen=True)
class Options:
    min_message_mb: float = 8.0  # only messages of at least this size (MB = 1e6 bytes) are compared
    max_ratio: float = 0.5  # report collectives below this fraction of the best busbw of their group


class LowBusBandwidth(RankRule[Options]):
    """Collectives of one op and size move data far slower than the best of their kind in the run.

    ## Why it matters
    The bus bandwidth of a collective (nccl-tests' busbw: the algorithm bandwidth times a factor
    of the op and the group size, e.g. 2(n-1)/n for an all-reduce) is comparable across ops and
    group sizes and, for messages large enough to reach the link's plateau, nearly constant on one
    link. When the same op of the same size over the same kind of link reaches half the
    bandwidth in some instances, those instances lost time to something else: another
    collective or a copy sharing the link, a slow or degraded link (NIC, NVLink), a different
    algorithm or protocol, CPU-side proxy threads starved of cores.

    ## How it shows up in a trace
    Collectives are matched across ranks (`collective-mismatch` reports those that are not);
    for each complete, fully matched instance the transfer time is the minimum over the ranks of
    its duration (the fastest rank waited least: tb_plugin's "data transfer time", TraceLens'
    `comm_latency`) and its transfer busbw is `bytes / transfer x factor` with GB = 1e9. The
    instances are grouped by op, size bucket (a power of two: bandwidth grows with the size up to
    the plateau) and link (one host or several), with messages of at least `min_message_mb`; one
    below `max_ratio` of its group's best is slow. The saving is each slow instance's transfer time
    minus its time at the best busbw, per profiled step; the best is what this run reached, not
    the hardware's peak (compare with an nccl-tests run for that).

    ## How to fix
    Look at what overlaps the slow instances: two collectives on different streams sharing a link
    (serialise them or give them different channels), copies on the same PCIe/NVLink, a second job
    on the node. Check the links (`nvidia-smi nvlink -s`, `ibstat`, NCCL's `NCCL_DEBUG=INFO`
    topology) and compare with `all_reduce_perf` from nccl-tests on the same nodes. Pin NCCL's
    proxy threads to free cores; keep `NCCL_ALGO`/`NCCL_PROTO` unset unless measured better.

    ## Options
    - `min_message_mb`: only messages of at least this size (MB = 1e6 bytes) are compared; small
      ones are latency-bound and their bandwidth says little.
    - `max_ratio`: report instances whose transfer busbw is below this fraction of the best of
      their op, size bucket and link.

    ## References
    - https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md
    - https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html
    - https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
    """

    code = "DS103"
    name = "low-bus-bandwidth"

    def check_ranks(self, run: RankRun) -> Iterator[Finding]:
        table = bandwidth_table(run, min_bytes=self.options.min_message_mb * 1e6)
        slow = table[table["ratio"] < self.options.max_ratio]
        if not len(slow):
            return
        b = run.breakdown
        steps = max(1, int(b["step"].nunique())) if len(b) else 1
        step_ns = float(b["step_ns"].mean()) if len(b) else 0.0
        members = run.metrics.per_rank.groupby("instance")["rank"].agg(lambda r: sorted(set(r.tolist())))
        for (op, span, bucket), g in slow.groupby(["op", "span", "bucket"], sort=True):
            group = table[(table["op"] == op) & (table["span"] == span) & (table["bucket"] == bucket)]
            best = float(group["best_gbps"].iloc[0])
            measured = float(g["busbw_gbps"].median())
            saving = float(g.loc[g["in_step"], "excess_ns"].sum()) / steps
            ranks = sorted({int(r) for i in g["instance"] for r in members.get(int(i), [])})
            size = float(np.median(g["bytes"]))
            yield self.rank_finding(
                run,
                message=(
                    f"{plural(len(g), str(op))} of {size / 1e6:.1f} MB ({span}) "
                    f"{'reaches' if len(g) == 1 else 'reach'} {measured:.2f} GB/s bus bandwidth"
                    f"{'' if len(g) == 1 else ' (median)'}, {100.0 * measured / best:.0f}% of the {best:.2f} GB/s "
                    f"the run reaches for the same op and size ({bucket_label(int(bucket))}); "
                    f"{fmt_ns(float(g['excess_ns'].sum()))} lost in all"
                ),
                recommendation=(
                    "Find what shares the link while these run (another collective on a second stream, "
                    "copies, another job), check the links (nvidia-smi nvlink -s, ibstat, NCCL_DEBUG=INFO) "
                    "and compare with nccl-tests' all_reduce_perf on the same nodes."
                ),
                ranks=ranks,
                saving_per_step_ns=saving,
                step_ns=step_ns,
                scenario="slow collectives at the run's best bus bandwidth",
                basis=BASIS,
                data={
                    "op": str(op),
                    "span": str(span),
                    "size_bucket": bucket_label(int(bucket)),
                    "count": len(g),
                    "compared": len(group),
                    "instances": [int(i) for i in g["instance"]],
                    "bytes": [float(x) for x in g["bytes"]],
                    "busbw_gbps": [float(x) for x in g["busbw_gbps"]],
                    "best_busbw_gbps": best,
                    "excess_ns": [float(x) for x in g["excess_ns"]],
                    "saving_per_step_ns": saving,
                },
            )
