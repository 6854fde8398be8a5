"""One small per-trace cache for the analyses: ``@memoised`` computes an analysis of a trace once.

The results live in the trace (``Trace.memo``: a dict the trace owns), so they go when the trace
goes, and no global table keeps big traces alive in a long-running process (the advisor). The
lookup is a method call on the trace, which the engine's read-only view of a trace
(``engine.isolation.ReadOnlyView``) forwards to the trace itself: a rule (given the view) and a
report section (given the trace) get one computation, the rule through a read-only copy of it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from traceadvisor.trace.model import Trace

P = ParamSpec("P")
R = TypeVar("R")


def memoised(fn: Callable[Concatenate[Trace, P], R]) -> Callable[Concatenate[Trace, P], R]:
    """``fn(trace, *args)`` computed once per trace and arguments (which must be hashable)."""

    @functools.wraps(fn)
    def cached(trace: Trace, /, *args: P.args, **kwargs: P.kwargs) -> R:
        key = (fn.__module__, fn.__qualname__, args, tuple(sorted(kwargs.items())))
        return trace.memo(key, lambda t: fn(t, *args, **kwargs))

    return cached
