"""Configuration: ``[tool.traceadvisor]`` in pyproject.toml, ``traceadvisor.toml``, or ``--config``.

Keys: ``select`` and ``ignore`` (lists of codes, code prefixes or names), ``severity`` (a table of
code-or-name → low/medium/high), ``thresholds`` (``high_pct``, ``medium_pct``), ``rules-dir`` (list
of folders), ``rule-timeout`` (seconds one rule may run on one trace; default 60), one table per
rule (by name or code) with its options, e.g. ``[tool.traceadvisor.rules.idle-gap] min_gap_us = 50``,
``communication-kernels`` (regexes of kernel names that are communication besides NCCL/RCCL's, e.g.
vLLM's ``"cross_device_reduce"``: kept out of occupancy, roofline and fusion advice, counted as
communication in the multi-rank breakdown) and ``[tool.traceadvisor.gpu]``: the GPU peaks of the
roofline (a GPU of the table, a measured device profile, or figures; see ``traceadvisor/trace/device.py``).

Which file applies (``resolve_config``, the one function the command line, ``Advisor``/``profile``
and capture's post-run analysis use):

1. ``--isolated``: none; only the command line's options.
2. ``--config PATH``, else ``TRACEADVISOR_CONFIG=PATH``: that file, trusted (the user named it).
3. Else a discovered file: the nearest ``traceadvisor.toml`` or ``pyproject.toml`` with a
   ``[tool.traceadvisor]`` table, from the working folder up to the root of the git repository
   holding it (the folder with ``.git``), and outside any repository the working folder alone.

``rules-dir`` is code: Python files the registry imports. Running ``analyze trace.json`` inside a
cloned repository, an unpacked trace bundle or under a shared folder (another user's
``/tmp/traceadvisor.toml``) must not run whatever code a file found there names, so a discovered
file's declarative keys apply, but its ``rules-dir`` is imported only when trusted
(``--trust-config`` or ``TRACEADVISOR_TRUST_CONFIG=1``); otherwise a warning names the file and the
skipped folders. As git does for repositories (``safe.directory``), a discovered file owned by
another user (not root) or writable by every user is skipped altogether: whoever controls it would
control this run. ruff's ``--isolated`` and pytest's ``--noconftest``/``--confcutdir`` answer the
same problem the same way.
"""

from __future__ import annotations

import math
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceadvisor.engine import DEFAULT_RULE_TIMEOUT_S
from traceadvisor.errors import UsageError
from traceadvisor.report.finding import Severity, Thresholds
from traceadvisor.roofline.peaks import parse_gpu_table
from traceadvisor.trace.device import GpuConfig

CONFIG_ENV = "TRACEADVISOR_CONFIG"
TRUST_ENV = "TRACEADVISOR_TRUST_CONFIG"
CONFIG_NAMES = ("traceadvisor.toml", "pyproject.toml")
# A configuration is a few hundred bytes; the cap keeps ``--config /dev/zero``-like mistakes (or a
# multi-gigabyte file) from being read into memory before TOML says no.
MAX_CONFIG_BYTES = 1 << 20


@dataclass
class ConfigOrigin:
    """Which configuration file applied, how it was found, and what of it was not used."""

    path: Path | None = None
    found_by: str | None = None  # "--config", "TRACEADVISOR_CONFIG", "discovered"; None: no file
    trusted: bool = False  # whether its rules-dir may be imported
    isolated: bool = False
    rules_dirs: list[Path] = field(default_factory=list)  # the file's rules-dir folders, loaded
    skipped_rules_dirs: list[Path] = field(default_factory=list)  # the file's rules-dir, not trusted
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON report's ``config`` entry."""
        return {
            "path": None if self.path is None else str(self.path),
            "found_by": self.found_by,
            "isolated": self.isolated,
            "rules_dir_trusted": self.trusted if self.path is not None else None,
            "rules_dirs": [str(p) for p in self.rules_dirs],
            "skipped_rules_dirs": [str(p) for p in self.skipped_rules_dirs],
            "warnings": list(self.warnings),
        }


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
    origin: ConfigOrigin = field(default_factory=ConfigOrigin)
    # ``--gpus-per-node``: ranks grouped into hosts by rank // N where a trace names no host
    gpus_per_node: int | None = None
    # ``communication-kernels``: regexes of kernel names that are communication besides NCCL/RCCL's
    communication_kernels: list[str] = field(default_factory=list)
    # ``--step-time``: the step time (µs) the user measured without the profiler; every trace that
    # carries none of its own is calibrated to it (whatif/profiler_cost.give_step_time)
    step_time_us: float | None = None


