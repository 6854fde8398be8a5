"""The ``Rule`` base class. A rule is one file: metadata, a docstring, typed options, ``check``.

A rule's docstring has fixed sections (``## Why it matters``, ``## How it shows up in a trace``,
``## How to fix``, ``## Options``, ``## References``); ``explain`` renders it and the catalog test
checks it. Options are a frozen dataclass bound by the class line: ``class MyRule(Rule[Options])``
(``Rule`` alone: no options). The binding is read once, when the class is created, so a rule whose
module defines ``Options`` but does not bind it is refused when it is loaded (``registry.py``), not
when its first finding would read a missing option.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast, get_args, get_origin

import numpy as np
import pandas as pd

from traceadvisor.analyses.idle import IdleCause
from traceadvisor.engine import claimed_by as engine_claimed_by
from traceadvisor.report.finding import Evidence, Finding, Impact, Location, Severity, Thresholds
from traceadvisor.trace.device import NO_PEAKS_HELP
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.saving_range import likely_saving_range_ns

if TYPE_CHECKING:
    from traceadvisor.ranks.combine import RankRun

DOC_SECTIONS = ("Why it matters", "How it shows up in a trace", "How to fix", "Options", "References")
MAX_EVIDENCE = 5


class Capability(StrEnum):
    """What a trace must contain for a rule to run, with how to re-capture when it does not."""

    gpu = "gpu"
    steps = "steps"
    shapes = "record_shapes"
    stack = "with_stack"
    memory = "profile_memory"
    multi_rank = "multi_rank"
    peaks = "gpu_peaks"

    @property
    def how_to_capture(self) -> str:
        return {
            "gpu": "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU",
            "steps": "profile with a schedule and call prof.step() each iteration (or use traceadvisor capture)",
            "record_shapes": "profile with record_shapes=True",
            "with_stack": "profile with with_stack=True",
            "profile_memory": "profile with profile_memory=True",
            "multi_rank": "pass the traces of several ranks (a directory or several files)",
            "gpu_peaks": "the GPU is not in the peak table (see the report's roofline section): " + NO_PEAKS_HELP,
        }[self.value]


def trace_capabilities(trace: Trace, rank_count: int = 1, has_peaks: bool = False) -> set[Capability]:
    """The capabilities a loaded trace offers. ``has_peaks``: the roofline knows the GPU's peaks
    (the pipeline asks ``traceadvisor.roofline.of(trace).peaks``; the engine does not import the
    roofline, so that a rule's capabilities never depend on how peaks are resolved)."""
    caps: set[Capability] = set()
    if len(trace.gpu):
        caps.add(Capability.gpu)
    if len(trace.steps):
        caps.add(Capability.steps)
    if trace.meta.flags.get("record_shapes") or trace.host["input_dims"].notna().any():
        caps.add(Capability.shapes)
    if trace.meta.flags.get("with_stack") or len(trace.frames):
        caps.add(Capability.stack)
    if trace.meta.flags.get("profile_memory") or len(trace.memory):
        caps.add(Capability.memory)
    if rank_count > 1:
        caps.add(Capability.multi_rank)
    if Capability.gpu in caps and has_peaks:
        caps.add(Capability.peaks)
    return caps


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A rule without options."""


O = TypeVar("O")  # noqa: E741 (the options type; "O" reads as in Rule[Options])


class Rule(Generic[O]):
    """Base class of every rule (built-in or user). Subclass it once per rule file:
    ``class MyRule(Rule[Options])`` binds the module's ``Options`` dataclass (``self.options`` is
    then typed ``Options``); ``class MyRule(Rule)`` has no options."""

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    severity: ClassVar[Severity] = Severity.medium
    requires: ClassVar[frozenset[Capability]] = frozenset()
    # The idle causes (analyses/idle.py) whose time this rule reports: each cause has at most one
    # claiming rule among those loaded, so no idle nanosecond is reported twice; the report's idle
    # section names the claimant (``engine.claimed_by``).
    claims: ClassVar[AbstractSet[IdleCause]] = frozenset()
    Options: ClassVar[type[Any]] = NoOptions

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        bound = _bound_options(cls)
        if bound is None:
            return
        declared = cls.__dict__.get("Options")
        if declared is not None and declared is not bound:
            raise TypeError(f"{cls.__name__}: Options = {declared.__name__} disagrees with Rule[{bound.__name__}]")
        if not (isinstance(bound, type) and dataclasses.is_dataclass(bound)):
            raise TypeError(f"{cls.__name__}: Rule[{getattr(bound, '__name__', bound)!s}] must bind a dataclass")
        cls.Options = bound

    def __init__(
        self,
        options: O | None = None,
        thresholds: Thresholds | None = None,
        severity_override: Severity | None = None,
        claimed_by: Mapping[str, str | None] | None = None,
    ) -> None:
        self.options: O = options if options is not None else cast(O, type(self).Options())
        self.thresholds = thresholds or Thresholds()
        self.severity_override = severity_override
        # Idle cause → the loaded rule that claims it (``engine.claimed_by``), for a rule that
        # names the owner of idle time it does not report itself; the engine passes the map of
        # every loaded rule, this rule alone knows only its own claims.
        self.claimed_by: Mapping[str, str | None] = (
            dict(claimed_by) if claimed_by is not None else engine_claimed_by([type(self)])
        )

    @classmethod
    def make_options(cls, values: Mapping[str, Any]) -> O:
        """Build the Options dataclass from configuration values, checking names and types."""
        fields = {f.name: f for f in dataclasses.fields(cls.Options)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ValueError(f"rule {cls.name}: unknown option(s) {', '.join(unknown)}; known: {', '.join(fields)}")
        clean: dict[str, Any] = {}
        for k, v in values.items():
            default = getattr(cls.Options(), k)
            if isinstance(default, bool) and not isinstance(v, bool):
                raise ValueError(f"rule {cls.name}: option {k} must be true or false")
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                if not isinstance(v, (int, float)) or isinstance(v, bool):
                    raise ValueError(f"rule {cls.name}: option {k} must be a number")
                v = type(default)(v)
            clean[k] = v
        return cast(O, cls.Options(**clean))

    def check(self, trace: Trace) -> Iterator[Finding]:
        """Yield findings for one trace."""
        raise NotImplementedError

    # -- helpers for rule authors -------------------------------------------------------------
    def finding(
        self,
        trace: Trace,
        *,
        message: str,
        recommendation: str,
        impact_ns: float | None = None,
        basis: str = "",
        per_step: tuple[str, float, float] | tuple[str, float, float, tuple[float, ...], bool] | None = None,
        evidence: Iterable[Evidence] = (),
        location: Location | None = None,
        data: Mapping[str, Any] | None = None,
        severity: Severity | None = None,
        step_basis: str = "predicted unprofiled",
    ) -> Finding:
        """A finding with code and name filled in and severity derived from the impact.

        ``per_step``: (scenario, saving per step ns, predicted unprofiled step ns[, the saving's shares
        of the step at the ends of the host's plausible speed, whether the trace carries measured
        unprofiled steps]) from a what-if replay
        (``rule_helpers.per_step``): the impact is the replay difference, its share that over the
        predicted unprofiled step, with its likely range (``whatif.saving_range``); ``impact_ns``
        is then ignored. ``step_basis``: what that
        step is, when it is not the replay's prediction (``measured unprofiled``)."""
        impact = None
        if per_step is not None:
            scenario, saving_ns, step_ns = per_step[:3]
            # a saving without its replay's detail gets the wider band of a trace without measured steps
            host_shares: tuple[float, ...] = per_step[3] if len(per_step) > 3 else ()  # type: ignore[misc]
            calibrated: bool = per_step[4] if len(per_step) > 4 else False  # type: ignore[misc]
            steps = max(1, len(trace.steps.table))
            impact = per_step_impact(saving_ns, step_ns, steps, basis, scenario, step_basis)
            low_ns, high_ns = likely_saving_range_ns(saving_ns, step_ns, host_shares, calibrated)
            impact = dataclasses.replace(
                impact, likely_low_per_step_us=low_ns / 1000.0, likely_high_per_step_us=high_ns / 1000.0
            )
        elif impact_ns is not None:
            window = trace.analysed_ns
            share = 100.0 * impact_ns / window if window > 0 else 0.0
            impact = Impact(time_us=float(impact_ns) / 1000.0, share_pct=share, basis=basis)
        return Finding(
            code=self.code,
            rule=self.name,
            severity=self._severity(impact, severity),
            message=message,
            recommendation=recommendation,
            impact=impact,
            location=location,
            evidence=tuple(evidence)[:MAX_EVIDENCE],
            trace=trace.path,
            data=dict(data or {}),
        )

    def _severity(self, impact: Impact | None, given: Severity | None) -> Severity:
        """The severity a finding gets: the configured override, else the one given, else from
        the impact's share (``thresholds``), else the rule's default."""
        if self.severity_override is not None:
            return self.severity_override
        if given is not None:
            return given
        return self.thresholds.severity(impact.share_pct) if impact else type(self).severity


