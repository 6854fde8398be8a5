"""``traceadvisor calibrate``: measure this GPU's achievable memory bandwidth and matmul FLOP/s.

Datasheet peaks are upper bounds that no kernel reaches (an H100's 3.35 TB/s HBM3 gives about
2.9-3.1 TB/s to a copy kernel); a roofline drawn against them makes every kernel look slower than
it is. ``calibrate`` measures what the reference kernels actually reach on this GPU and saves it
as a device profile (``traceadvisor.roofline.profile``) that the roofline then uses instead:

* memory bandwidth: a device-to-device copy (``Tensor.copy_``: reads and writes each byte once)
  and the Triton vector add of the ``vector-add`` workload (two reads, one write), on buffers far
  larger than the L2 cache; the higher of the two is the profile's figure;
* matmul FLOP/s per dtype: ``torch.matmul`` (cuBLAS) on square matrices for fp32 with TF32 off
  (the CUDA-core rate), tf32, bf16 and fp16, ``torch._scaled_mm`` for fp8 (e4m3, compute
  capability 8.9 and later), and, without ``--quick``, the Triton matmul of the ``matmul``
  workload for fp16 and bf16; the best per dtype is the profile's figure.

Each measurement is timed with CUDA events around back-to-back calls (enough calls for about
2 ms between the events, so launch gaps do not count), after warm-up calls, and the median of
the repeats is kept. The figures depend on clocks, power limits and other work on the GPU: run
it on an idle GPU. torch is imported inside the functions: the command line loads this module
without it.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from traceadvisor.console import fail

MATMUL_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class Plan:
    """Sizes and repeats of one calibration run."""

    copy_bytes: int  # per buffer
    matmul_n: int  # square matmul size
    warmup: int
    repeats: int
    triton_matmul: bool

    @staticmethod
    def make(quick: bool, total_memory: int) -> Plan:
        """Full: 1 GiB buffers (at most 1/16 of the memory), n = 8192, 10 repeats; quick: 256 MiB, 4096, 5."""
        copy_bytes = min(1 << 28 if quick else 1 << 30, max(total_memory // 16, 1 << 24))
        if quick:
            return Plan(copy_bytes, 4096, 2, 5, triton_matmul=False)
        return Plan(copy_bytes, 8192, 3, 10, triton_matmul=True)


def calibrate(
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the device profile here (default: the profile folder).")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Smaller sizes and fewer repeats; no Triton matmul.")] = False,
    device: Annotated[int, typer.Option("--device", help="CUDA device index.")] = 0,
) -> None:
    """Measure the GPU's memory bandwidth and matmul FLOP/s and save them as a device profile."""
    try:
        import torch
    except ImportError:
        raise fail("calibrate needs torch (pip install 'traceadvisor[capture]')") from None
    if not torch.cuda.is_available():
        raise fail("calibrate needs a CUDA GPU")
    if not 0 <= device < torch.cuda.device_count():
        raise fail(f"no CUDA device {device}; this machine has {torch.cuda.device_count()}")
    from traceadvisor.roofline.profile import ProfileError, default_profile_dir, profile_filename, save_device_profile

    try:
        profile = measure(device, quick, progress=_progress)
    except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
        raise fail(f"measurement failed: {' '.join(str(exc).split())[:300]}") from None
    path = out if out is not None else default_profile_dir() / profile_filename(profile.name, profile.sm_count)
    try:
        saved = save_device_profile(profile, path)
    except (OSError, ProfileError) as exc:
        raise fail(f"{path}: cannot write the device profile ({getattr(exc, 'strerror', None) or exc})") from None
    sys.stdout.write(render(profile.to_dict()))
    sys.stdout.write(f"device profile: {saved}\n")