def resolve_config(
    explicit: str | Path | None = None,
    *,
    isolated: bool = False,
    trust: bool = False,
    start: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """The configuration of a run (see the module docstring for the order).

    ``explicit`` is ``--config``; ``trust`` is ``--trust-config``; ``start`` is where discovery
    begins (the working folder); ``environ`` defaults to ``os.environ``. Problems with a file the
    user named are ``UsageError``; a discovered file that cannot be used is skipped, with a line in
    ``origin.warnings`` for the caller to show.
    """
    env = os.environ if environ is None else environ
    if isolated:
        if explicit is not None:
            raise UsageError("--config and --isolated exclude each other (--isolated reads no configuration file)")
        return Config(origin=ConfigOrigin(isolated=True))
    if explicit is not None:
        return _load(Path(explicit), "--config", trusted=True)
    if env.get(CONFIG_ENV):
        return _load(Path(env[CONFIG_ENV]), CONFIG_ENV, trusted=True)
    warnings: list[str] = []
    found = _discover((start or Path.cwd()).absolute(), warnings)
    if found is None:
        return Config(origin=ConfigOrigin(warnings=warnings))
    path, table = found
    trusted = trust or env.get(TRUST_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    cfg = parse_table(table, path)
    cfg.origin = ConfigOrigin(path=path, found_by="discovered", trusted=trusted, warnings=warnings)
    if trusted:
        cfg.origin.rules_dirs = list(cfg.rules_dirs)
    elif cfg.rules_dirs:
        cfg.origin.skipped_rules_dirs, cfg.rules_dirs = cfg.rules_dirs, []
        folders = ", ".join(str(d) for d in cfg.origin.skipped_rules_dirs)
        warnings.append(
            f"{path}: rules-dir not loaded ({folders}): a discovered configuration does not run code; "
            f"pass --trust-config, set {TRUST_ENV}=1, or name the file with --config"
        )
    return cfg


def find_config(start: Path | None = None, warnings: list[str] | None = None) -> Path | None:
    """The configuration file discovery would use from ``start`` (the working folder), if any."""
    found = _discover((start or Path.cwd()).absolute(), [] if warnings is None else warnings)
    return None if found is None else found[0]


def search_folders(start: Path) -> list[Path]:
    """Where discovery looks: ``start`` and its parents up to the root of the git repository that
    holds ``start`` (``.git`` is a folder, or a file in worktrees and submodules); outside any
    repository, ``start`` alone. A repository is one project, so a file in it is the project's; a
    parent above it (a home folder, ``/tmp``) is shared with whatever else lives there."""
    chain = [start, *start.parents]
    for i, folder in enumerate(chain):
        if os.path.lexists(folder / ".git"):
            return chain[: i + 1]
    return [start]


def _discover(start: Path, warnings: list[str]) -> tuple[Path, dict[str, Any]] | None:
    """The nearest usable configuration and its ``traceadvisor`` table; files that cannot be used
    (unreadable, not UTF-8, not TOML, unsafe owner) are skipped, as if absent, with a warning."""
    for folder in search_folders(start):
        for name in CONFIG_NAMES:
            path = folder / name
            try:
                if not path.is_file():
                    continue
            except OSError:  # a folder we may not search: nothing of ours is there
                continue
            try:
                doc = tomllib.loads(read_config_text(path, discovered=True))
            except UsageError as exc:
                warnings.append(f"{exc}; skipped")
                continue
            except tomllib.TOMLDecodeError as exc:
                if name == "traceadvisor.toml":  # ours: a typo in it is the user's to fix
                    raise UsageError(f"{path}: invalid TOML ({exc})") from None
                warnings.append(f"{path}: invalid TOML ({exc}); skipped")
                continue
            if name == "traceadvisor.toml":
                return path, doc
            table = _tool_table(doc)
            if table is not None:
                if not isinstance(table, dict):
                    raise UsageError(f"{path}: [tool.traceadvisor] must be a table")
                return path, table
    return None


def _tool_table(doc: dict[str, Any]) -> Any:
    """A pyproject document's ``[tool.traceadvisor]`` value (``None``: absent)."""
    tool = doc.get("tool")
    return tool.get("traceadvisor") if isinstance(tool, dict) else None


def read_config_text(path: Path, discovered: bool = False, label: str | None = None) -> str:
    """A configuration file's text: a regular file of at most ``MAX_CONFIG_BYTES``, read no further.

    Opened without blocking (a FIFO named by mistake would wait for a writer forever) and checked
    on the open descriptor, so what is checked is what is read. ``discovered`` adds git's
    ownership rule: the file must be the user's (or root's) and not writable by every user.
    ``UsageError`` says what is wrong in one line, naming the file as ``label`` (default: the path).
    """
    name = str(path) if label is None else label
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UsageError(f"{name}: config file not found") from None
    except IsADirectoryError:
        raise UsageError(f"{name}: is a directory, not a configuration file") from None
    except OSError as exc:
        raise UsageError(f"{name}: cannot read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{name}: is a directory, not a configuration file")
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{name}: not a regular file (a configuration is a TOML file)")
        if st.st_size > MAX_CONFIG_BYTES:
            raise UsageError(f"{name}: {st.st_size:,} bytes is too large for a configuration file (at most 1 MiB)")
        if discovered:
            _check_owner(name, st)
        data = _read_at_most(fd, MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{name}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:  # grew since fstat
        raise UsageError(f"{name}: too large for a configuration file (at most 1 MiB)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{name}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def _read_at_most(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fd`` (a regular file: a short read means its end)."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _check_owner(name: str, st: os.stat_result) -> None:
    """Refuse a discovered file that someone else controls (git's safe.directory reasoning)."""
    geteuid = getattr(os, "geteuid", None)
    if geteuid is None:  # no POSIX owners (Windows)
        return
    if st.st_uid not in (geteuid(), 0):
        raise UsageError(f"{name}: owned by another user (uid {st.st_uid}); name it with --config to use it")
    if st.st_mode & stat.S_IWOTH:
        raise UsageError(f"{name}: writable by every user; name it with --config to use it")


def load_config(path: Path | None) -> Config:
    """Read a configuration file the user named (``None``: defaults); its rules-dir is trusted."""
    if path is None:
        return Config()
    return _load(path, "--config", trusted=True)


def _load(path: Path, found_by: str, trusted: bool) -> Config:
    where = str(path) if found_by == "--config" else f"{path} (from {found_by})"
    text = read_config_text(path, label=where)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where}: invalid TOML ({exc})") from None
    table = _tool_table(doc) if path.name == "pyproject.toml" else doc
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise UsageError(f"{where}: [tool.traceadvisor] must be a table")
    cfg = parse_table(table, path)
    cfg.origin = ConfigOrigin(path=path.absolute(), found_by=found_by, trusted=trusted, rules_dirs=list(cfg.rules_dirs))
    return cfg


def parse_rule_timeout(value: Any, what: str) -> float:
    """Seconds per rule: a positive finite number (``UsageError`` naming ``what`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise UsageError(f"{what} must be a positive number of seconds, not {value!r}")
    return float(value)


# ``--step-time``'s units, in µs each; a bare number is milliseconds (what training logs print).
# tqdm's rates are accepted as they print: ``3.52it/s`` (a step is 1/3.52 s) and ``1.23s/it``.
STEP_TIME_UNITS = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6, "s/it": 1e6}
STEP_TIME_PATTERN = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ns|us|µs|ms|s/it|s|it/s)?\s*")


def parse_step_time(text: str, what: str = "--step-time") -> float:
    """A step time given on the command line (``12.3ms``, ``850us``, ``0.25s``, tqdm's ``3.52it/s``
    or ``1.23s/it``; a bare number is milliseconds) in µs; ``UsageError`` naming ``what`` for
    anything else, zero or not finite."""
    m = STEP_TIME_PATTERN.fullmatch(text)
    value = math.nan
    if m:
        number, unit = float(m.group(1)), m.group(2) or "ms"
        value = 1e6 / number if unit == "it/s" and number > 0 else number * STEP_TIME_UNITS.get(unit, math.nan)
    if not 0 < value < float("inf"):
        raise UsageError(f"{what} must be a positive duration such as 12.3ms, 850us, 0.25s or 3.5it/s, not {text!r}")
    return value


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
        elif key in ("communication-kernels", "communication_kernels"):
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise UsageError(f"{path}: communication-kernels must be a list of kernel-name patterns (regexes)")
            for v in value:
                try:
                    re.compile(v)
                except re.error as exc:
                    raise UsageError(f"{path}: communication-kernels: {v!r} is not a regex ({exc})") from None
            cfg.communication_kernels = list(value)
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
