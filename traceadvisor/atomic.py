"""Atomic file writes: a reader never sees a half-written report or trace."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

# Signals whose default action ends the process without unwinding Python (so without the cleanup
# in write_bytes's ``except``): ``kill``, a batch system's time limit, a closed terminal. SIGINT
# needs nothing: Python raises KeyboardInterrupt, which the cleanup sees.
_TERMINATING = (signal.SIGTERM, signal.SIGHUP) if hasattr(signal, "SIGHUP") else (signal.SIGTERM,)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    A SIGTERM (or SIGHUP) during the write removes the temporary file, then ends the process as the
    signal would have (its exit status still says killed by that signal)."""
    path = Path(path)
    if path.exists() and not path.is_file():
        # A device or pipe (/dev/null, /dev/stdout, a FIFO): renaming over it would replace it.
        with path.open("wb") as fh:
            fh.write(data)
        return
    temporary: list[Path] = []  # the temporary file, once made: what a terminating signal removes
    with _removed_if_terminated(temporary):
        with _terminating_signals_held():  # none between the file's creation and its listing
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
            temporary.append(Path(tmp))
        try:
            os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; a written file follows the umask as open() would
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            Path(tmp).replace(path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


@contextmanager
def _removed_if_terminated(files: list[Path]) -> Iterator[None]:
    """While the block runs, a terminating signal removes ``files`` first, then ends the process.

    Only where the signal would end the process anyway (its handler is the default): a program
    that handles or ignores it (a training loop that checkpoints on SIGTERM) keeps its own handler.
    Python runs signal handlers on the main thread only, so other threads install nothing. The
    previous handlers are back when the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def remove_and_die(signum: int, frame: FrameType | None) -> None:
        for f in files:
            f.unlink(missing_ok=True)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # the default action now: the process ends by this signal

    previous = {s: signal.getsignal(s) for s in _TERMINATING}
    installed = [s for s, handler in previous.items() if handler == signal.SIG_DFL]
    for s in installed:
        signal.signal(s, remove_and_die)
    try:
        yield
    finally:
        for s in installed:
            signal.signal(s, previous[s])


@contextmanager
def _terminating_signals_held() -> Iterator[None]:
    """The terminating signals blocked while the block runs (pthread_sigmask: one that comes is
    delivered, and its handler run, when the block ends)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _TERMINATING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Read once, at import: setting the umask to read it races with threads that create files.
_UMASK = _read_umask()
