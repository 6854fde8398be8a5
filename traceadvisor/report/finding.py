"""Findings and what they carry: evidence, impact, source location. Plain frozen data."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from numbers import Integral, Real
from typing import Any


class Severity(StrEnum):
    """How much a finding matters; by default it follows the time at stake (see ``Thresholds``)."""

    low = "low"
    medium = "medium"
    high = "high"

    @property
    def rank(self) -> int:
        return ("low", "medium", "high").index(self.value)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Severity from impact: high at ≥ ``high_pct`` of the step time, medium at ≥ ``medium_pct``."""

    high_pct: float = 10.0
    medium_pct: float = 2.0

    def severity(self, share_pct: float) -> Severity:
        if share_pct >= self.high_pct:
            return Severity.high
        if share_pct >= self.medium_pct:
            return Severity.medium
        return Severity.low


@dataclass(frozen=True, slots=True)
class Evidence:
    """One event that shows the problem."""

    name: str
    ts_us: float
    dur_us: float
    stream: int | None = None
    correlation: int | None = None
    category: str | None = None


@dataclass(frozen=True, slots=True)
class Impact:
    """Estimated recoverable time, its share of the step time, and how it was computed.

    From a what-if replay (``scenario`` set): ``saving_per_step_us`` is the predicted unprofiled
    step before the fix minus after it, ``share_pct`` that over the predicted unprofiled step, and
    ``time_us`` the saving over the analysed steps. Otherwise (a rule's own estimate) ``time_us`` is
    over the analysed steps and ``share_pct`` its share of their profiled time.

    ``likely_low_per_step_us``/``likely_high_per_step_us``: a replayed saving's likely range per
    step (``whatif.saving_range``: how far the GPU pairs' measured savings moved around the
    replay's prediction); None for a rule's own estimate.

    ``step_basis`` names the step a per-step saving's share is of, in words for the report:
    ``predicted unprofiled`` (a replay's), ``measured unprofiled`` (timed by capture or the advisor
    with the profiler off), ``profiled`` (a cross-rank rule's mean rank step)."""

    time_us: float
    share_pct: float
    basis: str
    saving_per_step_us: float | None = None
    scenario: str | None = None
    step_basis: str | None = None
    likely_low_per_step_us: float | None = None
    likely_high_per_step_us: float | None = None


# What a location's line is. ``exact``: the line itself (a rule or a capture that knows it). From
# a profiler frame (``with_stack``): ``function_start``, the first line of the function (the
# profiler names a frame called while tracing by its first line, not by the line inside it that
# ran the work), or ``trace_start``, the line the frame was at when profiling began (a frame
# already on the stack then, e.g. top-level script code).
LINE_KINDS = ("exact", "function_start", "trace_start")


@dataclass(frozen=True, slots=True)
class Location:
    """A user source location (the innermost frame of the user's code, outside every library)."""

    file: str
    line: int
    function: str
    line_kind: str = "exact"  # one of LINE_KINDS

    def where(self) -> str:
        """The location in words, saying what its line is: ``train.py:42 in step``, ``step (defined
        at train.py:30)``, or ``<module> (at train.py:12 when profiling began)``."""
        if self.line_kind == "function_start":
            return f"{self.function} (defined at {self.file}:{self.line})"
        if self.line_kind == "trace_start":
            return f"{self.function} (at {self.file}:{self.line} when profiling began)"
        return f"{self.file}:{self.line} in {self.function}"


