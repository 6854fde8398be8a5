"""When does a profiler step end? ``StepClock`` turns what the program does into ``prof.step()`` calls.

Three sources, in order of precedence:

- ``--step-on NAME``: each (outermost) call of that function starts a step. Explicit, so nothing
  else counts.
- ``traceadvisor.step()`` markers: the first marker switches the clock to markers for the rest of the
  run (optimizer steps stop counting, so the two never double count).
- Optimizer steps (the default): a global ``Optimizer.step`` post-hook ends the iteration. The hook
  runs *inside* the ``Optimizer.step#X.step`` annotation, so calling ``prof.step()`` there makes
  ``ProfilerStep#N`` end and ``#N+1`` begin inside that annotation: the spans overlap without nesting
  and the open optimizer annotation is cut at each window end (trace-format §10.4). The clock
  therefore only marks the step as *pending* and takes it when the next iteration starts: at the next
  batch fetched from a DataLoader, at the next module forward (a global forward pre-hook, registered
  only while a step is pending so the hot path of every ``Module.__call__`` stays hook-free), at
  the next optimizer step for loops with neither, or at the end of the run. ``ProfilerStep``
  boundaries then fall between iterations.

A GradScaler step skipped for inf/NaN gradients never calls ``optimizer.step()``, so no post-hook
fires; if every step were skipped (a diverged fp16 run, or the first iterations while the scale
backs off from 2**16) the schedule would stall and nothing would be recorded. ``GradScaler.update()``
runs once per iteration whether or not the step was skipped, so an ``update()`` with no optimizer
step since the previous one ends an iteration too. Counting ``zero_grad`` or backward calls instead
would miscount gradient accumulation and loops that call ``zero_grad`` twice.

Several optimizers stepped once per iteration (GANs, separate optimizers for parts of a model) would
make one iteration several steps. Only the *lead* optimizer, the first one seen stepping, ends an
iteration; when another optimizer steps twice with no lead step in between, the lead has gone quiet
(a warm-up optimizer replaced by the main one) and that optimizer becomes the lead.

The clock is plain Python so its logic is testable without torch; ``hooks`` wires it to torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from enum import StrEnum


class StepSource(StrEnum):
    """What ends a step in this run."""

    optimizer = "optimizer"
    marker = "marker"
    call = "step-on"


class StepClock:
    """Decides when ``advance`` (the session's ``prof.step()``) runs."""

    def __init__(self, advance: Callable[[], None], source: StepSource = StepSource.optimizer) -> None:
        self._advance = advance
        self.source = source
        self.pending = False
        self.counts: Counter[str] = Counter()
        # Set by the torch hooks: arm/disarm the next-iteration trigger, drop the optimizer hooks.
        self.on_pending: Callable[[bool], None] = _ignore_bool
        self.on_markers: Callable[[], None] = _ignore
        self._lead: int | None = None
        self._others: dict[int, int] = {}
        self._stepped_since_update = False
        self._depth = 0
        self.off_threads: list[str] = []  # names of other threads that stepped (ignored)

    # -- optimizer source ------------------------------------------------------------------------
    def optimizer_stepped(self, optimizer_id: int) -> None:
        """An ``Optimizer.step`` returned (its post-hook ran)."""
        if self.source is not StepSource.optimizer:
            return
        if self._lead is None:
            self._lead = optimizer_id
        if optimizer_id != self._lead:
            seen = self._others.get(optimizer_id, 0) + 1
            if seen < 2:
                self._others[optimizer_id] = seen
                return
            self._lead = optimizer_id
            self.counts["lead_changes"] += 1
        self._others.clear()
        self._stepped_since_update = True
        self.counts["optimizer"] += 1
        self._set_pending()

    def scaler_updated(self) -> None:
        """``GradScaler.update()`` ran: without a lead step since the last one, the step was skipped."""
        if self.source is not StepSource.optimizer:
            return
        if not self._stepped_since_update:
            self.counts["scaler_skipped"] += 1
            self._set_pending()
        self._stepped_since_update = False

    def iteration_starting(self) -> None:
        """The next iteration begins (a module forward, an optimizer step, the end of the run)."""
        if self.pending:
            self._clear_pending()
            self._advance()

    # -- markers -----------------------------------------------------------------------------------
    def marker(self) -> None:
        """``traceadvisor.step()`` was called."""
        if self.source is StepSource.call:
            self.counts["markers_ignored"] += 1
            return
        if self.source is StepSource.optimizer:
            self.source = StepSource.marker
            if self.pending:
                self._clear_pending()
            self.on_markers()
        self.counts["marker"] += 1
        self._advance()

    # -- --step-on ---------------------------------------------------------------------------------
    def call_started(self) -> None:
        """The ``--step-on`` function was entered; only the outermost of recursive calls is a step."""
        self._depth += 1
        if self._depth == 1:
            self.counts["call"] += 1
            self._advance()

    def call_finished(self) -> None:
        self._depth -= 1

    # -- another thread --------------------------------------------------------------------------------
    def off_thread(self, what: str) -> None:
        """A step signal (``optimizer``, ``marker``, ``step-on``) on a thread other than the program's:
        ignored, and counted so that a run without steps can say why."""
        import threading

        self.counts[f"off_thread:{what}"] += 1
        name = threading.current_thread().name
        if name not in self.off_threads and len(self.off_threads) < 3:
            self.off_threads.append(name)

    def off_thread_counts(self) -> dict[str, int]:
        """``{what: count}`` of the step signals ignored on other threads."""
        labels = {"optimizer": "optimizer steps", "marker": "traceadvisor.step() calls", "step-on": "--step-on calls"}
        return {labels[k.split(":", 1)[1]]: n for k, n in self.counts.items() if k.startswith("off_thread:") and n}

    # -- internals ---------------------------------------------------------------------------------
    def _set_pending(self) -> None:
        if not self.pending:
            self.pending = True
            self.on_pending(True)

    def _clear_pending(self) -> None:
        self.pending = False
        self.on_pending(False)


def _ignore() -> None:
    return None


def _ignore_bool(_: bool) -> None:
    return None
