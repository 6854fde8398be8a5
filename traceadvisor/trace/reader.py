"""Stream a Kineto/Chrome trace file into batches of decoded events.

A trace is read in blocks (inflating gzip on the fly), so memory stays bounded by one block plus
the columns built from it, whatever the file's size, and a gzip bomb cannot exhaust memory.

The top-level object is split in three parts:

* the head: every key before ``traceEvents`` (``deviceProperties``, ``schemaVersion``, ...);
* the events, decoded a batch at a time with a typed msgspec decoder (``schema.Event``);
* the tail: the keys after the array (``traceName``, and sometimes ``distributedInfo``,
  ``baseTimeNanoseconds``: kineto writes keys on both sides, format doc §1.1).

A batch ends at an event boundary (``}`` ``,`` ``{``). A candidate boundary that falls inside a
string or a nested object makes the batch invalid JSON, so the reader backs off to an earlier
candidate; a valid decode proves the cut was right. A file cut off mid-write (a crashed run) is
salvaged up to its last complete event, with a warning. The legacy ``use_kineto=False`` form, a
bare JSON array of events, is read the same way.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from traceadvisor.errors import TraceError
from traceadvisor.trace.schema import EVENT_LIST, Event

BLOCK_BYTES = 4 << 20
# The head (keys before traceEvents) holds deviceProperties and user metadata: tiny in practice.
MAX_HEAD_BYTES = 64 << 20
# A single event larger than this is not a profiler event (args of real events are kilobytes).
MAX_EVENT_BYTES = 64 << 20
DEFAULT_MAX_INFLATED_BYTES = 16 << 30

_GZIP_MAGIC = b"\x1f\x8b"
_EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*')

_typed_decoder = msgspec.json.Decoder(EVENT_LIST)
_any_decoder = msgspec.json.Decoder()


@dataclass
class ReadResult:
    """What the reader found besides the events."""

    top: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    dropped_events: int = 0
    truncated: bool = False
    bytes_read: int = 0


def iter_blocks(path: Path, result: ReadResult, max_bytes: int) -> Iterator[bytes]:
    """Yield the file's decompressed bytes in blocks of about ``BLOCK_BYTES``."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot open ({exc.strerror})") from None
    with fh:
        magic = fh.read(2)
        fh.seek(0)
        total = 0
        if magic == _GZIP_MAGIC:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while True:
                raw = fh.read(1 << 20)
                if not raw:
                    break
                try:
                    data = inflater.decompress(raw, BLOCK_BYTES)
                    while True:
                        if data:
                            total += len(data)
                            if total > max_bytes:
                                raise _too_big(path, max_bytes)
                            yield data
                        if not inflater.unconsumed_tail:
                            break
                        data = inflater.decompress(inflater.unconsumed_tail, BLOCK_BYTES)
                except zlib.error as exc:
                    if total == 0:
                        raise TraceError(f"{path}: corrupt gzip data ({exc})") from None
                    result.truncated = True
                    result.warnings.append(f"gzip stream is corrupt after {total} bytes; analysed the events before it")
                    break
                if inflater.eof:
                    break
            else:  # pragma: no cover - loop always breaks
                pass
            if not inflater.eof and not result.truncated:
                result.truncated = True
                result.warnings.append(
                    f"gzip stream ends early after {total} inflated bytes (file cut off?); "
                    "analysed the events before the cut"
                )
        else:
            while True:
                data = fh.read(BLOCK_BYTES)
                if not data:
                    break
                total += len(data)
                if total > max_bytes:
                    raise _too_big(path, max_bytes)
                yield data
        result.bytes_read = total


def _too_big(path: Path, limit: int) -> TraceError:
    return TraceError(
        f"{path}: trace is larger than {limit / 2**30:.0f} GiB once inflated; "
        "raise the limit with --max-size if it is real"
    )


def read_events(path: Path, max_bytes: int = DEFAULT_MAX_INFLATED_BYTES) -> tuple[Iterator[list[Event]], ReadResult]:
    """Return an iterator of event batches and the result record it fills as it runs."""
    result = ReadResult()
    return _read(path, result, max_bytes), result


