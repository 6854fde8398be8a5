"""Record each Triton kernel launch (name, grid, bytes of its tensor arguments) into the profiler trace.

Inside ``recording()``, every Triton launch made while the torch profiler records is wrapped in a
CPU op named ``triton::<kernel> grid=(x,y,z) bytes=<n> [flops=<n>]`` (the reader is
``traceadvisor.analyses.triton_launches``). Why an op in the trace rather than a side file: the
record then travels with the trace, is ordered by the same clock, and is tied to its GPU kernel
by the links the trace already has: the launch's driver call (``cuLaunchKernelEx``) carries the
External id of the innermost enclosing CPU op, which is this one. It is a CPU *op* (a
``_RecordFunctionFast`` scope, as Inductor uses for its kernels), not a ``record_function`` user
annotation: annotations push a different correlation kind, so the kernel would not name it as its
op, and every kernel would show up as a top-level user annotation in the per-annotation table.

How the fields are found (Triton 3.0 to 3.9):

* the launch hooks (``triton.knobs.runtime.launch_enter_hook`` / ``launch_exit_hook``, hook
  chains with ``add``/``remove`` from Triton 3.5, a single callable in 3.3-3.4, and the class
  attributes ``CompiledKernel.launch_enter_hook`` / ``launch_exit_hook`` before) run right
  before and after the driver launch, on the launching thread: they open and close the op, so the
  launch lies inside it. They receive only the kernel's name and launch metadata;
* the grid and the argument values come from ``CompiledKernel.launch_metadata(grid, stream,
  *args)``, which Triton calls just before each launch with the final grid; it is wrapped while
  recording. FLOPs come from the kernel's own ``launch_metadata`` function when it declares them
  (Proton's convention: keys ``flops``, ``flops8``, ``flops16``, ...).
* ``TRITON_INTERPRET=1`` runs kernels in Python and fires no launch hook: there
  ``InterpretedFunction.run`` is wrapped instead, so CPU traces carry the same records.

``bytes`` is the sum over tensor arguments of ``numel × element size``: what the kernel reads and
writes if it touches each argument once, the least memory traffic it can have. Kernels replayed
from a CUDA graph are recorded at capture time only.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OP_PREFIX = "triton::"
_FLOP_KEYS = ("flops", "flops8", "flops16", "flops32", "flops64")


@dataclass
class _Pending:
    """What ``launch_metadata`` saw of the launch that is about to happen on this thread."""

    metadata: Any
    kernel: str
    grid: tuple[int, int, int]
    nbytes: int
    tensors: list[Any]


class _State(threading.local):
    pending: _Pending | None = None
    stack: list[Any] | None = None


_state = _State()
_lock = threading.RLock()
_depth = 0
_undo: list[Callable[[], None]] = []


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Record Triton launches made inside this block (nests; a no-op where Triton is not installed).

    Triton is not imported here: it fixes at import time whether its kernels are compiled or
    interpreted (``TRITON_INTERPRET``), which is the program's choice. If the program has not
    imported it yet, the hooks are installed right after it does (an import hook).
    """
    global _depth
    with _lock:
        if _depth == 0:
            if "triton" in sys.modules:
                _install()
            else:
                sys.meta_path.insert(0, _after_import)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _uninstall()


def label(kernel: str, grid: Sequence[int] | None, nbytes: int | None, flops: int | None) -> str:
    """The op name of one launch: ``triton::<kernel> grid=(x,y,z) bytes=<n> flops=<n>`` (known fields only)."""
    parts = [OP_PREFIX + kernel]
    if grid is not None:
        parts.append("grid=(" + ",".join(str(int(g)) for g in grid) + ")")
    if nbytes is not None:
        parts.append(f"bytes={int(nbytes)}")
    if flops is not None:
        parts.append(f"flops={int(flops)}")
    return " ".join(parts)


def tensor_bytes(values: Sequence[Any]) -> tuple[int, list[Any]]:
    """Total bytes of the tensor arguments (tensors, tensor descriptors, reinterpreted tensors) and the tensors."""
    total = 0
    tensors = []
    for v in values:
        t = _tensor_of(v)
        if t is not None:
            total += int(t.numel()) * int(t.element_size())
            tensors.append(t)
    return total, tensors


def _tensor_of(value: Any) -> Any:
    if hasattr(value, "data_ptr") and hasattr(value, "numel") and hasattr(value, "element_size"):
        return value
    base = getattr(value, "base", None)  # TensorDescriptor, triton.reinterpret's TensorWrapper
    if base is not None and hasattr(base, "data_ptr") and hasattr(base, "numel"):
        return base
    return None


