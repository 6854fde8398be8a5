"""The rule engine: the ``Rule`` base class (``rule.py``), discovery (``registry.py``), selection
and the run (``runner.py``), isolation (``isolation.py``).

This module itself stays light (no pandas): the configuration reads ``DEFAULT_RULE_TIMEOUT_S``
while the command line starts, before the trace decodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from traceadvisor.errors import UsageError

if TYPE_CHECKING:
    from traceadvisor.engine.rule import Rule

# Seconds one rule may run on one trace (``rule-timeout``) before it is stopped and reported as an
# error: the built-in rules take well under a second on a 100 MB trace.
DEFAULT_RULE_TIMEOUT_S = 60.0


def claimed_by(rule_classes: Iterable[type[Rule[Any]]]) -> dict[str, str | None]:
    """Every idle cause → the name of the loaded rule that claims it (``None``: unclaimed), in the
    order of ``IdleCause``. Computed from the loaded rules, before ``--select``, so the report's
    idle section does not change with the rules a run selects. Two rules claiming one cause is a
    ``UsageError`` naming both (``registry.discover`` raises it at load)."""
    from traceadvisor.analyses.idle import IdleCause

    owners: dict[str, str | None] = {c.value: None for c in IdleCause}
    for cls in rule_classes:
        for cause in sorted(cls.claims):
            other = owners.get(cause.value)
            if other is not None:
                raise UsageError(f"idle cause {cause.value!r} is claimed by two rules: {other} and {cls.name}")
            owners[cause.value] = cls.name
    return owners
