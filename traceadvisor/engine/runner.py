"""Select rules, check what each needs, run each in isolation, rank the findings.

Isolation (``isolation.py``): each ``check`` runs, and what it yields is checked, inside one guard
under a time limit, with its ``print`` sent to stderr and a read-only view of the trace; whatever
goes wrong there (an exception, ``sys.exit``, a bad finding, the time limit) becomes that rule's
error record, with none of its findings, and the next rule runs. Only a real Ctrl-C
(``KeyboardInterrupt``) and ``cancel`` stop the run.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, cast

from traceadvisor.engine import DEFAULT_RULE_TIMEOUT_S, claimed_by
from traceadvisor.engine.isolation import Interrupter, RuleInterrupted, read_only, stdout_to_stderr
from traceadvisor.engine.registry import RuleSource
from traceadvisor.engine.rule import AnyRule, Capability, RankRule
from traceadvisor.errors import Cancelled, UsageError, raise_if_cancelled
from traceadvisor.report.finding import Finding, Severity, Thresholds, problem_with
from traceadvisor.report.model import RuleError, Skipped
from traceadvisor.trace.model import Trace

if TYPE_CHECKING:
    from traceadvisor.ranks.combine import RankRun


@dataclass
class RunResult:
    """Findings (ranked by impact), rules skipped with the reason, and rules that raised."""

    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    errors: list[RuleError] = field(default_factory=list)


class RuleChoice(Protocol):
    """What ``select`` and ``instantiate`` read of a run's configuration: ``traceadvisor.config.Config``
    has these fields (the engine sits below the configuration file's module and does not import it)."""

    @property
    def select(self) -> Sequence[str]: ...
    @property
    def ignore(self) -> Sequence[str]: ...
    @property
    def rule_options(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def severity(self) -> Mapping[str, Severity]: ...
    @property
    def thresholds(self) -> Thresholds: ...


def matches(cls: type[AnyRule], selector: str) -> bool:
    """A selector is a code (``GK101``), a code prefix (``GK``, ``GK1``), a name, or ``ALL``."""
    return selector == "ALL" or selector == cls.name or cls.code.startswith(selector)


def select(sources: Sequence[RuleSource], config: RuleChoice) -> list[type[AnyRule]]:
    """The rules a run uses: ``select`` (default all) minus ``ignore``; unknown selectors are errors."""
    classes = [s.cls for s in sources]
    for sel in [*config.select, *config.ignore]:
        if not any(matches(c, sel) for c in classes):
            raise UsageError(f"no rule matches {sel!r} (see 'traceadvisor rules')")
    chosen = [c for c in classes if not config.select or any(matches(c, s) for s in config.select)]
    return [c for c in chosen if not any(matches(c, s) for s in config.ignore)]


def instantiate(
    classes: Sequence[type[AnyRule]], config: RuleChoice, claims: Mapping[str, str | None] | None = None
) -> list[AnyRule]:
    """Rules with their configured options and severity overrides. ``claims``: the idle causes'
    claimants among all loaded rules (``registry.claims_of(discover(...))``), before selection;
    default: among ``classes``."""
    owners = dict(claims) if claims is not None else claimed_by(classes)
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
        rules.append(cls(options, config.thresholds, override, owners))
    return rules


def run(
    rules: Sequence[AnyRule],
    traces: Sequence[Trace],
    *,
    capabilities: Sequence[set[Capability]],
    rule_timeout_s: float | None = DEFAULT_RULE_TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Run every rule on every trace; ``capabilities[i]`` is what ``traces[i]`` offers
    (``rule.trace_capabilities``, computed by the caller, which knows the roofline's peaks). A rule
    whose ``requires`` it lacks is skipped with the reason. A rule that fails, or runs past ``rule_timeout_s`` seconds
    (``None``: no limit), becomes an error record. ``cancel`` set (by another thread) raises
    ``Cancelled`` before the next rule, or in the current one as its time limit would."""
    if len(capabilities) != len(traces):
        raise ValueError(f"{len(traces)} traces but {len(capabilities)} capability sets")
    result = RunResult()
    with Interrupter(cancel) as stop, stdout_to_stderr():
        for trace, caps in zip(traces, capabilities, strict=True):
            for rule in rules:
                if isinstance(rule, RankRule):  # runs once on the combined ranks (run_rank_rules)
                    continue
                raise_if_cancelled(cancel)
                missing = sorted((c for c in type(rule).requires if c not in caps), key=lambda c: c.value)
                if missing:
                    result.skipped.append(Skipped(rule.name, rule.code, trace.path, _reason(missing)))
                    continue
                found, error = run_rule(rule, trace, stop, rule_timeout_s)
                if error is not None:
                    result.errors.append(RuleError(rule.name, rule.code, trace.path, error))
                result.findings.extend(found)
    result.findings.sort(key=lambda f: (-(f.impact.time_us if f.impact else 0.0), -f.severity.rank, f.code))
    return result


def run_rule(rule: AnyRule, trace: Trace, stop: Interrupter, limit_s: float | None) -> tuple[list[Finding], str | None]:
    """One rule's findings on one trace, or none and what went wrong."""
    view = cast(Trace, read_only(trace))
    return _guarded(rule, lambda: rule.check(view), stop, limit_s)


def _guarded(
    rule: AnyRule, findings: Callable[[], Iterable[object]], stop: Interrupter, limit_s: float | None
) -> tuple[list[Finding], str | None]:
    """The one guard every rule runs under (per trace and across ranks): the generator is consumed,
    and each finding checked, inside it, since a rule's code runs lazily between yields. A failure
    or a timeout becomes what went wrong; a cancel or Ctrl-C ends the run."""
    watch = stop.watch(limit_s)
    try:
        with watch:
            found = [_checked(obj) for obj in findings()]
    except RuleInterrupted as exc:
        if watch.reason == "cancelled":
            raise Cancelled("analysis cancelled") from None
        if watch.reason == "timeout":
            return [], f"timed out after {limit_s:g} s{_where(exc, rule)}"
        return [], _describe(exc, rule)  # raised by the rule itself
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit, GeneratorExit and the like too: a rule must not end the run
        return [], _describe(exc, rule)
    return found, None


def run_rank_rules(
    rules: Sequence[AnyRule],
    run: RankRun,
    *,
    rule_timeout_s: float | None = DEFAULT_RULE_TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Run the cross-rank rules (``RankRule``) once on the combined ranks of one run, guarded like
    the per-trace rules (a failure or a timeout becomes an error record, trace ``ranks``)."""
    result = RunResult()
    with Interrupter(cancel) as stop, stdout_to_stderr():
        for rule in rules:
            if not isinstance(rule, RankRule):
                continue
            raise_if_cancelled(cancel)
            found, why = _guarded(rule, partial(rule.check_ranks, run), stop, rule_timeout_s)
            if why is not None:
                result.errors.append(RuleError(rule.name, rule.code, "ranks", why))
            result.findings.extend(found)
    return result


class InvalidFinding(Exception):
    """A rule yielded something that is not a well-formed, JSON-encodable ``Finding``."""


def _checked(obj: object) -> Finding:
    from traceadvisor.report.render_json import encode

    if not isinstance(obj, Finding):
        raise InvalidFinding(f"check() yielded {type(obj).__name__}, not a Finding")
    problem = problem_with(obj)
    if problem is not None:
        raise InvalidFinding(problem)
    try:
        encode(obj.to_dict())
    except (TypeError, ValueError, OverflowError, NotImplementedError) as exc:
        raise InvalidFinding(f"finding data is not JSON-encodable ({exc})") from None
    return obj


def _describe(exc: BaseException, rule: AnyRule) -> str:
    if isinstance(exc, InvalidFinding):
        return f"invalid finding: {exc}"
    text = str(exc)
    return f"{type(exc).__name__}{': ' + text if text else ''}{_where(exc, rule)}"


def _where(exc: BaseException, rule: AnyRule) -> str:
    """`` (file:line)`` of the innermost frame in the rule's own file, else of the innermost frame
    outside the isolation machinery (a signal handler is the last frame of a timeout)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.endswith("isolation.py")]
    module = sys.modules.get(type(rule).__module__)
    own = getattr(module, "__file__", None)
    mine = [f for f in frames if f.filename == own] or frames
    return f" ({mine[-1].filename.rsplit('/', 1)[-1]}:{mine[-1].lineno})" if mine else ""


def _reason(missing: list[Capability]) -> str:
    what = ", ".join(c.value for c in missing)
    how = "; ".join(c.how_to_capture for c in missing)
    return f"trace lacks {what}: {how}"
