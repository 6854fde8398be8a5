"""The GPU's power state when a profiled window ends, stored with the trace.

Why: a GPU held at its power limit gives part of any idle back as faster kernels. On three
GPU-bound H200 training loops at the 700 W limit, the side with a `.item()` per step ran every
kernel 1.3-2.7% faster than the side without, so removing the sync saved 44-72% of the idle it
left (fixtures/gpu_segment_probe/, docs/whatif.md, *Next on the GPU*). The replay keeps every
kernel's duration, so its saving is the idle's; sync-point says what share to expect, and with
this record it can say whether the GPU was at its limit at all. Kineto traces record no power
state.

How: NVML (nvidia-ml-py, the package torch's own ``torch.cuda.power_draw`` uses) is read once per
trace, when the window's last step ends and the trace is written (``key``: inside the
``prof.step()`` that exports, so no timed step pays for it), on the device the program runs on
(``torch.cuda._get_nvml_device_index`` maps ``CUDA_VISIBLE_DEVICES``). Recorded: the power draw,
the enforced limit, the SM clock and NVML's clock event reasons; ``power_capped`` is the software
power cap's bit (``nvmlClocksEventReasonSwPowerCap``, 0x4) or the hardware power brake's (0x80).
Without NVML, without CUDA, or when NVML refuses, nothing is stored and nothing is said.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

KEY = "gpu_power"
# nvmlClocksEventReasons (nvml.h): the software power cap, and the hardware power brake (an
# external power-supply signal); the thermal and sync-boost reasons are not the power limit
SW_POWER_CAP = 0x4
HW_POWER_BRAKE = 0x80
POWER_REASONS = SW_POWER_CAP | HW_POWER_BRAKE


def interpret(power_w: float, power_limit_w: float, sm_clock_mhz: float, reasons: int) -> dict[str, Any]:
    """The stored record of one NVML reading."""
    return {
        "power_w": power_w,
        "power_limit_w": power_limit_w,
        "sm_clock_mhz": sm_clock_mhz,
        "clock_event_reasons": reasons,
        "power_capped": bool(reasons & POWER_REASONS),
    }


def read_power_state() -> dict[str, Any] | None:
    """NVML's reading of the current CUDA device now, or None where it cannot be read."""
    try:
        import pynvml
        import torch

        if not torch.cuda.is_available():
            return None
        device = torch.cuda.current_device()
        index_of = getattr(torch.cuda, "_get_nvml_device_index", None)
        index = int(index_of(device)) if callable(index_of) else int(device)
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        # renamed in NVML 12.x; the old name stays in older nvidia-ml-py releases
        reasons_of = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if reasons_of is None:
            reasons_of = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return interpret(
            power_w=float(pynvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0,  # NVML reports mW
            power_limit_w=float(pynvml.nvmlDeviceGetEnforcedPowerLimit(handle)) / 1000.0,
            sm_clock_mhz=float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            reasons=int(reasons_of(handle)),
        )
    except Exception:  # no NVML, no GPU, an old driver: the trace goes without it
        return None


class PowerRecorder:
    """Reads the power state each time a trace is written; the readings also go to ``run.json``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.readings: list[dict[str, Any]] = []

    def key(self, steps: list[int]) -> dict[str, Any]:
        """``{"gpu_power": ...}`` for a trace being written now, or ``{}`` without a reading."""
        state = read_power_state()
        if state is None:
            return {}
        record = {**state, "source": self.source, "steps": list(steps)}
        self.readings.append(record)
        return {KEY: record}


@contextmanager
def capture_context(session: Any) -> Any:
    """``traceadvisor capture``'s recorder (a ``session.extra_contexts`` factory)."""
    recorder = PowerRecorder("capture")
    session.trace_key_parts.append(recorder.key)
    try:
        yield recorder
    finally:
        if recorder.key in session.trace_key_parts:
            session.trace_key_parts.remove(recorder.key)
        if recorder.readings:
            session.record.data[KEY] = recorder.readings
