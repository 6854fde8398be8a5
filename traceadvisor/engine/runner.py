"""Select rules, check what each needs, run each in isolation, rank the findings."""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field

from traceadvisor.engine.config import Config
from traceadvisor.engine.finding import Finding
from traceadvisor.engine.registry import RuleSource
from traceadvisor.engine.rule import Capability, Rule, trace_capabilities
from traceadvisor.errors import UsageError
from traceadvisor.trace.model import Trace


@dataclass
class RunResult:
    """Findings (ranked by impact), rules skipped with the reason, and rules that raised."""

    findings: list[Finding] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)


def matches(cls: type[Rule], selector: str) -> bool:
    """A selector is a code (``GK101``), a code prefix (``GK``, ``GK1``), a name, or ``ALL``."""
    return selector == "ALL" or selector == cls.name or cls.code.startswith(selector)


def select(sources: Sequence[RuleSource], config: Config) -> list[type[Rule]]:
    """The rules a run uses: ``select`` (default all) minus ``ignore``; unknown selectors are errors."""
    classes = [s.cls for s in sources]
    for sel in [*config.select, *config.ignore]:
        if not any(matches(c, sel) for c in classes):
            raise UsageError(f"no rule matches {sel!r} (see 'traceadvisor rules')")
    chosen = [c for c in classes if not config.select or any(matches(c, s) for s in config.select)]
    return [c for c in chosen if not any(matches(c, s) for s in config.ignore)]


def instantiate(classes: Sequence[type[Rule]], config: Config) -> list[Rule]:
    """Rules with their configured options and severity overrides."""
    known = {k for c in classes for k in (c.code, c.name)}
    for key in [*config.rule_options, *config.severity]:
        if key not in known and not any(key in (c.code, c.name) for c in classes):
            raise UsageError(f"configuration names unknown rule {key!r}")
    rules = []
    for cls in classes:
        values = {**config.rule_options.get(cls.code, {}), **config.rule_options.get(cls.name, {})}
        try:
            options = cls.make_options(values)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        override = config.severity.get(cls.code) or config.severity.get(cls.name)
        rules.append(cls(options, config.thresholds, override))
    return rules


def run(rules: Sequence[Rule], traces: Sequence[Trace]) -> RunResult:
    """Run every rule on every trace; a rule that raises becomes an error record."""
    result = RunResult()
    for trace in traces:
        caps = trace_capabilities(trace, rank_count=len(traces))
        for rule in rules:
            missing = sorted((c for c in type(rule).requires if c not in caps), key=lambda c: c.value)
            if missing:
                result.skipped.append(
                    {
                        "rule": rule.name,
                        "code": rule.code,
                        "trace": trace.path,
                        "reason": _reason(missing),
                    }
                )
                continue
            try:
                result.findings.extend(rule.check(trace))
            except Exception as exc:
                frame = traceback.extract_tb(exc.__traceback__)[-1]
                result.errors.append(
                    {
                        "rule": rule.name,
                        "code": rule.code,
                        "trace": trace.path,
                        "error": f"{type(exc).__name__}: {exc} ({frame.filename.split('/')[-1]}:{frame.lineno})",
                    }
                )
    result.findings.sort(key=lambda f: (-(f.impact.time_us if f.impact else 0.0), -f.severity.rank, f.code))
    return result


def _reason(missing: list[Capability]) -> str:
    what = ", ".join(c.value for c in missing)
    how = "; ".join(c.how_to_capture for c in missing)
    return f"trace lacks {what}: {how}"
