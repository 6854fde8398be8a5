"""The analysis pipeline: load traces, summarise them, run the rules, collect one report."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from traceadvisor import roofline
from traceadvisor.config import Config, ConfigOrigin
from traceadvisor.errors import raise_if_cancelled
from traceadvisor.report.model import ConfigInfo, MeasuredSteps, Report, TraceSummary
from traceadvisor.trace.load import load
from traceadvisor.trace.reader import DEFAULT_MAX_INFLATED_BYTES

if TYPE_CHECKING:  # the rule engine (and pandas with it) is imported while the trace decodes
    from traceadvisor.engine.rule import AnyRule, Capability
    from traceadvisor.ranks.summary import RankSummary
    from traceadvisor.report.finding import Finding
    from traceadvisor.trace.model import Trace


def analyze_traces(
    traces: list[Trace],
    config: Config | None = None,
    rules: list[AnyRule] | None = None,
    cancel: threading.Event | None = None,
    claimed_by: Mapping[str, str | None] | None = None,
    timeline: bool = False,
) -> Report:
    """Summarise loaded traces and run the rules on them (``cancel``: as ``analyze``).

    ``rules``: the configured rules (default: discovered and selected by ``config``);
    ``claimed_by``: idle cause → the loaded rule that claims it (default: ``engine.claimed_by`` of
    the rules ``config`` discovers, before selection, so that ``--select`` does not change it);
    ``timeline``: attach each trace's timeline (the HTML report's, ``summary/timeline.py``)."""
    from traceadvisor.engine.runner import run

    config = config or Config()
    if rules is None:
        rules, claimed_by = _configured_rules(config)
    elif claimed_by is None:
        claimed_by = _loaded_claims(config)
    summaries: list[TraceSummary] = []
    for t in traces:
        raise_if_cancelled(cancel)
        summaries.append(summarize(t, claimed_by))
    result = run(rules, traces, capabilities=capabilities(traces), rule_timeout_s=config.rule_timeout, cancel=cancel)
    if timeline:  # after the rules: the findings' windows decide which steps a sampled timeline keeps
        summaries = [_with_timeline(s, t, result.findings) for s, t in zip(summaries, traces, strict=True)]
    report = Report(
        traces=tuple(summaries),
        findings=tuple(result.findings),
        skipped=tuple(result.skipped),
        errors=tuple(result.errors),
        config=config_info(config.origin),
    )
    if len(traces) > 1:
        from traceadvisor.ranks.build import summary_of
        from traceadvisor.ranks.summary import TraceKey

        rank_summaries = [summary_of(t, TraceKey(t.path, 0, 0), {}) for t in traces]
        return with_ranks(report, rank_summaries, [t.path for t in traces], rules, config, cancel)
    return _with_verdict(report)


def _with_timeline(summary: TraceSummary, trace: Trace, findings: Iterable[Finding]) -> TraceSummary:
    """``summary`` with the trace's timeline, its sampling led by the windows of its findings."""
    from dataclasses import replace

    from traceadvisor.summary.timeline import timeline_of

    focus = [
        (round(e.ts_us * 1000), round((e.ts_us + max(e.dur_us, 0.0)) * 1000))
        for f in findings
        if f.trace == trace.path and f.evidence
        for e in f.evidence[:1]
    ]
    return replace(summary, timeline=timeline_of(trace, focus))


def _with_verdict(report: Report) -> Report:
    """``report`` with its verdict: the step and the top fixes (``summary/verdict.py``)."""
    from dataclasses import replace

    from traceadvisor.summary.verdict import verdict_of

    return replace(report, verdict=verdict_of(report.traces, report.findings))


