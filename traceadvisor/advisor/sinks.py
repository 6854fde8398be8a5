"""Where reports go besides the user's callback: the console (stderr), Python logging and TensorBoard."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from traceadvisor.advisor.report import AdvisorReport
from traceadvisor.report.finding import Severity
from traceadvisor.report.safe_text import one_line

logger = logging.getLogger("traceadvisor")


def format_report(report: AdvisorReport) -> str:
    """A report as log lines: a summary line, then each finding with its fix and source line.

    Each piece is escaped (``one_line``): messages quote names from the trace, and a newline or an
    ESC sequence in one would forge log lines or drive the terminal a log handler writes to."""
    where = f" ({one_line(report.trace_path)})" if report.trace_path is not None else ""
    lines = [f"traceadvisor: {one_line(report.summary())}{where}"]
    config = report.report.config
    note = config.note() if config is not None else None
    if note is not None:  # the configuration file that applied, as analyze's report names it
        lines.append(f"  config: {one_line(note[0])} ({one_line(note[1])})")
    for f in report.findings:
        impact = ""
        if f.impact is not None:
            impact = f" ({f.impact.share_pct:.1f}% of the steps, {f.impact.time_us / 1000:.3f} ms)"
        lines.append(f"  [{f.severity.value}] {one_line(f.rule)} ({one_line(f.code)}){impact}: {one_line(f.message)}")
        lines.append(f"      fix: {one_line(f.recommendation)}")
        if f.location is not None:
            lines.append(f"      at: {one_line(f.location.where())}")
    for t in report.report.traces:
        lines.extend(f"  warning: {one_line(w)}" for w in t.warnings)
    lines.extend(f"  rule error: {one_line(e.rule)}: {one_line(e.error)}" for e in report.report.errors)
    return "\n".join(lines)


def log_report(report: AdvisorReport) -> None:
    """One record per report: WARNING when a medium or high finding is in it, else INFO.

    The report object rides along as ``record.traceadvisor_report`` for handlers that want it.
    """
    worst = report.worst_severity
    level = logging.WARNING if worst is not None and worst.rank >= Severity.medium.rank else logging.INFO
    logger.log(level, "%s", format_report(report), extra={"traceadvisor_report": report})


def deserves_console(report: AdvisorReport) -> bool:
    """A report with a medium or high finding: one the user must see whatever logging does."""
    worst = report.worst_severity
    return worst is not None and worst.rank >= Severity.medium.rank


class ConsoleSink:
    """The default sink: the run's first report and every later one with a medium or high finding
    are printed to stderr; the others go to logging (``log_report``).

    Why print: an unconfigured Python logging drops INFO records (a report without a medium or high
    finding) and prints WARNING ones bare through its last-resort handler, so a user who set up no
    logging saw nothing of a first report with only low findings. A printed report is also logged
    when logging has a handler for it (a log file keeps every report); without one it is not, since
    the last-resort handler would print it a second time. ``enabled=False`` (``Advisor(console=False)``)
    sends every report to logging only, as before.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.printed = 0
        self._first = True

    def __call__(self, report: AdvisorReport) -> None:
        first, self._first = self._first, False
        if not self.enabled or not (first or deserves_console(report)):
            log_report(report)
            return
        stream = sys.stderr
        if stream is not None:  # a process started with stderr closed
            stream.write(format_report(report) + "\n")
            stream.flush()
            self.printed += 1
        if logger.hasHandlers() or stream is None:
            log_report(report)


class TensorBoardSink:
    """Writes each report's metrics as scalars and the report as Markdown text.

    ``target`` is a ``SummaryWriter`` (used as is, not closed), a log directory, or ``True``
    (``<out_dir>/tensorboard``). The writer is created at the first report: torch is imported
    only then.
    """

    def __init__(self, target: Any, default_dir: Path) -> None:
        self._target = target
        self._default_dir = default_dir
        self._writer: Any = None
        self._owned = False

    def _get(self) -> Any:
        if self._writer is None:
            if self._target is True or isinstance(self._target, (str, Path)):
                from torch.utils.tensorboard import SummaryWriter

                log_dir = self._default_dir if self._target is True else Path(self._target)
                self._writer = SummaryWriter(log_dir=str(log_dir))
                self._owned = True
            else:
                self._writer = self._target
        return self._writer

    def __call__(self, report: AdvisorReport) -> None:
        writer = self._get()
        step = report.step if report.step is not None else report.cycle
        for key, value in report.metrics().items():
            writer.add_scalar(key, value, step)
        writer.add_text(f"traceadvisor/report/rank{report.rank}", report.render("markdown"), step)
        writer.flush()

    def close(self) -> None:
        if self._owned and self._writer is not None:
            self._writer.close()
        self._writer = None
