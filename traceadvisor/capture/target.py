"""The program under capture, run in this process as ``python SCRIPT ARGS`` / ``python -m MODULE ARGS`` would.

Like python: ``sys.argv`` is ``[SCRIPT, *ARGS]`` (the module's file for ``-m``); ``sys.path[0]`` is the
script's directory with symlinks resolved (the working directory for ``-m``; untouched under
``python -P``); the code runs as the ``__main__`` module with ``__file__`` absolute and ``__spec__``
None for a script, the module's spec for ``-m``. An uncaught exception prints the program's
traceback through ``sys.excepthook`` (our own frames trimmed, so it reads as python's) and gives exit
status 1; ``sys.exit(n)`` gives ``n`` (a non-integer is printed and gives 1); KeyboardInterrupt
prints its traceback and gives 130, as a shell reports a python killed by SIGINT.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import traceback
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn

from traceadvisor.capture import stepon
from traceadvisor.errors import UsageError

EXIT_EXCEPTION, EXIT_INTERRUPTED = 1, 130


class TargetKind(StrEnum):
    script = "script"
    module = "module"
    workload = "workload"


@dataclass
class Target:
    """What to run: a script path, a module name or a reference workload, with its arguments."""

    kind: TargetKind
    name: str
    args: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """A short name for the run folder."""
        if self.kind is TargetKind.script:
            return Path(self.name).stem or "script"
        return self.name.replace(".", "-")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "name": self.name, "args": list(self.args)}


@dataclass
class Outcome:
    """How the program ended: ``status`` ok | exit | exception | interrupted, and its exit code."""

    status: str
    code: int
    exception: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "code": self.code, "exception": self.exception}


def check_script(path: str) -> None:
    """Our error (exit 2) for a script that cannot be run, before anything starts."""
    p = Path(path)
    try:
        if p.is_dir():
            raise UsageError(f"{path}: is a directory; give the script file (or -m for a package)")
        if not p.is_file():
            raise UsageError(f"{path}: no such file")
        with p.open("rb"):
            pass
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None


class Program:
    """A target prepared to run in this process; ``installed()`` sets up and restores ``sys``."""

    def __init__(self, target: Target, step_on: stepon.StepOnSpec | None = None) -> None:
        self.target = target
        self.step_on = step_on
        self.argv0 = target.name
        self._code: types.CodeType | None = None
        self._main: types.ModuleType | None = None
        self._workload: Any = None
        self._deferred: BaseException | None = None  # a SyntaxError to raise when the program "runs"

    @contextmanager
    def installed(self) -> Iterator[None]:
        """``sys.argv``, ``sys.path[0]``, ``__main__`` as python sets them; restored afterwards."""
        saved_argv, saved_path = sys.argv, list(sys.path)
        saved_main = sys.modules.get("__main__")
        saved_streams = sys.stdout, sys.stderr
        sys.argv = [self.argv0, *self.target.args]
        if not sys.flags.safe_path and self.target.kind is not TargetKind.workload:
            first = (
                str(Path(self.target.name).resolve().parent)
                if self.target.kind is TargetKind.script
                else str(Path.cwd())
            )
            if sys.path:
                sys.path[0] = first
            else:
                sys.path.insert(0, first)
        try:
            yield
        finally:
            sys.argv = saved_argv
            sys.path[:] = saved_path
            sys.stdout, sys.stderr = saved_streams
            if saved_main is not None:
                sys.modules["__main__"] = saved_main

    def prepare(self, wrapper: stepon.StepOnWrapper | None) -> None:
        """Find and compile the code (inside ``installed()``); patch ``--step-on`` targets.

        Raises UsageError for our errors. An exception from the user's code (a package ``__init__``
        imported to find the module, a ``--step-on`` module that fails on import) propagates.
        """
        kind = self.target.kind
        if self.step_on is not None and self.step_on.module is not None:
            assert wrapper is not None
            own = self._own_file()
            if own is not None and stepon.module_origin(self.step_on.module) == own:
                # ``--step-on train:step`` for the script train.py itself: importing it would run it twice.
                self.step_on = stepon.StepOnSpec(None, self.step_on.qualname)
            else:
                stepon.patch_module_function(self.step_on, wrapper)
        if kind is TargetKind.workload:
            self._workload = _load_workload(self.target.name)
            if self.step_on is not None and self.step_on.module is None:
                assert wrapper is not None
                _patch_workload(self._workload, self.step_on, wrapper, self.target.name)
            return
        rewrite = self.step_on is not None and self.step_on.module is None
        source: str | bytes | None = None
        if kind is TargetKind.script:
            path = os.path.abspath(self.target.name)  # noqa: PTH100 (python's __file__: absolute, links kept)
            source = Path(path).read_bytes()
            loader: Any = importlib.machinery.SourceFileLoader("__main__", path)
            spec = None
        else:
            spec = _module_spec(self.target.name)
            assert spec.origin is not None and spec.loader is not None
            path, loader = spec.origin, spec.loader
            self.argv0 = path
            sys.argv[0] = path
            if rewrite:
                source = _module_source(spec)
        main = types.ModuleType("__main__")
        main.__file__ = path
        main.__cached__ = None  # type: ignore[attr-defined]
        main.__loader__ = loader
        main.__spec__ = spec
        main.__package__ = spec.parent if spec is not None else None
        self._main = main
        try:
            if rewrite:
                assert wrapper is not None and self.step_on is not None and source is not None
                tree = ast.parse(source, filename=path)
                tree = stepon.insert_wrappers(tree, self.step_on.qualname, self.target.name)
                main.__dict__.update(wrapper.globals_for_program())
                self._code = compile(tree, path, "exec", dont_inherit=True)
            elif source is not None:
                self._code = compile(source, path, "exec", dont_inherit=True)
            else:
                self._code = loader.get_code(self.target.name if spec is None else spec.name)
        except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
            self._deferred = exc

    def run(self) -> Outcome:
        """Run the prepared program; never raises what the program raises.

        Except in a child the program forked (``os.fork()``) that runs off the program's end or
        raises: that process must end as python would end it, not finish the parent's capture (a
        second report, a rewritten ``run.json``); see ``end_forked_child``.
        """
        owner = os.getpid()
        try:
            if self._deferred is not None:
                raise self._deferred
            if self._workload is not None:
                self._workload.main(list(self.target.args))
            else:
                assert self._main is not None and self._code is not None
                sys.modules["__main__"] = self._main
                exec(self._code, self._main.__dict__)
        except BaseException as exc:
            if os.getpid() != owner:
                end_forked_child(outcome_of(exc).code)
            return outcome_of(exc)
        if os.getpid() != owner:
            end_forked_child(0)
        return Outcome("ok", 0)

    def _own_file(self) -> Path | None:
        if self.target.kind is TargetKind.script:
            return Path(self.target.name).resolve()
        if self.target.kind is TargetKind.module:
            return stepon.module_origin(self.target.name)
        return None


def end_forked_child(code: int) -> NoReturn:
    """End a child that the program forked, as multiprocessing ends its forked children.

    Python's own exit would run C++ static destructors, and in a child forked while the profiler
    runs kineto's (``libkineto::ConfigLoader``) waits forever on a condition variable whose other
    thread exists only in the parent. So: wait for the child's own threads, run its ``atexit``
    handlers, flush, and ``os._exit`` (``multiprocessing.process._bootstrap`` does the same).
    """
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        _flush()
        os._exit(code)


def outcome_of(exc: BaseException) -> Outcome:
    """The exit status python would give ``exc`` escaping the program, printing what python prints."""
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return Outcome("ok", 0)
        if isinstance(code, int):
            return Outcome("ok" if code == 0 else "exit", code)
        _flush()
        print(code, file=sys.stderr)
        return Outcome("exit", EXIT_EXCEPTION)
    print_program_exception(exc)
    status, code = ("interrupted", EXIT_INTERRUPTED) if isinstance(exc, KeyboardInterrupt) else ("exception", 1)
    return Outcome(status, code, _describe(exc))


def print_program_exception(exc: BaseException) -> None:
    """Print ``exc`` as python prints an uncaught exception: through ``sys.excepthook``, our frames cut."""
    tb = exc.__traceback__
    ours = {Path(__file__).resolve(), Path(stepon.__file__).resolve()}
    while tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve() in ours:
        tb = tb.tb_next
    # The hook prints exc.__traceback__ when it is set, whatever its third argument says.
    exc.with_traceback(tb)
    _flush()
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:
        traceback.print_exception(type(exc), exc, tb)
    sys.stderr.flush()


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _module_spec(name: str) -> importlib.machinery.ModuleSpec:
    """The spec ``python -m name`` runs: the module, or a package's ``__main__``."""
    if not name or not all(part.isidentifier() for part in name.split(".")):
        raise UsageError(f"-m {name!r}: not a module name")
    spec = _find_spec(name)
    if spec.submodule_search_locations is not None:
        spec = _find_spec(f"{name}.__main__", package=name)
    if spec.loader is None or not spec.origin or not spec.has_location:
        raise UsageError(f"-m {name}: has no code to run")
    return spec


