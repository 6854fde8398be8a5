"""``traceadvisor.step()``: a step marker for user code, a no-op unless ``traceadvisor capture`` runs it.

This module must stay free of torch and of the analysis stack: training scripts import it.
"""

from __future__ import annotations

from collections.abc import Callable

# Set by the capture session while it runs a program, None otherwise.
_handler: Callable[[], None] | None = None


def step() -> None:
    """Mark the end of one iteration of your loop (one profiler step) for ``traceadvisor capture``.

    Call it once per iteration, at the end of the loop body, as you would call ``prof.step()``.
    Outside ``traceadvisor capture`` it does nothing, so the call can stay in the code. Once the
    program calls it, markers alone define the steps (optimizer steps no longer count).
    """
    handler = _handler
    if handler is not None:
        handler()


def set_handler(handler: Callable[[], None] | None) -> None:
    """Route ``step()`` to ``handler`` (the capture session) or, with None, back to a no-op."""
    global _handler
    _handler = handler
