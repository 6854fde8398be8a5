"""traceadvisor: reads PyTorch profiler traces and says what slows the GPU workload down."""

from __future__ import annotations

from traceadvisor.engine.finding import Evidence, Finding, Impact, Location, Severity
from traceadvisor.engine.rule import Capability, Rule
from traceadvisor.trace.load import load, load_file
from traceadvisor.trace.model import Trace

__version__ = "0.1.0"

__all__ = [
    "Capability",
    "Evidence",
    "Finding",
    "Impact",
    "Location",
    "Rule",
    "Severity",
    "Trace",
    "__version__",
    "load",
    "load_file",
]
