"""Shared test fixtures (keep this file small)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixture_paths import EXTERNAL

# Triton kernels in the tests run in the interpreter, on any machine: Triton reads the flag when it is
# first imported, and on a CUDA machine importing torch may import Triton before any test runs.
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def external_traces() -> Path:
    """The folder of real third-party traces (HTA, TraceLens), vendored in ``fixtures/external/``.

    It is part of the repository, so a missing folder is a broken checkout: the tests that need it
    fail (they used to skip, which let a bare clone pass without running them)."""
    assert EXTERNAL.is_dir(), f"{EXTERNAL} is missing: fixtures/external/ is part of the repository"
    return EXTERNAL


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


@pytest.fixture
def one_intra_op_thread() -> Iterator[None]:
    """Tiny models on a busy 2-core machine: OpenMP threads spin at barriers while others hold the
    cores, which swamps the planted input stage with noise; one thread keeps step times sane.
    The in-loop advisor tests (test_advisor, test_integrations) use it for every test."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def rules_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``--rules-dir`` folder holding the user rule of tests/test_advisor.py (``CPU_INPUT_RULE``)."""
    from test_advisor import CPU_INPUT_RULE

    folder = tmp_path_factory.mktemp("user_rules")
    (folder / "usr101_cpu_input_bound.py").write_text(CPU_INPUT_RULE)
    return folder
