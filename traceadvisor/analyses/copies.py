"""Host-device copies: the rate a pageable copy would reach from pinned (page-locked) memory.

A pageable copy is staged by the driver through a pinned bounce buffer, in chunks, and runs well
below the link's rate (CUDA C++ Programming Guide, "Page-Locked Host Memory"); from pinned memory
it runs at what the machine's link gives. The best evidence of that is the trace itself: its own
large pinned copies. Without any, the rate is assumed by GPU generation: ~50 GB/s on sm_90 and
newer (PCIe 5.0 x16, measured on H100 hosts), ~20 GB/s before (PCIe 4.0 x16: ~25 GB/s peak).
Shared by the pageable-copy rule (MC101, whose options override the figures) and the ``pinned``
what-if scenario, so that both predict with the same rate.
"""

from __future__ import annotations

import numpy as np

from traceadvisor.trace.columns import MEMCPY
from traceadvisor.trace.model import Trace

# Share of the measured pinned rate taken as reachable (copies of other sizes and directions are
# slower than the trace's largest).
PINNED_MEASURED_FACTOR = 0.8
PINNED_GBPS_PCIE5 = 50.0
PINNED_GBPS_PCIE4 = 20.0
# Only copies of at least 1 MiB measure the link: smaller ones are dominated by their fixed cost.
MIN_MEASURED_BYTES = 1 << 20


def pinned_rate(
    trace: Trace,
    measured_factor: float = PINNED_MEASURED_FACTOR,
    gbps_pcie5: float = PINNED_GBPS_PCIE5,
    gbps_pcie4: float = PINNED_GBPS_PCIE4,
) -> tuple[float, str]:
    """The pinned copy rate (bytes/ns = GB/s) a pageable copy would reach, and how it was found:
    measured on this trace's large pinned copies when there are some, else assumed by GPU generation."""
    g = trace.gpu
    copies = g[g["kind"] == MEMCPY]
    names = copies["name"]
    # Tested once per distinct name; a row without a name (code -1) reads the last slot: False.
    per_name = np.append(names.cat.categories.astype(str).str.contains("Pinned", regex=False), False)
    is_pinned = per_name[names.cat.codes.to_numpy()]
    pinned = copies[is_pinned & (copies["bytes"] >= MIN_MEASURED_BYTES).to_numpy()]
    if len(pinned):
        rate = measured_factor * float(pinned["bytes"].sum()) / float(pinned["dur_ns"].sum())  # bytes/ns
        return rate, f"{measured_factor:.1f} × pinned copies measured in this trace ({rate:.1f} GB/s)"
    props = trace.device_properties() or {}
    gbps = gbps_pcie5 if int(props.get("computeMajor", 0) or 0) >= 9 else gbps_pcie4
    return gbps, f"{gbps:.0f} GB/s assumed pinned rate"