def measure(device: int, quick: bool, progress: Callable[[str], None] = lambda _: None) -> Any:
    """Run the measurements on CUDA device ``device``; returns a ``roofline.profile.DeviceProfile``."""
    import torch

    from traceadvisor.roofline.profile import DeviceProfile

    torch.cuda.set_device(device)
    props = torch.cuda.get_device_properties(device)
    plan = Plan.make(quick, int(props.total_memory))
    method: dict[str, Any] = {
        "timing": (
            f"CUDA events around back-to-back calls (>= 2 ms per sample), {plan.warmup} warm-up calls, "
            f"median of {plan.repeats} samples"
        ),
        "quick": quick,
        "cuda": torch.version.cuda,
    }
    progress(f"measuring memory bandwidth on {props.name} ({plan.copy_bytes >> 20} MiB buffers)")
    bandwidth = _bandwidth(plan)
    torch.cuda.empty_cache()  # the buffers are gone: give their memory back before the matmuls
    method["bandwidth"] = bandwidth
    progress(f"measuring matmul FLOP/s ({plan.matmul_n}×{plan.matmul_n}×{plan.matmul_n})")
    matmul = _matmul_flops(plan, (props.major, props.minor))
    method["matmul"] = {"shape": [plan.matmul_n] * 3, **matmul}
    best_gbs = max(v["gbs"] for v in bandwidth.values() if "gbs" in v)
    flops = {dt: _best(matmul.get(dt, {})) for dt in MATMUL_DTYPES}
    return DeviceProfile(
        name=str(torch.cuda.get_device_name(device)),
        sm_count=int(props.multi_processor_count),
        compute_capability=f"{props.major}.{props.minor}",
        total_memory_bytes=int(props.total_memory),
        memory_bandwidth_gbs=best_gbs,
        flops=flops,
        method=method,
        torch=str(torch.__version__),
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def time_call(fn: Callable[[], object], warmup: int, repeats: int, min_sample_s: float = 2e-3) -> float:
    """Median seconds per call of ``fn`` on the current CUDA stream (see the module docstring)."""
    import torch

    for _ in range(max(warmup, 1)):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()
    fn()
    end.record()
    end.synchronize()
    once = max(float(start.elapsed_time(end)) / 1e3, 1e-7)
    calls = max(1, min(1000, int(min_sample_s / once) + 1))
    samples: list[float] = []
    for _ in range(repeats):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        samples.append(float(start.elapsed_time(end)) / 1e3 / calls)
    return statistics.median(samples)


def _bandwidth(plan: Plan) -> dict[str, dict[str, Any]]:
    import torch

    n = plan.copy_bytes // 4
    src = torch.rand(n, device="cuda")
    dst = torch.empty_like(src)
    out: dict[str, dict[str, Any]] = {}
    seconds = time_call(lambda: dst.copy_(src), plan.warmup, plan.repeats)
    out["copy"] = {
        "kernel": "Tensor.copy_ (device to device)",
        "bytes_per_call": 2 * n * 4,
        "gbs": 2 * n * 4 / seconds / 1e9,
    }
    try:
        from traceadvisor.workloads.vector_add import add

        y = torch.rand(n, device="cuda")
        seconds = time_call(lambda: add(src, y, dst), plan.warmup, plan.repeats)
        out["triton_vector_add"] = {
            "kernel": "Triton add_kernel (traceadvisor.workloads.vector_add)",
            "bytes_per_call": 3 * n * 4,
            "gbs": 3 * n * 4 / seconds / 1e9,
        }
    except Exception as exc:  # triton missing or unusable here: the copy still gives the figure
        out["triton_vector_add"] = {"error": _describe(exc)}
    return out


def _matmul_flops(plan: Plan, capability: tuple[int, int]) -> dict[str, dict[str, Any]]:
    import torch

    n = plan.matmul_n
    results: dict[str, dict[str, Any]] = {}
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for dt, dtype in (
            ("fp32", torch.float32),
            ("tf32", torch.float32),
            ("bf16", torch.bfloat16),
            ("fp16", torch.float16),
        ):
            torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
            results[dt] = _matmul_entry(n, dtype, plan, triton=plan.triton_matmul and dt in ("bf16", "fp16"))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    results["fp8"] = _fp8(plan, capability, 2 * n * n * n)
    torch.cuda.empty_cache()
    return results


def _matmul_entry(n: int, dtype: Any, plan: Plan, triton: bool) -> dict[str, Any]:
    """cuBLAS (and the Triton matmul) on two n×n matrices of ``dtype``: FLOP/s and ms per product."""
    import torch

    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    work = 2 * n * n * n

    def product() -> object:
        return torch.matmul(a, b)

    seconds = time_call(product, plan.warmup, plan.repeats)
    entry: dict[str, Any] = {"cublas": {"flops": work / seconds, "ms": seconds * 1e3}}
    if triton:
        entry["triton"] = _triton_matmul(a, b, work, plan)
    return entry


def _triton_matmul(a: Any, b: Any, work: int, plan: Plan) -> dict[str, Any]:
    try:
        from traceadvisor.workloads.matmul import matmul

        seconds = time_call(lambda: matmul(a, b), plan.warmup, plan.repeats)
        return {"flops": work / seconds, "ms": seconds * 1e3, "kernel": "traceadvisor.workloads.matmul"}
    except Exception as exc:
        return {"error": _describe(exc)}


def _fp8(plan: Plan, capability: tuple[int, int], work: int) -> dict[str, Any]:
    """fp8 (e4m3) matmul through ``torch._scaled_mm``, where the GPU has fp8 tensor cores (sm_89+)."""
    import torch

    if capability < (8, 9) or not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return {"error": f"no fp8 matmul on compute capability {capability[0]}.{capability[1]} with this torch"}
    n = plan.matmul_n
    try:
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        # _scaled_mm wants the second operand column-major.
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        out: dict[str, Any] = {}
        # use_fast_accum: fp8 accumulation inside the tensor-core instruction, as fp8 training
        # recipes run their forward matmuls; the datasheet figure assumes it.
        for key, fast in (("scaled_mm", False), ("scaled_mm_fast_accum", True)):

            def product(fast: bool = fast) -> object:
                return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast)

            seconds = time_call(product, plan.warmup, plan.repeats)
            out[key] = {"flops": work / seconds, "ms": seconds * 1e3}
        return out
    except Exception as exc:  # an fp8 path this torch build lacks: the figure stays unmeasured
        return {"error": _describe(exc)}


