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
``share ± (RANGE_RELATIVE * share + RANGE_STEP_PCT)``, clipped to [0, 100] % of the step. Both
constants are fitted on the fit half of the GPU pairs alone (every clean run 14-37: 66 per-run
savings of 14 pairs), as the narrowest such band (median width over the fit savings) that holds
``RANGE_COVERAGE`` of them; the validation half (169 per-run savings of 15 pairs, never used to fit)
reports how often it holds there: ``python bench/pairs_validation.py --fit-range --calibrated``.
The fit gives no relative part at present: the fit half's misses are as wide on small savings (a
GPU-bound ``.item()`` loop's 1-3% moves by a point or two with the GPU's clock) as on large ones
(the compiled trainers' host-time share, the fused AdamW). A fresh machine held less than the
validation half (run 36: 32 of 45 captures), so the range is a measured spread, not a bound.
"""

from __future__ import annotations

# Fitted on the fit half of the clean GPU pairs (runs 14-37, calibrated as capture gives it; 2026-12-06):
# ``bench/pairs_validation.py --fit-range --calibrated``. Holds 54 of 66 fit savings (82%) and 156 of
# 169 validation savings (92%); of the captures of two fresh H100s, run 36's 32 of 45 and run 37's 44
# of 45 (docs/whatif.md, "Run 36" and "Run 37"). The fit before run 37's fit pairs joined it was
# ± (0.05 x share + 5.5 points), and held 28 of run 36's 45.
RANGE_COVERAGE = 0.8
RANGE_RELATIVE = 0.0
RANGE_STEP_PCT = 8.0


def likely_share_range(
    share_pct: float, relative: float = RANGE_RELATIVE, step_pct: float = RANGE_STEP_PCT
) -> tuple[float, float]:
    """The likely range of a saving predicted at ``share_pct`` % of the step, in % of the step."""
    half = relative * max(share_pct, 0.0) + step_pct
    return max(0.0, share_pct - half), min(100.0, share_pct + half)


def likely_saving_range_ns(saving_ns: float, step_ns: float) -> tuple[float, float]:
    """The likely range of a saving of ``saving_ns`` per step of ``step_ns`` (ns; both ends never
    below 0 nor above the step). (0, 0) without a step."""
    if step_ns <= 0:
        return 0.0, 0.0
    lo, hi = likely_share_range(100.0 * saving_ns / step_ns)
    return lo * step_ns / 100.0, hi * step_ns / 100.0
