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