def _read(path: Path, result: ReadResult, max_bytes: int) -> Iterator[list[Event]]:
    blocks = iter_blocks(path, result, max_bytes)
    buf, legacy = _read_head(path, blocks, result)
    pos = 0  # start of undecoded events in buf
    for block in blocks:
        buf = buf[pos:] + block if pos else buf + block
        pos = _skip_separators(buf, 0)
        cut = _last_boundary(buf, pos)
        while cut is not None:
            batch = _try_decode(buf, pos, cut + 1, result)
            if batch is not None:
                if batch:
                    yield batch
                pos = _skip_separators(buf, cut + 1)
                break
            cut = _last_boundary(buf, pos, cut)
        if len(buf) - pos > MAX_EVENT_BYTES + BLOCK_BYTES:
            raise TraceError(f"{path}: no event boundary in {MAX_EVENT_BYTES >> 20} MiB; not a trace")
    yield from _read_end(path, buf[pos:], legacy, result)


def _skip_separators(buf: bytes, pos: int) -> int:
    n = len(buf)
    while pos < n and buf[pos] in b" \t\r\n,":
        pos += 1
    return pos


def _last_boundary(buf: bytes, start: int, before: int | None = None) -> int | None:
    """Position of the ``}`` of the last ``}, {`` event boundary in ``buf[start:before]``."""
    end = len(buf) if before is None else before
    last = buf.rfind(b"},{", start, end + 2)
    # Kineto pretty-prints boundaries as "},\n  {": look for the general form near the end.
    lo = max(start, end - (1 << 16))
    for m in _EVENT_BOUNDARY.finditer(buf, lo, min(len(buf), end + (1 << 12))):
        if m.start() >= end:
            break
        last = max(last, m.start())
    return last if last >= start else None


def _try_decode(buf: bytes, start: int, end: int, result: ReadResult) -> list[Event] | None:
    """Decode ``buf[start:end]`` as a list of events; None when the cut is not a boundary."""
    chunk = b"[" + buf[start:end] + b"]"
    try:
        return _typed_decoder.decode(chunk)
    except msgspec.ValidationError:
        return _lenient_decode(chunk, result)
    except msgspec.DecodeError:
        return None
    except RecursionError:
        return _lenient_decode(chunk, result)


def _lenient_decode(chunk: bytes, result: ReadResult) -> list[Event] | None:
    """Decode a batch event by event, dropping the events that do not fit the schema."""
    try:
        items = _any_decoder.decode(chunk)
    except RecursionError:
        return _salvage_deep(chunk, result)
    except msgspec.DecodeError:
        return None
    events: list[Event] = []
    for item in items:
        ev = _coerce_event(item)
        if ev is None:
            result.dropped_events += 1
        else:
            events.append(ev)
    return events


def _salvage_deep(chunk: bytes, result: ReadResult) -> list[Event] | None:
    """A batch with absurdly deep nesting: keep the events around the deep one."""
    raws = _split_raw(chunk)
    if raws is None:
        return None
    events: list[Event] = []
    for raw in raws:
        try:
            events.extend(_typed_decoder.decode(b"[" + bytes(raw) + b"]"))
        except (msgspec.DecodeError, RecursionError):
            result.dropped_events += 1
    if result.dropped_events:
        result.warnings.append("dropped events nested too deeply to be profiler events")
    return events


def _split_raw(chunk: bytes) -> list[msgspec.Raw] | None:
    try:
        raws: list[msgspec.Raw] = msgspec.json.decode(chunk, type=list[msgspec.Raw])
    except (msgspec.DecodeError, RecursionError):
        return None
    return raws


def _coerce_event(item: Any) -> Event | None:
    if not isinstance(item, dict):
        return None
    args = item.get("args")
    if args is not None and not isinstance(args, dict):
        item = {k: v for k, v in item.items() if k != "args"}
    try:
        return msgspec.convert(item, Event, strict=False)
    except (msgspec.ValidationError, RecursionError):
        item = {k: v for k, v in item.items() if k != "args"}
        try:
            ev = msgspec.convert(item, Event, strict=False)
        except (msgspec.ValidationError, RecursionError):
            return None
        return ev


