"""Rule discovery: the built-in ``rules/`` folder, user folders, and the entry-point group.

Rule files are loaded by path under a private module prefix (``rules`` is far too generic a name
to install as a package); each must define exactly one ``Rule`` subclass. Built-in and user rules
go through the same loader. Two rules with one code (or one name), two rules claiming one idle
cause, and a user rule in a built-in rule family (``GK``, ``SY``, ...) are errors naming the files.

A rules folder may hold shared helper modules (files starting with ``_``, not loaded as rules):
while the folder's rule files load, the folder is first on ``sys.path``, so a rule file can
``import _helpers`` at its top level, as a script imports a module beside it; the folder's modules
are then taken out of ``sys.modules`` again, so that another folder's ``_helpers.py`` is its own.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from traceadvisor.analyses.idle import IdleCause
from traceadvisor.engine import claimed_by
from traceadvisor.engine.isolation import stdout_to_stderr
from traceadvisor.engine.rule import AnyRule, Rule
from traceadvisor.errors import UsageError

ENTRY_POINT_GROUP = "traceadvisor.rules"
CODE_PATTERN = re.compile(r"^[A-Z]{2,4}\d{3}$")
NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")

_PREFIX = "traceadvisor._loaded_rules."


@dataclass(frozen=True)
class RuleSource:
    """A discovered rule class and where it came from."""

    cls: type[AnyRule]
    origin: str  # a file path, or "entry point NAME"
    builtin: bool = False


def builtin_rules_dir() -> Path:
    """The packaged built-in rules (wheel), else the repository's ``rules/`` (editable install)."""
    packaged = Path(__file__).resolve().parents[1] / "_builtin_rules"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "rules"


def family(code: str) -> str:
    """A rule code's family: its letters (``GK`` of ``GK101``)."""
    return code.rstrip("0123456789")


def load_rule_file(path: Path) -> type[AnyRule]:
    """Import one rule file and return its single ``Rule`` subclass."""
    with _folder_importable(path.parent):
        return _load_rule_file(path)


def _load_rule_file(path: Path) -> type[AnyRule]:
    module_name = f"{_PREFIX}{path.parent.name}_{path.stem}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: cannot load rule file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        # A rule file's top level is user code: its print must not reach stdout (the JSON report),
        # and sys.exit() there must not end the run as if all went well.
        with stdout_to_stderr():
            spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise UsageError(f"{path}: rule file fails to import: {type(exc).__name__}: {exc}") from None
    found = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module_name
    ]
    if len(found) != 1:
        raise UsageError(f"{path}: a rule file defines exactly one Rule subclass (found {len(found)})")
    cls = found[0]
    _check_options_bound(cls, vars(module).get("Options"), module_name, str(path))
    _validate(cls, str(path))
    return cls


@contextmanager
def _folder_importable(folder: Path) -> Iterator[None]:
    """``folder`` first on ``sys.path`` while its rule files load; the modules imported from it
    leave ``sys.modules`` afterwards (the rules keep their references), so two folders' helper
    modules of one name do not meet."""
    where = str(folder.resolve())
    before = set(sys.modules)
    sys.path.insert(0, where)
    try:
        yield
    finally:
        sys.path.remove(where)
        for name in set(sys.modules) - before:
            file = getattr(sys.modules[name], "__file__", None)
            if file is not None and not name.startswith(_PREFIX) and Path(file).resolve().is_relative_to(where):
                del sys.modules[name]


def _check_options_bound(cls: type[AnyRule], module_options: object, module_name: str, origin: str) -> None:
    """A module that defines an ``Options`` dataclass meant it for its rule: not binding it would
    only show when a finding reads an option the default ``NoOptions`` lacks."""
    if (
        isinstance(module_options, type)
        and dataclasses.is_dataclass(module_options)
        and module_options.__module__ == module_name
        and cls.Options is not module_options
    ):
        raise UsageError(
            f"{origin}: {cls.__name__} does not bind the module's Options: write class {cls.__name__}(Rule[Options])"
        )


