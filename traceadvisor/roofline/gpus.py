"""Datasheet peaks of the GPUs traceadvisor knows, and matching a trace's ``deviceProperties`` to them.

Every figure is the vendor's **dense** peak (NVIDIA prints tensor-core figures "with sparsity" and
footnotes that dense is half: those are halved here), in FLOP/s (integer ops per second for
``int8``) and memory bandwidth in GB/s (10^9 bytes per second), with the document it comes from.

Keys of ``GpuSpec.flops`` (``None`` where the GPU has no such unit or the vendor gives no figure):

* ``fp64``, ``fp32``: vector (CUDA-core / SIMD) rates, what an elementwise kernel or a SIMT
  SGEMM can reach;
* ``fp64_matrix``, ``fp32_matrix``: FP64 tensor cores (A100 and later) and AMD's FP32 matrix
  cores, where they are faster than the vector units;
* ``tf32``, ``bf16``, ``fp16``, ``fp8``, ``int8``: tensor-core / matrix-core rates (fp16 with fp32
  accumulate, as PyTorch runs it).

MI200-series boards hold two graphics compute dies (GCDs) that ROCm exposes as two devices, so a
trace sees one GCD: those entries are per GCD (the board figure halved; the MI210 is one GCD).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from traceadvisor.trace.device import DTYPES as DTYPES  # re-exported: the dtypes of every figure table here

FIGURES = ("memory_bandwidth", *DTYPES)

T = 1e12  # TFLOP/s

_V100 = (
    "NVIDIA Tesla V100 datasheet (volta-v100-datasheet-update-us-1165301-r5), "
    "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
)
_A100 = (
    "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4), "
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_H100 = (
    "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM / H100 NVL columns), "
    "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
)
_H100_PCIE = (
    "NVIDIA H100 PCIe product brief PB-11133-001 and the H100 datasheet's PCIe column, "
    "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
)
_H200 = (
    "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM / H200 NVL columns), "
    "https://resources.nvidia.com/en-us-data-center-overview-mc/en-us-data-center-overview/hpc-datasheet-sc23-h200"
)
_B200 = (
    "NVIDIA HGX B200 specifications (per-GPU column of the HGX platform table), "
    "https://www.nvidia.com/en-us/data-center/hgx/"
)
_L4 = "NVIDIA L4 Tensor Core GPU datasheet, https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"
_L40S = "NVIDIA L40S datasheet, https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_L40 = "NVIDIA L40 datasheet, https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/support-guide/NVIDIA-L40-Datasheet-January-2023.pdf"
_A10 = (
    "NVIDIA A10 Tensor Core GPU datasheet, "
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf"
)
_T4 = (
    "NVIDIA T4 Tensor Core GPU datasheet, "
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf"
)
_MI250X = (
    "AMD Instinct MI250X data sheet / brochure (board figures; halved per GCD), "
    "https://www.amd.com/content/dam/amd/en/documents/instinct-business-docs/product-briefs/instinct-mi250x-brochure.pdf"
)
_MI210 = (
    "AMD Instinct MI210 data sheet (one GCD; an MI250 GCD has the same CUs, clock and HBM), "
    "https://www.amd.com/content/dam/amd/en/documents/instinct-business-docs/product-briefs/instinct-mi210-brochure.pdf"
)
_MI300X = (
    "AMD Instinct MI300X data sheet, "
    "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf"
)
# GA102/AD10x/TU104 datasheets give no FP64 figure; their FP64 rate follows from the CUDA C++
# Programming Guide's arithmetic-instruction throughput table (results per clock per SM).
_FP64_1_64 = (
    "derived: FP32 / 64 (CUDA C++ Programming Guide, arithmetic instruction throughput: "
    "2 FP64 vs 128 FP32 results per clock per SM on compute capability 8.6 / 8.9)"
)
_FP64_1_32 = (
    "derived: FP32 / 32 (CUDA C++ Programming Guide, arithmetic instruction throughput: "
    "2 FP64 vs 64 FP32 results per clock per SM on compute capability 7.5)"
)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model: dense peaks, bandwidth, SM (CU) count, and where each figure comes from."""

    key: str  # short stable name for configuration (``name = "h100-sxm"``)
    name: str  # marketing name
    vendor: str  # "nvidia" or "amd"
    sm_count: int  # SMs (NVIDIA) or compute units (AMD) of the device a trace sees
    memory_gb: float  # nominal memory of that device (GB)
    memory_bandwidth_gbs: float
    flops: Mapping[str, float | None]
    source: str
    derived: Mapping[str, str] = field(default_factory=dict)  # figure -> its own source

    def figure_source(self, figure: str) -> str:
        """The document a figure comes from."""
        return self.derived.get(figure, self.source)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "vendor": self.vendor,
            "sm_count": self.sm_count,
            "memory_gb": self.memory_gb,
            "memory_bandwidth_gbs": self.memory_bandwidth_gbs,
            "flops": {k: self.flops.get(k) for k in DTYPES},
            "sources": {f: self.figure_source(f) for f in FIGURES},
        }


