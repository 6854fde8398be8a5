"""Thread-mode advisor cases run by tests/test_advisor_reliability.py, each in a fresh interpreter
(see ``test_thread_mode_in_a_fresh_interpreter`` there for why). Not collected by the suite itself
(the file name does not start with ``test_``)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
import test_advisor_reliability as reliability

from traceadvisor.advisor import Advisor

FIXTURES = reliability.FIXTURES


# The spinning user rule's folder, the same fixture as the suite's.
spin_rules = reliability.spin_rules


def test_thread_mode_cancels_an_analysis_past_its_timeout(
    tmp_path: Path, spin_rules: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="traceadvisor")
    advisor = Advisor(tmp_path, mode="thread", analysis_timeout=1.0, rules_dir=spin_rules)
    try:
        advisor.submit_trace(FIXTURES / "pair_tf32_before.json.gz")
        deadline = time.monotonic() + 60
        while not any("was not analysed" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, advisor.status()
            advisor.poll()
            time.sleep(0.02)
        [message] = [r.getMessage() for r in caplog.records if "was not analysed" in r.getMessage()]
        assert "did not finish within 1 s; it was cancelled" in message
        # The analysis thread stops (it would otherwise spin, holding the GIL, for the rest of its minute).
        t0 = time.monotonic()
        while _analysis_threads() and time.monotonic() - t0 < 10:
            time.sleep(0.02)
        assert _analysis_threads() == []
        assert time.monotonic() - t0 < 2.0
    finally:
        advisor.close(timeout=0)


def _analysis_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "traceadvisor-analysis" and t.is_alive()]


def test_a_cancelled_analysis_never_runs_beside_the_next_one(
    tmp_path: Path, spin_rules: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two jobs: the first times out and is cancelled; the second starts only once the first returned,
    # so at most one analysis competes with training for the GIL.
    log = tmp_path / "spin.log"
    monkeypatch.setenv("SPIN_LOG", str(log))
    advisor = Advisor(tmp_path / "prof", mode="thread", analysis_timeout=1.0, rules_dir=spin_rules, max_pending=2)
    try:
        advisor.submit_trace(FIXTURES / "pair_tf32_before.json.gz")
        advisor.submit_trace(FIXTURES / "pair_tf32_after.json.gz")
        deadline = time.monotonic() + 30
        while advisor.pending and time.monotonic() < deadline:
            advisor.poll()
            time.sleep(0.01)
        assert advisor.pending == 0
        t0 = time.monotonic()
        while _analysis_threads() and time.monotonic() - t0 < 10:
            time.sleep(0.02)
    finally:
        advisor.close(timeout=0)
    marks = log.read_text().split()
    assert marks == ["+", "-", "+", "-"]  # both ran, one after the other, and both were stopped
