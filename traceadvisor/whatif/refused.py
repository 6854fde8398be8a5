"""``Refused``: a what-if scenario that cannot be applied to a trace (its own module so that scenario
modules registered in ``scenarios.SCENARIOS`` can raise it without importing scenarios.py)."""

from __future__ import annotations


class Refused(Exception):
    """A scenario that cannot be applied to this trace, with the reason."""
