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
  unprofiled; read in the boundary, whose time no unprofiled step is charged (capture/unprofiled.py).
  One reading is not enough there: the power limiter swings the clock by 150-250 MHz within a
  loop (item_gpu_short read 1,740-1,860 MHz before its three windows of run 28, its rounds'
  median 1,860), which moves the give-back model's share by up to 0.4. So the reading also holds
  the median of the SM clock and power the driver sampled over the unprofiled stretch before the
  window (``nvmlDeviceGetSamples``: one call returns the driver's buffer of samples, no polling),
  and the share of that stretch the power limit held the clocks down (``nvmlDeviceGetViolationStatus``
  for the power policy, read at both ends of the stretch);
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

import statistics
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

KEY = "gpu_power"
# nvmlClocksEventReasons (nvml.h): the software power cap, and the hardware power brake (an
# external power-supply signal); the thermal and sync-boost reasons are not the power limit
SW_POWER_CAP = 0x4
HW_POWER_BRAKE = 0x80
POWER_REASONS = SW_POWER_CAP | HW_POWER_BRAKE
# nvmlSamplingType_t (nvml.h): the processor (SM) clock's samples, MHz, and the board's power, mW
PROCESSOR_CLK_SAMPLES = 5
TOTAL_POWER_SAMPLES = 0
# nvmlPerfPolicyType_t: NVML_PERF_POLICY_POWER, the time the clocks were held down by the power limit
PERF_POLICY_POWER = 0


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

        handle = _nvml_handle()
        if handle is None:
            return None
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


def _nvml_handle() -> Any:
    """pynvml's handle of the current CUDA device, or None without CUDA."""
    import pynvml
    import torch

    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    index_of = getattr(torch.cuda, "_get_nvml_device_index", None)
    index = int(index_of(device)) if callable(index_of) else int(device)
    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def sample_pairs(handle: Any, kind: int, over_s: float) -> list[tuple[float, float]]:
    """The driver's samples of ``kind`` in the last ``over_s`` seconds, (time stamp µs, value), by
    the newest sample's time stamp, so no clock base is assumed. Raises NVML's error where the
    driver keeps none (NVML_ERROR_NOT_FOUND)."""
    import pynvml

    value_type, samples = pynvml.nvmlDeviceGetSamples(handle, kind, 0)
    field = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal"}.get(int(value_type), "uiVal")
    if not samples:
        return []
    newest = max(int(x.timeStamp) for x in samples)
    return [
        (float(x.timeStamp), float(getattr(x.sampleValue, field)))
        for x in samples
        if int(x.timeStamp) >= newest - over_s * 1e6
    ]


def _sample_values(handle: Any, kind: int, over_s: float) -> list[float]:
    return [v for _, v in sample_pairs(handle, kind, over_s)]


def read_clock_samples(over_s: float) -> dict[str, Any] | None:
    """The median SM clock (MHz) and power (W) NVML's driver sampled over the last ``over_s``
    seconds, with their counts; None where NVML cannot give them."""
    try:
        handle = _nvml_handle()
        if handle is None:
            return None
        clocks = _sample_values(handle, PROCESSOR_CLK_SAMPLES, over_s)
        out: dict[str, Any] = {}
        if clocks:
            out |= {"sm_clock_mhz_median": statistics.median(clocks), "clock_samples": len(clocks)}
        try:
            power = _sample_values(handle, TOTAL_POWER_SAMPLES, over_s)
        except Exception:  # the power samples are optional: the clock's stand
            power = []
        if power:
            out |= {"power_w_median": statistics.median(power) / 1000.0, "power_samples": len(power)}
        return out or None
    except Exception:  # an old driver, NVML_ERROR_NOT_FOUND (no samples yet): the point reading stands
        return None


# How often the poller reads the SM clock where the driver keeps no samples (nvmlDeviceGetSamples
# answered NVML_ERROR_NOT_FOUND for the clock on the H200s lent, run 29): 20 reads a second, each a
# ctypes call that releases the GIL (a few µs of the program's host time per read: <0.05%).
POLL_INTERVAL_S = 0.05


class ClockPoller:
    """Reads NVML's SM clock every ``interval_s`` on a daemon thread between ``start`` and ``stop``:
    the clock over an unprofiled stretch where the driver's sample buffer is not there. ``read`` is
    resolved in ``start`` (on the calling thread: it asks torch for the device), then called on the
    poller's thread only."""

    def __init__(
        self, interval_s: float = POLL_INTERVAL_S, reader: Callable[[], Callable[[], float] | None] | None = None
    ):
        self.interval_s = interval_s
        self._reader = reader or sm_clock_reader
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._values: list[float] = []

    def start(self) -> None:
        self.stop()
        read = self._reader()
        if read is None:
            return
        self._stop = threading.Event()
        self._values = []

        def poll() -> None:
            while not self._stop.is_set():
                try:
                    self._values.append(float(read()))
                except Exception:  # NVML went away: what was read stands
                    return
                self._stop.wait(self.interval_s)

        self._thread = threading.Thread(target=poll, name="traceadvisor-clock-poller", daemon=True)
        self._thread.start()

    def stop(self) -> list[float]:
        """Stop polling; the clocks read since ``start`` (empty when it never ran)."""
        if self._thread is None:
            return []
        self._stop.set()
        self._thread.join(timeout=1.0)
        self._thread = None
        values, self._values = self._values, []
        return values


def sm_clock_reader() -> Callable[[], float] | None:
    """A function reading the current CUDA device's SM clock (MHz) through NVML, or None without it."""
    try:
        import pynvml

        handle = _nvml_handle()
        if handle is None:
            return None
        return lambda: float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:
        return None


def read_power_violation() -> tuple[float, float] | None:
    """NVML's power-policy violation counter now: (reference time in µs, time in ns the power limit
    has held the clocks down); None where NVML cannot give it."""
    try:
        import pynvml

        handle = _nvml_handle()
        if handle is None:
            return None
        v = pynvml.nvmlDeviceGetViolationStatus(handle, PERF_POLICY_POWER)
        return float(v.referenceTime), float(v.violationTime)
    except Exception:
        return None


def capped_share(start: tuple[float, float] | None, end: tuple[float, float] | None) -> float | None:
    """The share of the time between two violation readings that the power limit held the clocks
    down (0-1), None without both or where the reference time did not advance."""
    if start is None or end is None or end[0] <= start[0]:
        return None
    return min(max((end[1] - start[1]) / ((end[0] - start[0]) * 1e3), 0.0), 1.0)


def stretch_summary(
    elapsed_s: float,
    violation_at_start: tuple[float, float] | None,
    polled: list[float],
    interval_s: float = POLL_INTERVAL_S,
    samples: Callable[[float], dict[str, Any] | None] = read_clock_samples,
    violation: Callable[[], tuple[float, float] | None] = read_power_violation,
) -> dict[str, Any]:
    """What an unprofiled stretch of ``elapsed_s`` ran at, for its reading: the driver's sampled
    median clock and power where it keeps samples, else the median of the clocks ``polled`` over it
    (``ClockPoller``), and the share of the stretch the power limit held the clocks (the violation
    counter now against ``violation_at_start``)."""
    out: dict[str, Any] = {}
    sampled = samples(max(elapsed_s, 0.0))
    if sampled:
        out |= {**sampled, "clock_source": "driver samples"}
    elif polled:
        out |= {
            "sm_clock_mhz_median": statistics.median(polled),
            "clock_samples": len(polled),
            "clock_source": f"polled every {interval_s * 1e3:.0f} ms",
        }
    share = capped_share(violation_at_start, violation())
    if share is not None:
        out["power_capped_share"] = share
    return out


class PowerRecorder:
    """Reads the power state as the profiler turns on (``boundary``) and each time a trace is
    written (``key``); the records also go to ``run.json``. The reading where the profiler turns on
    also holds what NVML sampled over the unprofiled stretch before it (from the first boundary the
    recorder saw without the profiler, or the last window's end): the median clock and power and the
    share of the stretch the power limit held the clocks down."""

    def __init__(
        self,
        source: str,
        read: Any = None,
        samples: Callable[[float], dict[str, Any] | None] | None = None,
        violation: Callable[[], tuple[float, float] | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        poller: ClockPoller | None = None,
    ) -> None:
        self.source = source
        self.readings: list[dict[str, Any]] = []
        self._read = read or read_power_state
        self._samples = samples or read_clock_samples
        self._violation = violation or read_power_violation
        self._clock = clock
        self._poller = poller or ClockPoller()
        self._unprofiled: dict[str, Any] | None = None
        # the unprofiled stretch being timed: when it began, and the violation counter then
        self._stretch: tuple[float, tuple[float, float] | None] | None = None

    def boundary(self, was_off: bool, now_off: bool) -> None:
        """A step boundary: the step that ended ran without the profiler (``was_off``), the one that
        begins runs with it or not (``now_off``). Where the profiler turns on, read the state the
        program ran at unprofiled, for the next trace written."""
        if now_off and self._stretch is None:
            self._stretch = (self._clock(), self._violation())
            self._poller.start()
        if was_off and not now_off:
            polled = self._poller.stop()
            state = self._read()
            if state is not None and self._stretch is not None:
                began, violation = self._stretch
                summary = stretch_summary(
                    self._clock() - began, violation, polled, self._poller.interval_s, self._samples, self._violation
                )
                state = {**state, **summary}
            self._unprofiled = state
            self._stretch = None

    def close(self) -> None:
        """Stop the clock poller (the program ended without the profiler on again)."""
        self._poller.stop()

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
        recorder.close()
        if recorder.key in session.trace_key_parts:
            session.trace_key_parts.remove(recorder.key)
        if recorder.boundary in session.boundary_listeners:
            session.boundary_listeners.remove(recorder.boundary)
        if recorder.readings:
            session.record.data[KEY] = recorder.readings
