"""The likely range of a replayed saving: how far the same fix's measured saving moved around the
replay's prediction on the GPU pairs.

A saving is a replay difference on one trace (``savings.py``); the saving a user then measures is
not one number. The same program, fix and GPU model measured savings that moved between machines and
minutes by more than 20% around their median on 10 of the 15 validation pairs (gpt_batch 10-44% of
the step, tfm_infer_compile 4.6-22.3%, item_gpu 0.2-4.1%: ``python bench/pairs_validation.py
--across-runs --calibrated``), because the host's speed decides how much of a launch-bound step a fix
can take back. So no point prediction from one trace can be within 20% of every measurement: a
prediction equal to each pair's median measured saving over all runs (14-37), known only afterwards,
is within 20% of 130 of the 169 per-run measurements of the validation half, and the replay's
per-run predictions of 126. What a user can act on is the range a fix's saving lands in.

The range is the prediction widened by a share of itself and points of the step,
``share ± (RANGE_RELATIVE * share + RANGE_STEP_PCT)``, clipped to [0, 100] % of the step, where the
trace carries the unprofiled steps measured around its capture; a trace without them gets a wider
band fitted the same way from the traces alone (``TRACE_ALONE_RELATIVE``, ``TRACE_ALONE_STEP_PCT``). Where the
trace's measured unprofiled step could not fix how fast its host ran (a GPU-bound step: the host
only took less; ``profiler_cost.host_cost_interval``), the same fix is also replayed at both ends of
the host's plausible speed, and the band goes around all of those savings (``host_shares_pct``): on
a fresh H100 whose host ran fast (run 36) the GPT trainer's compile saving read 49% at the bundled
profiler costs and 32% at the slow end, against 26% measured. Both constants are fitted on the fit
half of the GPU pairs alone (every clean run 14-37: 66 per-run savings of 14 pairs), as the
narrowest such band (median width over the fit savings) that holds ``RANGE_COVERAGE`` of them; the
validation half (169 per-run savings of 15 pairs, never used to fit) reports how often it holds
there: ``python bench/pairs_validation.py --fit-range --calibrated`` (``--captures``: every capture
of every run, 138 fit and 503 validation savings). The fit gives no relative part at present: the
fit half's misses are as wide on small savings (a GPU-bound ``.item()`` loop's 1-3% moves by a point
or two with the GPU's clock) as on large ones (the compiled trainers' host-time share, the fused
AdamW). A fresh machine held less than the validation half (run 36: 28 of 45 captures), so the range
is a measured spread, not a bound.
"""

from __future__ import annotations

# Fitted on the fit half of the clean GPU pairs (runs 14-37, calibrated as capture gives it; 2026-12-06,
# with the host's ends): ``bench/pairs_validation.py --fit-range --calibrated``. Holds 53 of 66 fit
# savings (80%) and 146 of 169 validation savings (86%), median width 11 points; every capture
# (``--captures``): 112 of 138 fit, 439 of 503 validation (87%). Before the host's ends the same fit
# gave ± 8 points (156 of 169 validation, width 16); before run 37's fit pairs joined, ± (0.05 x share
# + 5.5 points).
RANGE_COVERAGE = 0.8
RANGE_RELATIVE = 0.0
RANGE_STEP_PCT = 5.5
# The band of a trace without measured unprofiled steps (no capture, no --step-time): the same fit on
# the fit half replayed from the traces alone (``--fit-range`` without ``--calibrated``). Holds 53 of
# 66 fit savings (80%) and 144 of 169 validation savings (85%), median width 15.6 points. Wider: the
# host's speed is unknown there, and those traces get no replays at the host's ends
# (``profiler_cost.host_cost_interval``); the calibrated band on them held 131 of 169 (78%).
TRACE_ALONE_RELATIVE = 0.15
TRACE_ALONE_STEP_PCT = 5.0


def band(calibrated: bool) -> tuple[float, float]:
    """(relative, step points) of the range: the calibrated band where the trace carries measured
    unprofiled steps, the trace-alone band otherwise."""
    return (RANGE_RELATIVE, RANGE_STEP_PCT) if calibrated else (TRACE_ALONE_RELATIVE, TRACE_ALONE_STEP_PCT)


def likely_share_range(
    share_pct: float,
    host_shares_pct: tuple[float, ...] = (),
    relative: float = RANGE_RELATIVE,
    step_pct: float = RANGE_STEP_PCT,
) -> tuple[float, float]:
    """The likely range of a saving predicted at ``share_pct`` % of the step, in % of the step;
    ``host_shares_pct``: the same saving replayed at the ends of the host's plausible speed, where the
    trace could not fix it (``savings.host_alternatives``): the band then spans them all."""
    low, high = min((share_pct, *host_shares_pct)), max((share_pct, *host_shares_pct))
    return (
        max(0.0, low - (relative * max(low, 0.0) + step_pct)),
        min(100.0, high + (relative * max(high, 0.0) + step_pct)),
    )


def likely_saving_range_ns(
    saving_ns: float, step_ns: float, host_shares_pct: tuple[float, ...] = (), calibrated: bool = True
) -> tuple[float, float]:
    """The likely range of a saving of ``saving_ns`` per step of ``step_ns`` (ns; both ends never
    below 0 nor above the step) with the ``band`` of a trace that is (not) ``calibrated``. (0, 0)
    without a step."""
    if step_ns <= 0:
        return 0.0, 0.0
    lo, hi = likely_share_range(100.0 * saving_ns / step_ns, host_shares_pct, *band(calibrated))
    return lo * step_ns / 100.0, hi * step_ns / 100.0
