"""The trace model: reading Kineto traces into tables and derived views.

Names load on first use, so the reader (numpy and msgspec only) can start decoding before pandas
and the model are imported.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_LAZY = {
    "load": "traceadvisor.trace.load",
    "load_file": "traceadvisor.trace.load",
    "Steps": "traceadvisor.trace.model",
    "Trace": "traceadvisor.trace.model",
    "TraceMeta": "traceadvisor.trace.model",
}
__all__ = ["Steps", "Trace", "TraceMeta", "load", "load_file"]

if TYPE_CHECKING:
    from traceadvisor.trace.load import load, load_file
    from traceadvisor.trace.model import Steps, Trace, TraceMeta


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'traceadvisor.trace' has no attribute {name!r}")
    return getattr(import_module(module), name)
