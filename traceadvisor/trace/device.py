"""What the user says about the GPU: ``GpuConfig`` (``[tool.traceadvisor.gpu]``) and a measured
``DeviceProfile`` (``traceadvisor calibrate``), as plain data.

They live beside the trace model, not in ``roofline/``, because a trace is given its GPU
configuration when it is built (``Trace(..., gpu=...)``, ``load(..., gpu=...)``) and the model
must not import the roofline package that reads it (the roofline imports the model). Reading and
checking these (``roofline.peaks.parse_gpu_table``, ``roofline.profile.load_device_profile``) stays
in ``roofline/``; this module imports nothing of traceadvisor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The dtypes a peak is known for (``roofline.gpus`` explains each); the keys of every FLOP/s table.
DTYPES = ("fp64", "fp64_matrix", "fp32", "fp32_matrix", "tf32", "bf16", "fp16", "fp8", "int8")
# The ``schema`` of a device profile's JSON document (``roofline.profile`` shows the document).
PROFILE_SCHEMA = "traceadvisor-device-profile/1"

NO_PEAKS_HELP = (
    'name the GPU (name = "h100-sxm") or give its peaks in [tool.traceadvisor.gpu], '
    "or measure it with `traceadvisor calibrate`"
)


@dataclass(frozen=True)
class DeviceProfile:
    """Peaks measured on one GPU model."""

    name: str
    sm_count: int
    compute_capability: str
    total_memory_bytes: int
    memory_bandwidth_gbs: float
    flops: Mapping[str, float | None]  # FLOP/s by dtype; None = not measured
    method: Mapping[str, Any] = field(default_factory=dict)
    torch: str = ""
    created: str = ""
    extra_flops: Mapping[str, float | None] = field(default_factory=dict)
    path: str | None = None  # where it was read from

    def to_dict(self) -> dict[str, Any]:
        """The profile as its JSON document."""
        flops: dict[str, float | None] = {k: self.flops.get(k) for k in DTYPES if k in self.flops}
        flops.update(self.extra_flops)
        return {
            "schema": PROFILE_SCHEMA,
            "device": {
                "name": self.name,
                "sm_count": self.sm_count,
                "compute_capability": self.compute_capability,
                "total_memory_bytes": self.total_memory_bytes,
            },
            "measured": {"memory_bandwidth_gbs": self.memory_bandwidth_gbs, "flops": flops},
            "method": dict(self.method),
            "torch": self.torch,
            "created": self.created,
        }

    def describe(self) -> str:
        """Where this profile came from, for reports."""
        where = self.path or "device profile"
        when = f", measured {self.created}" if self.created else ""
        return f"measured: {where}{when}"


@dataclass(frozen=True)
class GpuConfig:
    """``[tool.traceadvisor.gpu]``: how to choose or override the peaks."""

    name: str | None = None
    device_profile: DeviceProfile | None = None
    search_profiles: bool = True
    memory_bandwidth_gbs: float | None = None
    sm_count: int | None = None
    tflops: Mapping[str, float] = field(default_factory=dict)
    source: str = "configuration"  # the file it came from
