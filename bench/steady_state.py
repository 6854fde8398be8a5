"""The loop's steady state in the replay (``whatif.replay.STEADY_STEPS``), counted on every run.

    python bench/steady_state.py [--variants]

A window of fewer than ``STEADY_STEPS`` steps is replayed again from the state it left, its first
step left out (``STEADY_FROM_STEP``), until the loop settles (``_Window.settled``: at least
``LATER_PASSES``, at most ``MAX_LATER_PASSES`` passes), and the predicted step is the spacing of
the last step's ends between the last two passes. Printed: the totals of ``pairs_validation.py
--all-runs`` (the clean runs, CUPTI detached), uncalibrated and calibrated, for the tool and for
one later pass whether settled or not (the model of 2026-12-02 to 12-04) and the window's own step
ends (``STEADY_STEPS = 0``, the estimator before); ``--variants`` adds the first step repeated too,
and exactly two, four and eight later passes. The model was chosen on the fit
half's counts; the validation half's are reported beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import pairs_validation as pv  # noqa: E402

import traceadvisor.whatif.replay as rp  # noqa: E402

KNOBS = ("STEADY_STEPS", "LATER_PASSES", "MAX_LATER_PASSES", "STEADY_FROM_STEP")


def totals(calibrated: bool) -> dict[str, str]:
    """The detached runs' total lines of ``--all-runs``, per half."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        pv.all_runs("stack", calibrated)
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("total, CUPTI detached")]
    return {ln.split()[3]: " ".join(ln.split()[4:]) for ln in lines}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", action="store_true", help="also the first step repeated, and 2, 4, 8 passes")
    args = ap.parse_args()
    tool = {k: getattr(rp, k) for k in KNOBS}
    configs: list[tuple[str, dict[str, int]]] = [
        ("the tool (steady state)", {}),
        ("one later pass (2026-12-02 to -04)", {"LATER_PASSES": 1, "MAX_LATER_PASSES": 1}),
        ("the window's step ends (before)", {"STEADY_STEPS": 0}),
    ]
    if args.variants:
        configs += [("steady, the first step repeated too", {"STEADY_FROM_STEP": 0})]
        configs += [(f"steady, {n} later passes", {"LATER_PASSES": n, "MAX_LATER_PASSES": n}) for n in (2, 4, 8)]
    print("counts: unprofiled steps within 10%, savings within 20%, savings right (detached runs)")
    print(f"{'model':38s} {'mode':12s} {'fit':38s} validation")
    for name, knobs in configs:
        for k, v in {**tool, **knobs}.items():
            setattr(rp, k, v)
        try:
            for mode, cal in (("uncalibrated", False), ("calibrated", True)):
                t = totals(cal)
                print(f"{name:38s} {mode:12s} {t.get('fit', ''):38s} {t.get('validation', '')}")
        finally:
            for k, v in tool.items():
                setattr(rp, k, v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
