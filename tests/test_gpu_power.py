"""The GPU's power state stored with a trace (capture/gpu_power.py) and what sync-point says with it.

On a GPU held at its power limit, removing a sync from a GPU-bound loop saves less than the idle
the replay predicts: the idling side's kernels ran faster, giving back 1-15% of the idle on loops
running near the top clock without the profiler and 28-56% on loops far below it
(fixtures/gpu_segment_probe/, whatif/power_limit.py). The traces are the probe's own loops
(fixtures/host_phase_probe/, H200), with the ``gpu_power`` record written in front as capture
writes it; the readings are the ones NVML gave on those loops (power 692 W of 700, clock event
reasons 0x4: the software power cap; SM clocks from the pairs runs' rounds).
"""

from __future__ import annotations

import gzip
import json
import re
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import capture_run
import pytest

from traceadvisor.capture import gpu_power
from traceadvisor.capture.gpu_power import PowerRecorder, interpret, read_power_state
from traceadvisor.capture.unprofiled import with_key
from traceadvisor.pipeline import analyze
from traceadvisor.rule_helpers import fmt_ns
from traceadvisor.whatif import power_limit

PROBE = Path(__file__).resolve().parent.parent / "fixtures" / "host_phase_probe" / "run_a" / "traces.tar"
CAPPED = interpret(power_w=692.4, power_limit_w=700.0, sm_clock_mhz=1650.0, reasons=0x4)
UNCAPPED = interpret(power_w=128.5, power_limit_w=700.0, sm_clock_mhz=1980.0, reasons=0x0)


# a window-end record whose unprofiled reading (as the window started) found the GPU at its limit
# at ``clock`` MHz of its 1,980 MHz top
def _with_unprofiled(clock: float, reasons: int = 0x4) -> dict[str, Any]:
    window_end = interpret(
        power_w=671.8, power_limit_w=700.0, sm_clock_mhz=1905.0, reasons=0x4, max_sm_clock_mhz=1980.0
    )
    unprofiled = interpret(
        power_w=691.0, power_limit_w=700.0, sm_clock_mhz=clock, reasons=reasons, max_sm_clock_mhz=1980.0
    )
    return {**window_end, "unprofiled": unprofiled}


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


def test_at_the_limit_without_the_unprofiled_clock_the_note_gives_the_measured_span(
    tmp_path: Path, item_gpu_body: bytes
) -> None:
    """A record read as the window ended only (the profiled loop's clock, which runs higher than
    the unprofiled one): the finding gives the span six loops measured, 44-99% of the replayed
    saving, which holds the loop's 155.7 µs (gpu_segment_probe/run_a)."""
    finding = _sy101(_trace(tmp_path, item_gpu_body, CAPPED, "capped.json.gz"))
    assert "it ran at its power limit when the window ended (NVML, 692 of 700 W)" in finding.message
    lo, hi = _range_us(finding.message)
    saving_us = finding.impact.saving_per_step_us
    assert saving_us is not None
    assert lo == pytest.approx(0.44 * saving_us, rel=1e-3) and hi == pytest.approx(0.99 * saving_us, rel=1e-3)
    assert lo <= 155.7 <= hi


