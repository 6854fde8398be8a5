"""Shared test fixtures (keep this file small)."""

from __future__ import annotations

from pathlib import Path

import pytest

EXTERNAL_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "external-traces"


@pytest.fixture(scope="session")
def external_traces() -> Path:
    """The folder of real third-party traces (HTA, TraceLens); tests that need it skip without it."""
    if not EXTERNAL_TRACES.is_dir():
        pytest.skip(f"{EXTERNAL_TRACES} not available")
    return EXTERNAL_TRACES