@dataclass(frozen=True, slots=True)
class Finding:
    """What a rule observed, where, what it costs, and the change to make."""

    code: str
    rule: str
    severity: Severity
    message: str
    recommendation: str
    impact: Impact | None = None
    location: Location | None = None
    evidence: tuple[Evidence, ...] = ()
    trace: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    # The ranks the finding is about in a multi-rank report (empty: a single trace). A single-rank
    # finding that holds on several ranks is reported once with all of them (``ranks/merge.py``).
    ranks: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The finding as in the JSON report."""
        return {
            "code": self.code,
            "rule": self.rule,
            "severity": self.severity.value,
            "message": self.message,
            "recommendation": self.recommendation,
            "impact": asdict(self.impact) if self.impact else None,
            "location": asdict(self.location) if self.location else None,
            "evidence": [asdict(e) for e in self.evidence],
            "trace": self.trace,
            "data": dict(self.data),
            "ranks": list(self.ranks),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        """A finding back from ``to_dict``'s form (the advisor's worker pipe)."""
        impact, location = d.get("impact"), d.get("location")
        return cls(
            code=str(d.get("code", "")),
            rule=str(d.get("rule", "")),
            severity=Severity(d.get("severity", "low")),
            message=str(d.get("message", "")),
            recommendation=str(d.get("recommendation", "")),
            impact=Impact(**impact) if isinstance(impact, Mapping) else None,
            location=Location(**location) if isinstance(location, Mapping) else None,
            evidence=tuple(Evidence(**e) for e in d.get("evidence") or ()),
            trace=str(d.get("trace", "")),
            data=dict(d.get("data") or {}),
            ranks=tuple(int(r) for r in d.get("ranks") or ()),
        )


def problem_with(f: Finding) -> str | None:
    """What is wrong with a finding (``None``: nothing). A dataclass does not check its field types,
    and a rule may build a ``Finding`` by hand: a wrong type would break the ranking or a renderer
    after every rule has run, losing the whole report, so the runner checks each one as it comes."""
    for name in ("code", "rule", "message", "recommendation", "trace"):
        if not isinstance(getattr(f, name), str):
            return _wrong(f"finding {name}", "a str", getattr(f, name))
    if not isinstance(f.severity, Severity):
        return _wrong("finding severity", "a Severity (e.g. Severity.high)", f.severity)
    if f.impact is not None:
        if not isinstance(f.impact, Impact):
            return _wrong("finding impact", "an Impact or None", f.impact)
        problem = _fields(f.impact, "impact", real=("time_us", "share_pct"), text=("basis",))
        if problem:
            return problem
    if f.location is not None:
        if not isinstance(f.location, Location):
            return _wrong("finding location", "a Location or None", f.location)
        problem = _fields(f.location, "location", integer=("line",), text=("file", "function", "line_kind"))
        if problem:
            return problem
        if f.location.line_kind not in LINE_KINDS:
            return _wrong("finding location line_kind", f"one of {', '.join(LINE_KINDS)}", f.location.line_kind)
    if not isinstance(f.ranks, tuple) or not all(isinstance(r, int) and not isinstance(r, bool) for r in f.ranks):
        return _wrong("finding ranks", "a tuple of int", f.ranks)
    if not isinstance(f.evidence, tuple):
        return _wrong("finding evidence", "a tuple of Evidence", f.evidence)
    for e in f.evidence:
        if not isinstance(e, Evidence):
            return _wrong("finding evidence item", "an Evidence", e)
        problem = _fields(
            e,
            "evidence",
            real=("ts_us", "dur_us"),
            text=("name",),
            optional_integer=("stream", "correlation"),
            optional_text=("category",),
        )
        if problem:
            return problem
    if not isinstance(f.data, dict):
        return _wrong("finding data", "a dict", f.data)
    return None


def _fields(
    obj: object,
    what: str,
    *,
    real: tuple[str, ...] = (),
    integer: tuple[str, ...] = (),
    text: tuple[str, ...] = (),
    optional_integer: tuple[str, ...] = (),
    optional_text: tuple[str, ...] = (),
) -> str | None:
    """The first field of ``obj`` of the wrong type, described (``bool`` is no number here)."""
    checks: list[tuple[tuple[str, ...], str, Callable[[object], bool]]] = [
        (real, "a number", _is_number),
        (integer, "an int", _is_int),
        (text, "a str", lambda v: isinstance(v, str)),
        (optional_integer, "an int or None", lambda v: v is None or _is_int(v)),
        (optional_text, "a str or None", lambda v: v is None or isinstance(v, str)),
    ]
    for names, expected, ok in checks:
        for name in names:
            value = getattr(obj, name)
            if not ok(value):
                return _wrong(f"{what} {name}", expected, value)
    return None


def _is_number(v: object) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool)


def _is_int(v: object) -> bool:
    return isinstance(v, Integral) and not isinstance(v, bool)


def _wrong(what: str, expected: str, value: object) -> str:
    try:
        shown = repr(value)
    except Exception:  # a rule's own object; its __repr__ may fail too
        shown = "(no repr)"
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{what} must be {expected}, not {type(value).__name__} {shown}"
