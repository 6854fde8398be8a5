"""The suite needs nothing outside the repository (issue 10: a bare clone must pass).

The third-party traces live in ``fixtures/external/`` with their checksums, provenance and
licences, and no test or benchmark names a path beside the repository. Self-contained on purpose
(no import of ``fixture_paths``): it must fail, not error, on a checkout that lacks the set.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXTERNAL = REPO / "fixtures" / "external"
SUMS = EXTERNAL / "SHA256SUMS"
# Our own text about the set, not upstream bytes: not checksummed.
OWN_FILES = {"SHA256SUMS", "PROVENANCE.md", "hta/README.md", "tracelens/README.md"}
LICENCES = {
    "hta/LICENSE.HTA-MIT.txt": "Copyright (c) Meta Platforms, Inc. and affiliates.",
    "tracelens/LICENSE.TraceLens-MIT.txt": "Copyright (c) 2024 - 2025 Advanced Micro Devices, Inc.",
}
# What pointed the tests at the development machine: the sibling ``shared`` folder and absolute
# paths of its checkout. (Character classes keep this file from matching itself.)
OUTSIDE = re.compile(r'"s[h]ared"|\.\./s[h]ared|/w[o]rk/|parents\[1\]\.parent')
SCANNED = ("tests", "bench", "traceadvisor")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".json", ".txt", ".c", ".h"}


def _sums() -> dict[str, str]:
    """``SHA256SUMS`` as path -> hex digest (``sha256sum`` format: digest, two spaces, path)."""
    assert SUMS.is_file(), f"{SUMS} is missing: the external traces must be vendored in the repository"
    out = {}
    for line in SUMS.read_text().splitlines():
        digest, path = line.split("  ", 1)
        out[path] = digest
    return out


def test_every_vendored_file_matches_its_checksum() -> None:
    sums = _sums()
    traces = [p for p in sums if p.endswith(".json.gz")]
    assert len(traces) == 11 and sum(p.endswith(".csv") for p in sums) == 14
    for rel, digest in sums.items():
        assert hashlib.sha256((EXTERNAL / rel).read_bytes()).hexdigest() == digest, rel


def test_nothing_unlisted_in_the_external_set() -> None:
    on_disk = {str(p.relative_to(EXTERNAL)) for p in EXTERNAL.rglob("*") if p.is_file()}
    unlisted = on_disk - set(_sums()) - OWN_FILES - set(LICENCES)
    assert not unlisted, f"not in SHA256SUMS: {sorted(unlisted)}"


def test_every_vendored_file_has_provenance_and_licence() -> None:
    provenance = (EXTERNAL / "PROVENANCE.md").read_text()
    for rel in _sums():
        if rel.endswith(".json.gz"):  # each trace has its own row
            assert f"`{rel}`" in provenance, rel
        else:  # CSVs are named by the trace they belong to and their sheet
            stem = Path(rel).parent.name.removesuffix("_perf_report_csvs")
            assert stem in provenance and Path(rel).name in provenance, rel
    for rel, holder in LICENCES.items():
        text = (EXTERNAL / rel).read_text()
        assert "MIT License" in text and holder in text, rel
        assert "Permission is hereby granted, free of charge" in text, rel


def test_no_test_or_benchmark_names_a_path_outside_the_repository() -> None:
    hits = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if not path.is_file() or path.suffix not in TEXT_SUFFIXES:
                continue  # the compiled decoder carries its build folder in its debug info
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if OUTSIDE.search(line):
                    hits.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)
