"""The program's stdout kept out of a machine-readable report that capture writes to stdout.

``traceadvisor capture -f json`` runs the program in this process, then prints the report: what the
program prints would land in the same stream and the JSON would no longer parse. So, for such a
report, file descriptor 1 points at stderr while the program runs (its prints, its child processes'
and its atexit handlers' too, which run after the report), and at the real stdout only while the
report is written. A text report leaves stdout alone: a person reads both.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


class ProgramStdout:
    """Where fd 1 points: ``to_stderr()`` once before the program runs; ``report()`` around the
    report's write. A no-op when ``active`` is False or stdout is no file descriptor."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self._saved: int | None = None

    def to_stderr(self) -> None:
        if not self.active or self._saved is not None:
            return
        try:
            _flush()
            self._saved = os.dup(1)
            os.dup2(2, 1)
        except OSError:  # stdout or stderr closed: nothing to keep apart
            self._saved = None

    @contextmanager
    def report(self) -> Iterator[None]:
        """fd 1 is the real stdout inside the block (what the program left buffered went to stderr)."""
        saved = self._saved
        if saved is None:
            yield
            return
        _flush()
        os.dup2(saved, 1)
        try:
            yield
        finally:
            _flush()
            os.dup2(2, 1)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
