"""Every rule's YAML cases (fixtures/rules/<CODE>.yaml), each run alone through the real loader.

Test ids are ``<CODE>-<case>``: ``pytest -k GK101`` runs one rule's cases.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from traceadvisor.testing import check_case, find_rule, load_case_file

CASES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "rules"


def _cases() -> list[Any]:
    params = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        cf = load_case_file(path)
        for name, case in cf.cases.items():
            params.append(pytest.param(cf.rule, cf.options, case, id=f"{path.stem}-{name}"))
    return params


@pytest.mark.parametrize(("rule", "options", "case"), _cases())
def test_rule_case(rule: str, options: dict[str, Any], case: dict[str, Any]) -> None:
    check_case(find_rule(rule), case, options)
