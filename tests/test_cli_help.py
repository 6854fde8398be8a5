"""Every command's ``--help`` ends with example invocations of that command (issue 14)."""

from __future__ import annotations

import os
import subprocess
import sys

import typer

from traceadvisor.cli import app


def registered_commands() -> list[str]:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return group.list_commands(typer.Context(group))


def help_of(name: str) -> str:
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
    p = subprocess.run(
        [sys.executable, "-m", "traceadvisor", name, "--help"], capture_output=True, text=True, timeout=120, env=env
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_every_command_help_has_an_example_of_itself() -> None:
    names = registered_commands()
    # The commands a user sees; a new one must come with its examples.
    assert {"analyze", "rules", "explain", "capture", "diff", "open", "whatif", "calibrate", "workloads"} <= set(names)
    for name in names:
        text = help_of(name)
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= 80, name  # rendered for an 80-column terminal
        at = next(i for i, line in enumerate(lines) if line.strip() == "Examples:")
        examples = [line.strip() for line in lines[at + 1 :] if line.strip()]
        assert examples, name
        # Each example is an invocation of this very command, on one line of its own (not rewrapped).
        assert all(e.startswith(f"traceadvisor {name}") for e in examples), (name, examples)


def test_all_lists_the_findings_without_a_saving() -> None:
    """``analyze --all`` lists every finding; without it those with no predicted saving are one line."""
    import json

    from fixture_paths import FIXTURE_TRACES

    trace = str(FIXTURE_TRACES / "train_step.json.gz")

    def analyze(*args: str) -> str:
        p = subprocess.run(
            [sys.executable, "-m", "traceadvisor", "analyze", trace, *args], capture_output=True, text=True, timeout=120
        )
        assert p.returncode == 0, p.stderr
        return p.stdout

    codes = [f["code"] for f in json.loads(analyze("-f", "json"))["findings"]]
    default, everything = analyze(), analyze("--all")
    assert "(--all shows them)" in default and "(--all shows them)" not in everything
    for i, code in enumerate(codes, 1):
        assert f"{i}. [" in everything and f"({code})" in everything
    hidden = [c for i, c in enumerate(codes, 1) if f"{c} (#{i})" in default]
    assert hidden and all(f"({c})" not in default.split("more finding")[0] for c in hidden)
    assert f"### {len(codes)}. " in analyze("-f", "markdown", "--all")
