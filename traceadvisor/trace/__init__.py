"""The trace model: reading Kineto traces into tables and derived views."""

from traceadvisor.trace.load import load, load_file
from traceadvisor.trace.model import Steps, Trace, TraceMeta

__all__ = ["Steps", "Trace", "TraceMeta", "load", "load_file"]
