"""``traceadvisor capture`` run as a real subprocess, for the capture tests (one helper instead of
one per test file)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_capture(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m traceadvisor capture ARGS`` in ``cwd``, output captured, with this process's
    environment plus ``env``; TRACEADVISOR_DEBUG is cleared unless ``env`` sets it (a developer's
    shell may have it on, and it turns one-line errors into tracebacks)."""
    base = {k: v for k, v in os.environ.items() if k != "TRACEADVISOR_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "traceadvisor", "capture", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**base, **(env or {})},
    )
