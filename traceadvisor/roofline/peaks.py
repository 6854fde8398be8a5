"""The peaks a trace is judged against: datasheet, measured device profile, or configuration.

Resolution, figure by figure (a later source replaces an earlier one):

1. the datasheet entry of ``gpus.py`` that the trace's ``deviceProperties`` match, or the one the
   configuration names (``name = "h100-sxm"``);
2. a device profile measured by ``traceadvisor calibrate``: the file configuration names
   (``device-profile = "path"``), else the newest profile in ``default_profile_dir()`` whose
   device name and SM count equal the trace's (``device-profile = false`` turns the search off);
   it replaces the figures it measured;
3. explicit figures in the configuration (``memory-bandwidth-gbs``, ``[gpu.tflops]``).

Without a memory bandwidth from any of these there is no roofline; the reason says why and how
to supply the peaks. ``[tool.traceadvisor.gpu]`` keys::

    name = "h100-sxm"                 # a GPU of the table (key or name) instead of matching
    device-profile = "h100.json"      # a measured profile (relative to the config file), or false
    memory-bandwidth-gbs = 3350.0     # GB/s
    sm-count = 132
    [tool.traceadvisor.gpu.tflops]    # dense TFLOP/s (TOP/s for int8) by dtype
    bf16 = 989.5
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceadvisor.roofline.gpus import DTYPES, GPUS, GpuSpec, describe, lookup, match
from traceadvisor.roofline.profile import ProfileError, find_device_profile, load_device_profile
from traceadvisor.trace.device import NO_PEAKS_HELP, DeviceProfile, GpuConfig

GPU_KEYS = ("name", "device-profile", "memory-bandwidth-gbs", "sm-count", "tflops")


def parse_gpu_table(table: Mapping[str, Any], base: Path, source: str) -> GpuConfig:
    """Read a ``[gpu]`` configuration table; ``ValueError`` says what is wrong."""
    name: str | None = None
    profile: DeviceProfile | None = None
    search = True
    bandwidth: float | None = None
    sm_count: int | None = None
    tflops: dict[str, float] = {}
    for key, value in table.items():
        if key == "name":
            if not isinstance(value, str) or lookup(value) is None:
                known = ", ".join(g.key for g in GPUS)
                raise ValueError(f"gpu.name {value!r} is not in the peak table; known: {known}")
            name = value
        elif key in ("device-profile", "device_profile"):
            if value is False:
                search = False
            elif isinstance(value, str) and value:
                try:
                    profile = load_device_profile(base / value)
                except ProfileError as exc:
                    raise ValueError(str(exc)) from None
            else:
                raise ValueError("gpu.device-profile must be a file path or false")
        elif key in ("memory-bandwidth-gbs", "memory_bandwidth_gbs"):
            bandwidth = _positive(value, "gpu.memory-bandwidth-gbs")
        elif key in ("sm-count", "sm_count"):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError("gpu.sm-count must be a positive integer")
            sm_count = value
        elif key == "tflops":
            if not isinstance(value, dict):
                raise ValueError(f"[gpu.tflops] is a table of dtype = TFLOP/s ({', '.join(DTYPES)})")
            for dtype, number in value.items():
                if dtype not in DTYPES:
                    raise ValueError(f"gpu.tflops.{dtype}: unknown dtype; known: {', '.join(DTYPES)}")
                tflops[dtype] = _positive(number, f"gpu.tflops.{dtype}")
        else:
            raise ValueError(f"unknown key gpu.{key}; known: {', '.join(GPU_KEYS)}")
    return GpuConfig(name, profile, search, bandwidth, sm_count, tflops, source)


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive number")
    return float(value)


@dataclass(frozen=True)
class Peaks:
    """The peaks used for one trace, with the source of every figure."""

    device: str  # the trace's device name
    model: str | None  # the table entry or profile device used
    sm_count: int | None
    memory_bandwidth_gbs: float
    flops: Mapping[str, float | None]  # FLOP/s by dtype (gpus.DTYPES)
    sources: Mapping[str, str]  # figure ("memory_bandwidth", dtype) → where it came from
    note: str = ""  # how the device was matched

    @property
    def bytes_per_s(self) -> float:
        return self.memory_bandwidth_gbs * 1e9

    def compute_peak(self, kind: str, dtype: str, tf32_kernel: bool = False) -> tuple[float | None, str]:
        """The FLOP/s roof of a kernel and which figure it is.

        Matrix ops (matmul, convolution, attention) run on tensor / matrix cores: their dtype's
        figure; fp32 products only where the kernel is a TF32 one (PyTorch keeps TF32 off for
        matmuls by default), else AMD's FP32 matrix cores or the vector FP32 rate; fp64 products
        on FP64 tensor cores where the GPU has them. Everything else is vector arithmetic:
        fp64 for double data, fp32 otherwise (PyTorch computes half-precision pointwise ops in
        fp32 registers).
        """
        f = self.flops
        if kind == "matrix":
            if dtype == "fp32":
                if tf32_kernel and f.get("tf32"):
                    return f["tf32"], "tf32"
                if f.get("fp32_matrix"):
                    return f["fp32_matrix"], "fp32_matrix"
                return f.get("fp32"), "fp32"
            if dtype == "fp64":
                if f.get("fp64_matrix"):
                    return f["fp64_matrix"], "fp64_matrix"
                return f.get("fp64"), "fp64"
            if dtype in ("bf16", "fp16", "fp8", "int8"):
                return f.get(dtype), dtype
            return f.get("fp32"), "fp32"
        if dtype == "fp64":
            return f.get("fp64"), "fp64"
        return f.get("fp32"), "fp32"

    def to_dict(self) -> dict[str, Any]:
        """The ``peaks`` object of the report's ``roofline`` section."""
        return {
            "device": self.device,
            "model": self.model,
            "sm_count": self.sm_count,
            "memory_bandwidth_gbs": self.memory_bandwidth_gbs,
            "tflops": {k: (None if v is None else v / 1e12) for k, v in self.flops.items()},
            "sources": dict(self.sources),
            "note": self.note,
        }


