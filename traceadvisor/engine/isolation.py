"""What keeps one rule from harming a run: a time limit (and cancellation) that interrupts it, its
``print`` kept off stdout (where the JSON report goes), and a read-only view of the trace.

The limits of doing this inside one process (documented for rule authors):

* A rule is interrupted between Python bytecodes. A rule stuck inside one C call (a sort of a huge
  array, a blocking read) is stopped only when that call returns; on a worker thread that includes
  ``time.sleep``, which only the main thread's signal can cut short.
* A rule that catches ``BaseException`` (or uses a bare ``except:``) and carries on can swallow
  the interruption.
* Only Python-level stdout is redirected: ``os.write(1, ...)`` or a C extension writing to file
  descriptor 1 still reaches stdout.
* The trace view hands out copies that pandas copy-on-write keeps separate, and read-only numpy
  arrays; pandas' private internals (``_mgr``, ``_values``) and ``Series.array`` of an extension
  column (a categorical) are documented escape hatches of copy-on-write and are not protected,
  nor are other libraries' objects (the networkx graph of ``dependency_graph(trace)``), handed as they are.
"""

from __future__ import annotations

import ctypes
import enum
import functools
import signal
import sys
import threading
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import numpy as np
import pandas as pd

# How often a watch looks at the cancel flag: the delay between ``cancel.set()`` and the
# interruption of a rule that is running.
_POLL_S = 0.05


class RuleInterrupted(BaseException):
    """Raised in a rule's thread when its time is up or the run is cancelled. A ``BaseException``,
    like ``KeyboardInterrupt``, so that a rule's ``except Exception:`` does not swallow it."""


# -- time limit and cancellation ------------------------------------------------------------------


def _raise_in_thread(ident: int, exc: type[BaseException] | None) -> None:
    """Schedule ``exc`` in the thread ``ident`` (``None`` withdraws a scheduled one). CPython raises
    it when that thread next checks its eval breaker (between bytecodes, on every backward jump), so
    a loop stops at once and a single long C call only when it returns."""
    arg = ctypes.py_object(exc) if exc is not None else None  # None: a NULL pointer, "clear"
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), arg)


def _signals_usable() -> bool:
    """Python signal handlers can be installed, and run, only in the main thread; ``pthread_kill``
    is POSIX only."""
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "pthread_kill")


