"""What the advisor hands to callbacks: one profiling cycle's report, with findings as objects."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceadvisor.report.finding import Finding, Severity
from traceadvisor.report.model import Report, StepSummary


def finding_from_dict(d: dict[str, Any]) -> Finding:
    """A ``Finding`` back from its JSON form (``Finding.from_dict``; kept for callers of 0.1)."""
    return Finding.from_dict(d)


@dataclass(frozen=True)
class AdvisorReport:
    """The analysis of one profiling cycle of one rank.

    ``report`` is the typed report (``traceadvisor.report.model.Report``); ``findings`` are its
    ``traceadvisor.Finding`` objects ranked by impact (``.rule``, ``.code``, ``.severity``,
    ``.message``, ``.recommendation``, ``.impact``, ``.location``, ``.evidence``); ``to_dict()`` is
    the JSON report that ``traceadvisor analyze --format json`` prints for the same trace file.
    """

    cycle: int
    rank: int
    step: int | None  # the profiler step at which the cycle's window closed
    trace_path: Path | None  # None when the trace was not kept (keep_traces=False)
    report: Report = field(repr=False)
    timings: dict[str, float] = field(default_factory=dict)
    html_path: Path | None = None  # the cycle's HTML report (``Advisor(html=True)``)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.report.findings

    @classmethod
    def from_document(
        cls,
        document: dict[str, Any],
        *,
        cycle: int,
        rank: int,
        step: int | None,
        trace_path: Path | None,
        timings: dict[str, float] | None = None,
        html_path: Path | None = None,
    ) -> AdvisorReport:
        """The report of a cycle from its JSON form, as the worker sends it (``Report.to_dict``)."""
        return cls(cycle, rank, step, trace_path, Report.from_dict(document), dict(timings or {}), html_path)

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (schema in the README), a new dict the caller may change: what
        ``analyze --format json`` prints, times in µs written to the nanosecond as there."""
        from traceadvisor.report.render_json import round_times

        doc: dict[str, Any] = round_times(self.report.to_dict())
        return doc

    @property
    def worst_severity(self) -> Severity | None:
        return max((f.severity for f in self.findings), key=lambda s: s.rank, default=None)

    def at_least(self, severity: Severity | str) -> list[Finding]:
        """The findings at or above ``severity``."""
        floor = Severity(severity).rank
        return [f for f in self.findings if f.severity.rank >= floor]

    @property
    def steps(self) -> list[StepSummary]:
        """The profiler steps of the analysed trace(s)."""
        return [s for t in self.report.traces for s in t.steps]

    def metrics(self, prefix: str = "traceadvisor/") -> dict[str, float]:
        """Numbers for metric loggers (TensorBoard, Lightning, Hugging Face): counts, step time, impacts."""
        m: dict[str, float] = {f"{prefix}findings": float(len(self.findings))}
        for sev in Severity:
            m[f"{prefix}findings_{sev.value}"] = float(sum(f.severity is sev for f in self.findings))
        cpu_steps = [s.cpu_dur_us for s in self.steps]
        if cpu_steps:
            m[f"{prefix}step_ms"] = statistics.median(cpu_steps) / 1000.0
        gpu = [t for t in self.report.traces if t.platform != "cpu"]
        if gpu:
            m[f"{prefix}gpu_busy_pct"] = statistics.fmean(float(t.gpu_busy_pct) for t in gpu)
        for f in self.findings:
            if f.impact is not None:
                key = f"{prefix}impact_pct/{f.rule}"
                m[key] = m.get(key, 0.0) + f.impact.share_pct
        if "analysis_s" in self.timings:
            m[f"{prefix}analysis_s"] = self.timings["analysis_s"]
        return m

    def render(self, fmt: str = "text") -> str:
        """The report as ``analyze`` renders it: ``text`` (plain) or ``markdown``. The HTML page
        needs the trace's timeline, which stays in the worker: ``Advisor(html=True)`` writes it
        there (``html_path``)."""
        if fmt not in ("text", "markdown"):
            raise ValueError(f"unknown report format {fmt!r}: text or markdown")
        from traceadvisor.report import render

        return render(self.report, fmt).decode()

    def summary(self) -> str:
        """One line: which cycle, how many findings of each severity, the top one."""
        counts = ", ".join(
            f"{n} {sev.value}" for sev in reversed(Severity) if (n := sum(f.severity is sev for f in self.findings))
        )
        head = f"cycle {self.cycle}, rank {self.rank}"
        steps = self.steps
        if steps:
            head += f", steps {steps[0].step}-{steps[-1].step}"
        what = f"{len(self.findings)} finding{'s' * (len(self.findings) != 1)}" + (f" ({counts})" if counts else "")
        top = f"; top: [{self.findings[0].severity.value}] {self.findings[0].rule}" if self.findings else ""
        return f"{head}: {what}{top}"
