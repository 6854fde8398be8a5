"""Rule pageable-copy on the real H100 fixtures: fires on its planted trace, never high on clean ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceadvisor import load_file
from traceadvisor.engine.config import Config
from traceadvisor.engine.runner import instantiate, run
from traceadvisor.testing import find_rule

TRACES = Path(__file__).resolve().parent.parent / "fixtures" / "traces"
RULE = "pageable-copy"


def _findings(name: str):
    cls = find_rule(RULE)
    result = run(instantiate([cls], Config()), [load_file(TRACES / f"{name}.json.gz")])
    assert not result.errors, result.errors
    return result.findings


def test_planted_trace_fires() -> None:
    found = _findings("planted_pageable_copies")
    assert len(found) == 1
    assert found[0].severity.value in ("medium", "high")
    assert found[0].impact is not None and found[0].impact.time_us > 0


@pytest.mark.parametrize("name", sorted(p.name.removesuffix(".json.gz") for p in TRACES.glob("clean_*.json.gz")))
def test_clean_trace_not_high(name: str) -> None:
    assert all(f.severity.value != "high" for f in _findings(name))
