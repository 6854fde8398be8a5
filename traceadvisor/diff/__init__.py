"""``traceadvisor diff BEFORE AFTER``: two analysed runs compared (docs/diff.md).

Computation only: ``compare.diff_runs`` returns plain data (``model.Diff``); ``render`` turns it
into text, Markdown or JSON. Nothing here prints.
"""

from traceadvisor.diff.compare import diff_runs
from traceadvisor.diff.model import Diff
from traceadvisor.diff.run import Run, load_run

__all__ = ["Diff", "Run", "diff_runs", "load_run"]
