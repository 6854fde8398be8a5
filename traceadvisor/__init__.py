"""traceadvisor: reads PyTorch profiler traces and says what slows the GPU workload down.

The public names load on first use (PEP 562): ``import traceadvisor`` stays cheap (no pandas, no
torch), which matters for ``traceadvisor.step()`` markers in training code and for the start-up
of the command line, whose reader begins decoding before the analysis modules are imported.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY: dict[str, str] = {
    "Advisor": "traceadvisor.advisor",
    "profile": "traceadvisor.advisor",
    "Capability": "traceadvisor.engine.rule",
    "Rule": "traceadvisor.engine.rule",
    "Evidence": "traceadvisor.report.finding",
    "Finding": "traceadvisor.report.finding",
    "Impact": "traceadvisor.report.finding",
    "Location": "traceadvisor.report.finding",
    "Severity": "traceadvisor.report.finding",
    "load": "traceadvisor.trace.load",
    "load_file": "traceadvisor.trace.load",
    "Trace": "traceadvisor.trace.model",
    "step": "traceadvisor.capture.marker",
    "analyze": "traceadvisor.pipeline",
    "Report": "traceadvisor.report.model",
    "render": "traceadvisor.report",
}

__all__ = [  # noqa: RUF022 (kept in the order of _LAZY)
    "Advisor",
    "profile",
    "Capability",
    "Rule",
    "Evidence",
    "Finding",
    "Impact",
    "Location",
    "Severity",
    "load",
    "load_file",
    "Trace",
    "step",
    "analyze",
    "Report",
    "render",
    "__version__",
]

if TYPE_CHECKING:
    from traceadvisor.advisor import Advisor, profile
    from traceadvisor.capture.marker import step
    from traceadvisor.engine.rule import Capability, Rule
    from traceadvisor.pipeline import analyze
    from traceadvisor.report import render
    from traceadvisor.report.finding import Evidence, Finding, Impact, Location, Severity
    from traceadvisor.report.model import Report
    from traceadvisor.trace.load import load, load_file
    from traceadvisor.trace.model import Trace


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'traceadvisor' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
