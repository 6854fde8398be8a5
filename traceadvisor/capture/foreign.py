"""Noticing a profiler that the program starts itself, before it starts.

Kineto keeps one profiling session per process. A second ``torch.profiler`` started while capture's
is prepared or recording does not fail: it replaces the session, so whichever profiler stops first
takes the events and the other gets none (torch 2.13 CPU: the program's profiler around the whole
loop recorded 0 events instead of 2,406), and on CUDA capture's export of a cycle whose session was
replaced crashed the process (SIGSEGV in ``export_chrome_trace``). Capture must therefore get out of
the way *before* the program's profiler touches kineto.

Every torch profiler (``torch.profiler.profile``, ``torch.autograd.profiler.profile``,
``emit_nvtx``, ``emit_itt``, and so Lightning's and Hugging Face's profilers) reaches kineto through
two functions that ``torch.autograd.profiler`` calls by their module-level names:
``_prepare_profiler`` (at warm-up or ``__enter__``) and ``_enable_profiler`` (when recording
starts). ``ForeignProfilerWatch`` wraps those two names; a call that is not capture's own runs
``on_foreign`` first, then goes on unchanged. Outside those calls the wrappers cost nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_ENTRY_POINTS = ("_prepare_profiler", "_enable_profiler")


class ForeignProfilerWatch:
    """Wraps kineto's entry points in ``torch.autograd.profiler``; ``remove`` puts them back."""

    def __init__(self, is_ours: Callable[[], bool], on_foreign: Callable[[], None]) -> None:
        self._is_ours = is_ours
        self._on_foreign = on_foreign
        self._patches: list[tuple[Any, str, Any, Any]] = []

    def install(self) -> None:
        from torch.autograd import profiler as autograd_profiler

        for name in _ENTRY_POINTS:
            original = getattr(autograd_profiler, name, None)
            if original is None:
                continue
            wrapper = self._wrap(original)
            setattr(autograd_profiler, name, wrapper)
            self._patches.append((autograd_profiler, name, original, wrapper))

    def remove(self) -> None:
        for module, name, original, wrapper in reversed(self._patches):
            if getattr(module, name, None) is wrapper:  # not replaced by someone else meanwhile
                setattr(module, name, original)
        self._patches = []

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        is_ours, on_foreign = self._is_ours, self._on_foreign

        def entry(*args: Any, **kwargs: Any) -> Any:
            if not is_ours():
                try:
                    on_foreign()
                except Exception:  # capture's trouble must never stop the program's profiler
                    pass
            return original(*args, **kwargs)

        entry.__wrapped__ = original  # type: ignore[attr-defined]
        return entry


def foreign_profiler_active() -> bool:
    """Is a profiler enabled on this thread (by any means, capture's own excepted by the caller)?

    A backstop for profilers enabled without going through ``torch.autograd.profiler`` (a direct
    ``torch._C._autograd._enable_profiler`` call): kineto's thread-local state says so.
    """
    try:
        import torch

        return bool(torch._C._autograd._profiler_enabled())
    except Exception:  # an older torch without the call: rely on the watch alone
        return False


def calling_site() -> str | None:
    """``file:line`` of the innermost frame outside torch, traceadvisor and ``contextlib``: where the
    program started its profiler."""
    import contextlib
    import traceback
    from pathlib import Path

    import torch

    import traceadvisor

    skip = [Path(m.__file__ or "").resolve().parent for m in (torch, traceadvisor)]
    helper = Path(contextlib.__file__).resolve()
    for frame in reversed(traceback.extract_stack()):
        if frame.filename.startswith("<"):
            continue
        path = Path(frame.filename).resolve()
        if path == helper or any(path.is_relative_to(folder) for folder in skip):
            continue
        return f"{frame.filename}:{frame.lineno}"
    return None
