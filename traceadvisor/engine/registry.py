"""Rule discovery: the built-in ``rules/`` folder, user folders, and the entry-point group.

Rule files are loaded by path under a private module prefix (``rules`` is far too generic a name
to install as a package); each must define exactly one ``Rule`` subclass. Built-in and user rules
go through the same loader. Two rules with one code (or one name) are an error naming both files.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from traceadvisor.engine.isolation import stdout_to_stderr
from traceadvisor.engine.rule import Rule
from traceadvisor.errors import UsageError

ENTRY_POINT_GROUP = "traceadvisor.rules"
CODE_PATTERN = re.compile(r"^[A-Z]{2,4}\d{3}$")
NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


@dataclass(frozen=True)
class RuleSource:
    """A discovered rule class and where it came from."""

    cls: type[Rule]
    origin: str  # a file path, or "entry point NAME"


def builtin_rules_dir() -> Path:
    """The packaged built-in rules (wheel), else the repository's ``rules/`` (editable install)."""
    packaged = Path(__file__).resolve().parents[1] / "_builtin_rules"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "rules"


def load_rule_file(path: Path) -> type[Rule]:
    """Import one rule file and return its single ``Rule`` subclass."""
    module_name = f"traceadvisor._loaded_rules.{path.parent.name}_{path.stem}_{abs(hash(str(path.resolve())))}"
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
    _validate(cls, str(path))
    return cls


def _validate(cls: type[Rule], origin: str) -> None:
    if not CODE_PATTERN.match(cls.code):
        raise UsageError(f"{origin}: rule code {cls.code!r} must be 2-4 capital letters and 3 digits")
    if not NAME_PATTERN.match(cls.name):
        raise UsageError(f"{origin}: rule name {cls.name!r} must be kebab-case")
    if not (cls.__doc__ or "").strip():
        raise UsageError(f"{origin}: rule {cls.code} has no docstring")


def rule_files(folder: Path) -> list[Path]:
    """Rule files in a folder (``*.py``, not starting with ``_``), sorted."""
    if not folder.is_dir():
        raise UsageError(f"{folder}: rules directory does not exist")
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))


def discover(extra_dirs: list[Path] | None = None, include_entry_points: bool = True) -> list[RuleSource]:
    """All rules: built-in, then each extra folder, then entry points; clashes are errors."""
    sources: list[RuleSource] = []
    for folder in [builtin_rules_dir(), *(extra_dirs or [])]:
        for path in rule_files(folder):
            sources.append(RuleSource(load_rule_file(path), str(path)))
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


def _check_clashes(sources: list[RuleSource]) -> None:
    by_code: dict[str, RuleSource] = {}
    by_name: dict[str, RuleSource] = {}
    for s in sources:
        for key, seen in ((s.cls.code, by_code), (s.cls.name, by_name)):
            other = seen.get(key)
            if other is not None:
                raise UsageError(f"rule {key!r} is defined twice: {other.origin} and {s.origin}")
            seen[key] = s
