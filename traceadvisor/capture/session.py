"""The capture session: one scheduled ``torch.profiler.profile`` around the program, traces on disk.

Hook points for other capture features (for example recording Triton launches):

- ``extra_contexts``: factories called with the session when a capture starts; each returns a
  context manager entered before the profiler starts and exited after it stopped (after the last
  trace was written: right after the schedule's last window, when no other can come, else at the
  end of the run). Inside ``__enter__`` a factory may read ``session.out_dir``, ``session.rank``
  and ``session.recording`` (True while a cycle or the time window records), and append callbacks to
  ``session.trace_listeners``.
- ``session.trace_listeners``: callbacks ``(session, TraceFile) -> None`` run after each trace file is
  written and before ``run.json`` lists it. A listener may rewrite the file (atomically, through
  ``traceadvisor.atomic``) or write files beside it and name them in ``TraceFile.sidecars``; a
  listener that raises becomes a warning in ``run.json``, never an error in the user's program.
- ``session.step_listeners``: callbacks ``(session) -> None`` run when the profiler starts and after
  each step boundary, when ``session.recording`` and ``session.steps_seen`` describe the step that
  begins (e.g. to do something during the recorded steps only); one that raises becomes a warning.
- ``session.trace_key_parts``: callbacks ``(steps) -> dict`` whose items are added to the top-level
  ``"traceadvisor"`` key of the trace recording ``steps`` (written with the trace, in one write).
- ``session.boundary_listeners``: callbacks ``(was_off, now_off) -> None`` run inside each step
  boundary the profiler's schedule takes, before the boundary's end is read: whether the step that
  ended and the one that begins run without the profiler. Their time is the boundary's, which no
  unprofiled step is charged (e.g. to read the GPU's state where the profiler turns on); one that
  raises becomes a warning.
"""

from __future__ import annotations

import gzip
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceadvisor.atomic import write_bytes
from traceadvisor.capture import cupti, marker
from traceadvisor.capture.export import export_chrome_json
from traceadvisor.capture.foreign import ForeignProfilerWatch, calling_site, foreign_profiler_active
from traceadvisor.capture.hooks import TorchStepHooks
from traceadvisor.capture.options import CaptureOptions
from traceadvisor.capture.runinfo import RunRecord, devices, now_iso, trace_path, versions
from traceadvisor.capture.steps import StepClock, StepSource
from traceadvisor.capture.target import Outcome, Program
from traceadvisor.capture.unprofiled import UnprofiledSteps, now_ns, with_key
from traceadvisor.capture.window import TimeWindow

extra_contexts: list[Callable[[CaptureSession], AbstractContextManager[Any]]] = []


def _triton_launch_records(session: CaptureSession) -> AbstractContextManager[Any]:
    # Every capture records Triton launches (kernel, grid, argument bytes) so the roofline covers
    # custom Triton kernels; the hooks install only once the program imports triton.
    from traceadvisor.workloads import triton_hooks

    return triton_hooks.capture_context(session)


extra_contexts.append(_triton_launch_records)


def _sync_site_records(session: CaptureSession) -> AbstractContextManager[Any]:
    # Every capture on a GPU records the Python line of each blocking sync in the recorded steps
    # (the trace names only a frame's first line): capture/sync_sites.py.
    from traceadvisor.capture import sync_sites

    return sync_sites.capture_context(session)


extra_contexts.append(_sync_site_records)


def _power_records(session: CaptureSession) -> AbstractContextManager[Any]:
    # Every trace written on a GPU carries the GPU's power state when its window ended (NVML): a GPU
    # at its power limit keeps only part of the idle a fix removes (capture/gpu_power.py).
    from traceadvisor.capture import gpu_power

    return gpu_power.capture_context(session)


extra_contexts.append(_power_records)

# zlib's default level: within ~10% of the smallest size at a third of level 9's time. The write runs
# inside the prof.step() that closes the window, so it stalls that one training step.
_GZIP_LEVEL = 6