@pytest.mark.parametrize(
    ("loop", "clock", "measured_us"),
    [
        # gpu_segment_probe/run_a's savings; the busy clock of each loop's unprofiled rounds (runs 27-28)
        ("item_gpu_wide", 1650.0, 131.3),  # fit
        ("item_gpu_deep", 1725.0, 340.6),  # validation
        ("item_gpu", 1657.5, 155.7),  # validation
    ],
)
def test_with_the_unprofiled_clock_the_note_gives_the_share_at_that_clock_and_the_saving_stays_the_idle(
    tmp_path: Path, loop: str, clock: float, measured_us: float
) -> None:
    """With capture's reading as the window started, the message gives the power-limit model's share
    at that clock (whatif/power_limit.py, fitted on two fit loops) and a range from the replayed idle
    less the share's band (widened by the replay's own error on the fit loops) up to the replayed
    idle; the saving itself stays the replayed idle (whatif/savings.py ``power_limited``: taken off,
    the give-back made more validation pairs of runs 27-31 miss). item_gpu_wide's 131 µs (fit) and
    item_gpu's 156 µs fall inside; item_gpu_deep's 341 µs does not: there the replay's own saving,
    235 µs, is short of it (docs/whatif.md)."""
    with tarfile.open(PROBE) as tar:
        member = tar.extractfile(f"{loop}_stack.json.gz")
        assert member is not None
        body = gzip.decompress(member.read())
    idle_only = _sy101(_trace(tmp_path, body, None, f"{loop}_bare.json.gz"))
    finding = _sy101(_trace(tmp_path, body, _with_unprofiled(clock), f"{loop}.json.gz"))
    assert f"Without the profiler it ran at its power limit (NVML: SM clock {clock:.0f} of 1980 MHz" in finding.message
    model = power_limit.at_clock(clock, 1980.0)
    assert model.share > 0
    assert f"at that clock the power-limit model gives back {model.share * 100:.0f}%" in finding.message
    assert f"({model.low * 100:.0f}-{model.high * 100:.0f}%)" in finding.message
    replayed_us = idle_only.impact.saving_per_step_us
    saving_us = finding.impact.saving_per_step_us
    assert replayed_us is not None and saving_us is not None
    assert saving_us == pytest.approx(replayed_us, rel=1e-9)
    assert f"{fmt_ns(model.share * replayed_us * 1e3)} a step" in finding.message
    assert "a GPU at its power limit may give back" in finding.impact.basis
    assert "power limit" not in idle_only.impact.basis
    lo, hi = _range_us(finding.message)
    factor = power_limit.REPLAY_SAVING_FACTOR
    assert lo == pytest.approx((1 - model.high) * replayed_us / factor, rel=1e-3)
    assert hi == pytest.approx(replayed_us, rel=1e-3)
    assert (lo <= measured_us <= hi) is (loop != "item_gpu_deep"), (loop, lo, hi, measured_us)


def test_near_the_top_clock_or_below_the_limit_unprofiled_there_is_no_power_note(
    tmp_path: Path, item_gpu_body: bytes
) -> None:
    """At 1,965 MHz unprofiled (item_gpu_short_deep's clock: 6% of its idle came back) the model
    gives nothing back, so the replayed saving stands; an unprofiled reading below the limit says
    the program does not run at it, whatever the profiled window's reading says."""
    for power, name in ((_with_unprofiled(1965.0), "top.json.gz"), (_with_unprofiled(1980.0, 0x0), "free.json.gz")):
        finding = _sy101(_trace(tmp_path, item_gpu_body, power, name))
        assert "power limit" not in finding.message, name


def test_the_unprofiled_reading_is_taken_where_the_profiler_turns_on() -> None:
    """Only the boundary from a step without the profiler to one with it reads NVML, and that
    reading goes to the next trace written, once."""
    readings = iter(range(1, 100))

    def read() -> dict[str, Any]:
        n = next(readings)
        return interpret(600.0 + n, 700.0, 1600.0 + n, 0x4, 1980.0)

    recorder = PowerRecorder("capture", read=read)
    for was_off, now_off in ((True, True), (False, False), (False, True)):
        recorder.boundary(was_off, now_off)
    recorder.boundary(True, False)  # reading 1: the window's first warmup step begins
    first = recorder.key([2, 3])["gpu_power"]
    assert first["sm_clock_mhz"] == 1602.0 and first["unprofiled"]["sm_clock_mhz"] == 1601.0
    assert first["unprofiled"]["max_sm_clock_mhz"] == 1980.0 and first["steps"] == [2, 3]
    second = recorder.key([6, 7])["gpu_power"]  # no boundary into this window was seen
    assert "unprofiled" not in second and second["sm_clock_mhz"] == 1603.0


