"""Every discovered rule: metadata, documentation sections, options, case files, README table."""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from traceadvisor.engine.registry import CODE_PATTERN, NAME_PATTERN, builtin_rules_dir, discover
from traceadvisor.engine.rule import DOC_SECTIONS, Rule
from traceadvisor.report.render_rules import render
from traceadvisor.testing import load_case_file

ROOT = Path(__file__).resolve().parents[1]
SOURCES = discover(include_entry_points=False)
RULES = [s.cls for s in SOURCES]


def test_rules_are_discovered_from_the_rules_folder() -> None:
    files = sorted(p.stem for p in builtin_rules_dir().glob("*.py") if not p.name.startswith("_"))
    assert len(files) == len(RULES) >= 1
    for s in SOURCES:
        assert Path(s.origin).stem.startswith(s.cls.code.lower() + "_")


@pytest.mark.parametrize("cls", RULES, ids=lambda c: c.code)
def test_rule_metadata_and_docs(cls: type[Rule]) -> None:
    assert CODE_PATTERN.match(cls.code)
    assert NAME_PATTERN.match(cls.name)
    doc = inspect.cleandoc(cls.__doc__ or "")
    headings = re.findall(r"^## (.+)$", doc, flags=re.MULTILINE)
    assert headings == list(DOC_SECTIONS), f"{cls.code}: sections {headings}"
    options_text = doc.split("## Options", 1)[1].split("## References", 1)[0]
    for f in dataclasses.fields(cls.Options):
        assert f"`{f.name}`" in options_text, f"{cls.code}: option {f.name} not documented"
    refs = doc.split("## References", 1)[1]
    assert "http" in refs


@pytest.mark.parametrize("cls", RULES, ids=lambda c: c.code)
def test_rule_has_fail_and_pass_cases(cls: type[Rule]) -> None:
    path = ROOT / "fixtures" / "rules" / f"{cls.code}.yaml"
    assert path.is_file(), f"missing {path}"
    cf = load_case_file(path)
    assert cf.rule in (cls.code, cls.name)
    expects = [c.get("expect", []) for c in cf.cases.values()]
    assert any(isinstance(e, list) and e for e in expects), "needs a case that must fire"
    assert any(e == [] for e in expects), "needs a near-miss case that must not fire"


def test_codes_and_names_are_unique() -> None:
    assert len({c.code for c in RULES}) == len(RULES)
    assert len({c.name for c in RULES}) == len(RULES)


def test_readme_rule_table_is_generated() -> None:
    readme = (ROOT / "README.md").read_text()
    start, end = "<!-- rules-table -->\n", "<!-- /rules-table -->"
    assert start in readme and end in readme
    table = readme.split(start, 1)[1].split(end, 1)[0]
    assert table == render(RULES, "markdown"), (
        "README rule table is stale: paste `traceadvisor rules --format markdown`"
    )


def test_explain_renders_a_rule_page() -> None:
    cls = RULES[0]
    out = subprocess.run(
        [sys.executable, "-m", "traceadvisor", "explain", cls.name], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith(f"# {cls.code} {cls.name}")
    for section in DOC_SECTIONS:
        assert f"## {section}" in out


def test_wheel_ships_the_builtin_rules(tmp_path: Path) -> None:
    """After a non-editable install, `traceadvisor rules` lists the rules packaged in the wheel."""
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    assert (target / "traceadvisor" / "_builtin_rules").is_dir()
    assert (target / "traceadvisor" / "py.typed").is_file()  # PEP 561: rule authors' mypy reads our types
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-m", "traceadvisor", "rules", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    ).stdout
    import json

    listed = {r["code"] for r in json.loads(out)}
    assert listed == {c.code for c in RULES}
