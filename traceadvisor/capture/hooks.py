"""The torch hooks that feed the ``StepClock``: optimizer steps, skipped AMP steps, the next iteration.

Every hook acts only on the thread that runs the program (the one that started the profiler):
``record_function`` ranges such as ``ProfilerStep#N`` belong to the thread that opens them, and an
optimizer stepped on a helper thread is not the training loop.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from traceadvisor.capture.steps import StepClock


class TorchStepHooks:
    """Installs and removes the global hooks; every patch is undone by ``remove``."""

    def __init__(self, clock: StepClock) -> None:
        self._clock = clock
        self._thread = threading.get_ident()
        self._optimizer_handles: list[Any] = []
        self._pre_handle: Any = None
        self._drop_pre_hook = False
        self._forward_hooks: Any = None  # torch's dict of global forward pre-hooks
        self._forward_id: int | None = None
        self._patches: list[tuple[type, str, Callable[..., Any], Callable[..., Any]]] = []
        clock.on_pending = self._arm_forward
        clock.on_markers = self._remove_optimizer_hooks

    def install_optimizer_hooks(self) -> None:
        """Global optimizer pre/post hooks, and wrappers of ``GradScaler.update`` and DataLoader ``__next__``."""
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        post = register_optimizer_step_post_hook(self._after_optimizer_step)
        self._pre_handle = register_optimizer_step_pre_hook(self._before_optimizer_step)
        self._optimizer_handles = [post, self._pre_handle]
        self._patch_grad_scaler()
        self._patch_data_loader()

    def remove(self) -> None:
        self._remove_optimizer_hooks()
        self._arm_forward(False)
        self._forward_hooks = None

    def keep_step_clock_only(self) -> None:
        """After the last profiling window: steps are taken where they end, and only what counts them stays.

        Deferring a step to the next iteration's start (the forward pre-hook armed once per step,
        which takes that step's first ``Module.__call__`` off its fast path; the DataLoader
        ``__next__`` wrapper; the optimizer pre-hook) only keeps ``ProfilerStep`` boundaries out of the
        ``Optimizer.step`` annotation in a trace; with no trace to come those go, and a step is taken
        at once, in the optimizer post-hook (or the ``GradScaler.update`` of a skipped step), which
        stay: they count the steps and time them for ``run.json``, one Python call each per iteration.
        """
        self._clock.on_pending = self._take_at_once
        self._arm_forward(False)
        self._forward_hooks = None
        self._unpatch("__next__")
        # Not removed here: this may run inside the pre-hook itself, and ``Optimizer.step`` iterates
        # the pre-hook dict while calling them (removing an entry would raise there). The next
        # post-hook removes it.
        self._drop_pre_hook = True

    # -- hooks ---------------------------------------------------------------------------------------
    def _after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if threading.get_ident() == self._thread:
            if self._drop_pre_hook:
                self._remove_pre_hook()
            self._clock.optimizer_stepped(id(optimizer))
        else:
            self._clock.off_thread("optimizer")

    def _before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # A step still pending here means no module forward ran since the last optimizer step (a loop
        # of functional calls, or a closure that runs the forward inside Optimizer.step): take it now.
        if threading.get_ident() == self._thread:
            self._clock.iteration_starting()

    def _before_forward(self, module: Any, args: Any) -> None:
        if threading.get_ident() == self._thread:
            self._clock.iteration_starting()

    # -- installation --------------------------------------------------------------------------------
    def _arm_forward(self, armed: bool) -> None:
        """Put the global forward pre-hook in place only while a step is pending.

        Any global module hook takes every ``Module.__call__`` off its fast path (and makes dynamo
        trace ``__call__``), so it must not stay registered. Registering and removing it through
        ``register_module_forward_pre_hook`` allocates a handle each step (about 8 µs a step with
        the forward's slow path, measured on a 2-core EPYC); capture registers it once to get a
        unique hook id, then adds and deletes that entry of torch's global hook dict (about 2 µs).
        ``Module._call_impl`` copies the dict's items before calling the hooks, so deleting the
        entry from inside the hook is safe.
        """
        if self._forward_hooks is None:
            if not armed:
                return
            from torch.nn.modules import module

            handle = module.register_module_forward_pre_hook(self._before_forward)
            self._forward_hooks, self._forward_id = module._global_forward_pre_hooks, handle.id
            handle.remove()
        if armed:
            self._forward_hooks[self._forward_id] = self._before_forward
        else:
            self._forward_hooks.pop(self._forward_id, None)

    def _remove_pre_hook(self) -> None:
        self._drop_pre_hook = False
        if self._pre_handle is not None:
            self._pre_handle.remove()
            self._optimizer_handles.remove(self._pre_handle)
            self._pre_handle = None

    def _take_at_once(self, pending: bool) -> None:
        if pending:
            self._clock.iteration_starting()

    def _remove_optimizer_hooks(self) -> None:
        for handle in self._optimizer_handles:
            handle.remove()
        self._optimizer_handles = []
        self._pre_handle = None
        for cls, name, original, wrapper in reversed(self._patches):
            if cls.__dict__.get(name) is wrapper:  # not replaced by someone else meanwhile
                setattr(cls, name, original)
        self._patches = []

    def _patch_grad_scaler(self) -> None:
        """Wrap ``GradScaler.update`` (class-wide; ``torch.cuda.amp.GradScaler`` inherits it)."""
        import importlib

        scaler_class: Any = None
        for module in ("torch.amp.grad_scaler", "torch.cuda.amp.grad_scaler"):  # the latter before torch 2.3
            try:
                scaler_class = importlib.import_module(module).GradScaler
                break
            except (ImportError, AttributeError):
                continue
        if scaler_class is None:
            return
        original = scaler_class.__dict__.get("update")
        if original is None:
            return
        clock, thread = self._clock, self._thread

        @functools.wraps(original)
        def update(scaler: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(scaler, *args, **kwargs)
            # A disabled scaler never skips (its step() calls optimizer.step() directly).
            if getattr(scaler, "_enabled", True) and threading.get_ident() == thread:
                clock.scaler_updated()
            return result

        self._patch(scaler_class, "update", original, update)

    def _patch_data_loader(self) -> None:
        """Take a pending step when the loop fetches its next batch.

        Fetching the next batch is where most training loops begin an iteration, before the forward.
        It matters where the forward runs inside ``Optimizer.step`` (a closure, as in Lightning's
        automatic optimization): the next forward and the next optimizer pre-hook both lie inside
        the ``Optimizer.step`` annotation, the batch fetch lies between the optimizer steps.
        """
        try:
            from torch.utils.data.dataloader import _BaseDataLoaderIter
        except ImportError:
            return
        original = _BaseDataLoaderIter.__dict__.get("__next__")
        if original is None:
            return
        clock, thread = self._clock, self._thread

        @functools.wraps(original)
        def next_batch(iterator: Any) -> Any:
            if clock.pending and threading.get_ident() == thread:
                clock.iteration_starting()
            return original(iterator)

        self._patch(_BaseDataLoaderIter, "__next__", original, next_batch)

    def _patch(self, cls: type, name: str, original: Callable[..., Any], wrapper: Callable[..., Any]) -> None:
        setattr(cls, name, wrapper)
        self._patches.append((cls, name, original, wrapper))

    def _unpatch(self, name: str) -> None:
        """Put back the original of every patched method called ``name`` (unless replaced meanwhile)."""
        for cls, attr, original, wrapper in [p for p in self._patches if p[1] == name]:
            if cls.__dict__.get(attr) is wrapper:
                setattr(cls, attr, original)
        self._patches = [p for p in self._patches if p[1] != name]