def _best(entry: dict[str, Any]) -> float | None:
    """The highest FLOP/s among the backends measured for a dtype (None if none succeeded)."""
    values = [v["flops"] for v in entry.values() if isinstance(v, dict) and isinstance(v.get("flops"), float)]
    return max(values) if values else None


def render(doc: dict[str, Any]) -> str:
    """The measured figures of a profile document as a short text table."""
    dev = doc["device"]
    measured = doc["measured"]
    bw = doc.get("method", {}).get("bandwidth", {})
    parts = ", ".join(f"{k} {v['gbs']:.0f}" for k, v in bw.items() if "gbs" in v)
    lines = [
        f"{dev['name']} ({dev['sm_count']} SMs, compute capability {dev['compute_capability']})",
        f"  memory bandwidth  {measured['memory_bandwidth_gbs']:8.0f} GB/s" + (f"  ({parts})" if parts else ""),
    ]
    for dt in MATMUL_DTYPES:
        value = measured["flops"].get(dt)
        shown = f"{value / 1e12:8.1f} TFLOP/s" if value else "       - (not measured)"
        note = "  (TF32 off: CUDA cores)" if dt == "fp32" else ""
        lines.append(f"  {dt:<16}  {shown}{note}")
    return "\n".join(lines) + "\n"


def _progress(message: str) -> None:
    sys.stderr.write(f"traceadvisor: {message}\n")


def _describe(exc: BaseException) -> str:
    """An exception as one short line for the measurement document (type, message)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