def _flops(**tflops: float | None) -> dict[str, float | None]:
    unknown = set(tflops) - set(DTYPES)
    if unknown:
        raise ValueError(f"unknown dtype(s) {sorted(unknown)}")
    return {k: (None if tflops.get(k) is None else float(tflops[k] or 0.0) * T) for k in DTYPES}


def _a100(key: str, name: str, memory_gb: float, bandwidth: float) -> GpuSpec:
    return GpuSpec(
        key,
        name,
        "nvidia",
        108,
        memory_gb,
        bandwidth,
        _flops(fp64=9.7, fp64_matrix=19.5, fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624),
        _A100,
    )


def _mi_gcd(key: str, name: str, cus: int, fp64: float, fp64m: float, half: float, source: str) -> GpuSpec:
    return GpuSpec(
        key,
        name,
        "amd",
        cus,
        64,
        1638.4,
        _flops(fp64=fp64, fp64_matrix=fp64m, fp32=fp64, fp32_matrix=fp64m, bf16=half, fp16=half, int8=half),
        source,
    )


# Where a datasheet prints only sparse tensor-core figures they are halved inline (``989 / 2``) so
# the datasheet number stays visible; where it prints the dense one too, that one is used.
GPUS: tuple[GpuSpec, ...] = (
    GpuSpec("v100-sxm2", "NVIDIA V100 SXM2", "nvidia", 80, 32, 900, _flops(fp64=7.8, fp32=15.7, fp16=125), _V100),
    GpuSpec("v100-pcie", "NVIDIA V100 PCIe", "nvidia", 80, 32, 900, _flops(fp64=7.0, fp32=14.0, fp16=112), _V100),
    GpuSpec("v100s-pcie", "NVIDIA V100S PCIe", "nvidia", 80, 32, 1134, _flops(fp64=8.2, fp32=16.4, fp16=130), _V100),
    _a100("a100-sxm-40gb", "NVIDIA A100 SXM4 40GB", 40, 1555),
    _a100("a100-sxm-80gb", "NVIDIA A100 SXM4 80GB", 80, 2039),
    _a100("a100-pcie-40gb", "NVIDIA A100 PCIe 40GB", 40, 1555),
    _a100("a100-pcie-80gb", "NVIDIA A100 PCIe 80GB", 80, 1935),
    GpuSpec(
        "h100-sxm",
        "NVIDIA H100 SXM5 80GB",
        "nvidia",
        132,
        80,
        3350,
        _flops(
            fp64=34, fp64_matrix=67, fp32=67, tf32=989 / 2, bf16=1979 / 2, fp16=1979 / 2, fp8=3958 / 2, int8=3958 / 2
        ),
        _H100,
    ),
    GpuSpec(
        "h100-pcie",
        "NVIDIA H100 PCIe 80GB",
        "nvidia",
        114,
        80,
        2000,
        _flops(
            fp64=26, fp64_matrix=51, fp32=51, tf32=756 / 2, bf16=1513 / 2, fp16=1513 / 2, fp8=3026 / 2, int8=3026 / 2
        ),
        _H100_PCIE,
    ),
    GpuSpec(
        "h100-nvl",
        "NVIDIA H100 NVL 94GB",
        "nvidia",
        132,
        94,
        3900,
        _flops(
            fp64=30, fp64_matrix=60, fp32=60, tf32=835 / 2, bf16=1671 / 2, fp16=1671 / 2, fp8=3341 / 2, int8=3341 / 2
        ),
        _H100,
    ),
    GpuSpec(
        "h200-sxm",
        "NVIDIA H200 SXM 141GB",
        "nvidia",
        132,
        141,
        4800,
        _flops(
            fp64=34, fp64_matrix=67, fp32=67, tf32=989 / 2, bf16=1979 / 2, fp16=1979 / 2, fp8=3958 / 2, int8=3958 / 2
        ),
        _H200,
    ),
    GpuSpec(
        "h200-nvl",
        "NVIDIA H200 NVL 141GB",
        "nvidia",
        132,
        141,
        4800,
        _flops(
            fp64=30, fp64_matrix=60, fp32=60, tf32=835 / 2, bf16=1671 / 2, fp16=1671 / 2, fp8=3341 / 2, int8=3341 / 2
        ),
        _H200,
    ),
    GpuSpec(
        "b200",
        "NVIDIA B200 (HGX) 180GB",
        "nvidia",
        148,
        180,
        7700,
        _flops(
            fp64=37, fp64_matrix=37, fp32=75, tf32=2200 / 2, bf16=4500 / 2, fp16=4500 / 2, fp8=9000 / 2, int8=9000 / 2
        ),
        _B200,
    ),
    GpuSpec(
        "l4",
        "NVIDIA L4",
        "nvidia",
        58,
        24,
        300,
        _flops(fp64=30.3 / 64, fp32=30.3, tf32=120 / 2, bf16=242 / 2, fp16=242 / 2, fp8=485 / 2, int8=485 / 2),
        _L4,
        {"fp64": _FP64_1_64},
    ),
    GpuSpec(
        "l40s",
        "NVIDIA L40S",
        "nvidia",
        142,
        48,
        864,
        # The L40S datasheet prints dense figures next to the sparse ones: 183 | 366*, 362.05 | 733*.
        _flops(fp64=91.6 / 64, fp32=91.6, tf32=183, bf16=362.05, fp16=362.05, fp8=733, int8=733),
        _L40S,
        {"fp64": _FP64_1_64},
    ),
    GpuSpec(
        "l40",
        "NVIDIA L40",
        "nvidia",
        142,
        48,
        864,
        _flops(fp64=90.5 / 64, fp32=90.5, tf32=181 / 2, bf16=362.1 / 2, fp16=362.1 / 2, fp8=724 / 2, int8=724 / 2),
        _L40,
        {"fp64": _FP64_1_64},
    ),
    GpuSpec(
        "a10",
        "NVIDIA A10",
        "nvidia",
        72,
        24,
        600,
        _flops(fp64=31.2 / 64, fp32=31.2, tf32=125 / 2, bf16=250 / 2, fp16=250 / 2, int8=500 / 2),
        _A10,
        {"fp64": _FP64_1_64},
    ),
    GpuSpec(
        "t4",
        "NVIDIA T4",
        "nvidia",
        40,
        16,
        320,
        _flops(fp64=8.1 / 32, fp32=8.1, fp16=65, int8=130),
        _T4,
        {"fp64": _FP64_1_32},
    ),
    _mi_gcd("mi250x-gcd", "AMD Instinct MI250X (one GCD)", 110, 47.9 / 2, 95.7 / 2, 383 / 2, _MI250X),
    _mi_gcd("mi210", "AMD Instinct MI210 / MI250 (one GCD)", 104, 22.6, 45.3, 181.0, _MI210),
    GpuSpec(
        "mi300x",
        "AMD Instinct MI300X",
        "amd",
        304,
        192,
        5300,
        _flops(
            fp64=81.7,
            fp64_matrix=163.4,
            fp32=163.4,
            fp32_matrix=163.4,
            tf32=653.7,
            bf16=1307.4,
            fp16=1307.4,
            fp8=2614.9,
            int8=2614.9,
        ),
        _MI300X,
    ),
)
BY_KEY = {g.key: g for g in GPUS}