def _grid3(grid: Any) -> tuple[int, int, int]:
    g = [*(int(x) for x in tuple(grid)[:3]), 1, 1]  # Triton pads a 1- or 2-D grid with ones
    return g[0], g[1], g[2]


def _declared_flops(values: Mapping[str, Any]) -> int | None:
    found = [int(values[k]) for k in _FLOP_KEYS if isinstance(values.get(k), int | float)]
    return sum(found) if found else None


def _profiling() -> bool:
    import torch.autograd.profiler as autograd_profiler

    return bool(getattr(autograd_profiler, "_is_profiler_enabled", True))


def _open_op(name: str, tensors: list[Any], grid: tuple[int, int, int] | None, nbytes: int | None) -> Any:
    """Enter a CPU op scope named ``name``; the tensors' shapes and dtypes go in with ``record_shapes``."""
    import torch

    fast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)
    op: Any
    if fast is not None:
        extra = {"grid": str(grid), "bytes": nbytes} if grid is not None and nbytes is not None else {}
        try:
            op = fast(name, tensors, extra)  # keyword values land in the op's args (torch ≥ 2.5)
        except TypeError:
            op = fast(name, tensors)
    else:  # torch < 2.2: a user annotation; the reader accepts either kind
        op = torch.autograd.profiler.record_function(name)
    op.__enter__()
    return op


def _push(op: Any) -> None:
    if _state.stack is None:
        _state.stack = []
    _state.stack.append(op)


def _pop() -> Any:
    stack = _state.stack
    return stack.pop() if stack else None


# -- compiled kernels: launch hooks ---------------------------------------------------------------
def _on_launch_metadata(original: Callable[..., Any]) -> Callable[..., Any]:
    def launch_metadata(self: Any, grid: Any, stream: Any, *args: Any) -> Any:
        result = original(self, grid, stream, *args)
        _state.pending = None
        try:
            if _profiling():
                nbytes, tensors = tensor_bytes(args)
                _state.pending = _Pending(result, str(self.name), _grid3(grid), nbytes, tensors)
        except Exception:  # never let bookkeeping break the user's launch
            _state.pending = None
        return result

    launch_metadata.__wrapped__ = original  # type: ignore[attr-defined]
    return launch_metadata


def _enter_hook(metadata: Any) -> None:
    pending, _state.pending = _state.pending, None
    # Launches do not nest: a scope still open here belongs to a launch that failed between the
    # hooks (Triton skips the exit hook then); close it so it does not swallow later launches.
    _close_all()
    op = None
    try:
        if _profiling():
            if pending is not None and pending.metadata is metadata:
                name, grid, nbytes, tensors = pending.kernel, pending.grid, pending.nbytes, pending.tensors
            else:  # an unknown launch path: the name only
                name, grid, nbytes, tensors = _raw_name(metadata), None, None, []
            op = _open_op(label(name, grid, nbytes, _flops_of(metadata)), tensors, grid, nbytes)
    except Exception:  # never let bookkeeping break the user's launch
        op = None
    _push(op)


def _exit_hook(metadata: Any) -> None:
    op = _pop()
    if op is not None:
        with contextlib.suppress(Exception):
            op.__exit__(None, None, None)


def _raw_name(metadata: Any) -> str:
    data = getattr(metadata, "data", None)
    name = data.get("name") if isinstance(data, Mapping) else None
    return str(name or "unknown")


def _flops_of(metadata: Any) -> int | None:
    """FLOPs the kernel declares through its ``launch_metadata`` function, if it has one."""
    try:
        values = metadata.get()  # evaluates the kernel's launch_metadata once (LazyDict caches it)
    except Exception:
        return None
    return _declared_flops(values) if isinstance(values, Mapping) else None


def _close_all() -> None:
    stack = _state.stack
    while stack:
        op = stack.pop()
        if op is not None:
            with contextlib.suppress(Exception):
                op.__exit__(None, None, None)


# -- interpreted kernels (TRITON_INTERPRET=1) -----------------------------------------------------
def _on_interpreted_run(original: Callable[..., Any]) -> Callable[..., Any]:
    def run(self: Any, *args: Any, grid: Any, warmup: Any, **kwargs: Any) -> Any:
        op = None
        if not warmup:
            try:
                if _profiling():
                    op = _interpreted_op(self, args, grid, kwargs)
            except Exception:
                op = None
        try:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            if op is not None:
                with contextlib.suppress(Exception):
                    op.__exit__(None, None, None)

    run.__wrapped__ = original  # type: ignore[attr-defined]
    return run


