"""The Python line of each blocking host-device sync, recorded during the profiler's active steps.

Why: Kineto names a Python frame by its function's first line (or, for a frame already running
when tracing began, the line it was at then; trace/source.py), so a trace alone cannot say which
line of a function synchronized. torch can: ``torch.cuda.set_sync_debug_mode("warn")`` makes
``c10::cuda::warn_or_error_on_sync()`` call ``TORCH_WARN("called a synchronizing CUDA operation")``
(c10/cuda/CUDAFunctions.cpp) from ``memcpy_and_sync`` (``.item()``, ``.cpu()`` and other
device-to-host copies into pageable memory) and ``stream_synchronize`` (``nonzero``, boolean-mask
indexing, ``Stream.synchronize()``) in c10/cuda/CUDAFunctions.h, each of which ends in exactly one
``cudaStreamSynchronize`` (``hipMemcpyWithStream``/``hipStreamSynchronize`` on ROCm).
``torch.cuda.synchronize()`` (``device_synchronize``: ``cudaDeviceSynchronize``) and
``Event.synchronize()`` do not warn. torch turns the C++ warning into a Python ``UserWarning`` when
the binding returns (torch/csrc/Exceptions.cpp, ``PyWarningHandler``: ``PyErr_WarnEx`` with
stacklevel 1, the text followed by `` (Triggered internally at FILE:LINE.)``), so the Python stack
at that moment holds the user's line that made the call.

How: for the active steps only (the skipped and wait steps are timed as the program's own,
capture/unprofiled.py, and must not pay for this), the recorder sets the debug mode to ``warn``,
puts an ``always`` filter for that one message in front of the warning filters (so the user's
``ignore``/``error`` filters and the once-per-location registry neither hide nor raise it) and
wraps ``warnings.showwarning``: a sync warning is recorded, never shown; every other warning goes
to the showwarning it found. When the active steps end it restores the mode and removes exactly
its filter and wrapper, so filters the program added meanwhile stay. A program that set a sync
debug mode itself keeps it, and nothing is recorded. Without CUDA there is nothing to record and
nothing is said.

What: per sync, the innermost frame of the user's code (the same library-frame test as the
analysis, trace/source.py, applied to the file name as the profiler writes it: the longest
``sys.path``/site-packages prefix stripped, torch/profiler/python_tracer.py ``_prefix_regex``), its
exact line, its function, the function's first line (``co_firstlineno``: what the profiler names
the frame by, so ``analyze`` can match the two), the profiler step, the order within the step and
a host timestamp on ``CLOCK_REALTIME`` (``time.time_ns``: the clock of torch's profiler,
``c10::getTime``; a trace's ``ts`` plus its ``baseTimeNanoseconds``). At most ``MAX_PER_STEP``
syncs per step are recorded, the rest only counted: one record costs a Python warning and a walk
up the stack (microseconds), against the sync itself, which drains the GPU.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from traceadvisor.trace.library_files import is_library_file

# The text of torch's warning (c10/cuda/CUDAFunctions.cpp, warn_or_error_on_sync).
SYNC_WARNING = "called a synchronizing CUDA operation"
KEY = "sync_sites"
MAX_PER_STEP = 1000
# torch.cuda.set_sync_debug_mode's levels (torch/cuda/__init__.py): 0 off, 1 warn, 2 error.
MODE_OFF, MODE_WARN = 0, 1


class TorchSyncDebugMode:
    """torch's sync debug mode (a process-wide setting in c10's ``warning_state()``), read and set
    through ``torch.cuda``; torch is the program's own import, never made here."""

    def unavailable(self) -> str | None:
        """Why the mode cannot be used here (None: it can)."""
        torch = sys.modules.get("torch")
        if torch is None:
            return "torch is not imported"
        try:
            if not torch.cuda.is_available():
                return "no CUDA device"
        except Exception as exc:  # a broken CUDA install: is_available itself failed
            return f"torch.cuda.is_available() failed: {exc}"
        if not hasattr(torch.cuda, "set_sync_debug_mode"):
            return "this torch has no sync debug mode"
        return None

    def get(self) -> int:
        return int(sys.modules["torch"].cuda.get_sync_debug_mode())

    def set(self, level: int) -> None:
        sys.modules["torch"].cuda.set_sync_debug_mode(level)


