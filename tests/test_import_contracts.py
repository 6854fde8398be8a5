"""The layers hold (issue 11): import-linter's contracts (pyproject.toml), no import cycle in the
package (function-level imports included: a lazy import that only hides a cycle is a cycle), and
rules import only ``traceadvisor.rules_api``; ``make lint`` runs each of these checks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def import_graph() -> nx.DiGraph:
    """Every import between traceadvisor's modules that can run: module level and inside
    functions (grimp reads both), not ``if TYPE_CHECKING:`` blocks, which never run."""
    g = grimp.build_graph("traceadvisor", exclude_type_checking_imports=True)
    graph = nx.DiGraph()
    for m in g.modules:
        graph.add_node(m)
        for imported in g.find_modules_directly_imported_by(m):
            graph.add_edge(m, imported)
    return graph


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    """One cycle per tangle of modules that import each other (directly or around a loop)."""
    found = []
    for part in nx.strongly_connected_components(graph):
        if len(part) > 1:
            found.append(nx.find_cycle(graph.subgraph(part)))
    return [[a for a, _ in c] for c in found]


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "\n".join(" -> ".join([*c, c[0]]) for c in found)


def test_a_lazy_import_that_closes_a_loop_is_found() -> None:
    """The check sees function-level imports: analyses/idle.py imports the model at the top; a
    function in the model importing it back (as the model did before issue 11) is a cycle."""
    graph = import_graph()
    assert graph.has_edge("traceadvisor.analyses.idle", "traceadvisor.trace.model")
    graph.add_edge("traceadvisor.trace.model", "traceadvisor.analyses.idle")
    assert any("traceadvisor.trace.model" in c for c in cycles(graph))


def test_import_linter_contracts_are_kept() -> None:
    p = subprocess.run([str(LINT_IMPORTS)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "Contracts: " in p.stdout, p.stdout + p.stderr
    assert p.returncode == 0, p.stdout[p.stdout.find("Broken contracts") :]


def test_the_contracts_are_the_issues_four_and_make_lint_runs_them() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'source_modules = ["traceadvisor.trace.model"]' in text
    assert 'forbidden_modules = ["traceadvisor.analyses", "traceadvisor.roofline"]' in text
    assert 'source_modules = ["traceadvisor.engine"]' in text
    assert 'source_modules = ["traceadvisor.report"]' in text
    recipe = lint_recipe()
    assert "lint-imports" in recipe
    assert "-m traceadvisor.engine.lint rules" in recipe
    assert "-m mypy rules" in recipe


def lint_recipe() -> str:
    """The commands of the Makefile's ``lint`` target."""
    text = (ROOT / "Makefile").read_text()
    body = re.search(r"^lint:.*\n((?:\t.*\n)+)", text, re.M)
    assert body is not None
    return body.group(1)


def rules_lint(folder: Path) -> subprocess.CompletedProcess[str]:
    """``make lint``'s rule check, as its recipe writes it, on ``folder`` instead of ``rules``."""
    line = next(ln for ln in lint_recipe().splitlines() if "traceadvisor.engine.lint" in ln)
    args = line.split("-m traceadvisor.engine.lint", 1)[1].split()
    assert args == ["rules"]
    return subprocess.run(
        [sys.executable, "-m", "traceadvisor.engine.lint", str(folder)], capture_output=True, text=True, timeout=60
    )


def test_builtin_rules_import_only_rules_api() -> None:
    p = rules_lint(ROOT / "rules")
    assert p.returncode == 0, p.stdout


def test_an_internal_import_in_a_rule_fails_the_lint(tmp_path: Path) -> None:
    folder = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", folder)
    assert rules_lint(folder).returncode == 0
    victim = folder / "tq102_too_few_steps.py"
    text = victim.read_text()
    # inside check(): an import the rule's first line does not show still counts
    victim.write_text(
        text.replace(
            "    def check(self",
            "    def _peek(self):\n        from traceadvisor.trace import model\n\n    def check(self",
        )
    )
    p = rules_lint(folder)
    assert p.returncode == 1
    (line,) = p.stdout.splitlines()
    assert line.startswith(f"{victim}:") and "from traceadvisor.trace import model" in line


def test_top_level_names_other_than_rules_api_count_as_internal(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from traceadvisor import Rule\nfrom traceadvisor import rules_api\n")
    (tmp_path / "b.py").write_text("import traceadvisor.rules_api\nfrom traceadvisor.rules_api import Rule\n")
    p = rules_lint(tmp_path)
    assert p.returncode == 1
    assert p.stdout.splitlines() == [
        f"{tmp_path / 'a.py'}:1: from traceadvisor import Rule: a rule imports only traceadvisor.rules_api"
    ]


def test_the_layers_contract_catches_an_upward_import(tmp_path: Path) -> None:
    """A copy of the package where the engine imports the pipeline (a layer above it) breaks the
    layers contract of pyproject.toml; the real package keeps it (test above)."""
    copy = tmp_path / "traceadvisor"
    shutil.copytree(ROOT / "traceadvisor", copy, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    runner = copy / "engine" / "runner.py"
    runner.write_text(runner.read_text() + "\nfrom traceadvisor import pipeline  # noqa: E402,F401\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    p = subprocess.run([str(LINT_IMPORTS)], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "The layers: entry points > pipeline" in p.stdout
    assert "traceadvisor.engine.runner -> traceadvisor.pipeline" in p.stdout
