"""The JSON rendering of a report (schema documented in the README)."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from traceadvisor.report.model import Report


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)


def render(report: Report) -> bytes:
    """Pretty-printed JSON bytes, ending with a newline."""
    return msgspec.json.format(_encoder.encode(report.to_dict()), indent=2) + b"\n"


def encode(value: Any) -> bytes:
    """Compact JSON of ``value`` by the encoder ``render`` uses (the rule runner checks each
    finding with it, so that one rule's unencodable ``data`` cannot lose the whole report)."""
    return _encoder.encode(value)
