"""Formatting shared by the text and Markdown reports (and the next HTML one): numbers, long
tables, the roofline's notes. Presentation only: no pandas, no escaping (each renderer escapes
names its own way, ``safe_text``).

Long tables: a trace of 200,000 steps made a 10 MB text report that took 53 s to print; nobody
reads that table. Long tables keep their first and last rows (the warm-up and the steady state)
and say what the rows in between hold in one line. The JSON report keeps every row.
"""

from __future__ import annotations

import math
import re
import statistics
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from traceadvisor.report.finding import Finding, Impact, Severity
from traceadvisor.report.model import (
    MeasuredSteps,
    RankRow,
    RanksSummary,
    RooflineKernel,
    Skipped,
    StepSummary,
    StepTime,
    TraceSummary,
    Verdict,
)

T = TypeVar("T")

ROW_LIMIT = 20  # a table of up to this many rows prints whole
HEAD_ROWS = 10
TAIL_ROWS = 5

# The dtypes the text report lists in the roofline's peak line, in this order.
ROOFLINE_DTYPES = ("fp8", "bf16", "fp16", "tf32", "fp32", "fp64")

# A kernel cannot move its compulsory bytes faster than the DRAM peak; when the figures say it
# did, the bytes came from the L2 cache (inputs the previous kernel left there: 50 MB on an H100)
# or an input was broadcast (expanded, stride 0) and is counted at its full size, since the
# profiler records shapes but not strides.
ABOVE_ROOF_NOTE = (
    "roof above 100%: faster than DRAM allows, so inputs came from the L2 cache or an expanded "
    "(broadcast) input is counted at full size (the trace records no strides)"
)


# Every time a text or Markdown report shows (tables, lines, the rules' messages) is written by
# ``fmt_time``: its unit chosen by magnitude, always this many significant digits, so one report
# never says 16755.0 µs in a finding and 16.755 ms in a table, and a column of times is one width.
TIME_DIGITS = 4
_TIME_UNITS = (("µs", 1.0), ("ms", 1e3), ("s", 1e6))


def fmt_time(us_value: float) -> str:
    """A time given in microseconds, for display: ``812.4 µs`` below 1000 µs, ``12.85 ms`` below
    1000 ms, else ``12.85 s``, each with ``TIME_DIGITS`` significant digits (``3.050 ms``, ``5.100 µs``),
    and never more than three decimals of a µs (the trace's nanosecond: ``0.500 µs``). A value that
    rounds up to 1000 of a unit is written in the next (``999.96 µs`` → ``1.000 ms``). Display only:
    the data keeps the unrounded value."""
    v = float(us_value)
    if v == 0.0 or not math.isfinite(v):
        return f"{0 if v == 0.0 else v} µs"
    sign, mag = ("-" if v < 0 else ""), abs(v)
    for unit, scale in _TIME_UNITS:
        text = _significant(mag / scale, max_decimals=3 if unit == "µs" else 3 + round(math.log10(scale)))
        if float(text) < 1000.0 or unit == _TIME_UNITS[-1][0]:
            return f"{sign}{text} {unit}"
    raise AssertionError("unreachable: the last unit always returns")


def _significant(x: float, max_decimals: int) -> str:
    """``x`` (> 0) with ``TIME_DIGITS`` significant digits, at most ``max_decimals`` decimals; when
    rounding carries into a new digit (9.9996 → 10.000) one decimal less, so the count holds."""
    exp = math.floor(math.log10(x))
    decimals = min(max_decimals, max(0, TIME_DIGITS - 1 - exp))
    text = f"{x:.{decimals}f}"
    if 0 < decimals == TIME_DIGITS - 1 - exp and float(text) >= 10.0 ** (exp + 1):
        text = f"{x:.{decimals - 1}f}"
    return text


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 kernel``, ``3 kernels``, ``0 kernels``; ``many`` for an irregular plural (``copy``,
    ``copies``). Never ``kernel(s)``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {many or word + 's'}"


def ms(us_value: float) -> str:
    """A time for display (``fmt_time``); the name is older than the choice of unit by magnitude."""
    return fmt_time(us_value)


# The source a step time given with ``--step-time`` is stored under: whatif.profiler_cost's
# GIVEN_STEP_SOURCE (the report renders plain data and does not import the replay; a test ties them)
GIVEN_STEP_SOURCE = "--step-time"