def _find_spec(name: str, package: str | None = None) -> importlib.machinery.ModuleSpec:
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise UsageError(f"-m {name}: no module named {exc.name!r}") from None
        raise
    if spec is None:
        if package is not None:
            raise UsageError(f"-m {package}: is a package and has no __main__ module")
        raise UsageError(f"-m {name}: no module named {name!r}")
    return spec


def _module_source(spec: importlib.machinery.ModuleSpec) -> str:
    loader: Any = spec.loader
    source = loader.get_source(spec.name) if hasattr(loader, "get_source") else None
    if source is None:
        raise UsageError(f"--step-on needs the Python source of {spec.name} ({spec.origin})")
    return str(source)


def _load_workload(name: str) -> Any:
    try:
        from traceadvisor.workloads import registry  # type: ignore[import-not-found,unused-ignore]
    except ModuleNotFoundError as exc:
        if exc.name in ("traceadvisor.workloads", "traceadvisor.workloads.registry"):
            raise UsageError("reference workloads are not available in this installation") from None
        raise
    try:
        return registry.get(name)
    except (KeyError, LookupError, ValueError, UsageError) as exc:
        detail = exc.args[0] if exc.args and isinstance(exc.args[0], str) else ""
        raise UsageError(detail or f"no workload {name!r}; see 'traceadvisor workloads'") from None


def _patch_workload(workload: Any, spec: stepon.StepOnSpec, wrapper: stepon.StepOnWrapper, name: str) -> None:
    owner: Any = workload
    *path, attr = spec.qualname.split(".")
    module = getattr(workload, "module", None)
    if not hasattr(workload, path[0] if path else attr) and isinstance(module, str):
        owner = importlib.import_module(module)  # a registry entry naming its module
    for part in path:
        owner = getattr(owner, part, None)
    if owner is None or not callable(getattr(owner, attr, None)):
        raise UsageError(f"--step-on {spec.qualname}: workload {name!r} has no such function")
    wrapper.patch_attribute(owner, attr)
