"""The real H100 pairs of fixtures/pairs12.json for the what-if and rule tests: their records, and
each trace loaded and each rule run on it once per test session."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from traceadvisor import Finding
from traceadvisor.testing import find_rule, run_case
from traceadvisor.trace.load import load_file
from traceadvisor.trace.model import Trace

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TRACES = FIXTURES / "traces"
PAIRS = json.loads((FIXTURES / "pairs12.json").read_text())["pairs"]


@cache
def trace(stem: str) -> Trace:
    """``fixtures/traces/<stem>.json.gz``, loaded once."""
    return load_file(TRACES / f"{stem}.json.gz")


@cache
def findings(rule: str, stem: str) -> tuple[Finding, ...]:
    """What ``rule`` reports on ``fixtures/traces/<stem>.json.gz`` (its run must not error)."""
    result = run_case(find_rule(rule), {"trace": str(TRACES / f"{stem}.json.gz")})
    assert not result.errors, result.errors
    return tuple(result.findings)
