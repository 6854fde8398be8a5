"""Lowering this process's CPU priority: the advisor's analysis worker, first thing it does.

Its own module, under the package root whose ``__init__`` imports nothing: the worker's command
(``advisor.backend._WORKER_MAIN``) calls it before importing ``traceadvisor.advisor``, whose
imports take ~0.2 s of CPU. Run at normal priority, those 0.2 s took a core from a training loop
whose ops use every core (OpenMP's barriers wait for the preempted thread): three steps of a
30 ms CPU loop ran at 80 ms each (tests/test_unprofiled_steps.py, on two cores), and the advisor
timed them as the loop's unprofiled steps.
"""

from __future__ import annotations

import os


def lower_priority(priority: str) -> None:
    """Make the worker yield the CPU to the training loop, before the imports.

    ``"idle"``: the ``SCHED_IDLE`` policy where there is one (Linux): the task runs only on CPU time
    no normal task wants (weight 3 against a nice-0 task's 1024) and a waking normal task preempts
    it at once; elsewhere nice 19. A number: that much niceness (CFS shares a contended core by
    weight: nice 19 gets ~1.5% of a nice-0 task's time, nice 10 ~10%). Lowering one's own
    priority needs no privilege.
    """
    try:
        if priority == "idle":
            if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            else:
                os.nice(19)
        elif int(priority):
            os.nice(int(priority))
    except (OSError, ValueError):
        pass  # a platform without the call: run at normal priority
