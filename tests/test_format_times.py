"""The report's one time format (``report.format.fmt_time``) and its use in rules (``fmt_ns``)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from traceadvisor.report.format import fmt_range, fmt_time
from traceadvisor.rules_api import fmt_ns


@pytest.mark.parametrize(
    ("us", "text"),
    [
        (812.44, "812.4 µs"),
        (81.236, "81.24 µs"),
        (5.1, "5.100 µs"),
        (0.5, "0.500 µs"),  # never past the nanosecond
        (0.0004, "0.000 µs"),
        (0.0, "0 µs"),
        (999.94, "999.9 µs"),
        (999.96, "1.000 ms"),  # rounds up to 1000 µs: the next unit
        (1000.0, "1.000 ms"),
        (3049.8, "3.050 ms"),
        (12854.0, "12.85 ms"),
        (999_960.0, "1.000 s"),
        (12_854_018.0, "12.85 s"),
        (11_952_044.0, "11.95 s"),
        (1e9, "1000 s"),
        (-2249.3, "-2.249 ms"),
        (9.99996, "10.00 µs"),  # rounding carried into a new digit: still four significant digits
    ],
)
def test_unit_by_magnitude_with_four_significant_digits(us: float, text: str) -> None:
    assert fmt_time(us) == text


def test_every_time_has_four_significant_digits() -> None:
    """Over twelve decades, each string has four significant digits (or is below a nanosecond's
    three decimals), and its value is the input's within half a unit of its last digit."""
    rng = np.random.default_rng(0)
    for us in 10.0 ** rng.uniform(-2, 10, 2000):
        text = fmt_time(float(us))
        number, unit = text.split(" ")
        value = float(number) * {"µs": 1.0, "ms": 1e3, "s": 1e6}[unit]
        decimals = len(number.partition(".")[2])
        assert abs(value - us) <= 0.5 * 10.0**-decimals * {"µs": 1.0, "ms": 1e3, "s": 1e6}[unit] * 1.000001
        digits = len(number.replace(".", "").lstrip("0"))
        assert digits == 4 or (unit == "µs" and decimals == 3) or (unit == "s" and float(number) >= 1000)
        assert float(number) < 1000 or unit == "s"


def test_rules_format_nanoseconds_the_same_way() -> None:
    assert fmt_ns(16_755_000) == fmt_time(16755.0) == "16.75 ms"  # 16.755 is 16.7549999... as a float
    assert fmt_ns(np.int64(3_049_800)) == "3.050 ms"
    assert fmt_ns(812_400) == "812.4 µs"


def test_no_rule_formats_a_time_by_hand() -> None:
    """Rule messages write times through fmt_ns/fmt_time only (a fixed-unit ``:.1f} µs`` reads
    "16755.0 µs" beside a table's "16.75 ms"; the older fixed-unit fmt_ms/fmt_us remain exported
    for users' rules, not used by the built-in ones)."""
    from pathlib import Path

    hand = re.compile(r"\{[^{}]*(?:/ ?1e[36]|/ ?1000)[^{}]*:\.\d+f\} ?(?:ms|µs|s)\b|:\.\d+f\} µs|fmt_(?:ms|us)\(")
    root = Path(__file__).resolve().parents[1] / "rules"
    offenders = [
        f"{p.name}:{i}"
        for p in sorted(root.glob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if hand.search(line)
    ]
    assert offenders == []


def test_every_impact_names_its_denominator_as_computed() -> None:
    """The impact line's share names what it is a share of, and that figure is the one the rule
    divided by: the predicted unprofiled step for a replayed saving, the analysed span otherwise."""
    from fixture_paths import REPO

    from traceadvisor.pipeline import analyze
    from traceadvisor.report.format import impact_text
    from traceadvisor.trace.load import load_file

    path = REPO / "fixtures" / "traces" / "train_step.json.gz"
    report = analyze([path])
    trace = load_file(path)
    step = report.traces[0].step_time
    assert step is not None and step.unprofiled_step_us is not None
    kinds = set()
    for f in report.findings:
        if f.impact is None or f.impact.share_pct <= 0:
            continue
        text = impact_text(f.impact)
        if f.impact.saving_per_step_us is not None:
            kinds.add("replay")
            assert text.startswith(f"{fmt_time(f.impact.saving_per_step_us)} a step ")
            low, high = f.impact.likely_low_per_step_us, f.impact.likely_high_per_step_us
            assert low is not None and high is not None
            assert 0.0 <= low <= f.impact.saving_per_step_us <= high <= step.unprofiled_step_us
            likely = fmt_range(low, high)
            assert f"% of the {fmt_time(step.unprofiled_step_us)} predicted unprofiled step; likely {likely})" in text
            assert f"; {fmt_time(f.impact.time_us)} over {len(trace.steps.table)} steps" in text
        else:
            kinds.add("estimate")
            assert text.endswith(f"% of the {fmt_time(trace.analysed_ns / 1e3)} analysed)")
    assert kinds == {"replay", "estimate"}