def measured_source_words(m: MeasuredSteps) -> str:
    """Where ``traces[].measured_unprofiled_step_us`` came from, in words: the steps capture or the
    advisor timed with the profiler off, or the step time given with ``--step-time``."""
    if m.source == GIVEN_STEP_SOURCE:
        return "given with --step-time"
    return f"median of {m.count} steps, profiler off"


def step_time_line(st: StepTime, measured: MeasuredSteps | None = None) -> str:
    """The profiled step and the predicted unprofiled one, with GPU busy on both; ``measured``
    (the trace's ``measured_unprofiled_step_us``) says what a calibrated prediction was fitted to."""
    line = f"{fmt_time(st.profiled_step_us)} profiled (GPU busy {st.gpu_busy_profiled_pct:.0f}%)"
    if st.unprofiled_step_us is not None and st.gpu_busy_unprofiled_pct is not None:
        predicted = fmt_time(st.unprofiled_step_us)
        basis = ""
        if st.unprofiled_basis == "calibrated":
            given = measured is not None and measured.source == GIVEN_STEP_SOURCE
            basis = "; calibrated to the step time given" if given else "; calibrated to the steps timed without it"
            if st.unprofiled_caveat:
                basis += f", but {st.unprofiled_caveat}"
        elif st.unprofiled_caveat:
            basis = f"; uncalibrated: {st.unprofiled_caveat}"
        line += f", {predicted} predicted without the profiler (GPU busy {st.gpu_busy_unprofiled_pct:.0f}%{basis})"
    return line


# External waits below this share of the step are launch latencies after an idle spell: not worth a line.
EXTERNAL_WAIT_MIN_SHARE = 0.01


def replay_line(error_pct: float, external_wait_us: float | None, step_us: float | None) -> str:
    """How well the replay reproduces the steps, and what it keeps as measured because the trace
    does not hold its cause (GPU waits on other ranks or processes), when that is material."""
    line = f"steps reproduced within {error_pct:.2f}%"
    if external_wait_us and step_us and external_wait_us >= EXTERNAL_WAIT_MIN_SHARE * step_us:
        line += f"; {fmt_time(external_wait_us)} per step of GPU waits on work outside the trace kept as measured"
    return line


def pct(value: float) -> str:
    return f"{value:.1f}%"


def num(v: float | None, spec: str, suffix: str = "") -> str:
    """A figure the trace may not give (None: ``-``)."""
    return "-" if v is None else f"{v:{spec}}{suffix}"


def elide(rows: Sequence[T], limit: int = ROW_LIMIT) -> tuple[list[T], list[T], list[T]]:
    """``(first, hidden, last)``: all of ``rows`` as ``first`` when there are at most ``limit``."""
    if len(rows) <= limit:
        return list(rows), [], []
    return list(rows[:HEAD_ROWS]), list(rows[HEAD_ROWS:-TAIL_ROWS]), list(rows[-TAIL_ROWS:])


def spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """``min a / median b / max c`` of ``values`` (not empty)."""
    return f"min {fmt(min(values))} / median {fmt(statistics.median(values))} / max {fmt(max(values))}"


def hidden_steps_line(hidden: Sequence[StepSummary]) -> str:
    """One line on the steps a table leaves out: how many, and the spread of each column."""
    cpu = [float(s.cpu_dur_us) for s in hidden]
    gpu = [float(s.gpu_dur_us) for s in hidden]
    busy = [float(s.gpu_busy_pct) for s in hidden]
    return (
        f"{len(hidden):,} steps not shown: CPU time {spread(cpu, fmt_time)}; "
        f"GPU time {spread(gpu, fmt_time)}; GPU busy {spread(busy, pct)}"
    )


def more_warnings_line(warnings: Sequence[str]) -> str | None:
    """The line that stands for the warnings past ``ROW_LIMIT`` (None: all are printed)."""
    if len(warnings) <= ROW_LIMIT:
        return None
    return f"… {len(warnings) - ROW_LIMIT:,} more warnings (the JSON report lists them all)"