# A device reporting clearly fewer SMs than the model has is a MIG slice or a compute partition:
# the whole-GPU peaks do not apply to it. (10% slack: board variants differ by an SM or two.)
_MIN_SM_FRACTION = 0.9


@dataclass(frozen=True)
class Match:
    """The table entry a device matched, or why none did."""

    spec: GpuSpec | None
    reason: str  # how it matched, or why not


def lookup(name: str) -> GpuSpec | None:
    """A table entry by key (``h100-sxm``) or marketing name (case-insensitive)."""
    want = name.strip().lower()
    for g in GPUS:
        if want in (g.key, g.name.lower()):
            return g
    return None


def describe(props: Mapping[str, Any] | None) -> str:
    """A device in words: name, compute capability, SMs, memory."""
    if not props:
        return "an unnamed device"
    parts = [repr(str(props.get("name", "?")))]
    if "computeMajor" in props:
        parts.append(f"cc {props.get('computeMajor')}.{props.get('computeMinor')}")
    if props.get("numSms"):
        parts.append(f"{props.get('numSms')} SMs")
    mem = _int(props.get("totalGlobalMem"))
    if mem:
        parts.append(f"{mem / 1e9:.0f} GB")
    return ", ".join(parts)


def match(props: Mapping[str, Any] | None) -> Match:
    """The table entry for a trace's ``deviceProperties`` entry, from its name, SMs and memory."""
    if not props:
        return Match(None, "the trace has no deviceProperties")
    spec = _by_properties(props)
    what = describe(props)
    if spec is None:
        return Match(None, f"GPU {what} is not in the peak table")
    sms = _int(props.get("numSms"))
    if sms and sms < _MIN_SM_FRACTION * spec.sm_count:
        return Match(
            None,
            f"GPU {what} looks like a {spec.name} partition or MIG slice ({sms} of {spec.sm_count} SMs): "
            "its whole-GPU peaks do not apply",
        )
    return Match(spec, f"{what} matched {spec.name}")


