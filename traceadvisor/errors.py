"""Errors of an analysis. The command line reports ``TraceError`` and ``UsageError`` as one line on stderr
with exit code 2; ``Cancelled`` reaches only callers that passed a ``cancel`` event."""

from __future__ import annotations

import threading


class TraceError(Exception):
    """A trace that cannot be read or analysed: missing, empty, not JSON, not a profiler trace."""


class UsageError(Exception):
    """Bad options or configuration given by the user."""


class Cancelled(Exception):
    """The analysis stopped because its ``cancel`` event was set (``pipeline.analyze(cancel=...)``)."""


def raise_if_cancelled(cancel: threading.Event | None) -> None:
    """Raise ``Cancelled`` if ``cancel`` is set."""
    if cancel is not None and cancel.is_set():
        raise Cancelled("analysis cancelled")
