"""Where the tests' real traces live: inside the repository, so a bare clone runs every test.

``fixtures/external/`` holds the third-party traces (HTA's and TraceLens's test data, MIT; see
``fixtures/external/PROVENANCE.md``); ``fixtures/traces/`` holds our own GPU captures. Every test
and the conftest fixture take the folder from here, so one constant names it.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
FIXTURE_TRACES = REPO / "fixtures" / "traces"
EXTERNAL = REPO / "fixtures" / "external"
HTA = EXTERNAL / "hta"
TRACELENS = EXTERNAL / "tracelens"


def external_traces() -> list[Path]:
    """Every vendored third-party trace, sorted.

    Raises instead of returning ``[]`` when none is there: parametrized tests built from an empty
    list are collected as one skipped case, so a checkout that lost the folder would pass quietly.
    """
    traces = sorted(EXTERNAL.rglob("*.json.gz"))
    if not traces:
        raise FileNotFoundError(f"no traces under {EXTERNAL}: fixtures/external/ is part of the repository")
    return traces


# One rank of a real 2-process gloo DDP run with an injected input delay (fixtures/capture_multirank.py).
MULTIRANK_INPUT_DELAY_RANK1 = FIXTURE_TRACES / "multirank" / "input_delay_2r" / "rank1.json.gz"


@cache
def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` imported once (the bench scripts are not a package): the tests call the same
    functions the reproducing commands do. Registered in ``sys.modules`` so dataclasses and pickling
    inside it find their module."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module