AnyRule = Rule[Any]  # a rule of any options type (what the engine handles)


def per_step_impact(
    saving_ns: float, step_ns: float, steps: int, basis: str, scenario: str | None, step_basis: str
) -> Impact:
    """The impact of a saving per step (a replay difference): over ``steps`` steps in all, its
    share that saving over ``step_ns`` (the step it is cut from, which ``step_basis`` names)."""
    return Impact(
        time_us=saving_ns * steps / 1000.0,
        share_pct=100.0 * saving_ns / step_ns if step_ns > 0 else 0.0,
        basis=basis,
        saving_per_step_us=saving_ns / 1000.0,
        scenario=scenario,
        step_basis=step_basis,
    )


def _bound_options(cls: type) -> Any:
    """The argument of ``Rule[...]`` among the class's own bases (``None``: not given here)."""
    for base in getattr(cls, "__orig_bases__", ()):
        origin = get_origin(base)
        if isinstance(origin, type) and issubclass(origin, Rule):
            (arg,) = get_args(base)
            return None if isinstance(arg, TypeVar) else arg
    return None


def evidence_from(
    df: pd.DataFrame, by: str = "dur_ns", n: int = MAX_EVIDENCE, category: str | None = None
) -> list[Evidence]:
    """The ``n`` largest rows of a table (by ``by``) as evidence."""
    if not len(df):
        return []
    top = df.nlargest(n, by) if by in df else df.head(n)
    out = []
    for r in top.itertuples():
        stream = getattr(r, "stream", None)
        corr = getattr(r, "correlation", None)
        out.append(
            Evidence(
                name=str(r.name),
                ts_us=int(r.ts_ns) / 1000.0,
                dur_us=int(getattr(r, "dur_ns", 0)) / 1000.0,
                stream=int(stream) if stream is not None and not pd.isna(stream) and int(stream) >= 0 else None,
                correlation=int(corr) if corr is not None and int(corr) >= 0 else None,
                category=category,
            )
        )
    return out