class Interrupter:
    """Stops the code that runs in the calling thread, under ``watch``, when its time is up or
    ``cancel`` is set; one per run (``with Interrupter(cancel) as stop: ... with stop.watch(60): ...``).

    One watcher thread per run, not per watch: a thread started and woken per rule costs ~0.5 ms
    of GIL hand-overs each (measured), more than some rules take. The watcher sleeps until the
    current watch's deadline, polling ``cancel`` every ``_POLL_S`` while a watch is on; a watch
    that ends early does not wake it (it wakes at that deadline, finds the next watch and sleeps
    on). Each watch fires at most once, under the lock that also ends the watch, so no interruption
    lands after the watched code is over.

    How a watch fires: on the main thread it sends SIGALRM to the thread. A blocking system call
    (``time.sleep``, a read) fails with EINTR, Python runs the handler, and the handler raises
    ``RuleInterrupted`` (PEP 475: a call is retried after EINTR only when the handler does not
    raise). On any other thread, where no Python signal handler runs, it schedules the exception
    with ``PyThreadState_SetAsyncExc``: raised between bytecodes, so not inside a blocking call.
    """

    def __init__(self, cancel: threading.Event | None = None) -> None:
        self.cancel = cancel
        self._use_signal = _signals_usable()
        self._previous: Any = None
        self._cond = threading.Condition()  # guards everything below, and every firing
        self._current: _Watch | None = None
        self._closed = False
        self._watcher: threading.Thread | None = None
        self._watcher_idle = False  # sleeping with no timeout: a new watch must wake it
        self._armed: _Watch | None = None  # the watch whose SIGALRM the handler must turn into an exception

    def __enter__(self) -> Interrupter:
        if self._use_signal:
            self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._use_signal:
            # signal.signal returned None if the previous handler was not set from Python.
            signal.signal(signal.SIGALRM, signal.SIG_DFL if self._previous is None else self._previous)

    def _on_alarm(self, signum: int, frame: types.FrameType | None) -> None:
        watch, self._armed = self._armed, None
        if watch is not None and not watch.over:
            raise RuleInterrupted

    def watch(self, limit_s: float | None) -> _Watch:
        """A context manager: interrupt its body once ``limit_s`` pass (``None``: no limit) or
        ``cancel`` is set; ``reason`` then says which."""
        return _Watch(self, limit_s)

    def _begin(self, w: _Watch) -> None:
        with self._cond:
            self._current = w
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch_loop, name="traceadvisor-rule-watch", daemon=True)
                self._watcher.start()
            elif self._watcher_idle:
                self._cond.notify()

    def _end(self, w: _Watch) -> None:
        with self._cond:
            w.over = True
            if self._current is w:
                self._current = None
            if w.reason is not None and not self._use_signal:
                _raise_in_thread(w.target, None)  # fired but not yet raised: withdraw it
        # A SIGALRM sent but not yet handled must be handled while our handler is installed (it
        # now does nothing: the watch is over); after the handler is restored it would reach the
        # previous one. It was sent to this thread, so the first sleep here lets it in.
        give_up = time.monotonic() + 1.0
        while self._armed is w and time.monotonic() < give_up:
            time.sleep(0.001)

    def _watch_loop(self) -> None:
        with self._cond:
            while not self._closed:
                w = self._current
                timeout = None
                if w is not None and w.reason is None:
                    left = None if w.deadline is None else w.deadline - time.monotonic()
                    if self.cancel is not None and self.cancel.is_set():
                        self._fire(w, "cancelled")
                        continue
                    if left is not None and left <= 0:
                        self._fire(w, "timeout")
                        continue
                    if self.cancel is not None:
                        timeout = _POLL_S if left is None else min(left, _POLL_S)
                    else:
                        timeout = left
                self._watcher_idle = timeout is None
                self._cond.wait(timeout)

    def _fire(self, w: _Watch, reason: str) -> None:
        """Interrupt ``w``'s thread (called with the lock held, while ``w`` is on)."""
        w.reason = reason
        if self._use_signal:
            self._armed = w
            signal.pthread_kill(w.target, signal.SIGALRM)
        else:
            _raise_in_thread(w.target, RuleInterrupted)


