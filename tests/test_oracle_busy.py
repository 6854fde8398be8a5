"""GPU busy/idle time, per device and per step, against an independent re-computation.

The oracle (``oracle_util``) re-reads each trace with plain ``json`` + ``Decimal`` and merges
intervals in pure Python; here traceadvisor's ``Trace`` (and the JSON summary built from it) must
agree with it **to the nanosecond** on every trace of the shared external set and of
``fixtures/traces/``.

One library bug bends that rule, and is tracked by ``test_gpu_event_times_exact_ns``
(``xfail(strict=True)``): traces written before torch ≈2.4 carry integer *absolute-epoch*
microseconds (≈1.7e15 µs); traceadvisor converts them to ns through float64
(``columns.to_ns``: ``floor(us) * 1000.0``), and 1.7e18 ns is above 2**53, where float64 holds
only multiples of 256 — every timestamp is off by up to 128 ns (e.g. ``1669783687389324`` µs
becomes ``1669783687389324032`` ns). On those five traces the other tests compare within that
float64 error (``float64_error_ns``: 0 for every trace whose ns values stay below 2**53, i.e.
all ns-precision traces, which therefore must match exactly).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

try:
    from . import oracle_util as ou
except ImportError:
    import oracle_util as ou

from traceadvisor.pipeline import summarize

PATHS = ou.all_traces()
IDS = [ou.trace_id(p) for p in PATHS]

# Traces with integer absolute-epoch µs timestamps (ns > 2**53): exact ns is impossible through float64.
EPOCH_US_TRACES = {
    "hta/benchmark_result_2869224_1695835535_trace.json.gz",
    "hta/df_index_resolver.json.gz",
    "hta/rank0.json.gz",
    "hta/sampled_rank-0.json.gz",
    "hta/sampled_rank-1.json.gz",
}
FLOAT64_BUG = (
    "traceadvisor.trace.columns.to_ns computes floor(us) * 1000.0 in float64: integer absolute-epoch µs "
    "(≈1.7e15, torch < 2.4) give ns above 2**53, rounded to multiples of 256 (error up to 128 ns per "
    "timestamp; to_ns([1669783687389324]) == [1669783687389324032]). Fix: integer arithmetic, "
    "floor(us).astype(int64) * 1000 + round(frac * 1000)."
)


def _pair(path: Path) -> tuple[ou.OracleTrace, object]:
    o = ou.oracle(str(path))
    traces = ou.traceadvisor_traces(str(path))
    assert len(traces) == 1, f"one file must load as one trace, got {len(traces)}"
    return o, traces[0]


def float64_error_ns(o: ou.OracleTrace) -> int:
    """Error allowed in ns conversions: none (the loader scales whole µs in int64, so even
    absolute-epoch µs beyond 2**53 ns convert exactly)."""
    return 0


def _busy_bound(o: ou.OracleTrace, device: int, lo: int, hi: int) -> int:
    """Error bound of a busy time when every endpoint may be off by ``float64_error_ns``."""
    err = float64_error_ns(o)
    if not err:
        return 0
    n = sum(1 for s, e in o.merged(device) if e > lo - err and s < hi + err)
    return 2 * err * (n + 1)


def _param(path: Path, xfail_if_epoch: bool = False) -> object:
    tid = ou.trace_id(path)
    if xfail_if_epoch and tid in EPOCH_US_TRACES:
        return pytest.param(path, id=tid)  # fixed: to_ns scales whole µs in int64
    return pytest.param(path, id=tid)


ALL = [_param(p) for p in PATHS]


# -- the known bug, isolated -----------------------------------------------------------------
@pytest.mark.parametrize("path", [_param(p, xfail_if_epoch=True) for p in PATHS])
def test_gpu_event_times_exact_ns(path: Path) -> None:
    """Every GPU event's (device, kind, start, end) equals the Decimal-parsed value, to the ns."""
    o, t = _pair(path)
    assert (ou.trace_id(path) in EPOCH_US_TRACES) == (o.max_abs_ns >= 2**53), "EPOCH_US_TRACES is stale"
    g = t.gpu
    ours = sorted(
        zip(
            g["device"].tolist(), g["kind"].astype(int).tolist(), g["ts_ns"].tolist(), g["end_ns"].tolist(), strict=True
        )
    )
    ref = sorted((e.device, e.kind, e.ts, e.end) for e in o.gpu)
    assert len(ours) == len(ref)
    assert ours == ref


def test_float64_ns_conversion_of_epoch_us() -> None:
    """The float64 rounding of the bug above, on one value (runs on any machine, no trace needed)."""
    from traceadvisor.trace.columns import to_ns

    got = to_ns([1669783687389324, 4458676422880.181, 0.896]).tolist()
    # The relative ns-precision values convert exactly; the absolute-epoch one is off by 32 ns.
    assert got[1:] == [4458676422880181, 896]
    assert abs(got[0] - 1669783687389324000) <= 128


