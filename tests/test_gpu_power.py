"""The GPU's power state stored with a trace (capture/gpu_power.py) and what sync-point says with it.

On a GPU held at its power limit, removing a sync from a GPU-bound loop saves 44-72% of the idle
the replay predicts (fixtures/gpu_segment_probe/: the idling side's kernels ran 1.3-2.7% faster).
The trace is the probe's own item_gpu loop (fixtures/host_phase_probe/, H200), with the
``gpu_power`` record written in front as capture writes it; the readings are the ones NVML gave on
that machine's loops (power 692 W of 700, clock event reasons 0x4: the software power cap).
"""

from __future__ import annotations

import gzip
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from traceadvisor.capture.gpu_power import PowerRecorder, interpret, read_power_state
from traceadvisor.capture.unprofiled import with_key
from traceadvisor.pipeline import analyze

PROBE = Path(__file__).resolve().parent.parent / "fixtures" / "host_phase_probe" / "run_a" / "traces.tar"
CAPPED = interpret(power_w=692.4, power_limit_w=700.0, sm_clock_mhz=1650.0, reasons=0x4)
UNCAPPED = interpret(power_w=128.5, power_limit_w=700.0, sm_clock_mhz=1980.0, reasons=0x0)


@pytest.fixture(scope="module")
def item_gpu_body() -> bytes:
    with tarfile.open(PROBE) as tar:
        member = tar.extractfile("item_gpu_stack.json.gz")
        assert member is not None
        return gzip.decompress(member.read())


def _trace(tmp_path: Path, body: bytes, power: dict[str, Any] | None, name: str) -> Path:
    out = tmp_path / name
    out.write_bytes(gzip.compress(with_key(body, {"gpu_power": power}) if power is not None else body))
    return out


def _sy101(path: Path) -> Any:
    return next(f for f in analyze([path]).findings if f.code == "SY101")


def _range_us(message: str) -> tuple[float, float]:
    m = re.search(r"expect ([\d.]+) µs to ([\d.]+) µs", message)
    assert m, message
    return float(m.group(1)), float(m.group(2))


@pytest.mark.parametrize(
    ("reasons", "capped"),
    [(0x0, False), (0x1, False), (0x4, True), (0x80, True), (0x20, False), (0x40, False), (0x4 | 0x20, True)],
)
def test_power_capped_is_the_power_reasons_bit(reasons: int, capped: bool) -> None:
    """The software power cap (0x4) or the hardware power brake (0x80) is the power limit; idle
    (0x1) and the thermal reasons (0x20, 0x40) are not."""
    assert interpret(600.0, 700.0, 1700.0, reasons)["power_capped"] is capped


def test_without_a_gpu_nothing_is_read_or_stored() -> None:
    """This machine has no CUDA GPU (torch's CPU build): no reading, so no key in the trace."""
    assert read_power_state() is None
    recorder = PowerRecorder("capture")
    assert recorder.key([2, 3, 4]) == {}
    assert recorder.readings == []


def test_at_the_power_limit_sync_point_gives_the_share_outright(tmp_path: Path, item_gpu_body: bytes) -> None:
    """The loop measured 155.7 µs a step without the profiler (gpu_segment_probe); the replay
    predicts 312.8 µs; at the limit the finding gives 44-72% of it, which holds the measurement."""
    finding = _sy101(_trace(tmp_path, item_gpu_body, CAPPED, "capped.json.gz"))
    assert "it ran at its power limit when the window ended (NVML, 692 of 700 W)" in finding.message
    lo, hi = _range_us(finding.message)
    saving_us = finding.impact.saving_per_step_us
    assert saving_us is not None
    assert lo == pytest.approx(0.44 * saving_us, rel=1e-3) and hi == pytest.approx(0.72 * saving_us, rel=1e-3)
    assert lo <= 155.7 <= hi


def test_below_the_limit_there_is_no_power_note(tmp_path: Path, item_gpu_body: bytes) -> None:
    finding = _sy101(_trace(tmp_path, item_gpu_body, UNCAPPED, "uncapped.json.gz"))
    assert "power limit" not in finding.message


def test_without_a_record_the_note_is_a_condition(tmp_path: Path, item_gpu_body: bytes) -> None:
    """A trace without ``gpu_power`` (Kineto records no power state; a malformed record counts as
    none): the note says how to check the limit."""
    for power, name in ((None, "plain.json.gz"), ({"power_capped": "yes"}, "malformed.json.gz")):
        finding = _sy101(_trace(tmp_path, item_gpu_body, power, name))
        assert "If it runs at its power limit (nvidia-smi -q -d PERFORMANCE: SW Power Cap active)" in finding.message


def test_a_host_bound_loop_gets_no_power_note(tmp_path: Path) -> None:
    """item_host stays host-bound without the sync: the power limit has nothing to give back."""
    with tarfile.open(PROBE) as tar:
        member = tar.extractfile("item_host_stack.json.gz")
        assert member is not None
        body = gzip.decompress(member.read())
    finding = _sy101(_trace(tmp_path, body, CAPPED, "host.json.gz"))
    assert "power limit" not in finding.message


def test_a_capture_at_the_power_limit_carries_its_record_to_the_finding() -> None:
    """The product end to end on the GPU (fixtures/traces/capture_power_capped_loop.json.gz: a
    GPU-bound `.item()` loop under `traceadvisor capture` on an H200 at its limit): capture stored
    NVML's reading with the trace, and sync-point, at the exact line of the `.item()`, gives the
    share outright."""
    path = Path(__file__).resolve().parent.parent / "fixtures" / "traces" / "capture_power_capped_loop.json.gz"
    finding = _sy101(path)
    assert finding.location is not None and (finding.location.file, finding.location.line) == ("gpu_loop.py", 11)
    assert "it ran at its power limit when the window ended (NVML, 661 of 700 W)" in finding.message
    lo, hi = _range_us(finding.message)
    saving_us = finding.impact.saving_per_step_us
    assert saving_us is not None and lo == pytest.approx(0.44 * saving_us, rel=1e-3)
    assert hi == pytest.approx(0.72 * saving_us, rel=1e-3)
