"""The likely range of a replayed saving: how far the same fix's measured saving moved around the
replay's prediction on the GPU pairs.

A saving is a replay difference on one trace (``savings.py``); the saving a user then measures is
not one number. The same program, fix and GPU model measured savings that moved between machines and
minutes by more than 20% around their median on 10 of the 15 validation pairs (gpt_batch 10-44% of
the step, tfm_infer_compile 4.6-22.3%, item_gpu 0.2-4.1%: ``python bench/pairs_validation.py
--across-runs --calibrated``), because the host's speed decides how much of a launch-bound step a fix
can take back. So no point prediction from one trace can be within 20% of every measurement: a
prediction equal to each pair's median measured saving over all runs (14-36), known only afterwards,
is within 20% of 115 of the 154 per-run measurements of the validation half, and the replay's
per-run predictions of 114. What a user can act on is the range a fix's saving lands in.

The range is the prediction widened by a share of itself and a share of the step,
``share ± (RANGE_RELATIVE * share + RANGE_STEP_PCT)``, clipped to [0, 100] % of the step. Both
constants are fitted on the fit half of the GPU pairs alone (every clean run 14-34: 64 per-run
savings of 16 pairs), as the narrowest such band (median width over the fit savings) that holds
``RANGE_COVERAGE`` of them; the validation half (139 per-run savings of 15 pairs, never used to fit)
reports how often it holds there: ``python bench/pairs_validation.py --fit-range --calibrated``.
A fresh machine held less (run 36: 62% of its captures), so the range is a measured spread, not a
bound.
The relative part covers the model's misses that grow with the saving (the compiled trainers'
host-time share), the step part the noise that does not (a GPU-bound ``.item()`` loop's 1-3% of
the step moves by a point or two with the GPU's clock under its power limit).
"""

from __future__ import annotations

# Fitted on the fit half of the clean GPU pairs (runs 14-34, calibrated as capture gives it; 2026-12-06):
# ``bench/pairs_validation.py --fit-range --calibrated``. Held 52 of 64 fit savings (81%) and 130 of
# 139 validation savings of runs 14-34 (94%); out of sample, on run 36 (a fresh H100 captured after the
# fit), only 28 of 45 captures (62%): docs/whatif.md, "Run 36".
RANGE_COVERAGE = 0.8
RANGE_RELATIVE = 0.05
RANGE_STEP_PCT = 5.5


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