def _interpreted_op(fn: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
    names = list(getattr(fn, "arg_names", []))
    bound = inspect.signature(fn.fn).bind_partial(*args, **{k: v for k, v in kwargs.items() if k in names})
    bound.apply_defaults()
    values = dict(bound.arguments)
    g = _grid3(grid(values) if callable(grid) else grid)
    nbytes, tensors = tensor_bytes(list(values.values()))
    flops = None
    declared = getattr(fn, "kwargs", {}).get("launch_metadata")
    if callable(declared):
        out = declared(g, None, values)
        flops = _declared_flops(out) if isinstance(out, Mapping) else None
    return _open_op(label(fn.fn.__name__, g, nbytes, flops), tensors, g, nbytes)


# -- installing -----------------------------------------------------------------------------------
def _install() -> None:
    try:
        import triton  # noqa: F401
        from triton.compiler import CompiledKernel
    except Exception:  # not installed, or unusable here: nothing to record
        return
    _patch(CompiledKernel, "launch_metadata", _on_launch_metadata)
    _add_hooks()
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except Exception:
        return
    _patch(InterpretedFunction, "run", _on_interpreted_run)


def _patch(cls: Any, attr: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    original = cls.__dict__.get(attr)
    if original is None or not callable(original):
        return
    setattr(cls, attr, wrap(original))
    _undo.append(lambda: setattr(cls, attr, original))


def _add_hooks() -> None:
    import triton

    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    enter_chain = getattr(runtime, "launch_enter_hook", None)
    if enter_chain is not None and hasattr(enter_chain, "add"):  # Triton ≥ 3.5: hook chains
        exit_chain = getattr(runtime, "launch_exit_hook")  # noqa: B009 - runtime is Any | None here

        def remove() -> None:
            enter_chain.remove(_enter_hook)
            exit_chain.remove(_exit_hook)

        enter_chain.add(_enter_hook)
        exit_chain.add(_exit_hook)
        _undo.append(remove)
        return
    if runtime is not None and hasattr(runtime, "launch_enter_hook"):  # Triton 3.3-3.4: one callable
        _chain_attr(runtime, "launch_enter_hook", _enter_hook, first=False)
        _chain_attr(runtime, "launch_exit_hook", _exit_hook, first=True)
        return
    from triton.compiler import CompiledKernel  # Triton 3.0-3.2: class attributes

    _chain_attr(CompiledKernel, "launch_enter_hook", _enter_hook, first=False)
    _chain_attr(CompiledKernel, "launch_exit_hook", _exit_hook, first=True)


def _chain_attr(owner: Any, attr: str, hook: Callable[[Any], None], first: bool) -> None:
    """Set a single-callable hook slot to ours, calling a hook already there too (Proton's, for one).

    Our exit runs before the other hook's exit and our enter after its enter, so scopes nest.
    """
    previous = getattr(owner, attr, None)
    if previous is None:
        combined: Callable[[Any], None] = hook
    elif first:

        def combined(metadata: Any) -> None:
            hook(metadata)
            previous(metadata)

    else:

        def combined(metadata: Any) -> None:
            previous(metadata)
            hook(metadata)

    setattr(owner, attr, combined)
    _undo.append(lambda: setattr(owner, attr, previous))


class _AfterTritonImport(importlib.abc.MetaPathFinder):
    """Finds ``triton`` with the other finders, then installs the hooks once its import completed."""

    def __init__(self) -> None:
        self._looking = threading.local()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "triton" or getattr(self._looking, "on", False):
            return None
        self._looking.on = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking.on = False
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _InstallingLoader(spec.loader)
        return spec


class _InstallingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        with _lock:
            _remove_finder()
            if _depth > 0:
                _install()


_after_import = _AfterTritonImport()


def _remove_finder() -> None:
    with contextlib.suppress(ValueError):
        sys.meta_path.remove(_after_import)


def _uninstall() -> None:
    _remove_finder()
    while _undo:
        with contextlib.suppress(Exception):
            _undo.pop()()
    # Scopes whose exit hook never ran (a launch that failed between the hooks) are closed here.
    _close_all()
    _state.pending = None


def capture_context(session: object) -> contextlib.AbstractContextManager[None]:
    """A factory for ``traceadvisor.capture.session.extra_contexts``: record launches for a whole capture."""
    return recording()