def test_float64_ns_conversion_of_epoch_us_is_exact() -> None:
    from traceadvisor.trace.columns import to_ns

    assert to_ns([1669783687389324, 1695835572943613]).tolist() == [1669783687389324000, 1695835572943613000]


# -- devices, window, busy and idle time -----------------------------------------------------
@pytest.mark.parametrize("path", ALL)
def test_gpu_event_counts(path: Path) -> None:
    """Same GPU events per (device, kind): nothing dropped, nothing invented, syncs not counted."""
    o, t = _pair(path)
    ref: dict[tuple[int, int], int] = {}
    for e in o.gpu:
        ref[(e.device, e.kind)] = ref.get((e.device, e.kind), 0) + 1
    got = t.gpu.groupby(["device", "kind"]).size()
    assert {(int(d), int(k)): int(n) for (d, k), n in got.items()} == ref


@pytest.mark.parametrize("path", ALL)
def test_main_device_and_analysis_window(path: Path) -> None:
    o, t = _pair(path)
    err = float64_error_ns(o)
    assert sorted(t.device_ids) == sorted(o.devices)
    if o.devices:
        assert t.device_ids[0] == o.main_device
    lo, hi, basis = t.analysis_window
    rlo, rhi, rbasis = o.analysis_window
    assert basis == rbasis
    assert abs(lo - rlo) <= err and abs(hi - rhi) <= err, (lo - rlo, hi - rhi)


@pytest.mark.parametrize("path", ALL)
def test_busy_and_idle_per_device(path: Path) -> None:
    """Busy = union of kernels/memcpys/memsets over all streams inside the window; idle = window - busy."""
    o, t = _pair(path)
    lo, hi, _ = t.analysis_window
    rlo, rhi, _ = o.analysis_window
    summary = summarize(t, {})
    by_dev = {d.id: d for d in summary.devices}
    assert set(by_dev) == set(o.devices)
    for dev in o.devices:
        ref_busy = o.busy(dev, rlo, rhi)
        bound = _busy_bound(o, dev, rlo, rhi)
        busy = t.busy_ns(dev, lo, hi)
        assert abs(busy - ref_busy) <= bound, (dev, busy, ref_busy)
        ref_idle = (rhi - rlo) - ref_busy
        assert abs(((hi - lo) - busy) - ref_idle) <= bound + 2 * float64_error_ns(o)
        # The report carries the same numbers, in µs with the ns decimals intact.
        d = by_dev[dev]
        assert d.busy_us == busy / 1000
        assert d.idle_us == ((hi - lo) - busy) / 1000
        if not bound:
            assert round(d.busy_us * 1000) == ref_busy
            assert round(d.idle_us * 1000) == ref_idle
            assert d.busy_pct == pytest.approx(100 * ref_busy / (rhi - rlo) if rhi > rlo else 0.0, rel=1e-12)
    if o.devices:
        main = o.main_device
        assert summary.gpu_busy_us == by_dev[main].busy_us
        assert summary.gpu_idle_us == by_dev[main].idle_us
        assert abs(summary.window_us * 1000 - (rhi - rlo)) <= 2 * float64_error_ns(o) + 1e-3
    else:
        assert summary.gpu_busy_us == 0.0


@pytest.mark.parametrize("path", ALL)
def test_idle_gaps(path: Path) -> None:
    """The idle gaps themselves, not only their sum: same gaps, to the ns."""
    o, t = _pair(path)
    lo, hi, _ = t.analysis_window
    rlo, rhi, _ = o.analysis_window
    for dev in o.devices:
        got = t.idle_gaps(dev, lo, hi)
        ref = o.gaps(dev, rlo, rhi)
        assert int(got["dur_ns"].sum()) == (hi - lo) - t.busy_ns(dev, lo, hi)
        assert (got["dur_ns"] > 0).all()
        if float64_error_ns(o):
            # Touching intervals in the file can get a spurious sub-256-ns gap (or lose one) here.
            assert abs(int(got["dur_ns"].sum()) - sum(e - s for s, e in ref)) <= _busy_bound(o, dev, rlo, rhi) + 512
            continue
        assert list(zip(got["start_ns"].tolist(), got["end_ns"].tolist(), strict=True)) == ref


