#!/usr/bin/env python3
"""Step time of a training loop after a thread-mode analysis ran past ``analysis_timeout`` (issue 10).

Before the fix, an analysis past its timeout was "abandoned" but its thread went on analysing and
holding the GIL: the loop's steps stayed slow for the rest of that analysis (1.3 ms -> 130 ms). Now
the advisor cancels it (``analysis.analyze(cancel=...)``) and the steps return to their speed.

The slow analysis is a rule that spins in Python for ``--spin`` seconds (loaded through
``rules_dir``, as ``--rules-dir`` loads rules). The loop (an MLP 256-512-1, batch 64, forward,
backward, SGD, one torch thread, ``advisor.poll()`` each step) is timed in three phases: before
the analysis (**idle**), while it runs (**busy**, until the timeout is reported), and for
``--after`` seconds after the timeout was reported (**after**). It prints each phase's mean,
median and 90th-percentile step: a thread holding the GIL delays a step by up to the switch
interval (5 ms) each time the loop wants the GIL back, so the mean moves more than the median.

    .venv/bin/python bench/advisor_thread_timeout.py                       # this tree
    PYTHONPATH=/tmp/base .venv/bin/python bench/advisor_thread_timeout.py  # another checkout
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

SPIN_RULE = '''
"""BEN900: spins in Python (a stand-in for a long analysis)."""

import time
from collections.abc import Iterator

from traceadvisor import Finding, Rule, Severity, Trace


class Spin(Rule):
    """Spins.

    ## Why it matters
    It keeps the analysis busy.
    ## How it shows up in a trace
    Not at all.
    ## How to fix
    Nothing to fix.
    ## Options
    None.
    ## References
    - https://pytorch.org/docs/stable/profiler.html
    """

    code = "BEN900"
    name = "spin"
    severity = Severity.low
    requires = frozenset()

    def check(self, trace: Trace) -> Iterator[Finding]:
        end = time.monotonic() + SPIN_S
        while time.monotonic() < end:
            pass
        yield from ()
'''

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "pair_tf32_before.json.gz"


class _Seen(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.timed_out = False

    def emit(self, record: logging.LogRecord) -> None:
        if "was not analysed" in record.getMessage():
            self.timed_out = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=1.0, help="analysis_timeout, s")
    parser.add_argument("--spin", type=float, default=20.0, help="how long the slow rule runs, s")
    parser.add_argument("--after", type=float, default=3.0, help="seconds timed after the timeout")
    args = parser.parse_args()

    import torch

    from traceadvisor import Advisor

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randn(64, 1)

    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules"
        rules.mkdir()
        (rules / "spin.py").write_text(SPIN_RULE.replace("SPIN_S", repr(args.spin)))
        seen = _Seen()
        logging.getLogger("traceadvisor").addHandler(seen)
        advisor = Advisor(Path(tmp) / "prof", mode="thread", analysis_timeout=args.timeout, rules_dir=rules)

        def step() -> float:
            t0 = time.perf_counter()
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            advisor.poll()
            return (time.perf_counter() - t0) * 1e3

        for _ in range(200):  # warm-up: allocator, first calls
            step()
        idle = [step() for _ in range(500)]
        advisor.submit_trace(FIXTURE)
        busy: list[float] = []
        deadline = time.monotonic() + args.timeout + 60
        while not seen.timed_out and time.monotonic() < deadline:
            busy.append(step())
        after: list[float] = []
        end = time.monotonic() + args.after
        while time.monotonic() < end:
            after.append(step())
        advisor.close(timeout=0)

    print(f"analysis_timeout {args.timeout:g} s, slow rule {args.spin:g} s, torch {torch.__version__}")
    for name, steps in (("idle", idle), ("busy", busy), ("after", after)):
        p90 = statistics.quantiles(steps, n=10)[-1]
        print(
            f"{name:>5}: step mean {statistics.fmean(steps):7.3f} ms, median {statistics.median(steps):7.3f} ms, "
            f"p90 {p90:7.3f} ms over {len(steps)} steps"
        )
    print(f"after/idle (mean step): {statistics.fmean(after) / statistics.fmean(idle):.2f}")


if __name__ == "__main__":
    main()
