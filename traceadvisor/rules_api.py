"""Everything a rule file imports besides the top-level names (kept in one place on purpose)."""

from traceadvisor.engine.finding import Evidence, Finding, Impact, Location, Severity, Thresholds
from traceadvisor.engine.rule import DOC_SECTIONS, Capability, Rule, evidence_from, location_of
from traceadvisor.trace.columns import parse_raw
from traceadvisor.trace.cuda_api import BLOCKING_CALLS

__all__ = [
    "BLOCKING_CALLS",
    "DOC_SECTIONS",
    "Capability",
    "Evidence",
    "Finding",
    "Impact",
    "Location",
    "Rule",
    "Severity",
    "Thresholds",
    "evidence_from",
    "location_of",
    "parse_raw",
]
