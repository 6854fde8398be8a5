"""TQ101: the trace lacks capture options some rules need, so those checks could not run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from traceadvisor.rules_api import Capability, Finding, Rule, Severity, Trace, trace_capabilities

# What each capture option unlocks (the rules that need it say so in `traceadvisor rules`).
UNLOCKS = {
    Capability.gpu: "GPU timelines: idle gaps, launch overhead, copies, kernels",
    Capability.steps: "per-step metrics and the steady-state window",
    Capability.shapes: "FLOP/byte estimates, fp32-matmul and attention checks (record_shapes=True)",
    Capability.stack: "source lines for findings (with_stack=True)",
}


@dataclass(frozen=True)
class Options:
    report_stack: bool = True  # also report a missing Python stack (source lines)


class MissingCaptureFlags(Rule[Options]):
    """Capture options were off, so some checks could not run or findings lack source lines.

    ## Why it matters
    Several rules need data that the profiler records only when asked: input shapes for FLOP
    and byte estimates, Python stacks for source lines, a schedule for steps. Without them the
    report is silent on those problems, which is not the same as their absence.

    ## How it shows up in a trace
    No ``record_shapes``/``with_stack`` top-level flags and no ``Input Dims`` or
    ``python_function`` events; no ``ProfilerStep#N`` annotations; no GPU events.

    ## How to fix
    Profile with ``torch.profiler.profile(activities=[CPU, CUDA], schedule=torch.profiler.schedule(
    wait=1, warmup=1, active=3), record_shapes=True, with_stack=True)`` and call ``prof.step()``
    each iteration, or run ``traceadvisor capture train.py``.

    ## Options
    - `report_stack`: also report a missing Python stack (default true).

    ## References
    - https://pytorch.org/docs/stable/profiler.html
    """

    code = "TQ101"
    name = "missing-capture-flags"
    severity = Severity.low
    requires = frozenset()

    def check(self, trace: Trace) -> Iterator[Finding]:
        opts = self.options
        have = trace_capabilities(trace)
        missing = [c for c in UNLOCKS if c not in have and (c is not Capability.stack or opts.report_stack)]
        if not missing:
            return
        what = "; ".join(f"{c.value}: {UNLOCKS[c]}" for c in missing)
        yield self.finding(
            trace,
            message=(
                f"The trace was captured without {', '.join(c.value for c in missing)}, "
                f"so these were not checked: {what}."
            ),
            recommendation="Re-capture with: " + "; ".join(c.how_to_capture for c in missing) + ".",
            severity=Severity.low,
            data={"missing": [c.value for c in missing]},
        )
