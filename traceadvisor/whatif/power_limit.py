"""What a GPU at its power limit gives back of the idle a fix removes.

Why: under the power cap (NVML's ``SwPowerCap`` clock event reason) the GPU's clock is set by its
power, averaged over the limiter's window. A loop that idles (a ``.item()`` per step) spends less
energy in the idle, so its busy part runs at a higher clock; remove the idle and the kernels slow
down. The replay keeps every kernel's measured duration, so its saving is the whole idle. Measured
without the profiler, segment by segment with CUDA events (fixtures/gpu_segment_probe/, H200 at
700 W), the share of the idle that came back as faster kernels grew with how far below its top
clock the loop ran:

===================== ===================== ========== =====
loop                  busy clock (unprof.)  given back split
===================== ===================== ========== =====
item_gpu_short_wide   1,980 MHz (no cap)    0.01       validation
item_gpu_short_deep   1,965 MHz             0.06       validation
item_gpu_short        1,860 MHz             0.04-0.15  fit
item_gpu_deep         1,725 MHz             0.28       validation
item_gpu              ~1,660 MHz            0.56       validation
item_gpu_wide         1,650-1,680 MHz       0.38-0.45  fit
===================== ===================== ========== =====

The model is a line in the clock's deficit ``d = 1 - clock / top clock`` through the two fit loops
(``bench/power_give_back.py`` fits it and checks the validation loops): nothing comes back above
``GIVE_BACK_ONSET`` below the top clock, ``GIVE_BACK_SLOPE`` of the idle per unit of deficit beyond
it, with ``GIVE_BACK_SPREAD`` either way (the fit loops' own spread between calls). The clock is
the one the program runs at without the profiler: capture reads it as the window starts
(capture/gpu_power.py, ``unprofiled``); the reading as the window ends is the profiled loop's,
whose extra host time idles the GPU more and lifts its clock (1,830-1,965 MHz on the same loops),
so it cannot place a loop on this line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Fitted on item_gpu_wide and item_gpu_short (fit pairs), gpu_segment_probe/run_b against the busy
# clock of run 28's rounds on the same machine (``python bench/power_give_back.py``).
GIVE_BACK_SLOPE = 3.76
GIVE_BACK_ONSET = 0.051
# the fit loops' own spread between calls (item_gpu_short 0.04-0.16, item_gpu_wide 0.38-0.45):
# the larger half-range
GIVE_BACK_SPREAD = 0.060
# The replay's own error on the same fit loops, as a factor either way: their measured saving over
# the replayed no-sync saving times the share the model keeps (bench/power_give_back.py: 1.10 and
# 1.16 on item_gpu_wide's two probe runs, 1.29 on item_gpu_short). A finding's range is widened by it.
REPLAY_SAVING_FACTOR = 1.29
# measured on six H200 loops, the share of the replayed (idle) saving that came true: the range a
# note gives where the trace does not say how far below its top clock the GPU ran
KEPT_SPAN_MEASURED = (0.44, 0.99)


@dataclass(frozen=True)
class GiveBack:
    """The share of a removed idle that a GPU at its power limit gives back as slower kernels."""

    share: float
    low: float
    high: float
    clock_mhz: float
    top_clock_mhz: float

    def expected_ns(self, replayed_saving_ns: float) -> tuple[float, float]:
        """The range of a replayed (idle) saving that comes true at this clock: the share kept,
        widened by the replay's own error on the fit loops (``REPLAY_SAVING_FACTOR``)."""
        return (
            (1.0 - self.high) * replayed_saving_ns / REPLAY_SAVING_FACTOR,
            (1.0 - self.low) * replayed_saving_ns * REPLAY_SAVING_FACTOR,
        )


def give_back_share(deficit: float) -> float:
    """The model's share at a clock ``deficit`` below the top clock (0 at or above the onset)."""
    return min(max(GIVE_BACK_SLOPE * (deficit - GIVE_BACK_ONSET), 0.0), 1.0)


def _number(x: object) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and x > 0 else None


# Where the unprofiled stretch's violation counter is read (capture/gpu_power.py,
# ``power_capped_share``), the GPU counts as at its limit when the limit held its clocks for most of
# the stretch; a loop on the cap's edge (item_gpu_short_deep: capped on some rounds, 1,905-1,965
# MHz) gives little back either way (the model's share at its clock is ~0).
CAPPED_SHARE = 0.5


def _capped(reading: Mapping[str, Any]) -> bool | None:
    """Whether a reading says the GPU ran at its power limit: the stretch's share held by the limit
    where it was read, else the reading's clock event reasons; None where neither is there."""
    share = reading.get("power_capped_share")
    if isinstance(share, int | float) and not isinstance(share, bool):
        return float(share) >= CAPPED_SHARE
    capped = reading.get("power_capped")
    return capped if isinstance(capped, bool) else None


def unprofiled_clock_mhz(reading: Mapping[str, Any]) -> float | None:
    """The clock the program ran at unprofiled: the median of the driver's samples over the stretch
    before the window where capture read them, else the one reading at the window's start."""
    return _number(reading.get("sm_clock_mhz_median")) or _number(reading.get("sm_clock_mhz"))


def give_back(state: Mapping[str, Any] | None) -> GiveBack | None:
    """The give-back for a trace's ``gpu_power`` record, from its ``unprofiled`` reading (the clock
    the program ran at without the profiler before the window); None where the record has no such
    reading, the reading lacks a clock or the top clock, or the GPU was not at its limit then."""
    if not isinstance(state, Mapping):
        return None
    before = state.get("unprofiled")
    if not isinstance(before, Mapping) or _capped(before) is not True:
        return None
    clock = unprofiled_clock_mhz(before)
    top = _number(before.get("max_sm_clock_mhz")) or _number(state.get("max_sm_clock_mhz"))
    if clock is None or top is None:
        return None
    return at_clock(clock, top)


def at_clock(clock_mhz: float, top_clock_mhz: float) -> GiveBack:
    """The model's give-back, with its band, for a GPU at its power limit at ``clock_mhz``."""
    share = give_back_share(max(1.0 - clock_mhz / top_clock_mhz, 0.0))
    return GiveBack(
        share=share,
        low=max(share - GIVE_BACK_SPREAD, 0.0),
        high=min(share + GIVE_BACK_SPREAD, 1.0),
        clock_mhz=clock_mhz,
        top_clock_mhz=top_clock_mhz,
    )


def unprofiled_capped(state: Mapping[str, Any] | None) -> bool | None:
    """Whether the GPU was at its power limit while the program ran unprofiled (the ``unprofiled``
    reading); None where the record has no such reading."""
    if not isinstance(state, Mapping):
        return None
    before = state.get("unprofiled")
    return _capped(before) if isinstance(before, Mapping) else None