@dataclass(frozen=True)
class PeaksResult:
    """Peaks, or ``None`` with the reason."""

    peaks: Peaks | None
    reason: str


def resolve_peaks(props: Mapping[str, Any] | None, config: GpuConfig | None = None) -> PeaksResult:
    """The peaks for a device (its ``deviceProperties`` entry) under a configuration."""
    cfg = config or GpuConfig()
    props = props or {}
    device = str(props.get("name") or "unknown device")
    spec: GpuSpec | None
    if cfg.name is not None:
        spec = lookup(cfg.name)
        note = f"configuration ({cfg.source}) names {spec.name if spec else cfg.name}"
    else:
        m = match(props)
        spec, note = m.spec, m.reason
    figures: dict[str, float | None] = {}
    sources: dict[str, str] = {}
    if spec is not None:
        figures["memory_bandwidth"] = spec.memory_bandwidth_gbs
        figures.update(spec.flops)
        sources.update({k: f"datasheet: {spec.figure_source(k)}" for k, v in figures.items() if v is not None})
    profile = cfg.device_profile
    if profile is None and cfg.search_profiles and props.get("name") and props.get("numSms"):
        try:
            profile = find_device_profile(device, int(props["numSms"]))
        except (OSError, ValueError):
            profile = None
    if profile is not None:
        measured: dict[str, float | None] = {"memory_bandwidth": profile.memory_bandwidth_gbs, **profile.flops}
        for k, v in measured.items():
            if v is not None:
                figures[k] = v
                sources[k] = profile.describe()
        note += f"; measured peaks from {profile.path or 'a device profile'}"
    overrides: dict[str, float | None] = {k: v * 1e12 for k, v in cfg.tflops.items()}
    if cfg.memory_bandwidth_gbs is not None:
        overrides["memory_bandwidth"] = cfg.memory_bandwidth_gbs
    for k, v in overrides.items():
        figures[k] = v
        sources[k] = f"configuration: {cfg.source}"
    bandwidth = figures.get("memory_bandwidth")
    if bandwidth is None:
        return PeaksResult(None, f"no roofline: {note}; {NO_PEAKS_HELP}")
    sm_count = cfg.sm_count or (profile.sm_count if profile else None) or (spec.sm_count if spec else None)
    if not sm_count:
        sm_count = int(props.get("numSms") or 0) or None
    model = spec.name if spec else (profile.name if profile else None)
    return PeaksResult(
        Peaks(
            device=device,
            model=model,
            sm_count=sm_count,
            memory_bandwidth_gbs=float(bandwidth),
            flops={k: figures.get(k) for k in DTYPES},
            sources=sources,
            note=note,
        ),
        note,
    )


__all__ = ["NO_PEAKS_HELP", "GpuConfig", "Peaks", "PeaksResult", "describe", "parse_gpu_table", "resolve_peaks"]
