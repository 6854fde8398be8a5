"""Rule unfused-attention (OP101) on the real H100 fixtures: fires on its planted trace, never high on clean ones."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from traceadvisor import load_file
from traceadvisor.engine.config import Config
from traceadvisor.engine.runner import instantiate, run
from traceadvisor.testing import find_rule

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TRACES = FIXTURES / "traces"
RULE = "unfused-attention"
PLANTED = "planted_naive_attention"
PAIR = "pair_sdpa"


@cache
def _findings(name: str) -> tuple:
    cls = find_rule(RULE)
    result = run(instantiate([cls], Config()), [load_file(TRACES / f"{name}.json.gz")])
    assert not result.errors, result.errors
    return tuple(result.findings)


def test_planted_trace_fires() -> None:
    found = _findings(PLANTED)
    assert len(found) == 1
    assert found[0].severity.value in ("medium", "high")
    assert found[0].impact is not None and found[0].impact.time_us > 0


def test_planted_among_top_findings() -> None:
    shares = {}
    for p in TRACES.glob("*.json.gz"):
        name = p.name.removesuffix(".json.gz")
        for f in _findings(name):
            if f.impact is not None:
                shares[name] = max(shares.get(name, 0.0), f.impact.share_pct)
    ranked = sorted(shares, key=shares.__getitem__, reverse=True)
    assert PLANTED in ranked[:3], ranked


@pytest.mark.parametrize("name", sorted(p.name.removesuffix(".json.gz") for p in TRACES.glob("clean_*.json.gz")))
def test_clean_trace_not_high(name: str) -> None:
    assert all(f.severity.value != "high" for f in _findings(name))


@pytest.mark.skipif(PAIR is None, reason="no before/after pair for this rule")
def test_pair_saving_close_to_measured() -> None:
    pair = json.loads((FIXTURES / "pairs.json").read_text())[PAIR]
    found = _findings(f"{PAIR}_before")
    assert len(found) == 1 and found[0].impact is not None
    steps = len(load_file(TRACES / f"{PAIR}_before.json.gz").steps)
    estimated = found[0].impact.time_us / steps
    measured = pair["measured_saving_us"]["mean"]
    assert abs(estimated - measured) <= 0.3 * measured, (estimated, measured)
    assert not _findings(f"{PAIR}_after") or all(f.severity.value != "high" for f in _findings(f"{PAIR}_after"))
