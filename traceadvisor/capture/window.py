"""The time window for a program that never marks a step.

Without steps the schedule never advances and nothing would be recorded. Once ``delay`` seconds pass
with no step, ``start`` records for ``length`` seconds, then ``stop`` saves the window.

The decisions must run on the program's thread (``record_function`` ranges and the profiler's
thread-local state belong to it), at a moment chosen by time, in a program we cannot edit. A
watcher thread cannot start the profiler for another thread; ``sys.settrace`` would slow every
call. A ``SIGALRM`` timer (``signal.setitimer``) costs nothing until it fires, and CPython runs its
handler on the main thread between bytecodes, never inside a torch op. It is used only when the
program has not claimed ``SIGALRM`` itself and capture runs on the main thread; otherwise there is
no window, and the run ends with the no-step warning.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

_RETRY_S = 0.05  # when the handler fires while the session is inside the profiler, try again shortly


class Phase(StrEnum):
    idle = "idle"
    waiting = "waiting"
    recording = "recording"
    done = "done"


class TimeWindow:
    """Arms a one-shot window; every callback runs on the main thread from the signal handler."""

    def __init__(
        self,
        delay_s: float,
        length_s: float,
        *,
        wanted: Callable[[], bool | None],
        busy: Callable[[], bool],
        start: Callable[[], bool],
        stop: Callable[[str], None],
    ) -> None:
        self.delay_s, self.length_s = delay_s, length_s
        self._wanted, self._busy, self._start, self._stop = wanted, busy, start, stop
        self.phase = Phase.idle
        self.started_at: float | None = None
        self._previous: Any = None
        self.unavailable: str | None = None

    def arm(self) -> bool:
        """Start the delay timer; False (with ``unavailable`` saying why) where no timer can be used."""
        if not hasattr(signal, "setitimer"):
            self.unavailable = "this platform has no interval timer"
        elif threading.current_thread() is not threading.main_thread():
            self.unavailable = "capture does not run on the main thread"
        elif signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
            self.unavailable = "the program's process already handles SIGALRM"
        if self.unavailable:
            return False
        self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
        self.phase = Phase.waiting
        signal.setitimer(signal.ITIMER_REAL, max(self.delay_s, 1e-3))
        return True

    def disarm(self) -> None:
        """Cancel the timer and give SIGALRM back (if the program has not taken it meanwhile)."""
        if self.phase is Phase.idle:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        if signal.getsignal(signal.SIGALRM) == self._on_alarm:
            signal.signal(signal.SIGALRM, self._previous if self._previous is not None else signal.SIG_DFL)
        if self.phase is Phase.waiting:
            self.phase = Phase.done

    def finish_early(self) -> None:
        """A step arrived: no window is needed any more (a running one is stopped)."""
        if self.phase is Phase.recording:
            self.phase = Phase.done
            signal.setitimer(signal.ITIMER_REAL, 0)
            self._stop("step")
        elif self.phase is Phase.waiting:
            self.phase = Phase.done
            signal.setitimer(signal.ITIMER_REAL, 0)

    def close(self) -> None:
        """End of the run: a window still recording is stopped (and saved, partial)."""
        self.disarm()
        if self.phase is Phase.recording:
            self.phase = Phase.done
            self._stop("ended")

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if self._busy():
            signal.setitimer(signal.ITIMER_REAL, _RETRY_S)
            return
        if self.phase is Phase.waiting:
            wanted = self._wanted()
            if wanted is None:  # not now (an optimizer exists but has not stepped yet): look again later
                signal.setitimer(signal.ITIMER_REAL, max(self.delay_s, 1.0))
            elif wanted and self._start():
                self.phase = Phase.recording
                self.started_at = time.monotonic()
                signal.setitimer(signal.ITIMER_REAL, self.length_s)
            else:
                self.phase = Phase.done
        elif self.phase is Phase.recording:
            self.phase = Phase.done
            self._stop("elapsed")
