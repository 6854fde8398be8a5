"""A rule imports only ``traceadvisor.rules_api``: the check behind ``make lint`` for ``rules/``.

``python -m traceadvisor.engine.lint FOLDER_OR_FILE ...`` prints one line per other
``traceadvisor`` import (``file:line: ...``) and exits 1 if there is any. Rule files are not a
package, so import-linter (``[tool.importlinter]``) cannot see them; the check reads each file's
syntax tree instead, at every depth (an import inside ``check()`` counts as much as one at the
top). The API's modules may move between releases; ``rules_api`` keeps its names.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

ALLOWED = "traceadvisor.rules_api"


def problems(path: Path) -> Iterator[str]:
    """``file:line: ...`` for each import of traceadvisor other than ``traceadvisor.rules_api``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if _ours(a.name) and a.name != ALLOWED]
            what = ", ".join(f"import {b}" for b in bad)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _ours(node.module):
            # ``from traceadvisor import rules_api`` reaches the API too; any other name does not
            names = [a.name for a in node.names]
            ok = node.module == ALLOWED or (node.module == "traceadvisor" and names == ["rules_api"])
            bad = [] if ok else names
            what = f"from {node.module} import {', '.join(names)}"
        else:
            continue
        if bad:
            yield f"{path}:{node.lineno}: {what}: a rule imports only {ALLOWED}"


def _ours(module: str) -> bool:
    return module == "traceadvisor" or module.startswith("traceadvisor.")


def rule_paths(targets: Sequence[str]) -> list[Path]:
    """The ``.py`` files named, and those in the folders named (helper modules included)."""
    out: list[Path] = []
    for t in map(Path, targets):
        out.extend(sorted(t.glob("*.py")) if t.is_dir() else [t])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    targets = list(sys.argv[1:] if argv is None else argv)
    if not targets:
        sys.stderr.write("usage: python -m traceadvisor.engine.lint RULES_FOLDER_OR_FILE ...\n")
        return 2
    found = [p for path in rule_paths(targets) for p in problems(path)]
    for line in found:
        sys.stdout.write(line + "\n")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