def test_the_unprofiled_reading_holds_the_stretch_nvml_sampled_before_the_window() -> None:
    """The reading where the profiler turns on also holds the driver's samples over the unprofiled
    stretch before it (from the first boundary without the profiler, or the last window's end) and the
    share of that stretch the power limit held the clocks down; a window entered without a stretch
    seen gets the point reading alone."""
    now = [100.0]
    asked: list[float] = []
    counter = iter([(1_000_000.0, 0.0), (3_000_000.0, 1.5e9), (9_000_000.0, 2.0e9), (10_000_000.0, 2.9e9)])

    def samples(over_s: float) -> dict[str, Any]:
        asked.append(over_s)
        return {"sm_clock_mhz_median": 1860.0, "clock_samples": 12, "power_w_median": 690.0, "power_samples": 12}

    recorder = PowerRecorder(
        "capture",
        read=lambda: interpret(650.0, 700.0, 1740.0, 0x4, 1980.0),
        samples=samples,
        violation=lambda: next(counter),
        clock=lambda: now[0],
    )
    recorder.boundary(True, True)  # the stretch begins: violation counter (1 s, 0 ns)
    now[0] = 102.5
    recorder.boundary(True, False)  # the window starts: counter (3 s, 1.5 s held) -> 0.75 of the stretch
    first = recorder.key([2, 3])["gpu_power"]["unprofiled"]
    assert asked == [2.5]
    assert first["sm_clock_mhz"] == 1740.0 and first["sm_clock_mhz_median"] == 1860.0
    assert first["power_capped_share"] == pytest.approx(0.75)
    recorder.boundary(False, True)  # the window ended: a new stretch, counter (9 s, 2.0 s)
    now[0] = 110.0
    recorder.boundary(True, False)  # counter (10 s, 2.9 s): 0.9 s of 1 s held
    second = recorder.key([8, 9])["gpu_power"]["unprofiled"]
    assert asked == [2.5, 7.5] and second["power_capped_share"] == pytest.approx(0.9)
    bare = PowerRecorder("capture", read=lambda: interpret(650.0, 700.0, 1740.0, 0x4, 1980.0), samples=samples)
    bare.boundary(False, False)
    bare.boundary(True, False)  # no boundary without the profiler seen before: no stretch
    assert "sm_clock_mhz_median" not in bare.key([1])["gpu_power"]["unprofiled"]


def test_the_model_takes_the_stretch_median_and_the_capped_share_over_one_reading() -> None:
    """item_gpu_short's case (run 28): one reading at 1,740 MHz would give back 0.26 of the idle, the
    loop's median clock (1,860) 0.04; a reading without the cap's reason inside a stretch held by the
    limit 90% of the time counts as capped, one with the reason in a stretch held 10% as not."""
    point = interpret(650.0, 700.0, 1740.0, 0x4, 1980.0)
    sampled = {**point, "sm_clock_mhz_median": 1860.0, "clock_samples": 12}
    state = {**point, "unprofiled": point}
    assert power_limit.give_back(state).share == pytest.approx(power_limit.at_clock(1740.0, 1980.0).share)
    given = power_limit.give_back({**point, "unprofiled": sampled})
    assert given is not None and given.clock_mhz == 1860.0
    assert given.share == pytest.approx(power_limit.at_clock(1860.0, 1980.0).share) and given.share < 0.1
    uncapped_now = {**sampled, "power_capped": False, "clock_event_reasons": 0, "power_capped_share": 0.9}
    assert power_limit.give_back({**point, "unprofiled": uncapped_now}) is not None
    assert power_limit.unprofiled_capped({**point, "unprofiled": uncapped_now}) is True
    capped_now = {**sampled, "power_capped_share": 0.1}
    assert power_limit.give_back({**point, "unprofiled": capped_now}) is None
    assert power_limit.unprofiled_capped({**point, "unprofiled": capped_now}) is False


BOUNDARIES = """
import json, sys
from contextlib import contextmanager
from pathlib import Path
from traceadvisor.capture import gpu_power, session

seen = []
count = [0]

def fake_read():
    count[0] += 1
    return gpu_power.interpret(600.0 + count[0], 700.0, 1600.0 + count[0], 4, 1980.0)

gpu_power.read_power_state = fake_read

@contextmanager
def watcher(s):
    s.boundary_listeners.append(lambda was_off, now_off: seen.append([s.steps_seen, was_off, now_off]))
    yield

session.extra_contexts.append(watcher)
sys.argv = ["traceadvisor", "capture", "--out", "run", "--no-analyze", "--skip-first", "1", "--warmup", "1",
            "--active", "2", "--wait", "2", "--repeat", "2", "train.py", "14"]
from traceadvisor.cli import main
try:
    main()
finally:
    Path("seen.json").write_text(json.dumps(seen))
"""


