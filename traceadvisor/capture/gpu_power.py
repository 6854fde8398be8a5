"""The GPU's power state, read without the profiler and as each profiled window ends, stored with the trace.

Why: a GPU held at its power limit gives part of any idle back as faster kernels: a loop that
idles less runs its kernels at a lower clock. On six GPU-bound H200 training loops with a
``.item()`` per step, the share of the idle that came back so grew with how far below its top
clock the loop ran without the profiler: 1-15% at 1,860-1,980 MHz, 28-56% at 1,650-1,725
(fixtures/gpu_segment_probe/, docs/whatif.md, *Next on the GPU*). The replay keeps every kernel's
duration, so its saving is the idle's; sync-point says what share to expect (whatif/power_limit.py)
from the clock the program ran at unprofiled. Kineto traces record no power state.

How: NVML (nvidia-ml-py, the package torch's own ``torch.cuda.power_draw`` uses) is read on the
device the program runs on (``torch.cuda._get_nvml_device_index`` maps ``CUDA_VISIBLE_DEVICES``):

* ``unprofiled``: at the step boundary where the profiler turns on (the last step without it has
  ended, its first warmup step begins), so the clock and power are those of the program as it runs
  unprofiled; read in the boundary, whose time no unprofiled step is charged (capture/unprofiled.py);
* the record itself: when the window's last step ends and the trace is written (``key``: inside
  the ``prof.step()`` that exports, so no timed step pays for it). The profiler's host time idles the
  GPU more, so this clock runs higher than the unprofiled one (1,830-1,965 MHz against 1,650-1,860
  on the same loops, run 28).

Recorded: the power draw, the enforced limit, the SM clock, the top SM clock
(``nvmlDeviceGetMaxClockInfo``) and NVML's clock event reasons; ``power_capped`` is the software
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


def interpret(
    power_w: float, power_limit_w: float, sm_clock_mhz: float, reasons: int, max_sm_clock_mhz: float | None = None
) -> dict[str, Any]:
    """The stored record of one NVML reading."""
    record: dict[str, Any] = {
        "power_w": power_w,
        "power_limit_w": power_limit_w,
        "sm_clock_mhz": sm_clock_mhz,
        "clock_event_reasons": reasons,
        "power_capped": bool(reasons & POWER_REASONS),
    }
    if max_sm_clock_mhz:
        record["max_sm_clock_mhz"] = max_sm_clock_mhz
    return record


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
            max_sm_clock_mhz=float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        )
    except Exception:  # no NVML, no GPU, an old driver: the trace goes without it
        return None


class PowerRecorder:
    """Reads the power state as the profiler turns on (``boundary``) and each time a trace is
    written (``key``); the records also go to ``run.json``."""

    def __init__(self, source: str, read: Any = None) -> None:
        self.source = source
        self.readings: list[dict[str, Any]] = []
        self._read = read or read_power_state
        self._unprofiled: dict[str, Any] | None = None

    def boundary(self, was_off: bool, now_off: bool) -> None:
        """A step boundary: the step that ended ran without the profiler (``was_off``), the one that
        begins runs with it or not (``now_off``). Where the profiler turns on, read the state the
        program ran at unprofiled, for the next trace written."""
        if was_off and not now_off:
            self._unprofiled = self._read()

    def key(self, steps: list[int]) -> dict[str, Any]:
        """``{"gpu_power": ...}`` for a trace being written now, or ``{}`` without a reading."""
        state = self._read()
        if state is None:
            return {}
        record = {**state, "source": self.source, "steps": list(steps)}
        if self._unprofiled is not None:
            record["unprofiled"] = self._unprofiled
            self._unprofiled = None  # each window's own: the next window reads its start again
        self.readings.append(record)
        return {KEY: record}


@contextmanager
def capture_context(session: Any) -> Any:
    """``traceadvisor capture``'s recorder (a ``session.extra_contexts`` factory)."""
    recorder = PowerRecorder("capture")
    session.trace_key_parts.append(recorder.key)
    session.boundary_listeners.append(recorder.boundary)
    try:
        yield recorder
    finally:
        if recorder.key in session.trace_key_parts:
            session.trace_key_parts.remove(recorder.key)
        if recorder.boundary in session.boundary_listeners:
            session.boundary_listeners.remove(recorder.boundary)
        if recorder.readings:
            session.record.data[KEY] = recorder.readings
