"""The reference workloads by name: what each runs, the lesson it plants, what ``analyze`` should say.

The texts come from each workload module's docstring (first line: the summary; sections
``## Lesson`` and ``## What analyze should say``), so they are written once, next to the code.
``Expect`` holds the part of "what analyze should say" that a GPU run can check mechanically
(``bench/gpu_workloads.py`` does). Listing workloads imports neither torch nor triton.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field

from traceadvisor.errors import UsageError

_SECTION = re.compile(r"^## (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Expect:
    """What a GPU trace of the workload at its default sizes should show."""

    top_kernel: str | None = None  # a substring of the kernel with the most GPU time
    bottleneck: tuple[str, ...] = ()  # the top-level annotation named as the bottleneck: one of these
    findings: tuple[str, ...] = ()  # at least one of these rule codes fires
    no_findings: tuple[str, ...] = ()  # none of these fires
    triton_kernels: tuple[str, ...] = ()  # kernels that must have Triton launch records


@dataclass(frozen=True)
class Workload:
    """One reference workload."""

    name: str
    module: str
    steps_by: str  # "marker": traceadvisor.step() after each iteration; "optimizer": optimizer.step()
    uses_triton: bool
    expect: Expect = field(default_factory=Expect)

    @property
    def doc(self) -> str:
        """The module docstring."""
        return importlib.import_module(self.module).__doc__ or ""

    @property
    def summary(self) -> str:
        """One line: what the workload runs."""
        return self.doc.strip().splitlines()[0] if self.doc.strip() else self.name

    @property
    def lesson(self) -> str:
        """The profiling lesson the workload plants."""
        return _section(self.doc, "Lesson")

    @property
    def analysis(self) -> str:
        """What ``traceadvisor analyze`` should say about its trace."""
        return _section(self.doc, "What analyze should say")

    def main(self, argv: list[str]) -> None:
        """Run the workload with script arguments ``argv`` (``--steps``, ``--device``, sizes)."""
        importlib.import_module(self.module).main(list(argv))


_WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "vector-add",
        "traceadvisor.workloads.vector_add",
        "marker",
        True,
        Expect(top_kernel="add_kernel", triton_kernels=("add_kernel",)),
    ),
    Workload(
        "softmax",
        "traceadvisor.workloads.softmax",
        "marker",
        True,
        Expect(top_kernel="softmax_kernel", triton_kernels=("softmax_kernel",)),
    ),
    Workload(
        "matmul",
        "traceadvisor.workloads.matmul",
        "marker",
        True,
        Expect(top_kernel="matmul_kernel", triton_kernels=("matmul_kernel",)),
    ),
    Workload(
        "layer-norm",
        "traceadvisor.workloads.layer_norm",
        "marker",
        True,
        Expect(top_kernel="layer_norm_fwd", triton_kernels=("layer_norm_fwd",)),
    ),
    Workload(
        "attention-naive",
        "traceadvisor.workloads.attention_naive",
        "marker",
        False,
        Expect(bottleneck=("scores", "softmax"), findings=("OP101",)),
    ),
    Workload(
        "attention-sdpa",
        "traceadvisor.workloads.attention_sdpa",
        "marker",
        False,
        Expect(no_findings=("OP101",)),
    ),
    Workload(
        "attention-flash",
        "traceadvisor.workloads.attention_flash",
        "marker",
        True,
        Expect(
            top_kernel="flash_attention_fwd",
            bottleneck=("flash_attention",),
            no_findings=("OP101",),
            triton_kernels=("flash_attention_fwd",),
        ),
    ),
    Workload(
        "mlp-train",
        "traceadvisor.workloads.mlp_train",
        "optimizer",
        False,
        Expect(findings=("GK102", "GK101")),
    ),
)


def all() -> list[Workload]:
    """Every reference workload, in the order they are listed."""
    return list(_WORKLOADS)


def names() -> list[str]:
    """The workload names."""
    return [w.name for w in _WORKLOADS]


def get(name: str) -> Workload:
    """The workload called ``name`` (``_`` and ``-`` are the same); ``UsageError`` if there is none."""
    key = name.strip().lower().replace("_", "-")
    for w in _WORKLOADS:
        if w.name == key:
            return w
    raise UsageError(f"no workload {name!r}; known: {', '.join(names())} (see 'traceadvisor workloads')")


def _section(doc: str, title: str) -> str:
    """The text of a ``## title`` section, joined into one paragraph."""
    parts = _SECTION.split(doc)
    # split() gives [preamble, title1, body1, title2, body2, ...]
    for i in range(1, len(parts) - 1, 2):
        if parts[i].strip() == title:
            return " ".join(parts[i + 1].split())
    return ""