def test_capture_reads_the_unprofiled_state_as_each_window_starts(tmp_path: Path) -> None:
    """A real capture (torch on the CPU, NVML's reading replaced by a counter): the listeners see
    each window's off-to-on boundary once, and each trace carries the reading taken there."""
    (tmp_path / "train.py").write_text(textwrap.dedent(capture_run.TRAIN))
    (tmp_path / "driver.py").write_text(textwrap.dedent(BOUNDARIES))
    proc = capture_run.run_driver(tmp_path)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    turns_on = [steps for steps, was_off, now_off in seen if was_off and not now_off]
    assert len(turns_on) == 2, seen  # two windows (--repeat 2), each entered once
    powers = []
    for trace in sorted((tmp_path / "run").rglob("rank0.json.gz")):
        with gzip.open(trace, "rt") as fh:
            powers.append(json.load(fh)["traceadvisor"]["gpu_power"])
    assert len(powers) == 2
    for power in powers:
        # the unprofiled reading was taken before the window's own (the counter rose in between)
        assert power["unprofiled"]["sm_clock_mhz"] < power["sm_clock_mhz"]
        assert power["unprofiled"]["power_capped"] is True
    assert powers[0]["sm_clock_mhz"] < powers[1]["unprofiled"]["sm_clock_mhz"]


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
    NVML's reading with the trace, and sync-point, at the exact line of the `.item()`, says the GPU
    was at its limit. The capture predates the unprofiled reading, so the note gives the span."""
    path = Path(__file__).resolve().parent.parent / "fixtures" / "traces" / "capture_power_capped_loop.json.gz"
    finding = _sy101(path)
    assert finding.location is not None and (finding.location.file, finding.location.line) == ("gpu_loop.py", 11)
    assert "it ran at its power limit when the window ended (NVML, 661 of 700 W)" in finding.message
    lo, hi = _range_us(finding.message)
    saving_us = finding.impact.saving_per_step_us
    assert saving_us is not None and lo == pytest.approx(0.44 * saving_us, rel=1e-3)
    assert hi == pytest.approx(0.99 * saving_us, rel=1e-3)


def test_the_in_loop_advisor_stores_the_unprofiled_reading_with_its_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``traceadvisor.profile()`` on the CPU (NVML's reading replaced by a counter): the trace of
    its window carries the reading taken where the profiler turned on, before the window's own."""
    import torch

    import traceadvisor
    from traceadvisor.capture import gpu_power

    count = [0]

    def fake_read() -> dict[str, Any]:
        count[0] += 1
        return interpret(600.0 + count[0], 700.0, 1600.0 + count[0], 0x4, 1980.0)

    monkeypatch.setattr(gpu_power, "read_power_state", fake_read)
    model = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    with traceadvisor.profile(out_dir=tmp_path, skip_first=1, wait=2, warmup=1, active=2, activities=None) as prof:
        for _ in range(8):
            model(x).sum().backward()
            prof.step()
    traces = sorted(tmp_path.rglob("*.json.gz"))
    assert len(traces) == 1, traces
    with gzip.open(traces[0], "rt") as fh:
        power = json.load(fh)["traceadvisor"]["gpu_power"]
    assert power["source"] == "advisor"
    assert power["unprofiled"]["sm_clock_mhz"] == 1601.0 and power["sm_clock_mhz"] == 1602.0