def _read_head(path: Path, blocks: Iterator[bytes], result: ReadResult) -> tuple[bytes, bool]:
    """Consume bytes up to the first event; return the rest and whether the file is a bare array."""
    buf = b""
    for block in blocks:
        buf += block
        start = _skip_ws(buf, 0)
        if start >= len(buf):
            continue
        if buf.startswith(b"\xef\xbb\xbf", start):
            start = _skip_ws(buf, start + 3)
        first = buf[start : start + 1]
        if first == b"[":
            return buf[start + 1 :], True
        if first != b"{":
            raise _not_json(path, buf[start : start + 8])
        found = _find_events_key(buf, start, result)
        if found is not None:
            return buf[found:], False
        if len(buf) > MAX_HEAD_BYTES:
            raise TraceError(f"{path}: no traceEvents array in the first {MAX_HEAD_BYTES >> 20} MiB")
    # The whole file is in buf and has no events array: say what it is instead.
    start = _skip_ws(buf, 0)
    if start >= len(buf):
        raise TraceError(f"{path}: file is empty")
    if buf[start : start + 1] not in (b"{", b"["):
        raise _not_json(path, buf[start : start + 8])
    try:
        doc = _any_decoder.decode(buf)
    except (msgspec.DecodeError, RecursionError):
        if result.truncated or b'"traceEvents"' not in buf:
            raise TraceError(f"{path}: not valid JSON (cut off or corrupt)") from None
        raise TraceError(f"{path}: not valid JSON") from None
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise TraceError(f"{path}: JSON object has no traceEvents key; not a profiler trace")
        raise TraceError(f"{path}: traceEvents is a {type(doc['traceEvents']).__name__}, not a list of events")
    raise TraceError(f"{path}: JSON is not a trace object")


def _find_events_key(buf: bytes, start: int, result: ReadResult) -> int | None:
    """Offset just after ``"traceEvents": [`` at the top level, recording the head keys."""
    for m in _EVENTS_KEY.finditer(buf, start):
        value_at = m.end()
        if value_at >= len(buf):
            return None
        if buf[value_at : value_at + 1] != b"[":
            head_ok = _decode_head(buf[start : m.start()])
            if head_ok is not None:
                return None  # a top-level traceEvents that is not a list: reported at EOF
            continue
        head = _decode_head(buf[start : m.start()])
        if head is None:
            continue  # the key text sits inside a string or a nested value
        result.top.update(head)
        return value_at + 1
    return None


def _decode_head(prefix: bytes) -> dict[str, Any] | None:
    try:
        doc = _any_decoder.decode(prefix + b'"traceEvents":null}')
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    doc.pop("traceEvents", None)
    return doc


def _skip_ws(buf: bytes, pos: int) -> int:
    n = len(buf)
    while pos < n and buf[pos] in b" \t\r\n":
        pos += 1
    return pos


def _not_json(path: Path, first: bytes) -> TraceError:
    if not first.strip():
        return TraceError(f"{path}: file is empty")
    printable = all(32 <= b < 127 for b in first)
    shown = first.decode("ascii") if printable else first.hex(" ")
    return TraceError(f"{path}: not a JSON trace (starts with {shown!r})")


def _read_end(path: Path, rest: bytes, legacy: bool, result: ReadResult) -> Iterator[list[Event]]:
    """Decode the last events and the tail keys after the array."""
    rest = rest.rstrip()
    p = len(rest)
    for _ in range(64):
        p = rest.rfind(b"]", 0, p)
        if p < 0:
            break
        tail = rest[p + 1 :].strip()
        tail_doc = _decode_tail(tail, legacy)
        if tail_doc is None:
            continue
        body_start = _skip_separators(rest, 0)
        batch = _try_decode(rest, body_start, _rstrip_comma(rest, p), result)
        if batch is None:
            continue
        result.top.update(tail_doc)
        if batch:
            yield batch
        return
    # No proper end: the file was cut off. Keep every complete event.
    result.truncated = True
    start = _skip_separators(rest, 0)
    batch = _try_decode(rest, start, len(rest), result)
    cut = None
    while batch is None:
        cut = _last_boundary(rest, start, cut)
        if cut is None:
            break
        batch = _try_decode(rest, start, cut + 1, result)
    if not any("cut off" in w for w in result.warnings):
        result.warnings.append("trace is cut off (no end of traceEvents); analysed the complete events before the cut")
    if batch:
        yield batch


def _rstrip_comma(buf: bytes, end: int) -> int:
    while end > 0 and buf[end - 1] in b" \t\r\n,":
        end -= 1
    return end


def _decode_tail(tail: bytes, legacy: bool) -> dict[str, Any] | None:
    if legacy:
        return {} if tail == b"" else None
    if tail == b"}":
        return {}
    if not tail.startswith(b","):
        return None
    try:
        doc = _any_decoder.decode(b"{" + tail[1:])
    except (msgspec.DecodeError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None
