"""The analysis pipeline: load traces, summarise them, run the rules, collect one report."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceadvisor.engine.config import Config
from traceadvisor.errors import raise_if_cancelled
from traceadvisor.trace.load import load
from traceadvisor.trace.reader import DEFAULT_MAX_INFLATED_BYTES

if TYPE_CHECKING:  # the rule engine (and pandas with it) is imported while the trace decodes
    from traceadvisor.engine.rule import Rule
    from traceadvisor.trace.model import Trace

SCHEMA_VERSION = 1
SEVERITIES = ("low", "medium", "high")


@dataclass
class Report:
    """Everything ``analyze`` found; ``to_dict`` is the versioned JSON report."""

    traces: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    # Which configuration file applied and whether its rules-dir ran (``ConfigOrigin.to_dict``).
    config: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        from traceadvisor import __version__

        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "traceadvisor", "version": __version__},
            "traces": self.traces,
            "findings": self.findings,
            "skipped": self.skipped,
            "errors": self.errors,
            "config": self.config,
        }

    def worst_severity(self) -> str | None:
        ranks = [SEVERITIES.index(f["severity"]) for f in self.findings if f.get("severity") in SEVERITIES]
        return SEVERITIES[max(ranks)] if ranks else None


def analyze_traces(
    traces: list[Trace],
    config: Config | None = None,
    rules: list[Rule] | None = None,
    cancel: threading.Event | None = None,
) -> Report:
    """Summarise loaded traces and run the rules on them (``cancel``: as ``analyze``)."""
    from traceadvisor.engine.runner import run
    from traceadvisor.report.summary import summarize

    config = config or Config()
    if rules is None:
        rules = _configured_rules(config)
    report = Report(config=config.origin.to_dict())
    for t in traces:
        raise_if_cancelled(cancel)
        t.gpu_config = config.gpu  # the roofline's peaks: [tool.traceadvisor.gpu]
        report.traces.append(summarize(t))
    result = run(rules, traces, rule_timeout_s=config.rule_timeout, cancel=cancel)
    report.findings = [f.to_dict() for f in result.findings]
    report.skipped = result.skipped
    report.errors = result.errors
    return report


def analyze(
    paths: Iterable[str | Path],
    config: Config | None = None,
    max_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    cancel: threading.Event | None = None,
) -> Report:
    """Load and analyse trace files (or directories of them).

    ``cancel``, set from another thread, stops the analysis with ``Cancelled``: checked after
    each trace loads, before each summary and each rule, and every 50 ms while a rule runs (the
    rule is interrupted as its time limit would). A single long C call (decoding one file, one
    pandas operation) finishes first."""
    config = config or Config()
    rules: list[Rule] = []

    def prepare_rules() -> None:
        # Runs before any event is decoded (configuration errors come first), overlapped with the
        # decoding in a second process where the trace is large enough (trace/parallel.py).
        rules.extend(_configured_rules(config))

    with _cyclic_gc_paused():
        traces = load(
            list(paths), max_bytes=max_bytes, meanwhile=prepare_rules, after_each=lambda: raise_if_cancelled(cancel)
        )
        return analyze_traces(traces, config, rules, cancel)


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for one analysis. Importing pandas and building the
    tables allocate hundreds of thousands of container objects, which trigger full collections
    that walk every object of pandas' module graph, finding no cycles worth it: 5 % of an analysis
    of a 100 MB trace (bench/RESULTS.md). Reference counting still frees everything acyclic; the
    collector is restored (and catches up) afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _configured_rules(config: Config) -> list[Rule]:
    from traceadvisor.engine.registry import discover
    from traceadvisor.engine.runner import instantiate, select

    return instantiate(select(discover(config.rules_dirs), config), config)