class SyncSiteRecorder:
    """Records the call sites of blocking syncs during the steps it is told are recorded.

    ``step(number, recording)`` at each step boundary (and when the profiler starts) turns the
    interception on for a recorded step and off otherwise; ``stop()`` at the end; ``key(steps)`` is
    what goes into a trace's top-level ``"traceadvisor"`` key (empty when nothing was recorded).
    ``mode`` is the sync debug mode to drive (``TorchSyncDebugMode()``; anything with
    ``unavailable``/``get``/``set``).
    """

    def __init__(self, source: str, max_per_step: int = MAX_PER_STEP, mode: Any = None) -> None:
        self.source = source
        self.max_per_step = max_per_step
        self.mode = mode if mode is not None else TorchSyncDebugMode()
        self.sites: list[dict[str, Any]] = []
        self.recorded_steps: list[int] = []
        self.dropped: dict[int, int] = {}  # step -> syncs beyond max_per_step, not recorded
        self.skipped: str | None = None  # why nothing is recorded (no CUDA, the program's own mode)
        self._step: int | None = None  # the step being recorded; None: not recording
        self._order = 0
        self._thread = 0
        self._filter: Any = None  # the warning filter entry added
        self._previous_show: Any = None  # warnings.showwarning when the recorder installed its own
        self._passing = threading.local()  # .on: handing a warning to _previous_show on this thread
        self._installed = False
        self._names: dict[str, tuple[str, bool]] = {}  # co_filename -> (profiler's name, library?)
        self._prefixes: list[str] | None = None

    @property
    def recording(self) -> bool:
        return self._step is not None

    # -- boundaries ------------------------------------------------------------------------------
    def step(self, number: int, recording: bool) -> None:
        """Step ``number`` begins; record its syncs when ``recording`` (an active profiler step)."""
        if not recording:
            self.stop()
            return
        if not self._installed and not self._install():
            return
        self._step, self._order = number, 0
        if number not in self.recorded_steps:
            self.recorded_steps.append(number)

    def stop(self) -> None:
        """Stop recording and give back the debug mode, the filter and ``showwarning``."""
        self._step = None
        if not self._installed:
            return
        self._installed = False
        try:
            # Only our own level: a program that changed the mode meanwhile keeps its choice.
            if self.mode.get() == MODE_WARN:
                self.mode.set(MODE_OFF)
        finally:
            _remove_filter(self._filter)
            self._filter = None
            if warnings.showwarning == self._show:
                warnings.showwarning = self._previous_show
            # Else something wrapped ours meanwhile (logging.captureWarnings): ours stays in its
            # chain and, no longer installed, hands every warning on.

    # -- installing ------------------------------------------------------------------------------
    def _install(self) -> bool:
        """Set the mode to warn and intercept its warning; False (and ``skipped`` says why) when
        the mode is not ours to use."""
        if self.skipped is not None:
            return False
        why = self.mode.unavailable()
        if why is None and self.mode.get() != MODE_OFF:
            why = "the program set torch.cuda.set_sync_debug_mode itself"
        if why is not None:
            if why != "torch is not imported":  # the program may import it later
                self.skipped = why
            return False
        if self._prefixes is None:
            self._prefixes = _path_prefixes()
        self._thread = threading.get_ident()
        warnings.filterwarnings("always", message=re.escape(SYNC_WARNING), category=UserWarning)
        self._filter = warnings.filters[0]
        self._previous_show = warnings.showwarning
        warnings.showwarning = self._show
        self._installed = True
        try:
            with warnings.catch_warnings():
                # torch warns that the mode "is a prototype feature" each time it is set
                # (torch/csrc/cuda/Module.cpp): the program's stderr is not the place for it.
                warnings.filterwarnings("ignore", message="Synchronization debug mode", category=UserWarning)
                self.mode.set(MODE_WARN)
        except Exception as exc:
            self.stop()
            self.skipped = f"could not set the sync debug mode: {exc}"
            return False
        return True

    # -- the warning -----------------------------------------------------------------------------
    def _show(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: Any = None,
    ) -> None:
        """``warnings.showwarning`` while installed: a sync warning is recorded (on the program's
        thread, during a recorded step) and never shown; any other warning is shown as before."""
        if self._installed and issubclass(category, UserWarning) and str(message).startswith(SYNC_WARNING):
            if self._step is not None and threading.get_ident() == self._thread:
                self.record(sys._getframe(1))
            return
        if getattr(self._passing, "on", False):
            # Back here through the showwarning we handed it to: a wrapper of ours (installed
            # while we recorded) that became our previous one at a later window. Show it plainly.
            _original_showwarning(message, category, filename, lineno, file, line)
            return
        self._passing.on = True
        try:
            self._previous_show(message, category, filename, lineno, file, line)
        finally:
            self._passing.on = False

    def record(self, frame: FrameType | None) -> None:
        """Record the sync whose Python stack is ``frame`` (innermost first) in the current step."""
        ts_ns = time.time_ns()
        step = self._step
        if step is None:
            return
        if self._order >= self.max_per_step:
            self.dropped[step] = self.dropped.get(step, 0) + 1
            return
        site = self._user_frame(frame, self._prefixes or [])
        if site is None:
            return  # no frame of the user's code on the stack (a library's own thread of work)
        site.update(step=step, order=self._order, ts_ns=ts_ns)
        self._order += 1
        self.sites.append(site)

    def _user_frame(self, frame: FrameType | None, prefixes: list[str]) -> dict[str, Any] | None:
        """The innermost frame of the user's code from ``frame`` outwards, as a site."""
        while frame is not None:
            code = frame.f_code
            named = self._names.get(code.co_filename)
            if named is None:
                name = _profiler_name(code.co_filename, prefixes)
                named = self._names[code.co_filename] = (name, is_library_file(name))
            if not named[1]:
                return {
                    "file": named[0],
                    "path": code.co_filename,
                    "line": frame.f_lineno,
                    "function": code.co_name,
                    "first_line": code.co_firstlineno,
                }
            frame = frame.f_back
        return None

    # -- what is stored --------------------------------------------------------------------------
    def key(self, steps: list[int]) -> dict[str, Any]:
        """``{"sync_sites": ...}`` for the recorded steps among ``steps`` (a trace's), or ``{}`` when
        none of them was recorded (no CUDA, the program's own debug mode, the time window)."""
        wanted = set(steps)
        recorded = [s for s in self.recorded_steps if s in wanted]
        if not recorded:
            return {}
        return {
            KEY: {
                "source": self.source,
                "steps": recorded,
                "max_per_step": self.max_per_step,
                "dropped": {str(s): n for s, n in self.dropped.items() if s in wanted},
                "sites": [s for s in self.sites if s["step"] in wanted],
            }
        }

    def summary(self) -> dict[str, Any] | None:
        """For ``run.json``: every recorded step's sites, or None when nothing was recorded."""
        return self.key(self.recorded_steps).get(KEY)


