"""The line the text and Markdown reports print about the configuration file that applied."""

from __future__ import annotations

from typing import Any


def config_note(config: dict[str, Any] | None) -> tuple[str, str] | None:
    """``(path, how)`` of the report's ``config`` entry, e.g. ``("/repo/traceadvisor.toml",
    "discovered; rules-dir not loaded: not trusted")``; ``None`` when no file applied. Unescaped:
    each renderer escapes the path its own way."""
    if not config or not config.get("path"):
        return None
    how = str(config.get("found_by") or "")
    if config.get("skipped_rules_dirs"):
        how += "; rules-dir not loaded: not trusted"
    elif config.get("rules_dirs"):
        how += "; rules-dir loaded"
    return str(config["path"]), how