def with_ranks(
    report: Report,
    summaries: list[RankSummary],
    paths: list[str],
    rules: list[AnyRule],
    config: Config,
    cancel: threading.Event | None = None,
) -> Report:
    """``report`` (all ranks' single-rank findings) made a multi-rank report: the summaries combined
    (``ranks/combine.py``), the cross-rank rules run once on them, each finding named by its rank
    and the same finding on several ranks merged; ``paths[i]`` is the trace of ``summaries[i]``."""
    from dataclasses import replace

    from traceadvisor.engine.runner import run_rank_rules
    from traceadvisor.ranks.combine import combine
    from traceadvisor.ranks.report import merge_findings, ranks_section

    rank_run = combine(summaries, gpus_per_node=config.gpus_per_node)
    rank_of = dict(zip(paths, (int(r) for r in rank_run.ranks["rank"].tolist()), strict=True))
    cross = run_rank_rules(rules, rank_run, rule_timeout_s=config.rule_timeout, cancel=cancel)
    findings = merge_findings(report.findings, rank_of) + cross.findings
    findings.sort(key=lambda f: (-(f.impact.time_us if f.impact else 0.0), -f.severity.rank, f.code))
    traces = tuple(replace(t, rank=rank_of.get(t.path, t.rank)) for t in report.traces)
    # each rank's skips kept (the renderers say on which ranks a reason holds: report/format.py)
    skipped = tuple({(s.rule, s.reason, s.trace): s for s in report.skipped}.values())
    return _with_verdict(
        replace(
            report,
            traces=traces,
            findings=tuple(findings),
            skipped=skipped,
            errors=report.errors + tuple(cross.errors),
            ranks=ranks_section(rank_run),
        )
    )


def analyze_summaries(summaries: list[RankSummary], config: Config | None = None) -> Report:
    """The multi-rank report from rank summaries alone (the scale-out path: ``--jobs``,
    ``--executor``): each summary carries its rank's single-rank report."""
    from traceadvisor.report.finding import Finding
    from traceadvisor.report.model import RuleError, Skipped

    config = config or Config()
    rules, _ = _configured_rules(config)
    paths = [str(s.report["traces"][0]["path"]) if s.report.get("traces") else s.key.path for s in summaries]
    report = Report(
        traces=tuple(TraceSummary.from_dict(t) for s in summaries for t in s.report.get("traces") or ()),
        findings=tuple(Finding.from_dict(f) for s in summaries for f in s.report.get("findings") or ()),
        skipped=tuple(Skipped.from_dict(x) for s in summaries for x in s.report.get("skipped") or ()),
        errors=tuple(RuleError.from_dict(x) for s in summaries for x in s.report.get("errors") or ()),
        config=config_info(config.origin),
    )
    return with_ranks(report, summaries, paths, rules, config)


def summarize(trace: Trace, claimed_by: Mapping[str, str | None]) -> TraceSummary:
    """The report's summary of one trace, assembled from the section builders (``summary/``)."""
    from traceadvisor.summary.annotations import annotation_summary
    from traceadvisor.summary.cpu import cpu_summary
    from traceadvisor.summary.devices import device_info, device_summaries, main_device
    from traceadvisor.summary.idle import idle_breakdown
    from traceadvisor.summary.kernels import top_kernels
    from traceadvisor.summary.roofline import roofline_summary
    from traceadvisor.summary.step_time import step_time
    from traceadvisor.summary.steps import host_stalls, step_summaries, step_variation
    from traceadvisor.summary.units import us
    from traceadvisor.whatif.replay import external_wait_per_step_ns, replay_error_pct

    lo, hi, basis = trace.analysis_window
    window = hi - lo
    devices = device_summaries(trace)
    main = main_device(trace)
    busy_main_ns = trace.busy_ns(main, lo, hi) if main is not None else 0
    return TraceSummary(
        path=trace.path,
        rank=trace.rank,
        platform=trace.platform,
        device=device_info(trace, main),
        window_us=us(window),
        window_start_us=us(lo),
        window_basis=basis,
        gpu_busy_us=us(busy_main_ns),
        gpu_idle_us=us(window - busy_main_ns) if devices else 0.0,
        gpu_busy_pct=devices[0].busy_pct if devices else 0.0,
        kernel_count=len(trace.kernels),
        devices=devices,
        steps=step_summaries(trace, main),
        top_kernels=top_kernels(trace),
        idle_breakdown=idle_breakdown(trace, claimed_by),
        roofline=roofline_summary(trace),
        annotations=annotation_summary(trace),
        capture=dict(trace.meta.flags),
        warnings=tuple(trace.meta.warnings),
        replay_error_pct=replay_error_pct(trace),
        replay_external_wait_us=_us_or_none(external_wait_per_step_ns(trace)),
        measured_unprofiled_step_us=MeasuredSteps.of_key(trace.meta.traceadvisor),
        step_time=step_time(trace, main),
        step_variation=step_variation(trace),
        host_stalls=host_stalls(trace),
        cpu=cpu_summary(trace),
    )


