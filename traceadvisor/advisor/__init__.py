"""Advice inside training loops: an ``on_trace_ready`` advisor and a ready-made ``profile``.

Nothing here imports torch until a profiler is created or a TensorBoard writer is needed.
"""

from __future__ import annotations

from traceadvisor.advisor.advisor import Advisor, AdvisorFindingsError, detect_rank
from traceadvisor.advisor.profiling import AdvisedProfile, Window, profile
from traceadvisor.advisor.report import AdvisorReport, finding_from_dict

__all__ = [
    "AdvisedProfile",
    "Advisor",
    "AdvisorFindingsError",
    "AdvisorReport",
    "Window",
    "detect_rank",
    "finding_from_dict",
    "profile",
]
