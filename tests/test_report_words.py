"""Plain words in the text and Markdown reports: no snake_case identifiers, singular and plural,
SMs or CUs by vendor, the roofline's peak source on one short line (issue 14)."""

from __future__ import annotations

import re

from fixture_paths import REPO

from traceadvisor.pipeline import analyze
from traceadvisor.report import render
from traceadvisor.report.format import (
    CAUSE_NAMES,
    cause_name,
    compute_unit,
    peaks_source_line,
    plural,
    short_source,
    window_basis_name,
)
from traceadvisor.rules_api import IdleCause

DATASHEET = (
    "datasheet: NVIDIA H100 Tensor Core GPU datasheet (H100 SXM / H100 NVL columns), "
    "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
)


def test_plural_is_never_s_in_parentheses() -> None:
    assert plural(1, "kernel") == "1 kernel" and plural(0, "kernel") == "0 kernels"
    assert plural(3, "block") == "3 blocks" and plural(1_200, "gap") == "1,200 gaps"
    assert plural(1, "pageable copy", "pageable copies") == "1 pageable copy"
    assert plural(2, "pageable copy", "pageable copies") == "2 pageable copies"


def test_every_idle_cause_has_a_name_in_words() -> None:
    assert set(CAUSE_NAMES) == {c.value for c in IdleCause}
    assert cause_name("launch_bound") == "launch-bound" and cause_name("cpu_op") == "CPU work"
    assert all("_" not in cause_name(c.value) for c in IdleCause)
    assert cause_name("my_new_cause") == "my new cause"  # a user rule's cause
    assert window_basis_name("steps (GPU windows)") == "steps on the GPU"


def test_cores_are_cus_on_amd() -> None:
    assert compute_unit("rocm", 304) == "304 CUs" and compute_unit("cuda", 132) == "132 SMs"
    assert compute_unit("rocm") == "CU" and compute_unit("cuda", 1) == "1 SM"


def test_peak_source_is_one_short_line_in_text_and_whole_in_markdown() -> None:
    assert short_source(DATASHEET) == "NVIDIA H100 Tensor Core GPU datasheet"
    sources = {"memory_bandwidth": DATASHEET, "fp32": DATASHEET, "bf16": "configuration: gpu.toml"}
    assert peaks_source_line(sources) == "NVIDIA H100 Tensor Core GPU datasheet; bf16: configuration: gpu.toml"
    assert peaks_source_line(sources, short=False) == f"{DATASHEET}; bf16: configuration: gpu.toml"


def test_train_step_report_in_plain_words() -> None:
    report = analyze([REPO / "fixtures" / "traces" / "train_step.json.gz"])
    text = render(report, "text", width=100, show_all=True).decode()
    md = render(report, "markdown", show_all=True).decode()
    for out in (text, md):
        for ident in ("launch_bound", "cpu_op", "launch_latency", "steps (GPU windows)", "(s) ", "https://"):
            if out is md and ident == "https://":
                continue
            assert ident not in out, ident
        assert "launch-bound" in out and "CPU work" in out
    assert "    peaks from: NVIDIA H100 Tensor Core GPU datasheet\n" in text
    assert "https://resources.nvidia.com/" in md  # Markdown keeps the link
    assert re.search(r"\b1 kernels\b|\b1 blocks\b", text + md) is None