def capabilities(traces: list[Trace]) -> list[set[Capability]]:
    """What each trace offers the rules; the peaks capability is the roofline's to say (the engine
    does not import the roofline)."""
    from traceadvisor.engine.rule import trace_capabilities

    return [trace_capabilities(t, rank_count=len(traces), has_peaks=roofline.of(t).peaks is not None) for t in traces]


def configure(
    path: Path | None = None,
    *,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    rules_dirs: list[Path] | None = None,
    isolated: bool = False,
    trust: bool = False,
) -> Config:
    """A run's configuration: the file ``resolve_config`` finds (or ``path``), with a caller's
    options on top (each ``select``/``ignore`` item may list several, comma-separated; ``ignore``
    and ``rules_dirs`` add to the file's, ``select`` replaces it). Its warnings are in
    ``origin.warnings``, for the caller to print."""
    from traceadvisor.config import resolve_config

    cfg = resolve_config(path, isolated=isolated, trust=trust)
    if select:
        cfg.select = [s for item in select for s in item.split(",") if s]
    if ignore:
        cfg.ignore = [*cfg.ignore, *(s for item in ignore for s in item.split(",") if s)]
    if rules_dirs:
        cfg.rules_dirs = [*cfg.rules_dirs, *rules_dirs]
    return cfg


def config_info(origin: ConfigOrigin) -> ConfigInfo:
    """The report's ``config`` entry: which file applied and whether its rules-dir ran."""
    return ConfigInfo(
        path=None if origin.path is None else str(origin.path),
        found_by=origin.found_by,
        isolated=origin.isolated,
        rules_dir_trusted=origin.trusted if origin.path is not None else None,
        rules_dirs=tuple(str(p) for p in origin.rules_dirs),
        skipped_rules_dirs=tuple(str(p) for p in origin.skipped_rules_dirs),
        warnings=tuple(origin.warnings),
    )


def analyze(
    paths: Iterable[str | Path],
    config: Config | None = None,
    max_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    cancel: threading.Event | None = None,
    timeline: bool = False,
) -> Report:
    """Load and analyse trace files (or directories of them).

    ``cancel``, set from another thread, stops the analysis with ``Cancelled``: checked after
    each trace loads, before each summary and each rule, and every 50 ms while a rule runs (the
    rule is interrupted as its time limit would). A single long C call (decoding one file, one
    pandas operation) finishes first. ``timeline``: each trace's timeline in its summary (for the
    HTML report)."""
    config = config or Config()
    rules: list[AnyRule] = []
    claims: dict[str, str | None] = {}

    def prepare_rules() -> None:
        # Runs before any event is decoded (configuration errors come first), overlapped with the
        # decoding in a second process where the trace is large enough (trace/parallel.py).
        configured, claimed_by = _configured_rules(config)
        rules.extend(configured)
        claims.update(claimed_by)

    with _cyclic_gc_paused():
        traces = load(
            list(paths),
            max_bytes=max_bytes,
            meanwhile=prepare_rules,
            after_each=lambda: raise_if_cancelled(cancel),
            gpu=config.gpu,  # the roofline's peaks ([tool.traceadvisor.gpu]), given to each trace at load
        )
        for t in traces:  # [tool.traceadvisor] communication-kernels, before anything reads them
            t.communication_patterns = tuple(config.communication_kernels)
            _give_step_time(t, config)
        return analyze_traces(traces, config, rules, cancel, claims, timeline=timeline)


def _give_step_time(trace: Trace, config: Config) -> None:
    """``--step-time``: the trace calibrated to the step time its user measured, where it carries none."""
    if config.step_time_us is not None:
        from traceadvisor.whatif.profiler_cost import give_step_time

        give_step_time(trace, config.step_time_us)


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


