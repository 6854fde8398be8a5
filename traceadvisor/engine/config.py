"""Configuration: ``[tool.traceadvisor]`` in pyproject.toml, ``traceadvisor.toml``, or ``--config``.

Keys: ``select`` and ``ignore`` (lists of codes, code prefixes or names), ``severity`` (a table of
code-or-name → low/medium/high), ``thresholds`` (``high_pct``, ``medium_pct``), ``rules-dir`` (list
of folders), ``rule-timeout`` (seconds one rule may run on one trace; default 60), one table per
rule (by name or code) with its options, e.g. ``[tool.traceadvisor.rules.idle-gap] min_gap_us = 50``,
and ``[tool.traceadvisor.gpu]``: the GPU peaks of the roofline (a GPU of the table, a measured
device profile, or figures; see ``traceadvisor/roofline/peaks.py``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceadvisor.engine.finding import Severity, Thresholds
from traceadvisor.errors import UsageError
from traceadvisor.roofline.peaks import GpuConfig, parse_gpu_table

# Seconds one rule may run on one trace (``rule-timeout``) before it is stopped and reported as an
# error: the built-in rules take well under a second on a 100 MB trace.
DEFAULT_RULE_TIMEOUT_S = 60.0


@dataclass
class Config:
    """Effective configuration of a run."""

    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    severity: dict[str, Severity] = field(default_factory=dict)
    thresholds: Thresholds = field(default_factory=Thresholds)
    rules_dirs: list[Path] = field(default_factory=list)
    rule_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    gpu: GpuConfig | None = None
    rule_timeout: float = DEFAULT_RULE_TIMEOUT_S
    source: str | None = None


def find_config(start: Path | None = None) -> Path | None:
    """The nearest ``traceadvisor.toml``, or ``pyproject.toml`` with a ``[tool.traceadvisor]`` table."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        own = folder / "traceadvisor.toml"
        if own.is_file():
            return own
        py = folder / "pyproject.toml"
        if py.is_file():
            try:
                if "traceadvisor" in tomllib.loads(py.read_text()).get("tool", {}):
                    return py
            except (tomllib.TOMLDecodeError, OSError):
                return None
    return None


def load_config(path: Path | None) -> Config:
    """Read a configuration file (``None``: defaults)."""
    if path is None:
        return Config()
    try:
        doc = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML ({exc})") from None
    table = doc.get("tool", {}).get("traceadvisor", {}) if path.name == "pyproject.toml" else doc
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [tool.traceadvisor] must be a table")
    return parse_table(table, path)


def parse_rule_timeout(value: Any, what: str) -> float:
    """Seconds per rule: a positive finite number (``UsageError`` naming ``what`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise UsageError(f"{what} must be a positive number of seconds, not {value!r}")
    return float(value)


def parse_table(table: dict[str, Any], path: Path) -> Config:
    cfg = Config(source=str(path))
    for key, value in table.items():
        if key in ("select", "ignore"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise UsageError(f"{path}: {key} must be a list of rule codes or names")
            setattr(cfg, key, list(value))
        elif key == "severity":
            if not isinstance(value, dict):
                raise UsageError(f"{path}: severity must be a table of rule = level")
            for rule, level in value.items():
                try:
                    cfg.severity[rule] = Severity(level)
                except ValueError:
                    raise UsageError(f"{path}: severity of {rule} must be low, medium or high") from None
        elif key == "thresholds":
            try:
                cfg.thresholds = Thresholds(**{k: float(v) for k, v in value.items()})
            except (TypeError, ValueError, AttributeError):
                raise UsageError(f"{path}: thresholds takes high_pct and medium_pct numbers") from None
        elif key in ("rules-dir", "rules_dir"):
            dirs = value if isinstance(value, list) else [value]
            cfg.rules_dirs = [(path.parent / d).resolve() for d in dirs]
        elif key == "rules":
            if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
                raise UsageError(f"{path}: [rules.NAME] tables hold rule options")
            cfg.rule_options = {k: dict(v) for k, v in value.items()}
        elif key in ("rule-timeout", "rule_timeout"):
            cfg.rule_timeout = parse_rule_timeout(value, f"{path}: rule-timeout")
        elif key == "gpu":
            if not isinstance(value, dict):
                raise UsageError(f"{path}: [gpu] must be a table (name, device-profile, memory-bandwidth-gbs, tflops)")
            try:
                cfg.gpu = parse_gpu_table(value, path.parent, str(path))
            except ValueError as exc:
                raise UsageError(f"{path}: {exc}") from None
        else:
            raise UsageError(f"{path}: unknown key {key!r} in traceadvisor configuration")
    return cfg
