"""Shared test fixtures (keep this file small)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Triton kernels in the tests run in the interpreter, on any machine: Triton reads the flag when it is
# first imported, and on a CUDA machine importing torch may import Triton before any test runs.
os.environ.setdefault("TRITON_INTERPRET", "1")

EXTERNAL_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "external-traces"


@pytest.fixture(scope="session")
def external_traces() -> Path:
    """The folder of real third-party traces (HTA, TraceLens); tests that need it skip without it."""
    if not EXTERNAL_TRACES.is_dir():
        pytest.skip(f"{EXTERNAL_TRACES} not available")
    return EXTERNAL_TRACES


@pytest.fixture(autouse=True, scope="session")
def _isolated_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Device profiles saved by ``traceadvisor calibrate`` on this machine must not change the
    peaks the tests see: every test runs with an empty ``TRACEADVISOR_HOME``."""
    home = tmp_path_factory.mktemp("traceadvisor-home")
    old = os.environ.get("TRACEADVISOR_HOME")
    os.environ["TRACEADVISOR_HOME"] = str(home)
    yield
    if old is None:
        os.environ.pop("TRACEADVISOR_HOME", None)
    else:
        os.environ["TRACEADVISOR_HOME"] = old