def location_of(trace: Trace, pid: int, tid: int, ts_ns: int) -> Location | None:
    """The user's innermost frame active on a thread at a time (needs ``with_stack``); its line is
    the function's first line or where it was when profiling began (``line_kind``), as the profiler
    names frames."""
    src = trace.source_of(np.array([pid]), np.array([tid]), np.array([ts_ns]))[0]
    if src is None:
        return None
    return Location(
        file=str(src["file"]), line=int(src["line"]), function=str(src["function"]), line_kind=str(src["line_kind"])
    )


class RankRule(Rule[O]):
    """Base class of a cross-rank rule: it reads all the ranks of one run at once (the combined
    ``RankRun`` of ``ranks/combine.py``: matched collectives, alignment, per-(rank, step)
    breakdown, the straggler) and runs once per multi-rank analysis, not once per trace."""

    requires: ClassVar[frozenset[Capability]] = frozenset({Capability.multi_rank})

    def check(self, trace: Trace) -> Iterator[Finding]:
        return iter(())  # nothing per trace: check_ranks runs once on the combined run

    def check_ranks(self, run: RankRun) -> Iterator[Finding]:
        """Yield findings about the run's ranks."""
        raise NotImplementedError

    def rank_finding(
        self,
        run: RankRun,
        *,
        message: str,
        recommendation: str,
        ranks: Iterable[int],
        saving_per_step_ns: float | None = None,
        step_ns: float | None = None,
        scenario: str | None = None,
        basis: str = "",
        location: Location | None = None,
        data: Mapping[str, Any] | None = None,
        severity: Severity | None = None,
    ) -> Finding:
        """A finding about some ranks of ``run``. With ``saving_per_step_ns`` and ``step_ns`` (the
        mean step it is a share of) the impact is that saving per step, over the run's steps."""
        impact = None
        if saving_per_step_ns is not None and step_ns:
            steps = max(1, int(run.breakdown["step"].nunique())) if len(run.breakdown) else 1
            impact = per_step_impact(saving_per_step_ns, step_ns, steps, basis, scenario, "profiled mean rank")
        return Finding(
            code=self.code,
            rule=self.name,
            severity=self._severity(impact, severity),
            message=message,
            recommendation=recommendation,
            impact=impact,
            location=location,
            trace="",
            data=dict(data or {}),
            ranks=tuple(sorted(int(r) for r in ranks)),
        )
