"""The JSON rendering of a report (schema documented in the README): every finding, times in µs
rounded to the nanosecond when written."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np

from traceadvisor.report.model import Report


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)


# Times in the JSON report are µs to the nanosecond: a trace records ns, so a 4th decimal is float
# noise (12.000000000001, 4.369666666666667 for a mean); written with 3 decimals. Only here, when
# the report is written: the data (Report, findings, rules' ``data``) keep the unrounded values.
TIME_DECIMALS = 3


def round_times(value: Any, is_time: bool = False) -> Any:
    """``value`` (a report's ``to_dict`` form) with every float that is a time in µs rounded to
    ``TIME_DECIMALS``: the value of a key ending in ``_us`` (``window_us``, ``ts_us``), and the
    floats inside one (``offsets_us: {host: µs}``, ``measured_unprofiled_step_us.median_us``) but
    not a percentage or ratio there (``_pct``, ``ratio``). Integers, strings, None, NaN and
    infinities are left as they are."""
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return round(x, TIME_DECIMALS) if is_time and math.isfinite(x) else value
    if isinstance(value, dict):
        return {k: round_times(v, _time_key(k, is_time)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [round_times(v, is_time) for v in value]
    return value


def _time_key(key: object, inside_time: bool) -> bool:
    if not isinstance(key, str):
        return inside_time
    if key.endswith("_us"):
        return True
    if key.endswith("_pct") or key == "ratio":
        return False
    return inside_time


def render(report: Report) -> bytes:
    """Pretty-printed JSON bytes, ending with a newline; times in µs to the nanosecond."""
    return msgspec.json.format(_encoder.encode(round_times(report.to_dict())), indent=2) + b"\n"


def encode(value: Any) -> bytes:
    """Compact JSON of ``value`` by the encoder ``render`` uses (the rule runner checks each
    finding with it, so that one rule's unencodable ``data`` cannot lose the whole report)."""
    return _encoder.encode(value)
