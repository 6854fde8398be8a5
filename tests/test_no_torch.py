"""The analysis path never imports torch: ``analyze`` works where torch cannot be imported."""

from __future__ import annotations

import subprocess
import sys

from fixture_paths import TRACELENS

TRACE = TRACELENS / "h100" / "gaunernst_bert-small-uncased__1016001.json.gz"

# A meta-path finder that makes `import torch` (and triton) fail, as on a machine without them.
BLOCKER = """
import sys, runpy
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'triton'):
            raise ImportError('torch is not installed here')
        return None
sys.meta_path.insert(0, Block())
sys.argv = ['traceadvisor', 'analyze', sys.argv[1], '--format', 'json']
runpy.run_module('traceadvisor', run_name='__main__')
"""


def test_analyze_runs_without_torch() -> None:
    proc = subprocess.run([sys.executable, "-c", BLOCKER, str(TRACE)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '"kernel_count": 60' in proc.stdout
    assert "torch" not in proc.stderr


def test_analysis_modules_do_not_import_torch() -> None:
    code = (
        "import sys, traceadvisor, traceadvisor.cli, traceadvisor.pipeline, traceadvisor.analyses.graph;"
        "print(any(m == 'torch' or m.startswith('torch.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