def figures_by_source(sources: Mapping[str, str]) -> dict[str, list[str]]:
    """The roofline's peak figures grouped by where they came from, sources in first-seen order."""
    by_source: dict[str, list[str]] = {}
    for figure, source in sources.items():
        by_source.setdefault(source, []).append(figure)
    return by_source


def above_roof(rows: Sequence[RooflineKernel]) -> bool:
    """Whether any memory-bound kernel of the roofline table claims more than the bandwidth peak."""
    return any((k.roof_pct or 0.0) > 100.0 and k.bound == "memory" for k in rows)


RANK_COLUMNS = ("rank", "host", "step", "compute", "exposed wait", "exposed transfer", "exposed memcpy", "idle")


def rank_label(ranks: Sequence[int]) -> str:
    """``rank 3``, ``ranks 0, 1, 2`` (a finding's ranks in a multi-rank report; "" for none)."""
    if not ranks:
        return ""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(str(r) for r in ranks[:8]) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
    return f"ranks {shown}"


def rank_cells(row: RankRow) -> list[str]:
    """One row of the rank comparison table (means per step), the straggler marked."""
    return [
        f"{row.rank}{' (straggler)' if row.straggler else ''}",
        row.host or "-",
        fmt_time(row.step_us),
        fmt_time(row.compute_us),
        fmt_time(row.exposed_wait_us),
        fmt_time(row.exposed_transfer_us),
        fmt_time(row.memcpy_exposed_us),
        fmt_time(row.idle_us),
    ]


def ranks_head(r: RanksSummary) -> str:
    """The section's first line: how many ranks, how collectives matched, how clocks aligned."""
    return (
        f"{len(r.rows)} ranks; collectives matched by {r.match_key} ({r.collectives} collectives, "
        f"{r.coverage_pct:.0f}% of rows matched); clocks: {r.alignment}"
    )


def trace_labels(traces: Sequence[TraceSummary]) -> dict[str, str]:
    """How a line names each trace of a report: ``rank N`` where the trace knows its rank, else
    its file name (the full path when two traces share a file name)."""
    names = [t.path.replace("\\", "/").rsplit("/", 1)[-1] for t in traces]
    return {
        t.path: f"rank {t.rank}" if t.rank is not None else (name if names.count(name) == 1 else t.path)
        for t, name in zip(traces, names, strict=True)
    }


def skipped_by_reason(
    skipped: Sequence[Skipped], labels: Mapping[str, str] | None = None
) -> list[tuple[str, list[str], str]]:
    """The skipped rules, one entry per reason (the rules in report order, each once): ten rules
    skipped because the trace has no GPU are one line, not ten. Each entry is (reason, rules,
    scope); with ``labels`` of several traces (``trace_labels``) the scope says which traces the
    reason holds for (`` on rank 1``, `` on every rank``), so a CPU trace's skips are not read as
    a GPU trace's; else it is empty. Callers write ``skipped {rules}{scope}: {reason}``."""
    by: dict[str, list[str]] = {}
    where: dict[str, list[str]] = {}
    for s in skipped:
        rules = by.setdefault(s.reason, [])
        if s.rule not in rules:
            rules.append(s.rule)
        on = where.setdefault(s.reason, [])
        if s.trace not in on:
            on.append(s.trace)
    out = []
    for reason, rules in by.items():
        scope = ""
        if labels and len(labels) > 1:
            on = where[reason]
            ranks = all(label.startswith("rank ") for label in labels.values())
            every = "every rank" if ranks else "every trace"
            scope = " on " + (every if set(labels) <= set(on) else ", ".join(labels.get(t, t) for t in on))
        out.append((reason, rules, scope))
    return out


_FINDING_HEAD = re.compile(r"^\d+\. \[")
# A continuation line of a folded finding or list line is indented past the item's own indentation.
CONTINUATION = 3


