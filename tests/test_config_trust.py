"""Which configuration applies, and when its rules-dir (code) may run.

Every case runs the real command line in a real folder tree: a "repository" (a folder holding
``.git``) with a configuration whose ``rules-dir`` holds a rule file that, when imported, writes a
marker file. The marker is the proof that code ran; the tests look for it, not for log lines.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "fixtures" / "traces" / "train_step.json.gz"

PLANTED_RULE = '''
"""USR901: a rule whose import leaves a mark."""

from pathlib import Path

Path({marker!r}).write_text("imported")

from traceadvisor import Rule, Severity


class Planted(Rule):
    """Fires once on every trace.

    ## Why it matters
    It proves the rule file was imported.
    ## How it shows up in a trace
    Always.
    ## How to fix
    Nothing to fix.
    ## Options
    None.
    ## References
    - none
    """

    code = "USR901"
    name = "planted-rule"
    severity = Severity.low
    requires = frozenset()

    def check(self, trace):
        yield self.finding(trace, message="planted rule ran", recommendation="none")
'''


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRACEADVISOR_CONFIG", "TRACEADVISOR_TRUST_CONFIG")}
    return {**env, **extra}


def _cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, limit_memory: bool = False
) -> subprocess.CompletedProcess[str]:
    def cap_memory() -> None:  # a read of /dev/zero must fail, not take the machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run(
        [sys.executable, "-m", "traceadvisor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env if env is not None else _env(),
        preexec_fn=cap_memory if limit_memory else None,
    )


class Repo:
    """A folder tree: ``top/`` (outside any repository) holding ``repo/`` (with ``.git``) holding ``sub/``."""

    def __init__(self, tmp: Path) -> None:
        self.top = tmp
        self.repo = tmp / "repo"
        self.sub = self.repo / "sub"
        self.sub.mkdir(parents=True)
        (self.repo / ".git").mkdir()
        self.marker = tmp / "rule-was-imported"

    def plant(self, folder: Path, name: str = "traceadvisor.toml", extra: str = "") -> Path:
        """A configuration in ``folder`` with a rules-dir holding the planted rule, ignoring GK101."""
        rules = folder / "my_rules"
        rules.mkdir(exist_ok=True)
        (rules / "usr901_planted.py").write_text(PLANTED_RULE.format(marker=str(self.marker)))
        body = f'rules-dir = ["my_rules"]\nignore = ["GK101"]\n{extra}'
        path = folder / name
        path.write_text(body if name == "traceadvisor.toml" else f"[tool.traceadvisor]\n{body}")
        return path

    def analyze(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Any:
        p = _cli("analyze", str(TRACE), "-f", "json", *args, cwd=cwd or self.sub, env=env)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout), p.stderr


@pytest.fixture
def tree(tmp_path: Path) -> Repo:
    return Repo(tmp_path)


def _codes(doc: dict[str, Any]) -> set[str]:
    return {f["code"] for f in doc["findings"]}


def test_discovered_config_applies_but_its_rules_dir_does_not_run(tree: Repo) -> None:
    cfg = tree.plant(tree.repo)
    doc, stderr = tree.analyze()
    assert not tree.marker.exists()  # the rule file was never imported
    assert "USR901" not in _codes(doc) and "GK101" not in _codes(doc)  # declarative keys applied
    assert doc["config"] == {
        "path": str(cfg),
        "found_by": "discovered",
        "isolated": False,
        "rules_dir_trusted": False,
        "rules_dirs": [],
        "skipped_rules_dirs": [str(tree.repo / "my_rules")],
        "warnings": [stderr.split("warning: ", 1)[1].rstrip("\n")],
    }
    assert stderr.count("\n") == 1 and stderr.startswith(f"traceadvisor: warning: {cfg}: rules-dir not loaded")
    assert "--trust-config" in stderr and "TRACEADVISOR_TRUST_CONFIG=1" in stderr and "--config" in stderr
    text = _cli("analyze", str(TRACE), cwd=tree.sub, env=_env(COLUMNS="400")).stdout  # the tmp path is long
    assert text.splitlines()[0] == f"config: {cfg} (discovered; rules-dir not loaded: not trusted)"
    md = _cli("analyze", str(TRACE), "-f", "markdown", cwd=tree.sub).stdout
    assert f"config: `{cfg}` (discovered; rules-dir not loaded: not trusted)" in md


@pytest.mark.parametrize("how", ["--trust-config", "TRACEADVISOR_TRUST_CONFIG=1", "--config", "TRACEADVISOR_CONFIG"])
def test_an_explicit_choice_runs_the_rules_dir(tree: Repo, how: str) -> None:
    cfg = tree.plant(tree.repo, "pyproject.toml")
    if how == "--trust-config":
        doc, stderr = tree.analyze("--trust-config")
    elif how == "--config":
        doc, stderr = tree.analyze("--config", str(cfg), cwd=tree.top)
    elif how == "TRACEADVISOR_CONFIG":
        doc, stderr = tree.analyze(cwd=tree.top, env=_env(TRACEADVISOR_CONFIG=str(cfg)))
    else:
        doc, stderr = tree.analyze(env=_env(TRACEADVISOR_TRUST_CONFIG="1"))
    assert tree.marker.read_text() == "imported"
    assert "USR901" in _codes(doc) and "GK101" not in _codes(doc)
    assert stderr == ""
    assert doc["config"]["path"] == str(cfg) and doc["config"]["rules_dir_trusted"] is True
    assert doc["config"]["rules_dirs"] == [str(tree.repo / "my_rules")]
    found_by = {"--trust-config": "discovered", "TRACEADVISOR_TRUST_CONFIG=1": "discovered"}.get(how, how)
    assert doc["config"]["found_by"] == found_by


def test_discovery_stops_at_the_repository_root(tree: Repo) -> None:
    """A file above the repository (a shared parent such as /tmp) is never found."""
    tree.plant(tree.top)
    doc, stderr = tree.analyze()
    assert not tree.marker.exists() and stderr == ""
    assert doc["config"]["path"] is None and "GK101" in _codes(doc)


def test_outside_a_repository_only_the_working_folder_is_searched(tree: Repo) -> None:
    outside = tree.top / "bundle" / "inner"
    outside.mkdir(parents=True)
    tree.plant(tree.top / "bundle")
    doc, _ = tree.analyze(cwd=outside)
    assert doc["config"]["path"] is None and "GK101" in _codes(doc)
    doc, _ = tree.analyze(cwd=tree.top / "bundle")
    assert doc["config"]["path"] == str(tree.top / "bundle" / "traceadvisor.toml")
    assert not tree.marker.exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file away needs root")
def test_a_file_owned_by_another_user_is_skipped(tree: Repo) -> None:
    cfg = tree.plant(tree.repo)
    os.chown(cfg, 1000, 1000)
    doc, stderr = tree.analyze("--trust-config")
    assert not tree.marker.exists()
    assert doc["config"]["path"] is None and "GK101" in _codes(doc)  # nothing of it applied
    assert f"{cfg}: owned by another user (uid 1000)" in stderr and stderr.count("\n") == 1


def test_a_file_writable_by_every_user_is_skipped(tree: Repo) -> None:
    cfg = tree.plant(tree.repo, "pyproject.toml")
    cfg.chmod(0o666)
    doc, stderr = tree.analyze("--trust-config")
    assert not tree.marker.exists() and doc["config"]["path"] is None
    assert f"{cfg}: writable by every user" in stderr
    # named explicitly, it is the user's choice
    doc, _ = tree.analyze("--config", str(cfg))
    assert tree.marker.exists() and "USR901" in _codes(doc)


def test_isolated_reads_no_configuration(tree: Repo) -> None:
    tree.plant(tree.repo)
    doc, stderr = tree.analyze("--isolated", env=_env(TRACEADVISOR_CONFIG=str(tree.repo / "traceadvisor.toml")))
    assert not tree.marker.exists() and stderr == ""
    assert doc["config"]["path"] is None and doc["config"]["isolated"] is True and "GK101" in _codes(doc)
    p = _cli("analyze", str(TRACE), "--isolated", "--config", str(tree.repo / "traceadvisor.toml"), cwd=tree.sub)
    assert p.returncode == 2 and p.stderr.startswith("traceadvisor: error: --config and --isolated exclude")


def test_a_non_utf8_pyproject_in_a_parent_is_skipped_with_a_warning(tree: Repo) -> None:
    bad = tree.repo / "pyproject.toml"
    bad.write_bytes(b'[project]\nname = "caf\xe9"\n')
    doc, stderr = tree.analyze()
    assert doc["config"]["path"] is None
    offset = bad.read_bytes().index(b"\xe9")
    assert stderr == f"traceadvisor: warning: {bad}: not UTF-8 text (byte 0xe9 at offset {offset}); skipped\n"
    # Invalid TOML in a pyproject.toml (not ours to judge) is skipped the same way.
    bad.write_text("[project\n")
    doc, stderr = tree.analyze()
    assert "invalid TOML" in stderr and "skipped" in stderr and stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d, "is a directory, not a configuration file"),
        (lambda d: Path("/dev/zero"), "not a regular file"),
        (lambda d: _fifo(d / "fifo.toml"), "not a regular file"),
        (lambda d: _big(d / "big.toml"), "2,000,000 bytes is too large for a configuration file (at most 1 MiB)"),
        (lambda d: _latin1(d / "latin1.toml"), "not UTF-8 text (byte 0xe9 at offset"),
        (lambda d: d / "missing.toml", "config file not found"),
    ],
    ids=["directory", "dev-zero", "fifo", "huge", "not-utf8", "missing"],
)
def test_a_bad_explicit_config_is_one_clear_line(tmp_path: Path, make: Any, message: str) -> None:
    path = make(tmp_path)
    p = _cli("analyze", str(TRACE), "--config", str(path), cwd=tmp_path, limit_memory=True)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith(f"traceadvisor: error: {path}: ") and message in p.stderr
    assert p.stderr.count("\n") == 1 and "internal error" not in p.stderr
    env = _env(TRACEADVISOR_CONFIG=str(path))
    p = _cli("analyze", str(TRACE), cwd=tmp_path, env=env, limit_memory=True)
    assert p.returncode == 2 and p.stderr.startswith(f"traceadvisor: error: {path} (from TRACEADVISOR_CONFIG): ")


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _big(path: Path) -> Path:
    path.write_text("# padding\n" * 200_000)  # 2 MB of valid TOML
    return path


def _latin1(path: Path) -> Path:
    path.write_bytes(b'select = ["caf\xe9"]\n')
    return path


def test_advisor_resolves_config_as_analyze_does(
    tree: Repo, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``Advisor``/``profile`` take the same path: a discovered rules-dir stays unloaded, logged once."""
    from traceadvisor.advisor.advisor import build_config

    cfg_path = tree.plant(tree.repo)
    monkeypatch.chdir(tree.sub)
    monkeypatch.delenv("TRACEADVISOR_CONFIG", raising=False)
    monkeypatch.delenv("TRACEADVISOR_TRUST_CONFIG", raising=False)
    with caplog.at_level(logging.WARNING, logger="traceadvisor"):
        cfg = build_config(None, None, None, None)
    assert not tree.marker.exists()
    assert cfg.ignore == ["GK101"] and cfg.rules_dirs == []
    assert [r.getMessage() for r in caplog.records if "rules-dir not loaded" in r.getMessage()] == [
        f"traceadvisor: {cfg_path}: rules-dir not loaded ({tree.repo / 'my_rules'}): a discovered configuration "
        "does not run code; pass --trust-config, set TRACEADVISOR_TRUST_CONFIG=1, or name the file with --config"
    ]
    monkeypatch.setenv("TRACEADVISOR_TRUST_CONFIG", "1")
    cfg = build_config(None, None, None, None)
    assert tree.marker.exists() and cfg.rules_dirs == [tree.repo / "my_rules"]
