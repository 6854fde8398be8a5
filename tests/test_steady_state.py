"""The loop's steady state (``whatif.replay._Window``): a short window's steps are replayed again
from the state they left until the loop settles, and the predicted step is the spacing of the last
step's ends between the last two passes. Checked on run 31's traces (fixtures/pairs12_runs/run_31,
H200), where one later pass was not always enough."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

import traceadvisor.whatif.replay as rp
from traceadvisor.trace.load import load_file
from traceadvisor.trace.model import Trace
from traceadvisor.whatif.host_time import HostTimeMap
from traceadvisor.whatif.profiler_cost import unprofiled_overrides
from traceadvisor.whatif.replay import Overrides, replay
from traceadvisor.whatif.savings import with_profiler_removed
from traceadvisor.whatif.scenarios import SCENARIOS, step_time_ns

RUN = Path(__file__).resolve().parent.parent / "fixtures" / "pairs12_runs" / "run_31" / "traces"
TRACES = sorted(p.name for p in RUN.glob("p12_*_stack.json.gz"))


@cache
def _trace(name: str) -> Trace:
    return load_file(RUN / name)


@contextmanager
def _passes(least: int, most: int) -> Iterator[None]:
    old = rp.LATER_PASSES, rp.MAX_LATER_PASSES
    rp.LATER_PASSES, rp.MAX_LATER_PASSES = least, most
    try:
        yield
    finally:
        rp.LATER_PASSES, rp.MAX_LATER_PASSES = old


def _step(trace: Trace, ov: Overrides | None = None) -> float:
    return step_time_ns(replay(trace, with_profiler_removed(trace, ov or Overrides())))


@pytest.mark.parametrize("name", TRACES)
def test_the_settled_step_is_what_more_passes_give(name: str) -> None:
    """Where the replay stops (the loop settled), six more passes do not move the step by more than
    0.2%: the criterion stops at the steady state, not before it."""
    t = _trace(name)
    ov = unprofiled_overrides(t)
    settled = step_time_ns(replay(t, ov))
    with _passes(8, 8):
        longer = step_time_ns(replay(t, ov))
    assert settled == pytest.approx(longer, rel=0.002), (settled, longer)


@pytest.mark.parametrize("name", TRACES)
def test_the_first_pass_ends_where_the_steps_do(name: str) -> None:
    """The window's first pass (the trace itself) ends each step where the replay's steps end it:
    the later passes are measured from the same point."""
    t = _trace(name)
    seen: list[tuple[list[int], int]] = []
    period = rp._Window.period_ns

    def spy(self: rp._Window, steps: tuple[rp.StepReplay, ...]) -> float | None:
        seen.append((self.ends[0], steps[-1].replayed_end_ns))
        return period(self, steps)

    rp._Window.period_ns = spy  # type: ignore[method-assign]
    try:
        replay(t, unprofiled_overrides(t))
    finally:
        rp._Window.period_ns = period  # type: ignore[method-assign]
    assert seen and seen[0][0][-1] == seen[0][1]


def test_a_drained_backlog_is_not_read_as_the_step() -> None:
    """Run 31's first capture of p12_gpt_compile_before: its host slow (33 ms profiled steps against
    23-24 ms on the other two captures), its first step leaving the GPU 2.0 ms behind. One later pass
    drained 1.3 ms of that backlog and read it as a 14.64 ms step; the loop settles at its host's
    time a step (15.90 ms), one pass later. Fusing its kernels (the compile scenario's GPU part)
    then read as a 1.26 ms loss; settled, a change that only shortens kernels saves nothing on a
    loop its host paces, and loses nothing."""
    t = _trace("p12_gpt_compile_before_stack.json.gz")
    ov = SCENARIOS["compile"].build(t)
    gpu_only = replace(ov, host_removed=HostTimeMap())
    with _passes(1, 1):
        one = _step(t), _step(t, gpu_only)
    settled = _step(t), _step(t, gpu_only)
    assert one[1] - one[0] > 0.05 * one[0]  # the artefact: a GPU-only change lengthening the step
    assert settled[0] > 1.05 * one[0]
    assert settled[1] == pytest.approx(settled[0], rel=0.001)
    # and the whole scenario (its host part too) now saves time on this capture
    assert _step(t, ov) < 0.9 * settled[0]


@pytest.mark.parametrize("name", TRACES)
def test_shortening_kernels_never_lengthens_the_step(name: str) -> None:
    """Every kernel 10% shorter, nothing else changed: the predicted step can only shrink (no event
    of the replay waits longer for shorter work). One later pass broke this where it stopped short
    of the steady state."""
    t = _trace(name)
    assert _step(t, Overrides(kernel_scale=0.9)) <= _step(t) * 1.0005
