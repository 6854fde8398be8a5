"""TQ102: too few profiler steps to tell the steady state from warm-up and outliers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from traceadvisor.rules_api import Finding, Rule, Severity, Trace


@dataclass(frozen=True)
class Options:
    min_steps: int = 2  # fewer complete steps than this cannot show a steady state


class TooFewSteps(Rule[Options]):
    """Too few profiler steps were recorded to judge the steady state.

    ## Why it matters
    The first steps after the profiler starts pay for lazy initialisation, autotuning and
    allocator growth; one step can also be an outlier. With fewer than two steps every per-step
    figure in the report may describe a transient, not the training loop.

    ## How it shows up in a trace
    Fewer than ``min_steps`` ``ProfilerStep#N`` annotations (none at all without a schedule).

    ## How to fix
    Use a schedule with warm-up and several active steps:
    ``schedule=torch.profiler.schedule(wait=1, warmup=1, active=3)`` and call ``prof.step()`` at
    the end of each iteration (``traceadvisor capture`` does this for unmodified scripts).

    ## Options
    - `min_steps`: the fewest steps that count as enough (default 2).

    ## References
    - https://pytorch.org/docs/stable/profiler.html#torch.profiler.schedule
    """

    code = "TQ102"
    name = "too-few-steps"
    severity = Severity.low
    requires = frozenset()

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        n = len(trace.steps)
        if n >= opts.min_steps:
            return
        got = "no ProfilerStep annotations" if n == 0 else f"only {n} profiler step"
        yield self.finding(
            trace,
            message=f"The trace has {got}; per-step figures may describe warm-up or an outlier, not the steady state.",
            recommendation=(
                "Profile with schedule=torch.profiler.schedule(wait=1, warmup=1, active=3) and call prof.step() "
                "each iteration."
            ),
            severity=Severity.low,
            data={"steps": n},
        )
