"""Errors that the command line reports as one line on stderr with exit code 2."""

from __future__ import annotations


class TraceError(Exception):
    """A trace that cannot be read or analysed: missing, empty, not JSON, not a profiler trace."""


class UsageError(Exception):
    """Bad options or configuration given by the user."""
