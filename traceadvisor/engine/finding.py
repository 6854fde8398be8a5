"""Findings and what they carry: evidence, impact, source location. Plain frozen data."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
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
    """Estimated recoverable time, its share of the analysed step time, and how it was computed."""

    time_us: float
    share_pct: float
    basis: str


@dataclass(frozen=True, slots=True)
class Location:
    """A user source line (the first frame outside torch and site-packages)."""

    file: str
    line: int
    function: str


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
        }