def test_a_capture_with_the_unprofiled_reading_gives_the_range_at_its_clock() -> None:
    """The product end to end on an H200 (fixtures/traces/capture_power_unprofiled_loop.json.gz:
    the same loop under capture with the unprofiled reading): NVML read the GPU at its limit both
    times, the profiled window 165 MHz above the unprofiled loop, and sync-point gives the range at
    the unprofiled clock, at the exact line of the `.item()`."""
    path = Path(__file__).resolve().parent.parent / "fixtures" / "traces" / "capture_power_unprofiled_loop.json.gz"
    with gzip.open(path, "rt") as fh:
        power = json.load(fh)["traceadvisor"]["gpu_power"]
    unprofiled = power["unprofiled"]
    assert power["power_capped"] and unprofiled["power_capped"]
    assert unprofiled["max_sm_clock_mhz"] == power["max_sm_clock_mhz"] == 1980.0
    assert unprofiled["sm_clock_mhz"] == 1710.0 and power["sm_clock_mhz"] == 1875.0
    finding = _sy101(path)
    assert finding.location is not None and (finding.location.file, finding.location.line) == ("gpu_loop.py", 11)
    assert "Without the profiler it ran at its power limit (NVML: SM clock 1710 of 1980 MHz, 693 of 700 W)" in (
        finding.message
    )
    given = power_limit.give_back(power)
    assert given is not None and given.share > 0
    lo, hi = _range_us(finding.message)
    saving_us = finding.impact.saving_per_step_us
    assert saving_us is not None
    # the saving is the replayed idle; the range runs from it less the give-back at 1,710 MHz up to it
    assert f"the step takes {saving_us:.1f} µs less" in finding.message
    assert lo == pytest.approx(given.expected_ns(saving_us * 1e3)[0] / 1e3, rel=1e-3)
    assert hi == pytest.approx(saving_us, rel=1e-3) and lo < hi


def test_only_a_fix_that_removes_idle_carries_the_give_back_and_whatif_says_so() -> None:
    """On the H200 capture at its power limit (1,710 MHz unprofiled), the no-sync what-if carries the
    same give-back as sync-point's finding beside its saving (not taken off it), and says so; a fix
    that changes kernels' durations changes the energy per step too, which the model does not cover,
    so it carries none; without the unprofiled reading there is none."""
    from traceadvisor.trace.load import load_file
    from traceadvisor.whatif import savings
    from traceadvisor.whatif.replay import Overrides, replay
    from traceadvisor.whatif.scenarios import SCENARIOS, step_time_ns
    from traceadvisor.whatif_command import render_text, to_dict

    path = Path(__file__).resolve().parent.parent / "fixtures" / "traces" / "capture_power_unprofiled_loop.json.gz"
    trace = load_file(path)
    no_sync = savings.scenario_saving(trace, "no-sync")
    assert no_sync.give_back is not None and no_sync.power_give_back_ns > 0
    assert no_sync.power_give_back_ns == pytest.approx(no_sync.give_back.share * no_sync.saving_ns, rel=1e-9)
    # the after step is the replay's own: nothing is added to it
    ov = savings.with_profiler_removed(trace, SCENARIOS["no-sync"].build(trace))
    assert no_sync.after_ns == step_time_ns(replay(trace, ov))
    assert _sy101(path).impact.saving_per_step_us == pytest.approx(no_sync.saving_ns / 1e3, rel=1e-9)
    # combined with a fix that changes kernels, the same idle is removed: the combination carries its give-back
    both = savings.whatif(trace, ["no-sync", "fuse-elementwise"])
    assert both[1].saving.power_give_back_ns == 0 and both[2].saving.scenario == "combined"
    assert both[2].saving.power_give_back_ns == pytest.approx(no_sync.power_give_back_ns)
    report = to_dict(str(path), None, savings.whatif(trace, ["no-sync"]), [])
    entry = report["scenarios"][0]
    assert entry["power_give_back_us"] == pytest.approx(no_sync.power_give_back_ns / 1e3)
    assert entry["saving_per_step_us"] == pytest.approx(no_sync.saving_ns / 1e3)
    assert "may come back as slower kernels at the GPU's power limit" in render_text(report)
    # the same removed idle with one kernel made longer: a change of kernels is not power-limited
    plain = savings.Saving("x", no_sync.before_ns, no_sync.after_ns)
    kernel = int(trace.kernels.index[0])
    changed = savings.power_limited(trace, Overrides(gpu_dur_ns={kernel: 1}), plain)
    assert changed == plain
    limited = savings.power_limited(trace, Overrides(), plain)
    assert limited.power_give_back_ns == pytest.approx(no_sync.power_give_back_ns)
    assert limited.saving_ns == plain.saving_ns
    bare = load_file(path)
    bare.meta.traceadvisor = {k: v for k, v in bare.meta.traceadvisor.items() if k != "gpu_power"}
    assert savings.scenario_saving(bare, "no-sync").power_give_back_ns == 0.0


