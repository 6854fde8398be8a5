"""docs/writing-rules.md works as written (issue 11): its files, copied out of the page into an empty
folder, make a rule that imports only ``traceadvisor.rules_api``, that ``analyze --rules-dir``,
``rules --rules-dir`` and ``explain`` load through the real command line, whose YAML cases pass
under pytest, and that the rules' import check accepts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "writing-rules.md"
README = ROOT / "README.md"
TRACE = ROOT / "fixtures" / "traces" / "planted_fp32_matmul.json.gz"  # one GEMM kernel: all kernel time
RULE_FILE = "my_rules/xk101_hot_kernel.py"


def doc_files(text: str) -> dict[str, str]:
    """Fenced code blocks whose first line is ``# file: PATH``, by path."""
    files = {}
    for body in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S):
        first, _, rest = body.partition("\n")
        m = re.fullmatch(r"# file: (\S+)", first.strip())
        if m:
            files[m.group(1)] = rest
    return files


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page's files written into an empty folder (outside any repository: no configuration)."""
    root = tmp_path_factory.mktemp("doc_project")
    files = doc_files(DOC.read_text())
    assert set(files) == {RULE_FILE, "cases/XK101.yaml", "tests/test_my_rules.py"}, set(files)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def cli(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceadvisor", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=180
    )


def test_the_rule_imports_only_rules_api(project: Path) -> None:
    imports = re.findall(r"^\s*(?:from|import) (traceadvisor\S*)", (project / RULE_FILE).read_text(), re.M)
    assert imports == ["traceadvisor.rules_api"]
    p = subprocess.run(
        [sys.executable, "-m", "traceadvisor.engine.lint", str(project / "my_rules")], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stdout


def test_analyze_with_rules_dir_reports_the_rule(project: Path) -> None:
    p = cli(project, "analyze", TRACE, "-f", "json", "--rules-dir", "my_rules", "--select", "XK101")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert not report["errors"], report["errors"]
    (finding,) = [f for f in report["findings"] if f["code"] == "XK101"]
    assert finding["rule"] == "hot-kernel" and finding["severity"] == "low"
    assert finding["data"]["share_pct"] == 100.0
    assert finding["data"]["kernel"].startswith("sm80_xmma_gemm_f32f32")
    assert finding["evidence"], finding


def test_rules_with_rules_dir_lists_it(project: Path) -> None:
    p = cli(project, "rules", "--rules-dir", "my_rules", "--format", "json")
    assert p.returncode == 0, p.stderr
    rows = {r["code"]: r for r in json.loads(p.stdout)}
    assert rows["XK101"]["name"] == "hot-kernel"
    assert rows["XK101"]["options"] == {"min_share_pct": 50.0}
    assert rows["XK101"]["requires"] == ["gpu"]
    assert "GK101" in rows  # beside the built-in rules


def test_explain_shows_its_page(project: Path) -> None:
    p = cli(project, "explain", "hot-kernel", "--rules-dir", "my_rules")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("# XK101 hot-kernel\n")
    assert "## How to fix" in p.stdout and "min_share_pct=50.0" in p.stdout
    missing = cli(project, "explain", "hot-kernel")  # without the folder: not loaded
    assert missing.returncode == 2 and "no rule 'hot-kernel'" in missing.stderr


def test_rules_and_explain_read_the_configuration(project: Path, tmp_path: Path) -> None:
    config = tmp_path / "traceadvisor.toml"
    config.write_text(f'rules-dir = ["{project / "my_rules"}"]\n')
    p = cli(project, "explain", "XK101", "--config", config)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("# XK101 hot-kernel")
    isolated = cli(project, "rules", "--isolated")
    assert isolated.returncode == 0 and "XK101" not in isolated.stdout


def test_the_pages_cases_pass_under_pytest(project: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_my_rules.py"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "3 passed" in p.stdout


def test_the_pages_cases_can_fail(project: Path, tmp_path: Path) -> None:
    """The same test file fails when the rule's behaviour changes (here: a higher default)."""
    broken = tmp_path / "broken"
    for rel in ("cases/XK101.yaml", "tests/test_my_rules.py", RULE_FILE):
        (broken / rel).parent.mkdir(parents=True, exist_ok=True)
        text = (project / rel).read_text()
        (broken / rel).write_text(text.replace("min_share_pct: float = 50.0", "min_share_pct: float = 99.0"))
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_my_rules.py"],
        cwd=broken,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 1 and "1 failed" in p.stdout, p.stdout


def test_readme_rule_example_uses_only_rules_api() -> None:
    """The README's rule section points at the page and imports nothing but the API."""
    text = README.read_text()
    section = text[text.index("### Writing your own rule") :]
    section = section[: section.index("\n## ")]
    assert "docs/writing-rules.md" in section
    imported = re.findall(r"(?:from|import) (traceadvisor[\w.]*)", section)
    assert set(imported) <= {"traceadvisor.rules_api", "traceadvisor.testing"}, imported