@dataclass
class TraceFile:
    """One trace written by the session."""

    path: Path
    kind: str  # "cycle" or "window"
    index: int | None
    rank: int
    steps: list[int]
    partial: bool
    bytes: int = 0
    sidecars: list[str] = field(default_factory=list)

    @property
    def step_names(self) -> list[str]:
        return [f"ProfilerStep#{n}" for n in self.steps]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": trace_path(self.rank, self.kind, self.index).as_posix(),  # relative to the run folder
            "kind": self.kind,
            "cycle": self.index,
            "rank": self.rank,
            "steps": self.step_names,
            "partial": self.partial,
            "bytes": self.bytes,
            "sidecars": list(self.sidecars),
        }


class CaptureSession:
    """Runs a prepared ``Program`` under the profiler and writes its traces into ``out_dir``."""

    def __init__(self, options: CaptureOptions, out_dir: Path, record: RunRecord, quiet: bool = False) -> None:
        self.options = options
        self.out_dir = out_dir
        self.record = record
        self.rank = record.rank
        self.quiet = quiet
        self.clock = StepClock(self._advance, StepSource.call if options.step_on else StepSource.optimizer)
        self.files: list[TraceFile] = []
        self.trace_listeners: list[Callable[[CaptureSession, TraceFile], None]] = []
        self.step_listeners: list[Callable[[CaptureSession], None]] = []
        self.trace_key_parts: list[Callable[[list[int]], dict[str, Any]]] = []
        self.boundary_listeners: list[Callable[[bool, bool], None]] = []
        self._prof: Any = None
        self._window_prof: Any = None
        self._window: TimeWindow | None = None
        self._activities: list[Any] = []
        self._experimental: Any = None
        self._cycle_steps: list[int] = []
        self._cycles = 0
        self._lost_traces = 0  # traces recorded but not written (a full disk)
        self._busy = False
        self._stopping = False
        self._failed: str | None = None
        self._stepped_aside = False  # the program started its own profiler: capture is out of its way
        self._prof_started = False
        self._prof_ended = False  # capture's profiler was stopped (by stepping aside or at the end)
        # The schedule's last window is written: the profiler is exited and capture is out of the way;
        # steps are still counted and timed (run.json), by the count below instead of prof.step_num.
        self._windows_over = False
        self._steps_after_windows = 0
        self._contexts: ExitStack | None = None
        self._watch: ForeignProfilerWatch | None = None
        self._hooks: TorchStepHooks | None = None
        self._t0 = time.monotonic()
        self._thread = threading.get_ident()  # the program's thread: only its markers count
        # A forked child of the program inherits this session; only this process may act on it.
        self._pid = os.getpid()
        self._recording_actions: tuple[Any, ...] = ()  # ProfilerAction.RECORD and RECORD_AND_SAVE
        self._off_action: Any = None  # ProfilerAction.NONE: the profiler is not running in this step
        self.unprofiled = UnprofiledSteps("capture")  # step times outside the active window

    # -- public state ----------------------------------------------------------------------------
    @property
    def recording(self) -> bool:
        """True while a profiler cycle or the time window records."""
        if self._window_prof is not None:
            return True
        if self._prof is None or self._prof_ended:
            return False
        return self._prof.current_action in self._recording_actions

    @property
    def steps_seen(self) -> int:
        return int(self._prof.step_num) + self._steps_after_windows if self._prof is not None else 0

    def warn(self, message: str) -> None:
        """A warning for stderr (printed at the end) and ``run.json``."""
        self.record.warn(message)

    # -- the run ---------------------------------------------------------------------------------
    def run(self, program: Program) -> Outcome:
        """Run ``program`` (already prepared) under the profiler; returns how it ended."""
        import torch
        from torch.profiler import ProfilerAction

        self._recording_actions = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        self._off_action = ProfilerAction.NONE
        self.record.data["versions"] = versions()
        self._activities, self._experimental = self._profiler_settings(torch)
        self.record.data["activities"] = [str(a).rsplit(".", 1)[-1].lower() for a in self._activities]
        self.record.data["flags"]["sync_events"] = self._experimental is not None
        self.record.write()
        self._prof = self._profiler(scheduled=True)
        hooks = self._hooks = TorchStepHooks(self.clock)
        if self.clock.source is StepSource.optimizer:
            hooks.install_optimizer_hooks()
        watch = self._watch = ForeignProfilerWatch(is_ours=self._ours, on_foreign=self._step_aside)
        watch.install()
        window = self._window = TimeWindow(
            self.options.window_delay_s,
            self.options.window_s,
            wanted=self._window_wanted,
            busy=lambda: self._busy,
            start=self._window_start,
            stop=self._window_stop,
        )
        marker.set_handler(self._marker)
        try:
            with ExitStack() as contexts:
                self._contexts = contexts
                for factory in list(extra_contexts):
                    try:
                        contexts.enter_context(factory(self))
                    except Exception as exc:
                        name = getattr(factory, "__qualname__", repr(factory))
                        self.warn(f"capture extension {name} did not start: {_one_line(exc)}")
                self._guarded(self._start)
                window.arm()
                try:
                    outcome = program.run()
                finally:
                    self._finish(window)
        finally:
            if os.getpid() == self._pid:
                watch.remove()
                marker.set_handler(None)
                hooks.remove()
        self._conclude(outcome, window)
        return outcome

    # -- profiler --------------------------------------------------------------------------------
    def _profiler_settings(self, torch: Any) -> tuple[list[Any], Any]:
        from torch.profiler import ProfilerActivity

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        experimental = None
        if ProfilerActivity.CUDA in activities and self.options.sync_events:
            try:
                from torch._C._profiler import _ExperimentalConfig

                experimental = _ExperimentalConfig(enable_cuda_sync_events=True)
            except (ImportError, TypeError, AttributeError):  # torch < 2.1: no sync events
                self.warn("this torch cannot record CUDA synchronization events; the sync-point rule sees less")
        return activities, experimental

    def _profiler(self, scheduled: bool) -> Any:
        from torch.profiler import profile, schedule

        o, s = self.options, self.options.schedule
        kwargs: dict[str, Any] = {
            "activities": self._activities,
            "record_shapes": o.record_shapes,
            "with_stack": o.with_stack,
            "profile_memory": o.profile_memory,
        }
        if self._experimental is not None:
            kwargs["experimental_config"] = self._experimental
        if scheduled:
            kwargs["schedule"] = schedule(
                skip_first=s.skip_first, wait=s.wait, warmup=s.warmup, active=s.active, repeat=s.repeat
            )
            kwargs["on_trace_ready"] = self._on_trace_ready
        return profile(**kwargs)

    def _start(self) -> None:
        if foreign_profiler_active():  # started while the program was prepared (a --step-on module's import)
            self._step_aside()
            return
        self._prof.start()
        self._prof_started = True
        self._note_step()

    def _advance(self) -> None:
        """``prof.step()``: the clock says a step ended. Never lets a profiler failure into the program."""
        if self._prof is None or self._failed or os.getpid() != self._pid:
            return
        if self._windows_over:
            self._count_step()
            return
        if self._window_prof is None and not self._kineto_ours() and foreign_profiler_active():
            # Enabled behind the watch's back (a direct torch._C call): the same step aside.
            self._step_aside()
            return
        self._busy = True
        try:
            if self._window is not None:
                self._window.finish_early()
            started, step, unprofiled = now_ns(), int(self._prof.step_num), self._step_unprofiled()
            if cupti.last_cycle_ending(self._prof, self._cycles, self.options.schedule.repeat):
                cupti.teardown_when_trace_ends(self._prof)  # CUPTI detached with the last trace
            self._prof.step()
            last_window_done = self._schedule_done()
            if last_window_done:
                self._stand_down()
            self._tell_boundary(unprofiled)
            self.unprofiled.boundary(step, unprofiled, started, now_ns())
            if last_window_done and self.clock.source is StepSource.optimizer:
                self.unprofiled.forget_boundary()  # see _count_step
            self._note_step()
        except Exception as exc:
            self._fail(f"the profiler failed at step {self.steps_seen}: {_one_line(exc)}")
        finally:
            self._busy = False

    def _schedule_done(self) -> bool:
        """Has the schedule recorded its last cycle (``--repeat N``, N > 0)? Then it returns
        ``ProfilerAction.NONE`` for every later step: no further window can come."""
        repeat = self.options.schedule.repeat
        return repeat > 0 and self._cycles >= repeat and not self._prof_ended and self._window_prof is None

    def _stand_down(self) -> None:
        """After the last window: exit the profiler and take out everything capture installed, but the
        step clock that run.json's unprofiled step times need.

        A profiler left in its schedule's NONE state still opens and closes a ``ProfilerStep#N``
        ``record_function`` in every ``prof.step()`` (a dispatcher op, ~7 µs on this repository's CPU
        machine), and under CUDA kineto keeps CUPTI attached until the profiler object's session ends
        (pytorch/pytorch#144455; CUPTI is finalised only with ``TEARDOWN_CUPTI=1``, which torch turns
        off where Inductor's CUDA graphs run). Triton launch hooks make Triton build launch metadata for
        every launch. None of it records anything any more. ``__exit__``, not ``stop()``: see ``_finish``.
        """
        self._windows_over = True
        if self._hooks is not None and self.clock.source is StepSource.optimizer:
            self._hooks.keep_step_clock_only()
        if self._watch is not None:
            self._watch.remove()  # kineto is free now: the program may start its own profiler
        if self._window is not None and threading.current_thread() is threading.main_thread():
            self._window.disarm()  # SIGALRM back to the program
        self._prof_ended = True
        try:
            _exit(self._prof)
        finally:
            if self._contexts is not None:
                # The extensions' contract: exited after the profiler stopped and the last trace was written.
                try:
                    self._contexts.close()
                except Exception as exc:
                    self.warn(f"a capture extension did not stop cleanly after the last window: {_one_line(exc)}")

    def _count_step(self) -> None:
        """A step after the last window: counted and timed (one ``perf_counter_ns`` read), nothing else.

        From the optimizer hooks a step is now taken at the optimizer step that ends it, no longer at
        the start of the next iteration (``TorchStepHooks.keep_step_clock_only``): the time between two
        of them is still one iteration, and it is recorded under the number it had before, the step
        that began at the earlier one. So the first such boundary only starts the clock
        (``_advance`` forgot the last), and the run's end still closes (untimed) the last step.
        Markers and ``--step-on`` calls are taken where they always were.
        """
        now = now_ns()
        step = self.steps_seen - (1 if self.clock.source is StepSource.optimizer else 0)
        self._steps_after_windows += 1
        self.unprofiled.boundary(step, True, now, now)

    def _step_unprofiled(self) -> bool:
        """Did the step now ending run with no profiler at all? (Warmup steps run it, and discard it.)"""
        return self._window_prof is None and not self._prof_ended and self._prof.current_action == self._off_action

    def _note_step(self) -> None:
        if self._prof.current_action in self._recording_actions:
            self._cycle_steps.append(int(self._prof.step_num))
        for listener in list(self.step_listeners):
            try:
                listener(self)
            except Exception as exc:
                self.step_listeners.remove(listener)
                self.warn(f"step listener {getattr(listener, '__qualname__', listener)} failed: {_one_line(exc)}")

    def _tell_boundary(self, was_off: bool) -> None:
        """Tell the boundary listeners whether the step that ended and the one that begins ran
        without the profiler (after ``prof.step()``: its action is the new step's)."""
        now_off = self._prof_ended or self._windows_over or self._step_unprofiled()
        for listener in list(self.boundary_listeners):
            try:
                listener(was_off, now_off)
            except Exception as exc:
                self.boundary_listeners.remove(listener)
                self.warn(f"boundary listener {getattr(listener, '__qualname__', listener)} failed: {_one_line(exc)}")

    def _marker(self) -> None:
        if threading.get_ident() == self._thread:
            self.clock.marker()
        else:
            self.clock.off_thread("marker")

    # -- the program's own profiler ----------------------------------------------------------------
    def _ours(self) -> bool:
        """Is this call into kineto capture's own (made by the session, on its thread)?"""
        return self._busy and threading.get_ident() == self._thread and os.getpid() == self._pid

    def _kineto_ours(self) -> bool:
        """Does capture's profiler hold kineto's session now (recording, not merely prepared)?"""
        return not self._prof_ended and self._prof.current_action in self._recording_actions

    def _step_aside(self) -> None:
        """The program starts its own profiler: stop capture's for the rest of the run, before the
        program's touches kineto (one session per process; see ``foreign.py``).

        On capture's thread a cycle that is recording is saved, partial, and a running time window
        too; the traces of completed cycles are kept. A profiler started on another thread cannot
        stop capture's (its state is thread-local), so capture only stops acting and its profiler
        ends at the end of the run.
        """
        if self._stepped_aside or os.getpid() != self._pid:
            return
        self._stepped_aside = True
        site = calling_site()
        at = f" at {site}" if site else ""
        message = (
            f"the program started its own torch profiler{at} (after {self.steps_seen} steps); kineto records "
            "one profiler at a time, so capture stepped aside for the rest of the run and the program's profiler "
            "records as it would without capture. To analyse the program's profiler, pass "
            "traceadvisor.Advisor(...) as its on_trace_ready"
        )
        if self._hooks is not None:
            self._hooks.remove()
        marker.set_handler(None)
        if threading.get_ident() == self._thread:
            self._stopping = True  # a cycle cut here is saved as partial
            self._busy = True
            try:
                if self._window is not None and threading.current_thread() is threading.main_thread():
                    self._window.close()
                if self._prof_started:
                    _exit(self._prof)
                self._prof_ended = True
            except Exception as exc:
                message += f" (stopping capture's profiler failed: {_one_line(exc)})"
            finally:
                self._busy = False
        if self._failed is None:
            self._failed = message
        self.warn(message)

    def _on_trace_ready(self, prof: Any) -> None:
        self.unprofiled.trace_ended(cupti.profiles_cuda(prof), os.environ.get(cupti.ENV))
        steps, self._cycle_steps = self._cycle_steps, []
        self._cycles += 1
        index = self._cycles  # cycles are counted from 1, as the advisor counts them (runinfo.trace_path)
        self._export(prof, "cycle", index, steps, partial=self._stopping)

    def _finish(self, window: TimeWindow) -> None:
        """End of the program: take a pending step, save a running window, stop (saving a partial cycle)."""
        if os.getpid() != self._pid:
            return  # a forked child of the program ending: the parent owns the capture
        window.disarm()
        self.unprofiled.forget_boundary()  # the step the run's end closes also holds what followed the loop
        self.clock.iteration_starting()
        window.close()
        self._stopping = True
        if self._prof_ended:
            return
        self._prof_ended = True
        # __exit__, not stop(): it also ends kineto's step tracking and finalises an execution-trace
        # observer (ENABLE_PYTORCH_EXECUTION_TRACE), which stop() leaves unterminated.
        self._guarded(lambda: _exit(self._prof), even_after_failure=True)

    def _guarded(self, action: Callable[[], None], even_after_failure: bool = False) -> None:
        if self._failed and not even_after_failure:
            return
        self._busy = True
        try:
            action()
        except Exception as exc:
            self._fail(f"the profiler failed: {_one_line(exc)}")
        finally:
            self._busy = False

    def _fail(self, message: str) -> None:
        if self._failed is None:
            self._failed = message
            hint = ""
            if "already" in message.lower() and "enabled" in message.lower():
                hint = " (does the program run its own torch.profiler? capture cannot nest one inside it)"
            self.warn(message + hint + "; capture stopped, the program went on")

    # -- writing traces ----------------------------------------------------------------------------
    def _export(self, prof: Any, kind: str, index: int | None, steps: list[int], partial: bool) -> None:
        name = trace_path(self.rank, kind, index).as_posix()
        path = self.out_dir / name
        tmp = path.parent / f".{path.name}.{os.getpid()}.json.tmp"
        if os.getpid() != self._pid:
            return
        try:
            path.parent.mkdir(exist_ok=True)
            export_chrome_json(prof, tmp)
            key = self.unprofiled.key(steps)
            for part in list(self.trace_key_parts):
                key.update(part(steps))
            body = with_key(tmp.read_bytes(), key)
            data = gzip.compress(body, compresslevel=_GZIP_LEVEL, mtime=0)
            write_bytes(path, data)
        except Exception as exc:
            self._lost_traces += 1
            self.warn(f"could not write {name}: {_one_line(exc)}")
            return
        finally:
            tmp.unlink(missing_ok=True)
        trace = TraceFile(path, kind, index, self.rank, steps, partial, len(data))
        self.files.append(trace)
        for listener in list(self.trace_listeners):
            try:
                listener(self, trace)
            except Exception as exc:
                self.warn(f"{name}: trace listener {getattr(listener, '__qualname__', listener)} failed: {exc}")
        try:
            self.record.add_file(trace.to_dict())
        except OSError as exc:
            self.warn(f"could not update {self.record.path.name}: {exc.strerror or exc}")
        if not self.quiet:
            what = f"steps {steps[0]}-{steps[-1]}" if len(steps) > 1 else (f"step {steps[0]}" if steps else "no steps")
            flag = ", partial" if partial else ""
            sys.stderr.write(f"traceadvisor: wrote {path} ({what}{flag}, {_size(len(data))})\n")
            sys.stderr.flush()

    # -- the time window for programs without steps -------------------------------------------------
    def _window_wanted(self) -> bool | None:
        from torch.profiler import ProfilerAction

        if self._failed or self.steps_seen > 0:
            return False
        if self._prof.current_action is not ProfilerAction.NONE:
            return False  # the schedule itself records from the first instruction
        if _optimizer_constructed():
            return None  # a training loop is being set up (compiling?): its steps will come
        return True

    def _window_start(self) -> bool:
        self._busy = True
        try:
            prof = self._profiler(scheduled=False)
            prof.start()
        except Exception as exc:
            self._fail(f"could not start the time window: {_one_line(exc)}")
            return False
        finally:
            self._busy = False
        self._window_prof = prof
        return True

    def _window_stop(self, why: str) -> None:
        """Stop the window: saved when its time is up or the program ended, dropped when a step came.

        A step means the program has a loop after all, and the window then holds only its start-up,
        which the schedule deliberately skips: it is not written (the cost of recording it is spent).
        """
        prof, self._window_prof = self._window_prof, None
        if prof is None:
            return
        self._busy = True
        try:
            _exit(prof)
            if why == "step":
                at = time.monotonic() - self._t0
                self.warn(
                    f"a time window (no step for --window-delay {self.options.window_delay_s:g} s) was dropped "
                    f"when the first step came, {at:.1f} s into the run; a longer --window-delay saves its cost"
                )
            else:
                self._export(prof, "window", None, [], partial=why == "ended")
        except Exception as exc:
            self.warn(f"could not stop the time window: {_one_line(exc)}")
        finally:
            self._busy = False

    # -- the end -----------------------------------------------------------------------------------
    def _conclude(self, outcome: Outcome, window: TimeWindow) -> None:
        s = self.options.schedule
        steps = self.steps_seen
        counts = self.clock.counts
        cycles = [f for f in self.files if f.kind == "cycle"]
        if self._stepped_aside:
            pass  # the step-aside warning says what happened; the step counts below would mislead
        elif steps == 0 and self.clock.off_thread_counts():
            self.warn(self._off_thread_warning())
        elif steps == 0 and any(f.kind == "window" for f in self.files):
            at = (window.started_at or self._t0) - self._t0
            self.warn(
                f"no step was seen: recorded one time window of up to {self.options.window_s:g} s, "
                f"{at:.1f} s into the run; mark steps with --step-on NAME or traceadvisor.step() for per-step analysis"
            )
        elif steps == 0:
            elapsed = time.monotonic() - self._t0
            if window.unavailable:
                why = f" ({window.unavailable})"
            elif elapsed < self.options.window_delay_s:
                delay = self.options.window_delay_s
                why = f" (the program ended after {elapsed:.1f} s, before --window-delay {delay:g} s)"
            elif self._failed is None and _optimizer_constructed():
                why = " (an optimizer was built but never stepped)"
            else:
                why = ""
            self.warn(
                "no step was seen (no optimizer step, traceadvisor.step() call or --step-on call) and no time window "
                f"was recorded{why}; mark steps with --step-on NAME or traceadvisor.step(), or lower --window-delay"
            )
        elif not cycles and not self._lost_traces:
            self.warn(
                f"the program made {steps} steps and ended before the schedule recorded one (the first recorded "
                f"step is #{s.first_active_step}); lower --skip-first/--wait/--warmup or run more iterations"
            )
        if counts["markers_ignored"]:
            self.warn(f"traceadvisor.step() was called {counts['markers_ignored']} times and ignored: --step-on rules")
        if s.warmup == 0:
            self.warn("--warmup 0: the first recorded step includes the profiler's start-up")
        self.record.data["steps"] = {
            "source": self.clock.source.value,
            "count": steps,
            "optimizer_steps": counts["optimizer"],
            "scaler_skipped_steps": counts["scaler_skipped"],
            "markers": counts["marker"],
            "step_on_calls": counts["call"],
        }
        self.record.data["unprofiled_steps"] = self.unprofiled.key([n for f in self.files for n in f.steps])
        try:
            self.record.data["devices"] = devices()
        except Exception as exc:
            self.warn(f"could not list the GPUs: {_one_line(exc)}")
        self.record.data["exit"] = outcome.to_dict()
        self.record.data["finished_at"] = now_iso()
        self.record.data["duration_s"] = round(time.monotonic() - self._t0, 3)

    def _off_thread_warning(self) -> str:
        """Why a loop on another thread was not captured, and what to do instead."""
        seen = ", ".join(f"{n} {what}" for what, n in self.clock.off_thread_counts().items())
        threads = ", ".join(repr(t) for t in self.clock.off_threads)
        return (
            f"no step was seen on the main thread, but the program stepped on another thread ({threads}: {seen}). "
            "torch's profiler records only the thread that starts it (its operator callbacks are thread-local), "
            "and capture starts it on the main thread before the program runs, so that loop is neither stepped "
            "nor recorded. Run the training loop on the main thread, or profile inside that thread with "
            "traceadvisor.profile() (without capture)"
        )

    def analysis_files(self) -> list[TraceFile]:
        """What to analyse: the last complete cycle, else the last partial one, else the time window."""
        complete = [f for f in self.files if f.kind == "cycle" and not f.partial]
        partial = [f for f in self.files if f.kind == "cycle" and f.partial]
        windows = [f for f in self.files if f.kind == "window"]
        return (complete or partial or windows)[-1:]


def _exit(prof: Any) -> None:
    prof.__exit__(None, None, None)


def _optimizer_constructed() -> bool:
    """Has any ``torch.optim.Optimizer`` been built? ``Optimizer.__init__`` marks its class's ``step``."""
    import torch

    seen: set[type] = set()
    stack: list[type] = [torch.optim.Optimizer]
    while stack:
        sub: type
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
                if getattr(sub.__dict__.get("step"), "hooked", False):
                    return True
    return False


def _one_line(exc: BaseException) -> str:
    """An exception as part of one safe warning line (its text may hold newlines or escapes)."""
    from traceadvisor.report.safe_text import terminal

    text = terminal(" ".join(str(exc).split()), 300)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"