def fit(text: str, width: int) -> str:
    """Plain text folded to ``width`` columns: a longer line breaks at spaces (a word longer than the
    room, a path or URL, breaks where it must) and continues indented ``CONTINUATION`` past its own
    indentation (past the number of a finding line), so no continuation can start at column 0."""
    out: list[str] = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" "))
        indent = " " * min(lead + CONTINUATION, width // 2)
        out.extend(
            textwrap.wrap(
                line,
                width=width,
                subsequent_indent=indent,
                break_long_words=True,
                break_on_hyphens=False,
                replace_whitespace=False,
                drop_whitespace=True,
            )
            or [line[:width]]
        )
    return "\n".join(out)


def middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut in the middle (``sm80_xmma_ge…_tn_n_ts64``): a
    kernel's or op's name keeps its start (the family) and its end (the variant)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    head = (width - 1) - (width - 1) // 2
    tail = (width - 1) // 2
    return text[:head] + "…" + (text[-tail:] if tail else "")


def verdict_lines(v: Verdict) -> list[str]:
    """The verdict as lines: the step, then each top fix with the step it predicts after it."""
    head = f"step {fmt_time(v.step_us)} ({v.basis})"
    if not v.fixes:
        return [f"{head}; no finding predicts a saving"]
    out = [f"{head}; do first:"]
    for i, f in enumerate(v.fixes, 1):
        who = f" [{rank_label(f.ranks)}]" if f.ranks else ""
        share = 100.0 * f.saving_per_step_us / v.step_us if v.step_us > 0 else 0.0
        saving, after = fmt_time(f.saving_per_step_us), fmt_time(f.step_after_us)
        likely = ""
        if f.likely_low_per_step_us is not None and f.likely_high_per_step_us is not None:
            likely = f"; likely {fmt_range(f.likely_low_per_step_us, f.likely_high_per_step_us)}"
        out.append(f"{i}) {f.rule} ({f.code}){who}: −{saving} a step ({share:.0f}%{likely}) → {after}")
    return out


def has_saving(f: Finding) -> bool:
    """Whether a finding predicts time back: an impact above zero. A finding without one (a capture
    flag to set, a mismatch to look at, a fix the replay says gains nothing) is still a finding."""
    return f.impact is not None and f.impact.time_us > 0


def split_findings(
    findings: Sequence[Finding], show_all: bool
) -> tuple[list[tuple[int, Finding]], list[tuple[int, Finding]]]:
    """``(shown, hidden)``, each finding with its number in the report (1-based over all findings,
    so ``open --at N`` and the HTML report's ``#finding-N`` name the same one whatever is shown).
    Without ``show_all`` the text and Markdown reports hide findings with no saving (``has_saving``)
    unless they are high severity (a rule or the configuration judged them to matter regardless)."""
    numbered = list(enumerate(findings, 1))
    if show_all:
        return numbered, []
    shown = [(i, f) for i, f in numbered if has_saving(f) or f.severity is Severity.high]
    hidden = [(i, f) for i, f in numbered if not (has_saving(f) or f.severity is Severity.high)]
    return shown, hidden


def hidden_findings_line(hidden: Sequence[tuple[int, Finding]]) -> str:
    """The one line that stands for the findings ``split_findings`` hid: how many, and each one's
    code with its number (``open --at N`` takes it)."""
    codes = ", ".join(f"{f.code} (#{i})" for i, f in hidden)
    n = len(hidden)
    what = "finding" if n == 1 else "findings"
    return f"{n} more {what} with no predicted saving: {codes} (--all shows them)"


def fmt_range(low_us: float, high_us: float) -> str:
    """A range of two times in the unit of the larger: ``0-1.210 ms``, ``350.0-980.0 µs``."""
    high, low = fmt_time(high_us), fmt_time(low_us)
    unit = high.rsplit(" ", 1)[-1]
    if low_us == 0.0 or low.endswith(f" {unit}"):
        return f"{low.rsplit(' ', 1)[0]}-{high}"
    return f"{low} to {high}"


def impact_text(impact: Impact) -> str:
    """A finding's impact with the denominator of its share named and its length shown.

    A replayed saving (``saving_per_step_us``): the saving per step, its share of the step
    ``impact.step_basis`` names (the predicted unprofiled one by default), and the total over the
    steps (``2.249 ms a step (73.7% of the 3.050 ms predicted unprofiled step); 6.746 ms over 3
    steps``), the figures the verdict and the what-if use. A rule's
    own estimate: the time over the analysed steps and its share of their span (``trace.analysed_ns``,
    which can be longer than the report's window: it spans both the CPU and the GPU side of the
    steps): ``1.565 ms (6.1% of the 25.47 ms analysed)``. A replayed saving also gives its likely
    range (``whatif.saving_range``): ``(73.7% of the 3.050 ms predicted unprofiled step; likely
    2.004-2.492 ms)``. Each denominator is recovered from the
    impact itself (share = part / whole), so a finding of one rank names that rank's step."""
    share = impact.share_pct
    per_step = impact.saving_per_step_us
    if per_step is not None:
        head = f"{fmt_time(per_step)} a step"
        step = f" {fmt_time(100.0 * per_step / share)}" if share > 0 else ""
        steps = round(impact.time_us / per_step) if per_step > 0 else 0
        total = f"; {fmt_time(impact.time_us)} over {steps} steps" if steps > 1 else ""
        basis = impact.step_basis or "predicted unprofiled"
        likely = ""
        if impact.likely_low_per_step_us is not None and impact.likely_high_per_step_us is not None:
            likely = f"; likely {fmt_range(impact.likely_low_per_step_us, impact.likely_high_per_step_us)}"
        return f"{head} ({share:.1f}% of the{step} {basis} step{likely}){total}"
    whole = f" {fmt_time(100.0 * impact.time_us / share)}" if share > 0 else ""
    return f"{fmt_time(impact.time_us)} ({share:.1f}% of the{whole} analysed)"


# The report's words for the analyses' identifiers (idle causes, window bases): the JSON report
# keeps the identifiers, text and Markdown say what they mean. An identifier not listed (a cause a
# user rule adds) is shown with its underscores as spaces.
CAUSE_NAMES = {
    "sync": "host-device sync",
    "data_loading": "data loading",
    "optimizer": "optimizer step",
    "launch_bound": "launch-bound",
    "cpu_op": "CPU work",
    "launch_latency": "launch latency",
    "unknown": "unexplained",
    "communication": "communication",
}
WINDOW_BASES = {
    "steps (GPU windows)": "steps on the GPU",
    "steps (CPU windows)": "steps on the CPU",
    "GPU activity span": "all GPU activity",
    "host activity span": "all host activity",
    "empty": "no events",
}


def cause_name(cause: str) -> str:
    """An idle cause in words (``launch_bound`` → ``launch-bound``, ``cpu_op`` → ``CPU work``)."""
    return CAUSE_NAMES.get(cause, cause.replace("_", " "))


def window_basis_name(basis: str) -> str:
    """What the analysis window spans, in words (``steps (GPU windows)`` → ``steps on the GPU``:
    from the first step's GPU start to the last one's GPU end)."""
    return WINDOW_BASES.get(basis, basis)


def compute_unit(platform: str, n: int | None = None) -> str:
    """What the device's cores are called: ``SM`` (NVIDIA) or ``CU`` (AMD, platform ``rocm``);
    with ``n``, counted (``132 SMs``, ``1 CU``)."""
    unit = "CU" if platform == "rocm" else "SM"
    return unit if n is None else plural(n, unit)


_URL = re.compile(r",?\s*https?://\S+")
_ASIDE = re.compile(r"\s*\([^()]*\)")


def short_source(source: str) -> str:
    """A peak figure's source without its URL and asides, for one line of text: ``datasheet: NVIDIA
    H100 Tensor Core GPU datasheet (H100 SXM / H100 NVL columns), https://...`` → ``NVIDIA H100
    Tensor Core GPU datasheet`` (the Markdown and JSON reports keep the whole text)."""
    text = _ASIDE.sub("", _URL.sub("", source)).strip(" ,;")
    kind, sep, rest = text.partition(": ")
    return rest if sep and kind == "datasheet" and "datasheet" in rest.lower() else text


def peaks_source_line(sources: Mapping[str, str], short: bool = True) -> str:
    """Where the roofline's peaks come from, in one line: the source of most figures, then any
    other source with the figures it gives (``NVIDIA H100 Tensor Core GPU datasheet; bf16, fp16:
    configuration: gpu.toml``). ``short``: sources without URLs and asides (text)."""
    groups = sorted(figures_by_source(sources).items(), key=lambda kv: -len(kv[1]))
    if not groups:
        return "none given"
    shown = [(short_source(src) if short else src, figs) for src, figs in groups]
    head = shown[0][0]
    rest = [f"{', '.join(figs)}: {src}" for src, figs in shown[1:]]
    return "; ".join([head, *rest])
