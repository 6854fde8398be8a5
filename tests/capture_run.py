"""``traceadvisor capture`` run as a real subprocess, for the capture tests (one helper instead of
one per test file)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# A small CPU training script (``python train.py N``: N optimizer steps) that writes its argv, path
# and module name to the file ``$PROBE`` names, for the capture tests to check how it was run.
TRAIN = """
import json, os, sys
import torch
from torch import nn

record = {"argv": sys.argv, "path0": sys.path[0], "file": __file__, "name": __name__}
with open(os.environ["PROBE"], "w") as fh:
    json.dump(record, fh)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(8, 16), torch.randn(8, 4)
for i in range(int(sys.argv[1])):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
"""


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


def run_driver(tmp_path: Path, driver: str = "driver.py") -> subprocess.CompletedProcess[str]:
    """Run a test's Python driver (which calls ``traceadvisor.cli.main`` itself, with hooks set up
    first) in ``tmp_path``, with ``$PROBE`` naming ``probe.json`` there."""
    return subprocess.run(
        [sys.executable, driver],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PROBE": str(tmp_path / "probe.json")},
    )
