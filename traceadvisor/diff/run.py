"""One side of a diff: a trace or a folder of ranks, loaded and analysed, with its per-step times."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from traceadvisor.config import Config
from traceadvisor.report.model import Report
from traceadvisor.trace.model import Trace
from traceadvisor.trace.reader import DEFAULT_MAX_INFLATED_BYTES


@dataclass(frozen=True)
class Run:
    """An analysed run: the report ``pipeline.analyze`` gives and the traces it was made from
    (one per rank), kept for the kernel and op tables and the per-step replays."""

    path: str
    report: Report
    traces: tuple[Trace, ...]

    @property
    def steps(self) -> int:
        """Profiled steps per rank (the fewest over the ranks; 0: a trace without steps)."""
        return min((len(t.steps.table) for t in self.traces), default=0)


def load_run(path: str | Path, config: Config | None = None, max_bytes: int = DEFAULT_MAX_INFLATED_BYTES) -> Run:
    """Load and analyse ``path`` (a trace file or a directory of rank traces) as ``analyze`` does.

    Raises ``TraceError`` for what is not a trace (the command turns it into one error line)."""
    from traceadvisor.pipeline import analyze_traces
    from traceadvisor.trace.load import load

    config = config or Config()
    traces = load([path], max_bytes=max_bytes, gpu=config.gpu)
    for t in traces:  # as pipeline.analyze: configured communication kernels before anything reads them
        t.communication_patterns = tuple(config.communication_kernels)
    return Run(path=str(path), report=analyze_traces(traces, config), traces=tuple(traces))
