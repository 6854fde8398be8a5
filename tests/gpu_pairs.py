"""The real H100 pairs for the what-if and rule tests: their records, and each trace loaded and each
rule run on it once per test session.

``PAIRS``/``TRACES``: the main fixture (fixtures/pairs12.json, fixtures/traces), every capture variant.
Its steps were timed with CUPTI left attached after the run's first capture (fixtures/traces/PROVENANCE.md),
slower than the programs run without the profiler: a test that holds a prediction to a measured step
or saving uses ``clean_pair``, ``clean_trace`` and ``clean_findings`` (run 14: stack traces; run 15:
nostack traces; both timed with CUPTI detached after each capture)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from traceadvisor import Finding
from traceadvisor.testing import find_rule, run_case
from traceadvisor.trace.load import load_file
from traceadvisor.trace.model import Trace

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TRACES = FIXTURES / "traces"
PAIRS = json.loads((FIXTURES / "pairs12.json").read_text())["pairs"]
CLEAN = FIXTURES / "pairs12_runs" / "run_14"
CLEAN_PAIRS = json.loads((CLEAN / "pairs12.json").read_text())["pairs"]
CLEAN_NOSTACK = FIXTURES / "pairs12_runs" / "run_15"
CLEAN_NOSTACK_PAIRS = json.loads((CLEAN_NOSTACK / "pairs12.json").read_text())["pairs"]


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


def _clean_dir(stem: str) -> Path:
    return CLEAN_NOSTACK if stem.endswith("_nostack") else CLEAN


def clean_pair(pair: str, variant: str = "stack") -> dict[str, Any]:
    """A pair's record in the clean run that holds its ``variant`` traces (run 14 stack, run 15 nostack)."""
    return (CLEAN_NOSTACK_PAIRS if variant == "nostack" else CLEAN_PAIRS)[pair]


@cache
def clean_trace(stem: str) -> Trace:
    """``traces/<stem>.json.gz`` of the clean run holding it (run 15 for ``*_nostack``, else run 14;
    both timed with CUPTI detached after each capture), loaded once."""
    return load_file(_clean_dir(stem) / "traces" / f"{stem}.json.gz")


@cache
def clean_findings(rule: str, stem: str) -> tuple[Finding, ...]:
    """What ``rule`` reports on the clean run's ``traces/<stem>.json.gz``."""
    result = run_case(find_rule(rule), {"trace": str(_clean_dir(stem) / "traces" / f"{stem}.json.gz")})
    assert not result.errors, result.errors
    return tuple(result.findings)
