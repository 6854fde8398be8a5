"""``--step-on NAME``: every call of a function is a profiler step, without editing the program.

``package.module:function`` (or ``package.module:Class.method``) names an importable function: the
module is imported before the program runs and the attribute is replaced by a wrapper, so the
program's own ``from package.module import function`` picks up the wrapper.

A bare ``NAME`` (or ``Class.method``) is a function the program itself defines. It does not exist
until the program's code runs, and a wrapper must be in place before the first call. Options weighed:
a ``sys.settrace``/``sys.setprofile`` watcher costs on every Python call of the whole run; running the
code with a ``dict`` subclass as globals (to see the definition being stored) takes every global
lookup in the program off CPython's fast path and cannot be the real ``__main__`` module's dict, which
pickling (multiprocessing, DataLoader workers under spawn) needs. Chosen: the program's source is
parsed, and after each module-level statement that binds NAME (``def``, ``async def``, an
assignment, an import) one statement ``NAME = __traceadvisor_step_on__(NAME)`` is inserted, then
the tree is compiled under the program's own file name. Line numbers of the program are unchanged,
so tracebacks and profiler stacks point at the user's lines, and the only cost is the wrapper itself.
Definitions nested in functions are not module-level and are refused with a clear message.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceadvisor.capture.steps import StepClock
from traceadvisor.errors import UsageError

WRAP_NAME = "__traceadvisor_step_on__"
PATCH_NAME = "__traceadvisor_step_on_attribute__"
_MARK = "__traceadvisor_step_on_wrapped__"


@dataclass(frozen=True)
class StepOnSpec:
    """A parsed ``--step-on`` value: ``module`` is None for a function of the program itself."""

    module: str | None
    qualname: str

    @property
    def text(self) -> str:
        return self.qualname if self.module is None else f"{self.module}:{self.qualname}"


def parse(value: str) -> StepOnSpec:
    """``NAME``, ``Class.method``, ``package.module:NAME`` or ``package.module:Class.method``."""
    module, sep, qualname = value.strip().rpartition(":")
    if not sep:
        module, qualname = "", value.strip()
    parts = qualname.split(".")
    if not qualname or len(parts) > 2 or not all(p.isidentifier() for p in parts):
        raise UsageError(
            f"--step-on {value!r}: expected NAME, Class.method, package.module:NAME or package.module:Class.method"
        )
    if sep and not all(p.isidentifier() for p in module.split(".")):
        raise UsageError(f"--step-on {value!r}: {module!r} is not a module name")
    return StepOnSpec(module if sep else None, qualname)


class StepOnWrapper:
    """Builds the wrappers that turn each outermost call into a step on the program's thread."""

    def __init__(self, clock: StepClock) -> None:
        self._clock = clock
        self._thread = threading.get_ident()
        self.wrapped: list[str] = []
        self.refused: list[str] = []

    def wrap(self, fn: Any) -> Any:
        if getattr(fn, _MARK, False):
            return fn
        if not (inspect.isroutine(fn) or isinstance(fn, functools.partial)):
            # A module instance, a class, a value: replacing it by a function would break the program.
            self.refused.append(f"{type(fn).__name__} {getattr(fn, '__qualname__', '')}".strip())
            return fn
        clock, thread = self._clock, self._thread

        @functools.wraps(fn)
        def stepped(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != thread:
                clock.off_thread("step-on")
                return fn(*args, **kwargs)
            clock.call_started()
            try:
                return fn(*args, **kwargs)
            finally:
                clock.call_finished()

        setattr(stepped, _MARK, True)
        self.wrapped.append(getattr(fn, "__qualname__", repr(fn)))
        return stepped

    def patch_attribute(self, owner: Any, name: str) -> None:
        """Replace ``owner.name``, keeping ``staticmethod``/``classmethod`` descriptors intact."""
        raw = inspect.getattr_static(owner, name)
        if isinstance(raw, staticmethod):
            setattr(owner, name, staticmethod(self.wrap(raw.__func__)))
        elif isinstance(raw, classmethod):
            setattr(owner, name, classmethod(self.wrap(raw.__func__)))
        else:
            setattr(owner, name, self.wrap(getattr(owner, name)))

    def globals_for_program(self) -> dict[str, Any]:
        """The names the rewritten program calls."""
        return {WRAP_NAME: self.wrap, PATCH_NAME: self.patch_attribute}


def patch_module_function(spec: StepOnSpec, wrapper: StepOnWrapper) -> None:
    """Import ``spec.module`` (with the program's ``sys.path``) and wrap the named function."""
    assert spec.module is not None
    try:
        module = importlib.import_module(spec.module)
    except ModuleNotFoundError as exc:
        if exc.name and (spec.module == exc.name or spec.module.startswith(exc.name + ".")):
            raise UsageError(f"--step-on {spec.text}: no module named {exc.name!r}") from None
        raise
    owner: Any = module
    *path, attr = spec.qualname.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            raise UsageError(f"--step-on {spec.text}: {spec.module} has no {part!r}")
    if not callable(getattr(owner, attr, None)):
        raise UsageError(f"--step-on {spec.text}: {spec.module} has no function {spec.qualname!r}")
    wrapper.patch_attribute(owner, attr)


def module_origin(name: str) -> Path | None:
    """Where ``name`` would be imported from, without running it (its parents are imported)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.has_location:
        return None
    return Path(spec.origin).resolve()


def insert_wrappers(tree: ast.Module, qualname: str, filename: str) -> ast.Module:
    """Insert the wrapping statement after each module-level binding of ``qualname``."""
    head, _, method = qualname.partition(".")
    count = _rewrite_block(tree.body, head, method)
    if count == 0:
        what = f"class {head} with a method {method!r}" if method else f"function {head!r}"
        raise UsageError(
            f"--step-on {qualname}: {filename} defines no {what} at module level "
            "(for a function in another module use package.module:NAME)"
        )
    return ast.fix_missing_locations(tree)


def _rewrite_block(body: list[ast.stmt], head: str, method: str) -> int:
    count = 0
    i = 0
    while i < len(body):
        node = body[i]
        for block in _nested_blocks(node):
            count += _rewrite_block(block, head, method)
        if _binds(node, head, method):
            body.insert(i + 1, _wrapping_statement(node, head, method))
            count += 1
            i += 1
        i += 1
    return count


def _nested_blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    """Statement lists that still run at module level (not function or class bodies)."""
    blocks: list[list[ast.stmt]] = []
    if isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While)):
        blocks += [node.body, node.orelse]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        blocks.append(node.body)
    elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
        blocks += [node.body, node.orelse, node.finalbody]  # type: ignore[attr-defined]
        blocks += [h.body for h in node.handlers]  # type: ignore[attr-defined]
    elif isinstance(node, ast.Match):
        blocks += [case.body for case in node.cases]
    return blocks


def _binds(node: ast.stmt, head: str, method: str) -> bool:
    if method:
        return isinstance(node, ast.ClassDef) and node.name == head
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name == head
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == head for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return node.value is not None and isinstance(node.target, ast.Name) and node.target.id == head
    if isinstance(node, ast.ImportFrom):
        return any((a.asname or a.name) == head for a in node.names)
    return False


def _wrapping_statement(after: ast.stmt, head: str, method: str) -> ast.stmt:
    line = after.end_lineno or after.lineno
    stmt: ast.stmt
    if method:
        call = ast.Call(
            func=ast.Name(PATCH_NAME, ast.Load()),
            args=[ast.Name(head, ast.Load()), ast.Constant(method)],
            keywords=[],
        )
        stmt = ast.Expr(call)
    else:
        call = ast.Call(func=ast.Name(WRAP_NAME, ast.Load()), args=[ast.Name(head, ast.Load())], keywords=[])
        stmt = ast.Assign(targets=[ast.Name(head, ast.Store())], value=call)
    for node in ast.walk(stmt):
        node.lineno = node.end_lineno = line  # type: ignore[attr-defined]
        node.col_offset = node.end_col_offset = 0  # type: ignore[attr-defined]
    return stmt
