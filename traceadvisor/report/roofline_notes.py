"""Notes the renderers print under the roofline table (presentation only: no pandas here)."""

from __future__ import annotations

from typing import Any

# A kernel cannot move its compulsory bytes faster than the DRAM peak; when the figures say it
# did, the bytes came from the L2 cache (inputs the previous kernel left there: 50 MB on an H100)
# or an input was broadcast (expanded, stride 0) and is counted at its full size, since the
# profiler records shapes but not strides.
ABOVE_ROOF_NOTE = (
    "roof above 100%: faster than DRAM allows, so inputs came from the L2 cache or an expanded "
    "(broadcast) input is counted at full size (the trace records no strides)"
)


def above_roof(rows: list[dict[str, Any]]) -> bool:
    """Whether any memory-bound row of ``top_kernels`` claims more than the bandwidth peak."""
    return any((k.get("roof_pct") or 0.0) > 100.0 and k.get("bound") == "memory" for k in rows)