def _validate(cls: type[AnyRule], origin: str) -> None:
    if not CODE_PATTERN.match(cls.code):
        raise UsageError(f"{origin}: rule code {cls.code!r} must be 2-4 capital letters and 3 digits")
    if not NAME_PATTERN.match(cls.name):
        raise UsageError(f"{origin}: rule name {cls.name!r} must be kebab-case")
    if not (cls.__doc__ or "").strip():
        raise UsageError(f"{origin}: rule {cls.code} has no docstring")
    bad = [c for c in cls.claims if not isinstance(c, IdleCause)]
    if bad:
        known = ", ".join(f"IdleCause.{c.name}" for c in IdleCause)
        raise UsageError(f"{origin}: rule {cls.code} claims {bad[0]!r}, not an IdleCause (one of {known})")


def rule_files(folder: Path) -> list[Path]:
    """Rule files in a folder (``*.py``, not starting with ``_``: those are helper modules), sorted."""
    if not folder.is_dir():
        raise UsageError(f"{folder}: rules directory does not exist")
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))


def discover(extra_dirs: list[Path] | None = None, include_entry_points: bool = True) -> list[RuleSource]:
    """All rules: built-in, then each extra folder, then entry points; clashes are errors."""
    builtin = builtin_rules_dir()
    sources = _load_folder(builtin, builtin=True)
    for folder in extra_dirs or []:
        sources.extend(_load_folder(folder, builtin=False))
    if include_entry_points:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                with stdout_to_stderr():
                    provided = ep.load()()
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                raise UsageError(f"entry point {ep.name}: cannot load rules: {type(exc).__name__}: {exc}") from None
            for cls in provided:
                if not (isinstance(cls, type) and issubclass(cls, Rule)):
                    raise UsageError(f"entry point {ep.name}: {cls!r} is not a Rule subclass")
                _validate(cls, f"entry point {ep.name}")
                sources.append(RuleSource(cls, f"entry point {ep.name}"))
    _check_clashes(sources)
    return sources


def _load_folder(folder: Path, builtin: bool) -> list[RuleSource]:
    files = rule_files(folder)
    with _folder_importable(folder):
        return [RuleSource(_load_rule_file(path), str(path), builtin) for path in files]


def _check_clashes(sources: list[RuleSource]) -> None:
    by_code: dict[str, RuleSource] = {}
    by_name: dict[str, RuleSource] = {}
    for s in sources:
        for key, seen in ((s.cls.code, by_code), (s.cls.name, by_name)):
            other = seen.get(key)
            if other is not None:
                raise UsageError(f"rule {key!r} is defined twice: {other.origin} and {s.origin}")
            seen[key] = s
    # The README promises user codes never clash with the built-in families: a later built-in rule
    # of that family (GK104) would otherwise collide with a user's GK104 on upgrade.
    builtin_families = {family(s.cls.code): s for s in sources if s.builtin}
    for s in sources:
        mine = builtin_families.get(family(s.cls.code))
        if not s.builtin and mine is not None:
            raise UsageError(
                f"{s.origin}: rule code {s.cls.code} is in the built-in family {family(s.cls.code)} "
                f"(of {mine.cls.code}); use letters of your own"
            )
    owner: dict[IdleCause, RuleSource] = {}
    for s in sources:
        for cause in sorted(s.cls.claims):
            other = owner.get(cause)
            if other is not None:
                raise UsageError(
                    f"idle cause {cause.value!r} is claimed by two rules: "
                    f"{other.cls.name} ({other.origin}) and {s.cls.name} ({s.origin})"
                )
            owner[cause] = s


def claims_of(sources: list[RuleSource]) -> dict[str, str | None]:
    """``engine.claimed_by`` of the discovered rules (before selection)."""
    return claimed_by([s.cls for s in sources])
