"""What the advisor hands to callbacks: one profiling cycle's report, with findings as objects."""

from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceadvisor.pipeline import Report
from traceadvisor.report.finding import Evidence, Finding, Impact, Location, Severity


def finding_from_dict(d: dict[str, Any]) -> Finding:
    """A ``Finding`` back from its JSON form (``Finding.to_dict``)."""
    impact = d.get("impact")
    location = d.get("location")
    return Finding(
        code=str(d.get("code", "")),
        rule=str(d.get("rule", "")),
        severity=Severity(d.get("severity", "low")),
        message=str(d.get("message", "")),
        recommendation=str(d.get("recommendation", "")),
        impact=Impact(**impact) if isinstance(impact, dict) else None,
        location=Location(**location) if isinstance(location, dict) else None,
        evidence=tuple(Evidence(**e) for e in d.get("evidence") or ()),
        trace=str(d.get("trace", "")),
        data=dict(d.get("data") or {}),
    )


@dataclass(frozen=True)
class AdvisorReport:
    """The analysis of one profiling cycle of one rank.

    ``findings`` are ``traceadvisor.Finding`` objects ranked by impact (``.rule``, ``.code``,
    ``.severity``, ``.message``, ``.recommendation``, ``.impact``, ``.location``, ``.evidence``);
    ``to_dict()`` is the JSON report that ``traceadvisor analyze --format json`` prints for the
    same trace file.
    """

    cycle: int
    rank: int
    step: int | None  # the profiler step at which the cycle's window closed
    trace_path: Path | None  # None when the trace was not kept (keep_traces=False)
    findings: tuple[Finding, ...]
    document: dict[str, Any] = field(repr=False)
    timings: dict[str, float] = field(default_factory=dict)

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
    ) -> AdvisorReport:
        findings = tuple(finding_from_dict(f) for f in document.get("findings", []))
        return cls(cycle, rank, step, trace_path, findings, document, dict(timings or {}))

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (schema in the README), a copy the caller may change."""
        return copy.deepcopy(self.document)

    @property
    def worst_severity(self) -> Severity | None:
        return max((f.severity for f in self.findings), key=lambda s: s.rank, default=None)

    def at_least(self, severity: Severity | str) -> list[Finding]:
        """The findings at or above ``severity``."""
        floor = Severity(severity).rank
        return [f for f in self.findings if f.severity.rank >= floor]

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The profiler steps of the analysed trace(s), as in the JSON report."""
        return [s for t in self.document.get("traces", []) for s in t.get("steps", [])]

    def metrics(self, prefix: str = "traceadvisor/") -> dict[str, float]:
        """Numbers for metric loggers (TensorBoard, Lightning, Hugging Face): counts, step time, impacts."""
        m: dict[str, float] = {f"{prefix}findings": float(len(self.findings))}
        for sev in Severity:
            m[f"{prefix}findings_{sev.value}"] = float(sum(f.severity is sev for f in self.findings))
        cpu_steps = [s["cpu_dur_us"] for s in self.steps if isinstance(s.get("cpu_dur_us"), (int, float))]
        if cpu_steps:
            m[f"{prefix}step_ms"] = statistics.median(cpu_steps) / 1000.0
        gpu = [t for t in self.document.get("traces", []) if t.get("platform") != "cpu"]
        if gpu:
            m[f"{prefix}gpu_busy_pct"] = statistics.fmean(float(t.get("gpu_busy_pct", 0.0)) for t in gpu)
        for f in self.findings:
            if f.impact is not None:
                key = f"{prefix}impact_pct/{f.rule}"
                m[key] = m.get(key, 0.0) + f.impact.share_pct
        if "analysis_s" in self.timings:
            m[f"{prefix}analysis_s"] = self.timings["analysis_s"]
        return m

    def render(self, fmt: str = "text") -> str:
        """The report as ``analyze`` renders it: ``text`` (plain) or ``markdown``."""
        report = Report(
            traces=self.document.get("traces", []),
            findings=self.document.get("findings", []),
            skipped=self.document.get("skipped", []),
            errors=self.document.get("errors", []),
            config=self.document.get("config"),
        )
        if fmt == "markdown":
            from traceadvisor.report.render_markdown import render as render_markdown

            return render_markdown(report)
        if fmt == "text":
            from traceadvisor.report.render_text import render as render_text

            return render_text(report)
        raise ValueError(f"unknown report format {fmt!r}: text or markdown")

    def summary(self) -> str:
        """One line: which cycle, how many findings of each severity, the top one."""
        counts = ", ".join(
            f"{n} {sev.value}" for sev in reversed(Severity) if (n := sum(f.severity is sev for f in self.findings))
        )
        head = f"cycle {self.cycle}, rank {self.rank}"
        steps = self.steps
        if steps:
            head += f", steps {steps[0]['step']}-{steps[-1]['step']}"
        what = f"{len(self.findings)} finding{'s' * (len(self.findings) != 1)}" + (f" ({counts})" if counts else "")
        top = f"; top: [{self.findings[0].severity.value}] {self.findings[0].rule}" if self.findings else ""
        return f"{head}: {what}{top}"
