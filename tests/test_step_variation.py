"""Unstable steps are flagged (issue 14): ``traces[].step_variation`` and one header line."""

from __future__ import annotations

from fixture_paths import FIXTURE_TRACES, HTA

from traceadvisor.pipeline import analyze
from traceadvisor.report import render
from traceadvisor.report.format import fmt_time
from traceadvisor.report.model import StepVariation, TraceSummary
from traceadvisor.summary.steps import UNSTABLE_STEP_RATIO

# A vendored ROCm trace whose second profiled step has no GPU work and lasts 1/189 of the first.
VARIABLE = HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
STEADY = FIXTURE_TRACES / "workload_matmul.json.gz"


# A GPU-bound loop whose host runs ahead: each step's GPU work starts after its CPU part ended.
BACKLOGGED = FIXTURE_TRACES / "pair_pinned_after.json.gz"


def spans(t: TraceSummary, from_cpu_start: bool = False) -> list[float]:
    """Each step's span from the report's own steps table: CPU start to its CPU or GPU end, or its
    GPU work alone where that began after the CPU part ended (unless ``from_cpu_start``)."""
    out = []
    for s in t.steps:
        cpu_end = s.cpu_start_us + s.cpu_dur_us
        if s.gpu_start_us is None:
            out.append(s.cpu_dur_us)
            continue
        end = max(cpu_end, s.gpu_start_us + s.gpu_dur_us)
        begin = s.gpu_start_us if s.gpu_start_us > cpu_end and not from_cpu_start else s.cpu_start_us
        out.append(end - begin)
    return out


def test_variable_steps_are_flagged_with_their_range_and_slowest_step() -> None:
    report = analyze([VARIABLE])
    t = report.traces[0]
    v = t.step_variation
    assert v is not None
    s = spans(t)
    assert abs(v.min_us - min(s)) < 1e-3 and abs(v.max_us - max(s)) < 1e-3
    # The spans from absolute µs timestamps (4.2e12) keep only ~1 ns: compare relatively.
    assert abs(v.ratio / (max(s) / min(s)) - 1) < 1e-4 and v.ratio >= UNSTABLE_STEP_RATIO and v.unstable
    assert v.slowest == t.steps[s.index(max(s))].name == "ProfilerStep#1"
    assert v.slowest_is_first and v.steps == 2
    line = f"steps vary {v.ratio:.0f}x: {fmt_time(v.min_us)} to {fmt_time(v.max_us)}, slowest ProfilerStep#1"
    text = render(report, "text", width=200).decode()
    assert sum(line in x for x in text.splitlines()) == 1
    markdown = render(report, "markdown").decode()
    assert f"- warning: {line}" in markdown
    # JSON carries it and reads back.
    assert TraceSummary.from_dict(t.to_dict()).step_variation == v


def test_steady_steps_are_not_flagged() -> None:
    report = analyze([STEADY])
    v = report.traces[0].step_variation
    assert v is not None and not v.unstable and v.ratio < UNSTABLE_STEP_RATIO
    assert v.steps == len(report.traces[0].steps)
    assert "steps vary" not in render(report, "text").decode()
    assert "steps vary" not in render(report, "markdown").decode()


def test_describe_says_the_first_step_only_when_it_is_the_slowest() -> None:
    v = StepVariation(38000.0, 293000.0, 293 / 38, "ProfilerStep#7", False, 5, True)
    expected = "steps vary 7.7x: 38.00 ms to 293.0 ms, slowest ProfilerStep#7; per-step means mix them"
    assert v.describe(fmt_time) == expected


def test_a_gpu_bound_loop_is_not_flagged_for_its_backlog() -> None:
    """The host enqueues each step long before the GPU reaches it: from its CPU start a step's span
    would hold the earlier steps' GPU work too, growing by a step each (2.1x over three steps that
    each take 1.6 ms on the GPU). Each step spans its GPU work."""
    report = analyze([BACKLOGGED])
    t = report.traces[0]
    v = t.step_variation
    assert v is not None
    assert all(s.gpu_start_us is not None and s.gpu_start_us > s.cpu_start_us + s.cpu_dur_us for s in t.steps)
    naive = spans(t, from_cpu_start=True)
    assert max(naive) / min(naive) >= UNSTABLE_STEP_RATIO
    own = spans(t)
    assert all(abs(a - s.gpu_dur_us) < 2e-3 for a, s in zip(own, t.steps, strict=True))
    assert abs(v.ratio - max(own) / min(own)) < 1e-5 and v.ratio < 1.05 and not v.unstable
    assert "steps vary" not in render(report, "text").decode()