def _configured_rules(config: Config) -> tuple[list[AnyRule], dict[str, str | None]]:
    """The rules ``config`` selects, instantiated, and the claim map of all the rules it loads."""
    from traceadvisor.engine.registry import claims_of, discover
    from traceadvisor.engine.runner import instantiate, select

    sources = discover(config.rules_dirs)
    claims = claims_of(sources)
    return instantiate(select(sources, config), config, claims), claims


def _loaded_claims(config: Config) -> dict[str, str | None]:
    from traceadvisor.engine.registry import claims_of, discover

    return claims_of(discover(config.rules_dirs))


def _us_or_none(ns: float | None) -> float | None:
    """ns -> µs, keeping None (no steps)."""
    return None if ns is None else ns / 1000.0


def rank_summary(
    path: str,
    config: Config | None = None,
    max_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    timeline: bool = False,
) -> RankSummary:
    """The map step of a multi-rank analysis: load one rank's trace, analyse it alone (every
    single-rank rule) and reduce it to its summary (``ranks/build.py``). Top-level and picklable:
    ``ranks/executor.py`` runs it in worker processes or on a Dask cluster. ``timeline``: the
    rank's report carries its trace's timeline (the HTML report's lanes of that rank)."""
    from traceadvisor.ranks.build import summary_of
    from traceadvisor.ranks.summary_io import trace_key
    from traceadvisor.trace.load import load_file

    config = config or Config()
    key = trace_key(Path(path))  # before reading: a file changed meanwhile gets rebuilt next time
    trace = load_file(Path(path), max_bytes=max_bytes, gpu=config.gpu)
    trace.communication_patterns = tuple(config.communication_kernels)
    _give_step_time(trace, config)
    report = analyze_traces([trace], config, timeline=timeline)
    return summary_of(trace, key, report.to_dict())


def analyze_scaled(
    paths: Iterable[str | Path],
    config: Config | None = None,
    jobs: int | None = None,
    executor: str | None = None,
    max_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    cache: bool = True,
    timeline: bool = False,
) -> Report:
    """``analyze`` through rank summaries (``--jobs``, ``--executor``): each trace reduced to its
    summary in a worker (a process pool, or a Dask cluster) and cached beside it, the summaries
    combined here. Nothing large crosses processes; a second run reuses the cached summaries of
    unchanged traces (only under the default configuration: a summary holds its rank's findings,
    which the configuration's rule selection and options decide). ``timeline``: each rank's
    timeline in its trace summary (for the HTML report); the cache is then neither read nor written
    (a cached summary holds no timeline, and one with a timeline must not reach another report)."""
    from functools import partial

    from traceadvisor.errors import TraceError
    from traceadvisor.ranks.executor import summaries as map_summaries
    from traceadvisor.trace.load import expand_named, report_skipped

    config = config or Config()
    named = expand_named(paths)
    files = [str(p) for p, _ in named]
    # a summary holds its rank's findings and step times, which the rule selection, the rules' options
    # and a given step time decide: only the default configuration's are cached
    default = not (
        config.select
        or config.ignore
        or config.rules_dirs
        or config.origin.path is not None
        or config.step_time_us is not None
    )
    build = partial(rank_summary, config=config, max_bytes=max_bytes, timeline=timeline)
    use_cache = default and cache and not timeline
    got = map_summaries(files, build, jobs=jobs, executor=executor, use_cache=use_cache)
    in_folder = {str(p): f for p, f in named}
    skipped: list[TraceError] = []
    for e in got.errors:
        err = TraceError(e.message if e.message.startswith(e.path) else f"{e.path}: {e.message}")
        if not in_folder.get(e.path, False):
            raise err  # a trace named on its own must be a trace, as in analyze
        skipped.append(err)
    report_skipped(skipped, any_loaded=bool(got.summaries))
    if len(got.summaries) == 1:
        return Report.from_dict(got.summaries[0].report)
    return analyze_summaries(got.summaries, config)