_RECORDING = ("RECORD", "RECORD_AND_SAVE")


def profiler_recording(prof: Any) -> bool:
    """Does ``prof`` (a ``torch.profiler.profile``, or None) record its current step? Read by the
    action's name, so that this module does not import torch."""
    return getattr(getattr(prof, "current_action", None), "name", None) in _RECORDING


@contextmanager
def capture_context(session: Any, mode: Any = None) -> Iterator[SyncSiteRecorder]:
    """``traceadvisor capture``'s recorder (a ``session.extra_contexts`` factory): told each step by
    the session, its sites added to each trace's key and, at the end, to ``run.json``."""
    recorder = SyncSiteRecorder("capture", mode=mode)

    def on_step(s: Any) -> None:
        recorder.step(s.steps_seen, s.recording)

    session.step_listeners.append(on_step)
    session.trace_key_parts.append(recorder.key)
    try:
        yield recorder
    finally:
        if on_step in session.step_listeners:
            session.step_listeners.remove(on_step)
        recorder.stop()
        summary = recorder.summary()
        if summary is not None:
            session.record.data[KEY] = summary


def _original_showwarning(*args: Any) -> None:
    """Python's own ``showwarning`` (to stderr), whatever replaced it since."""
    show = getattr(warnings, "_showwarning_orig", None)
    if callable(show):
        show(*args)


def _remove_filter(entry: Any) -> None:
    """Remove one filter entry (the one added), leaving any the program added meanwhile."""
    if entry is None:
        return
    filters: list[Any] = warnings.filters  # type: ignore[assignment]  # typeshed says Sequence; it is the list
    try:
        filters.remove(entry)
    except ValueError:
        return  # gone already (the program reset the filters, or a catch_warnings block ended)
    # The filters' version invalidates each module's once-per-location registry; warnings.py's own
    # helper bumps it (Python 3.11-3.13; 3.14 renamed it), as filterwarnings does.
    mutated = getattr(warnings, "_filters_mutated", None)
    if callable(mutated):
        mutated()


def _path_prefixes() -> list[str]:
    """The folders the profiler strips from a frame's file name, in its order (sorted in reverse,
    so a folder comes before the folders that hold it)."""
    try:
        from torch.profiler.python_tracer import _prefix_regex

        return [p for p in _prefix_regex() if isinstance(p, str)]
    except Exception:  # a torch without it: sys.path, as that function reads it
        # abspath, not resolve(): the profiler compares the unresolved names.
        return [p + os.sep for p in sorted({os.path.abspath(p) for p in sys.path if p}, reverse=True)]  # noqa: PTH100


def _profiler_name(path: str, prefixes: list[str]) -> str:
    """``path`` as the profiler writes it: without the first of ``prefixes`` it starts with
    (torch/csrc/profiler/python/init.cpp trims the prefixes in the order given)."""
    for prefix in prefixes:
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


__all__ = [
    "KEY",
    "MAX_PER_STEP",
    "MODE_OFF",
    "MODE_WARN",
    "SYNC_WARNING",
    "SyncSiteRecorder",
    "TorchSyncDebugMode",
    "capture_context",
    "profiler_recording",
]