# -- steps -----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ALL)
def test_steps_windows_and_busy(path: Path) -> None:
    """CPU and GPU step windows, their basis, and each step's GPU busy/idle time."""
    o, t = _pair(path)
    err = float64_error_ns(o)
    table = t.steps.table
    assert table["name"].tolist() == [s.name for s in o.steps]
    assert table["step"].astype(int).tolist() == [s.step for s in o.steps]
    assert table["gpu_basis"].tolist() == [s.basis for s in o.steps]
    summary_steps = summarize(t, {}).steps
    assert [s.name for s in summary_steps] == [s.name for s in o.steps]
    dev = o.main_device
    for row, ref, srow in zip(table.itertuples(index=False), o.steps, summary_steps, strict=True):
        for got, want in (
            (row.cpu_start_ns, ref.cpu_start),
            (row.cpu_end_ns, ref.cpu_end),
            (row.gpu_start_ns, ref.gpu_start),
            (row.gpu_end_ns, ref.gpu_end),
        ):
            assert abs(int(got) - want) <= (err if want != -1 else 0), (ref.name, got, want)
        assert abs(srow.cpu_dur_us * 1000 - (ref.cpu_end - ref.cpu_start)) <= 2 * err + 1e-3
        if ref.gpu_start < 0:
            assert srow.gpu_start_us is None and srow.gpu_busy_us == 0.0
            continue
        ref_busy = o.busy(dev, ref.gpu_start, ref.gpu_end)
        bound = _busy_bound(o, dev, ref.gpu_start, ref.gpu_end)
        busy = t.busy_ns(dev, int(row.gpu_start_ns), int(row.gpu_end_ns))
        assert abs(busy - ref_busy) <= bound, (ref.name, busy, ref_busy)
        ref_dur = ref.gpu_end - ref.gpu_start
        assert abs(srow.gpu_dur_us * 1000 - ref_dur) <= 2 * err + 1e-3
        assert abs(srow.gpu_busy_us * 1000 - ref_busy) <= bound + 1e-3
        # Per-step idle time is what is left of the step's GPU window.
        ref_idle = ref_dur - ref_busy
        idle = (int(row.gpu_end_ns) - int(row.gpu_start_ns)) - busy
        assert abs(idle - ref_idle) <= bound + 2 * err
        if not err:
            assert srow.gpu_start_us == ref.gpu_start / 1000
            assert srow.gpu_busy_us == ref_busy / 1000


# -- step windows: what they mean ------------------------------------------------------------
AUTOGRAD_WINDOW_BUG = (
    "GPU step windows come from kineto's gpu_user_annotation ProfilerStep#N, which only spans the GPU work "
    "correlated to the step range on the launching thread with no inner record_function: kernels launched "
    "from the autograd thread (pt_autograd_0, the whole backward) or inside nested annotations fall outside. "
    "mi300: 892 of 895 GPU ops launched in ProfilerStep#15 lie outside its 18 µs GPU window (their span is "
    "~19 ms); mi250: 8 of 16. The fixtures train_step, clean_bf16_train, planted_* show the same."
)
EXTERNAL_STEPPED = [p for p in ou.external_traces() if ou.trace_id(p) not in EPOCH_US_TRACES]


def _external_param(path: Path, bad: set[str], reason: str) -> object:
    tid = ou.trace_id(path)
    marks: list[object] = []  # fixed: step windows come from the launches inside the CPU step
    return pytest.param(path, id=tid, marks=marks)


@pytest.mark.parametrize(
    "path",
    [
        _external_param(
            p,
            {"hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "tracelens/mi300/resnet_act_checkpoint.json.gz"},
            AUTOGRAD_WINDOW_BUG,
        )
        for p in EXTERNAL_STEPPED
    ],
)
def test_step_gpu_window_holds_the_steps_gpu_work(path: Path) -> None:
    """Each GPU op launched (runtime call start) inside CPU step N lies inside step N's GPU window."""
    o, t = _pair(path)
    dev = o.main_device
    table = t.steps.table
    starts, ends = table["cpu_start_ns"].to_numpy(), table["cpu_end_ns"].to_numpy()
    outside = 0
    for g in o.gpu:
        if g.device != dev or g.correlation not in o.launch_ts:
            continue
        when = o.launch_ts[g.correlation]
        k = int(np.searchsorted(starts, when, side="right")) - 1
        if k < 0 or when >= ends[k]:
            continue
        row = table.iloc[k]
        if not (row["gpu_start_ns"] <= g.ts and g.end <= row["gpu_end_ns"]):
            outside += 1
    assert outside == 0


WIDENING_BUG = (
    "trace/steps.py _gpu_step_windows says 'kineto widens GPU annotations by 1 ns (older: 1 µs) on each side; the work "
    "inside defines the window, not the widening' but takes the annotation's own span: every annotation-based "
    "step window (and the analysis window) is 2 ns too long (2 µs on µs-era kineto), adding two idle slivers "
    "(BERT: window 3907.827 µs vs 3907.825 µs of GPU work; TraceLens total_time 3.907825 ms)."
)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(ou.EXTERNAL / p, id=p)
        for p in (
            "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
            "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
        )
    ],
)
def test_annotation_step_window_is_the_work_inside(path: Path) -> None:
    o, t = _pair(path)
    dev = o.main_device
    for row in t.steps.table.itertuples(index=False):
        assert row.gpu_basis in ("annotation", "launches")  # never the padded annotation span itself
        inside = [g for g in o.gpu if g.device == dev and row.gpu_start_ns <= g.ts and g.end <= row.gpu_end_ns]
        assert (row.gpu_start_ns, row.gpu_end_ns) == (min(g.ts for g in inside), max(g.end for g in inside))
