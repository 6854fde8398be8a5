"""Findings of two runs matched: resolved, new, better, worse, unchanged.

A finding is matched on its rule code and where it is: its user source location, else its first
evidence name (normalised). A fix often moves the code (the after-script's function has another
line), so a finding left unmatched on both sides whose code is the only one of its kind left on
each side is matched on the code alone. Its size is the time it costs per step: the what-if
saving per step where the rule gave one (``impact.saving_per_step_us``), else its time over the
analysed steps divided by the steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceadvisor.diff.names import normalise
from traceadvisor.report.finding import Finding

# better or worse: the cost per step moved by more than 10 % (the replay's own error on our
# fixtures is a few %, report ``replay_error_pct``)
CHANGE = 0.10
STATUSES = ("resolved", "new", "worse", "better", "unchanged")


@dataclass(frozen=True, slots=True)
class FindingChange:
    status: str  # one of STATUSES
    code: str
    rule: str
    where: str
    severity_before: str | None
    severity_after: str | None
    cost_before_ns: float | None  # per step; None: no finding on that side, or no impact
    cost_after_ns: float | None
    message: str  # the AFTER finding's message (BEFORE's when resolved)


def where(f: Finding) -> str:
    if f.location is not None:
        return f.location.where()
    if f.evidence:
        return normalise(f.evidence[0].name)
    return ""


def cost_ns(f: Finding, steps: int) -> float | None:
    if f.impact is None:
        return None
    if f.impact.saving_per_step_us is not None:
        return f.impact.saving_per_step_us * 1000
    return f.impact.time_us * 1000 / max(steps, 1)


def _status(b: float | None, a: float | None) -> str:
    if b is None or a is None or b <= 0:
        return "unchanged" if b == a or b is None or a is None else "worse"
    if a > b * (1 + CHANGE):
        return "worse"
    if a < b * (1 - CHANGE):
        return "better"
    return "unchanged"


def _change(status: str, b: Finding | None, a: Finding | None, b_steps: int, a_steps: int) -> FindingChange:
    f = a if a is not None else b
    assert f is not None
    return FindingChange(
        status=status,
        code=f.code,
        rule=f.rule,
        where=where(f),
        severity_before=b.severity.value if b is not None else None,
        severity_after=a.severity.value if a is not None else None,
        cost_before_ns=cost_ns(b, b_steps) if b is not None else None,
        cost_after_ns=cost_ns(a, a_steps) if a is not None else None,
        message=f.message,
    )


def compare_findings(
    before: tuple[Finding, ...], after: tuple[Finding, ...], b_steps: int, a_steps: int
) -> tuple[FindingChange, ...]:
    left = list(before)
    right = list(after)
    pairs: list[tuple[Finding, Finding]] = []
    for f in list(left):  # exact: code and place
        hit = next((g for g in right if g.code == f.code and where(g) == where(f)), None)
        if hit is not None:
            pairs.append((f, hit))
            left.remove(f)
            right.remove(hit)
    for f in list(left):  # the only one of its code left on both sides: the code moved
        same_b = [x for x in left if x.code == f.code]
        same_a = [x for x in right if x.code == f.code]
        if len(same_b) == 1 and len(same_a) == 1:
            pairs.append((f, same_a[0]))
            left.remove(f)
            right.remove(same_a[0])
    out = [_change("resolved", f, None, b_steps, a_steps) for f in left]
    out += [_change("new", None, f, b_steps, a_steps) for f in right]
    for b, a in pairs:
        out.append(_change(_status(cost_ns(b, b_steps), cost_ns(a, a_steps)), b, a, b_steps, a_steps))
    out.sort(key=lambda c: (STATUSES.index(c.status), c.code, c.where))
    return tuple(out)