class _Watch:
    """One watched stretch of code in the calling thread."""

    def __init__(self, owner: Interrupter, limit_s: float | None) -> None:
        self.owner = owner
        self.limit_s = limit_s
        self.target = threading.get_ident()
        self.deadline: float | None = None
        self.reason: str | None = None  # "timeout" or "cancelled" once fired
        self.over = False

    def __enter__(self) -> _Watch:
        if self.limit_s is not None or self.owner.cancel is not None:
            self.deadline = None if self.limit_s is None else time.monotonic() + self.limit_s
            self.owner._begin(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.owner._end(self)


# -- stdout -------------------------------------------------------------------------------------


class _RoutedStdout:
    """``sys.stdout`` while a rule runs: what the rule's thread writes goes to stderr, what other
    threads write (the training loop of an in-loop advisor in thread mode) to the real stdout."""

    def __init__(self, real: TextIO) -> None:
        self.real = real
        self.threads: Counter[int] = Counter()

    def _target(self) -> TextIO:
        return sys.stderr if threading.get_ident() in self.threads else self.real

    def write(self, text: str) -> int:
        return self._target().write(text)

    def close(self) -> None:
        """Nothing: a rule closing "stdout" would otherwise close stderr, or the report's stream."""

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:  # buffer, fileno, isatty, encoding...
        return getattr(self._target(), name)


_route_lock = threading.Lock()


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what the calling thread writes to ``sys.stdout`` to stderr (rule code: ``print``
    would corrupt ``--format json`` on stdout). Unlike ``contextlib.redirect_stdout``, which
    swaps the stream for every thread, only the calling thread is redirected."""
    me = threading.get_ident()
    with _route_lock:
        router = sys.stdout if isinstance(sys.stdout, _RoutedStdout) else _RoutedStdout(sys.stdout)
        router.threads[me] += 1
        sys.stdout = router  # type: ignore[assignment]
    try:
        yield
    finally:
        with _route_lock:
            router.threads[me] -= 1
            if router.threads[me] <= 0:
                del router.threads[me]
            if not router.threads and sys.stdout is router:
                sys.stdout = router.real


# -- read-only data -----------------------------------------------------------------------------

# Values handed to rules as they are: immutable.
_IMMUTABLE = (
    str,
    bytes,
    int,
    float,
    complex,
    type(None),
    enum.Enum,
    np.generic,
    np.dtype,
    frozenset,
    range,
    pd.Index,  # immutable by design: __setitem__ raises
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.ModuleType,
)


def read_only(value: Any) -> Any:
    """What a rule gets instead of ``value``: changes it makes stay in its own copy.

    Tables are shallow copies: under pandas' copy-on-write (the only mode in pandas 3), a write to
    one (``.loc[...] =``, a new column, an in-place sort) copies the columns it touches first, so
    the shared table never changes; a shallow copy costs ~10-25 µs whatever the row count (deep:
    ~250 ms for 1M rows x 23 columns). Arrays are read-only views (a write raises). Lists and
    dicts are copied; traceadvisor's own objects (the trace, its steps, roofline, metadata) are
    wrapped in a ``ReadOnlyView``; methods return read-only results.
    """
    if isinstance(value, _IMMUTABLE):
        return value
    if isinstance(value, (pd.DataFrame, pd.Series)):
        return value.copy(deep=False)
    if isinstance(value, np.ndarray):
        view = value.view()
        view.flags.writeable = False
        return view
    kind = type(value)
    if kind is tuple:
        return tuple(read_only(v) for v in value)
    if kind is list:
        return [read_only(v) for v in value]
    if kind is dict:
        return {k: read_only(v) for k, v in value.items()}
    if kind in (set, bytearray):
        return kind(value)
    if isinstance(value, types.MethodType):
        return _read_only_method(value)
    if type(value).__module__.startswith("traceadvisor."):
        return ReadOnlyView(value)
    # Another library's object (the networkx graph of ``dependency_graph(trace)``): a view would fail its
    # type checks, and a deep copy costs what the object weighs; it is shared as it is.
    return value


def _read_only_method(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        return read_only(method(*args, **kwargs))

    return call


class ReadOnlyView:
    """An object as a rule sees it: attributes read through ``read_only`` (once per view, so a rule
    sees its own changes to its copy of a table), attributes set on the view stay on the view.
    ``isinstance(view, type(target))`` holds."""

    __slots__ = ("_got", "_target")

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_got", {})

    def __getattr__(self, name: str) -> Any:
        got: dict[str, Any] = object.__getattribute__(self, "_got")
        if name not in got:
            got[name] = read_only(getattr(object.__getattribute__(self, "_target"), name))
        return got[name]

    def __setattr__(self, name: str, value: Any) -> None:
        object.__getattribute__(self, "_got")[name] = value

    def __delattr__(self, name: str) -> None:
        got = object.__getattribute__(self, "_got")
        if name not in got:
            raise AttributeError(name)
        del got[name]

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance() falls back to __class__
        return type(object.__getattribute__(self, "_target"))

    def __len__(self) -> int:
        return len(self._target)

    def __bool__(self) -> bool:
        return bool(self._target)

    def __iter__(self) -> Iterator[Any]:
        return (read_only(v) for v in self._target)

    def __getitem__(self, key: Any) -> Any:
        return read_only(self._target[key])

    def __contains__(self, item: Any) -> bool:
        return item in self._target

    def __eq__(self, other: object) -> bool:
        return bool(self._target == (other._target if type(other) is ReadOnlyView else other))

    def __hash__(self) -> int:
        return hash(self._target)

    def __repr__(self) -> str:
        return repr(self._target)