def test_where_the_driver_keeps_no_clock_samples_the_clock_is_polled_over_the_stretch() -> None:
    """On run 29's H200 the driver answered NVML_ERROR_NOT_FOUND for clock samples: the recorder then
    polls the clock on a thread over the unprofiled stretch (here a counter every millisecond) and
    stores the polled median; the poller stops where the window starts and when the recorder closes."""
    import threading
    import time as clock_time

    ticks = iter(range(1600, 100000, 10))
    lock = threading.Lock()

    def reader() -> Any:
        def read() -> float:
            with lock:
                return float(next(ticks))

        return read

    poller = gpu_power.ClockPoller(interval_s=0.001, reader=reader)
    recorder = PowerRecorder(
        "capture",
        read=lambda: interpret(650.0, 700.0, 1740.0, 0x4, 1980.0),
        samples=lambda over_s: None,
        violation=lambda: None,
        poller=poller,
    )
    recorder.boundary(True, True)
    deadline = clock_time.monotonic() + 5.0
    while clock_time.monotonic() < deadline and len(poller._values) < 5:
        clock_time.sleep(0.005)
    recorder.boundary(True, False)
    unprofiled = recorder.key([2])["gpu_power"]["unprofiled"]
    n = unprofiled["clock_samples"]
    assert n >= 5 and unprofiled["clock_source"] == "polled every 1 ms"
    assert unprofiled["sm_clock_mhz_median"] == pytest.approx(1600 + 10 * (n - 1) / 2)
    assert poller._thread is None  # stopped where the profiler turned on
    recorder.boundary(False, True)  # the next stretch starts polling again ...
    assert poller._thread is not None
    recorder.close()  # ... until the recorder closes
    assert poller._thread is None and poller.stop() == []
    assert gpu_power.ClockPoller(reader=lambda: None).stop() == []  # no NVML: nothing runs


def test_a_capture_with_the_polled_clock_gives_the_share_at_its_median() -> None:
    """The product end to end on an H200 where the driver keeps no clock samples (run 30,
    fixtures/traces/capture_power_polled_loop.json.gz: item_gpu's loop under capture): the unprofiled
    reading holds the clock polled over the 300 steps before the window (47 readings, median 1,740
    MHz against 1,710 for the one reading there) and the stretch's capped share, and sync-point gives
    the model's share at the median beside its saving, the replayed idle."""
    path = Path(__file__).resolve().parent.parent / "fixtures" / "traces" / "capture_power_polled_loop.json.gz"
    with gzip.open(path, "rt") as fh:
        power = json.load(fh)["traceadvisor"]["gpu_power"]
    unprofiled = power["unprofiled"]
    assert unprofiled["clock_source"] == "polled every 50 ms" and unprofiled["clock_samples"] == 47
    assert unprofiled["sm_clock_mhz_median"] == 1740.0 and unprofiled["sm_clock_mhz"] == 1710.0
    assert unprofiled["power_capped_share"] == pytest.approx(0.986, abs=0.001)
    given = power_limit.give_back(power)
    assert given is not None and given.clock_mhz == 1740.0
    finding = _sy101(path)
    assert "NVML: median SM clock 1740 of 1980 MHz over 47 readings, 690 of 700 W" in finding.message
    saving_us = finding.impact.saving_per_step_us
    assert saving_us is not None
    assert f"at that clock the power-limit model gives back {given.share * 100:.0f}%" in finding.message
    lo, hi = _range_us(finding.message)
    assert lo == pytest.approx(given.expected_ns(saving_us * 1e3)[0] / 1e3, rel=1e-3)
    assert hi == pytest.approx(saving_us, rel=1e-3)