def _by_properties(props: Mapping[str, Any]) -> GpuSpec | None:
    name = str(props.get("name", "")).upper()
    sms = _int(props.get("numSms"))
    mem_gb = _int(props.get("totalGlobalMem")) / 1e9
    if "NVIDIA" in name or "TESLA" in name or name.startswith(("A100", "H100", "V100")):
        return _nvidia(name, sms, mem_gb)
    if "AMD" in name or "INSTINCT" in name or "RADEON" in name or int(props.get("warpSize", 32) or 32) == 64:
        return _amd(name, sms, props)
    return None


def _nvidia(name: str, sms: int, mem_gb: float) -> GpuSpec | None:
    def has(word: str) -> bool:
        return re.search(rf"(?<![A-Z0-9]){word}(?![A-Z0-9])", name) is not None

    if "GB200" in name or "GH200" in name:
        return None  # superchip variants have their own clocks and memory: not in the table
    if has("B200"):
        return BY_KEY["b200"]
    if has("H200"):
        return BY_KEY["h200-nvl" if "NVL" in name else "h200-sxm"]
    if has("H100"):
        if "NVL" in name:
            return BY_KEY["h100-nvl"]
        if "PCIE" in name or sms == BY_KEY["h100-pcie"].sm_count:
            return BY_KEY["h100-pcie"]
        return BY_KEY["h100-sxm"]
    if "A100" in name:
        pcie = "PCIE" in name
        big = mem_gb > 60 or "80GB" in name
        return BY_KEY[f"a100-{'pcie' if pcie else 'sxm'}-{'80' if big else '40'}gb"]
    if "V100S" in name:
        return BY_KEY["v100s-pcie"]
    if has("V100"):
        if "PCIE" in name:
            return BY_KEY["v100-pcie"]
        if "SXM" in name or "DGXS" in name:
            return BY_KEY["v100-sxm2"]
        return None  # no form factor in the name: PCIe and SXM2 clocks differ
    for key, word in (("l40s", "L40S"), ("l40", "L40"), ("l4", "L4"), ("a10", "A10"), ("t4", "T4")):
        if has(word):
            return BY_KEY[key]
    return None


def _amd(name: str, sms: int, props: Mapping[str, Any]) -> GpuSpec | None:
    if "MI300X" in name:
        return BY_KEY["mi300x"]
    if "MI250X" in name:
        return BY_KEY["mi250x-gcd"]
    if "MI250" in name or "MI210" in name:
        return BY_KEY["mi210"]
    # ROCm often names Instinct parts "AMD Radeon Graphics"; the gfx version (reported as the
    # compute capability: gfx90a = 9.0, gfx942 = 9.4) and the CU count then identify them.
    cc = (_int(props.get("computeMajor")), _int(props.get("computeMinor")))
    if cc == (9, 4) and sms == 304:
        return BY_KEY["mi300x"]
    if cc == (9, 0) and sms == 110:
        return BY_KEY["mi250x-gcd"]
    if cc == (9, 0) and sms == 104:
        return BY_KEY["mi210"]
    return None


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
