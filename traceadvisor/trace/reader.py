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
candidate; a valid decode proves the cut was right. The legacy ``use_kineto=False`` form, a bare
JSON array of events, is read the same way.

Damage is contained to the events it touches; the normal path does no per-event Python work:

* a file cut off mid-write (a crashed run) is salvaged up to its last complete event;
* an event that is not valid JSON is located from msgspec's error offset and re-read leniently
  with the standard library: ``NaN``/``Infinity`` literals (kineto's non-finite doubles) become
  the strings ``"nan"``/``"inf"`` that the column builder already treats as unreadable numbers,
  unescaped double quotes in names (kineto before 2026, format doc §1.3) are escaped, control
  characters and invalid UTF-8 are accepted; what still fails is skipped, and the events after it
  are read normally;
* an event nested deeper than the interpreter's recursion limit is skipped;
* ill-typed events (not objects, ``args`` not an object) are decoded one by one in their batch.

Each of these is counted and reported as a warning; what cannot be read at all is a ``TraceError``
with a one-line message.
"""

from __future__ import annotations

import json
import os
import re
import stat
import zlib
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec

from traceadvisor.errors import TraceError
from traceadvisor.trace.schema import EVENT_LIST, Event

BLOCK_BYTES = 4 << 20
# The head (keys before traceEvents) holds deviceProperties and user metadata: tiny in practice.
MAX_HEAD_BYTES = 64 << 20
# A single event larger than this is not a profiler event (args of real events are kilobytes).
# It also bounds blank space between events (a gzip bomb of spaces stops here).
MAX_EVENT_BYTES = 64 << 20
DEFAULT_MAX_INFLATED_BYTES = 16 << 30
# Compressed bytes handed to the inflater at a time.
_READ_BYTES = 1 << 20
# After this much inflated output, a gzip whose compression ratio predicts more than twice the
# size limit is refused at once rather than inflated to the limit.
_ESTIMATE_AFTER = 64 << 20

GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"
_OTHER_COMPRESSION = {
    b"\x28\xb5\x2f\xfd": "zstd",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"PK\x03\x04": "zip",
    b"\x04\x22\x4d\x18": "lz4",
}
EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*')
_SEPARATORS = re.compile(rb"[ \t\r\n,]*")
_BLANK = re.compile(rb"[ \t\r\n]*")
_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")
# A \uD800-\uDFFF escape that is not half of a pair: msgspec rejects it (sometimes as "truncated").
_LONE_SURROGATE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
# Candidate cuts tried one by one from the end before the back-off goes geometric.
_LINEAR_BACKOFF = 8
_MAX_HEAD_KEY_TRIES = 1000
_MAX_QUOTE_REPAIRS = 16
_MAX_TAIL_TRIES = 256
_MAX_REPAIR_CUTS = 16
_MAX_REPAIR_BYTES = 1 << 20
_TAIL_KEYS = ("distributedInfo", "baseTimeNanoseconds", "displayTimeUnit", "traceName")

_typed_decoder = msgspec.json.Decoder(EVENT_LIST)
_event_decoder = msgspec.json.Decoder(Event)
_raw_list_decoder = msgspec.json.Decoder(list[msgspec.Raw])
_any_decoder = msgspec.json.Decoder()
# Every way msgspec can refuse bytes: bad syntax or types, too deep, bad UTF-8 inside a string.
_JSON_ERRORS = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)

# Outcomes of one decode attempt.
_OK, _WRONG_CUT, _DAMAGE, _DEEP, _END, _TRUNCATED = range(6)

Batches = Generator[list[Event], None, int]


@dataclass
class ReadResult:
    """What the reader found besides the events."""

    top: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    dropped_events: int = 0
    truncated: bool = False
    bytes_read: int = 0
    repaired_events: int = 0
    skipped_events: int = 0
    deep_events: int = 0
    surrogates: bool = False

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def cut_off(self, message: str) -> None:
        self.truncated = True
        if not any("cut off" in w or "corrupt" in w for w in self.warnings):
            self.warnings.append(message)


# -- bytes ---------------------------------------------------------------------------------------
def iter_blocks(path: Path, result: ReadResult, max_bytes: int) -> Iterator[bytes]:
    """Yield the file's decompressed bytes in blocks of about ``BLOCK_BYTES``."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot open ({exc.strerror or exc})") from None
    with fh:
        try:
            size = _file_size(fh)
        except OSError as exc:
            raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
        magic = _read(path, fh, len(GZIP_MAGIC))  # no seek back: pipes and FIFOs work too
        if magic == GZIP_MAGIC:
            yield from _inflate(path, fh, size, result, max_bytes, magic)
            return
        if size is not None and size > max_bytes:
            raise _too_big(path, max_bytes)
        total = 0
        pending = magic
        while True:
            data = pending + _read(path, fh, BLOCK_BYTES - len(pending)) if pending else _read(path, fh, BLOCK_BYTES)
            pending = b""
            if not data:
                break
            total += len(data)
            if total > max_bytes:
                raise _too_big(path, max_bytes)
            yield data
        result.bytes_read = total


def _file_size(fh: IO[bytes]) -> int | None:
    st = os.fstat(fh.fileno())
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _read(path: Path, fh: IO[bytes], n: int) -> bytes:
    try:
        return fh.read(n)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _inflate(
    path: Path, fh: IO[bytes], size: int | None, result: ReadResult, max_bytes: int, pending: bytes
) -> Iterator[bytes]:
    """Inflate every gzip member of the file, refusing output beyond ``max_bytes``."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    total = 0
    while True:
        raw = pending or _read(path, fh, _READ_BYTES)
        pending = b""
        if not raw:
            break
        try:
            data = inflater.decompress(raw, BLOCK_BYTES)
            while True:
                if data:
                    if total == 0 and data.startswith(GZIP_MAGIC):
                        raise TraceError(f"{path}: compressed twice (a gzip inside a gzip); gunzip it once first")
                    total += len(data)
                    if total > max_bytes:
                        raise _too_big(path, max_bytes)
                    if size is not None and total >= _ESTIMATE_AFTER:
                        _check_ratio(path, fh, inflater, total, size, max_bytes)
                    yield data
                if not inflater.unconsumed_tail:
                    break
                data = inflater.decompress(inflater.unconsumed_tail, BLOCK_BYTES)
        except zlib.error as exc:
            if total == 0:
                raise TraceError(f"{path}: corrupt gzip data ({exc})") from None
            result.cut_off(f"gzip stream is corrupt after {total} inflated bytes; analysed the events before it")
            result.truncated = True
            return
        if inflater.eof:
            rest = inflater.unused_data
            if len(rest) < len(GZIP_MAGIC):
                rest += _read(path, fh, _READ_BYTES)
            if rest.startswith(GZIP_MAGIC):
                # Another member (pigz/bgzip output, or gzip files appended): gunzip reads them all.
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                pending = rest
                continue
            if rest.strip(b"\0"):
                result.warn("ignored trailing data after the gzip stream")
            break
    if not inflater.eof:
        if total == 0:
            raise TraceError(f"{path}: gzip file is cut off before any data")
        result.cut_off(
            f"gzip stream ends early after {total} inflated bytes (file cut off?); analysed the events before the cut"
        )
    result.bytes_read = total


def _check_ratio(path: Path, fh: IO[bytes], inflater: Any, total: int, size: int, max_bytes: int) -> None:
    consumed = max(1, fh.tell() - len(inflater.unconsumed_tail))
    estimate = total / consumed * size
    if estimate > 2 * max_bytes:
        raise TraceError(
            f"{path}: gzip data would inflate to about {_gib(estimate)} GiB, over the {_gib(max_bytes)} GiB limit "
            "(a gzip bomb?); raise the limit with --max-size if it is real"
        )


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g}"


def _too_big(path: Path, limit: int) -> TraceError:
    return TraceError(
        f"{path}: trace is larger than {_gib(limit)} GiB once inflated; raise the limit with --max-size if it is real"
    )


# -- top level -----------------------------------------------------------------------------------
def read_events(path: Path, max_bytes: int = DEFAULT_MAX_INFLATED_BYTES) -> tuple[Iterator[list[Event]], ReadResult]:
    """Return an iterator of event batches and the result record it fills as it runs."""
    result = ReadResult()
    return _read_all(path, result, max_bytes), result


def _read_all(path: Path, result: ReadResult, max_bytes: int) -> Iterator[list[Event]]:
    blocks = iter_blocks(path, result, max_bytes)
    buf, legacy = read_head(path, blocks, result)
    yield from read_body(path, blocks, buf, legacy, result, closes=True)
    summarise(result)


def read_body(
    path: Path, blocks: Iterator[bytes], buf: bytes, legacy: bool, result: ReadResult, closes: bool
) -> Iterator[list[Event]]:
    """Decode events from ``buf`` (which starts at an event) and the blocks after it. ``closes``:
    the bytes run to the end of the file (the array closes, the tail keys follow); else they end
    exactly after an event (one part of a split read, ``parallel.py``)."""
    pos = _skip_separators(buf, 0)
    idle = len(buf) - pos  # bytes read since the last event was decoded
    for block in blocks:
        buf = buf[pos:] + block if pos < len(buf) else block
        idle += len(block)
        start = _skip_separators(buf, 0)
        pos = yield from _take(buf, start, len(buf), result)
        if pos > start:
            idle = len(buf) - pos
        if idle > MAX_EVENT_BYTES + BLOCK_BYTES:
            if pos >= len(buf):
                raise TraceError(
                    f"{path}: {idle >> 20} MiB of blank space between events; not a profiler trace (a gzip bomb?)"
                )
            raise TraceError(f"{path}: no event boundary in {idle >> 20} MiB; not a profiler trace")
    if closes:
        yield from _read_end(buf[pos:], legacy, result)
    else:
        yield from _take_all(buf, pos, len(buf), result, complete=True)


def summarise(result: ReadResult) -> None:
    """Turn the damage counters of ``result`` into warnings (once, after the last event)."""
    if result.repaired_events:
        result.warn(
            f"{_count(result.repaired_events, 'event')} {'was' if result.repaired_events == 1 else 'were'} not valid "
            "JSON (NaN/Infinity, unescaped quotes, control characters or bad UTF-8): read leniently, NaN and Infinity "
            "as unreadable numbers"
        )
    if result.skipped_events:
        result.warn(f"skipped {_count(result.skipped_events, 'damaged event')} that could not be read as JSON")
    if result.deep_events:
        result.warn(f"skipped {_count(result.deep_events, 'event')} nested too deeply to be profiler events")
    if result.surrogates:
        result.warn("replaced invalid \\u escapes (lone UTF-16 surrogates) in strings with U+FFFD")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# -- head ----------------------------------------------------------------------------------------
def read_head(path: Path, blocks: Iterator[bytes], result: ReadResult) -> tuple[bytes, bool]:
    """Consume bytes up to the first event; return the rest and whether the file is a bare array."""
    buf = b""
    blank = 0
    for block in blocks:
        buf = buf + block if buf else block
        start = _skip_blank(buf, 0)
        if buf.startswith(_BOM, start):
            buf = buf[start + len(_BOM) :]
            start = _skip_blank(buf, 0)
        if start >= len(buf):
            blank += len(buf)
            buf = b""
            if blank > MAX_HEAD_BYTES:
                raise TraceError(f"{path}: {blank >> 20} MiB of blank space and no JSON; not a profiler trace")
            continue
        first = buf[start : start + 1]
        if first == b"[":
            return buf[start + 1 :], True
        if first != b"{":
            raise _not_json(path, buf[start : start + 8])
        found = _find_events_key(path, buf, start, result)
        if found is not None:
            return buf[found:], False
        if len(buf) > MAX_HEAD_BYTES:
            raise TraceError(f"{path}: no traceEvents array in the first {MAX_HEAD_BYTES >> 20} MiB")
    # The whole file is in buf and has no events array: say what it is instead.
    start = _skip_blank(buf, 0)
    if start >= len(buf):
        raise TraceError(f"{path}: file is empty" if not blank else f"{path}: file holds only blank space")
    try:
        doc = _any_decoder.decode(buf[start:])
    except RecursionError:
        raise TraceError(f"{path}: JSON nested too deeply; not a profiler trace") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not valid UTF-8 JSON") from None
    except msgspec.DecodeError as exc:
        if result.truncated or "truncated" in str(exc):
            raise TraceError(f"{path}: trace is cut off before its events ({len(buf)} bytes)") from None
        raise TraceError(f"{path}: not valid JSON ({_describe(exc)})") from None
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise TraceError(f"{path}: JSON object has no traceEvents key; not a profiler trace")
        raise TraceError(f"{path}: traceEvents is {_kind(doc['traceEvents'])}, not a list of events")
    raise TraceError(f"{path}: JSON is not a trace object")


def _find_events_key(path: Path, buf: bytes, start: int, result: ReadResult) -> int | None:
    """Offset just after ``"traceEvents": [`` at the top level, recording the head keys."""
    for tries, m in enumerate(_EVENTS_KEY.finditer(buf, start)):
        if tries >= _MAX_HEAD_KEY_TRIES:
            raise TraceError(f"{path}: cannot find the top-level traceEvents key")
        value_at = m.end()
        if value_at >= len(buf):
            return None
        head = _decode_head(path, buf[start : m.start()], result)
        if head is None:
            continue  # the key text sits inside a string or a nested value
        if buf[value_at : value_at + 1] != b"[":
            value = buf[value_at : value_at + 1]
            raise TraceError(f"{path}: traceEvents is {_kind_of_byte(value)}, not a list of events")
        result.top.update(head)
        return value_at + 1
    return None


def _decode_head(path: Path, prefix: bytes, result: ReadResult) -> dict[str, Any] | None:
    """The keys before a ``"traceEvents"`` found at ``len(prefix)``; None if that is not top level."""
    doc_bytes = prefix + b'"traceEvents":null}'
    try:
        doc = _any_decoder.decode(doc_bytes)
    except RecursionError:
        raise TraceError(f"{path}: JSON nested too deeply before traceEvents; not a profiler trace") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        if isinstance(exc, msgspec.DecodeError) and "truncated" in str(exc):
            fixed = _fix_surrogates(doc_bytes, result)
            if fixed is doc_bytes:
                return None  # inside a string or a nested value
            return _decode_head(path, fixed[: -len(b'"traceEvents":null}')], result)
        # Damaged head keys (user metadata can be anything): read them leniently, else skip them.
        items = _lenient_items(b"[" + doc_bytes + b"]")
        if items and isinstance(items[0], dict):
            doc = items[0]
        else:
            result.warn("the top-level keys before traceEvents are not valid JSON; ignored them")
            return {}
    if not isinstance(doc, dict):
        return None
    doc.pop("traceEvents", None)
    return doc


def _skip_blank(buf: bytes, pos: int) -> int:
    m = _BLANK.match(buf, pos)
    return m.end() if m else pos


def _skip_separators(buf: bytes, pos: int) -> int:
    m = _SEPARATORS.match(buf, pos)
    return m.end() if m else pos


def _not_json(path: Path, first: bytes) -> TraceError:
    for magic, name in _OTHER_COMPRESSION.items():
        if first.startswith(magic):
            return TraceError(f"{path}: {name}-compressed; only gzip is read, decompress it first")
    if first.startswith((b"\xff\xfe", b"\xfe\xff")) or (first[1:2] == b"\0" and first[:1] in (b"{", b"[")):
        return TraceError(f"{path}: UTF-16 text; a trace is UTF-8 JSON")
    printable = all(32 <= b < 127 for b in first)
    shown = first.decode("ascii") if printable else first.hex(" ")
    return TraceError(f"{path}: not a JSON trace (starts with {shown!r})")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    names = {dict: "an object", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _kind_of_byte(first: bytes) -> str:
    kinds = {b"{": "an object", b'"': "a string", b"n": "null", b"t": "a boolean", b"f": "a boolean"}
    return kinds.get(first, "a number" if first in b"-0123456789" else "not valid JSON")


def _describe(exc: Exception) -> str:
    return str(exc).removeprefix("JSON is malformed: ")


# -- events --------------------------------------------------------------------------------------
def _take(buf: bytes, pos: int, limit: int, result: ReadResult) -> Batches:
    """Decode the events of ``buf[pos:]`` up to the last event boundary before ``limit`` that
    proves right; return the offset of the first byte not decoded."""
    cut = _last_boundary(buf, pos, limit)
    fallback: Iterator[int] | None = None
    while cut is not None:
        kind, val = _attempt(buf, pos, cut + 1, result)
        if kind == _OK:
            if val:
                yield val
            return _skip_separators(buf, cut + 1)
        if kind == _WRONG_CUT:
            if fallback is None:
                fallback = _fallback_cuts(buf, pos, cut)
            cut = next(fallback, None)
            if cut is None:
                # No candidate decodes: either the next event is larger than the buffer (wait for
                # more), or it is damaged in a way msgspec reports as truncation.
                first = _next_boundary(buf, pos, min(limit, pos + _MAX_REPAIR_BYTES))
                if first is not None and (events := _lenient_events(buf[pos : first + 1], result)) is not None:
                    yield events
                    pos = _skip_separators(buf, first + 1)
                    cut, fallback = _last_boundary(buf, pos, limit), None
            continue
        # Damage inside the batch: keep the events before it, re-read or skip the damaged one.
        at = val if kind == _DAMAGE else _find_deep(buf, pos, cut + 1)
        pos = yield from _take(buf, pos, at, result)
        pos = yield from _repair(buf, pos, at, cut + 1, result)
        if pos > cut:
            return pos
        fallback = None
    return pos


def _attempt(buf: bytes, start: int, end: int, result: ReadResult, final: bool = False) -> tuple[int, Any]:
    """Decode ``buf[start:end]`` as events. ``final``: it runs to the end of the file, so the array
    must close inside it (``_END`` with the offset after ``]``, or ``_OK`` when nothing follows)."""
    return _attempt_chunk(b"[" + buf[start:end] + (b"" if final else b"]"), start, result, final)


def _attempt_chunk(chunk: bytes, start: int, result: ReadResult, final: bool) -> tuple[int, Any]:
    try:
        return _OK, _typed_decoder.decode(chunk)
    except msgspec.ValidationError:
        pass  # ill-typed events: decoded one by one below
    except msgspec.DecodeError as exc:
        if "truncated" in str(exc):
            fixed = _fix_surrogates(chunk, result)
            if fixed is not chunk:
                return _attempt_chunk(fixed, start, result, final)
        return _classify(exc, start, chunk, final)
    except RecursionError:
        return _DEEP, None
    except UnicodeDecodeError:
        return _DAMAGE, start - 1 + _bad_utf8_at(chunk)
    try:
        raws = _raw_list_decoder.decode(chunk)
    except msgspec.DecodeError as exc:
        return _classify(exc, start, chunk, final)
    except RecursionError:
        return _DEEP, None
    return _OK, _decode_each(raws, result)


def _classify(exc: msgspec.DecodeError, start: int, chunk: bytes, final: bool) -> tuple[int, Any]:
    """What a decode error of ``chunk`` (``buf[start:]`` behind a ``[``) says about the cut."""
    message = str(exc)
    if "truncated" in message:
        return (_TRUNCATED if final else _WRONG_CUT), None
    m = _ERROR_BYTE.search(message)
    if m is None:
        return _WRONG_CUT, None
    at = int(m.group(1))
    n = len(chunk)
    if "trailing characters" in message:
        # The array closed before the end of the chunk: at EOF that is the end of traceEvents; in
        # a batch the cut lies past the array (in a list of objects of the tail keys).
        return (_END, start - 1 + _value_end(chunk, at)) if final else (_WRONG_CUT, None)
    if not final and at >= n - 1:
        return _WRONG_CUT, None  # the "]" we added closes nothing: the cut is inside a nested value
    return _DAMAGE, min(start - 1 + at, start + n - 2)


def _value_end(data: bytes, at: int) -> int:
    """Where the JSON value of ``data`` ends, from msgspec's "trailing characters (byte at)"
    (msgspec reports one past the first non-blank byte after the value)."""
    return len(data[: max(0, at - 1)].rstrip())


def _trailing_at(exc: msgspec.DecodeError, data: bytes) -> int | None:
    message = str(exc)
    m = _ERROR_BYTE.search(message)
    if "trailing characters" not in message or m is None:
        return None
    return _value_end(data, int(m.group(1)))


def _bad_utf8_at(chunk: bytes) -> int:
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError as exc:
        return max(1, exc.start)
    return 1


def _fix_surrogates(chunk: bytes, result: ReadResult) -> bytes:
    """``chunk`` with lone surrogate escapes replaced (same length), or ``chunk`` itself."""
    if b"\\u" not in chunk:
        return chunk
    fixed, n = _LONE_SURROGATE.subn(rb"\\ufffd", chunk)
    if not n:
        return chunk
    result.surrogates = True
    return fixed


def _last_boundary(buf: bytes, start: int, limit: int) -> int | None:
    """Position of the ``}`` of the last ``}, {`` event boundary in ``buf[start:limit]``."""
    end = min(limit, len(buf))
    last = buf.rfind(b"},{", start, end + 2)
    # Kineto pretty-prints boundaries as "},\n  {": look for the general form near the end, and
    # further back only when an event larger than the window ends the buffer.
    span = 1 << 16
    while True:
        lo = max(start, end - span)
        for m in EVENT_BOUNDARY.finditer(buf, lo, min(len(buf), end + (1 << 12))):
            if m.start() >= end:
                break
            last = max(last, m.start())
        if last >= lo or lo == start:
            break
        span *= 8
    return last if last >= start else None


def _next_boundary(buf: bytes, start: int, limit: int) -> int | None:
    """Position of the ``}`` of the first boundary at or after ``start`` and before ``limit``."""
    m = EVENT_BOUNDARY.search(buf, start)
    return m.start() if m is not None and m.start() < limit else None


def _boundaries(buf: bytes, start: int, limit: int) -> list[int]:
    return [
        m.start() for m in EVENT_BOUNDARY.finditer(buf, start, min(len(buf), limit + (1 << 12))) if m.start() < limit
    ]


def _fallback_cuts(buf: bytes, start: int, cut: int) -> Iterator[int]:
    """Earlier candidates than ``cut``: the last few, then geometrically further back, then the
    first, so that a long run of false candidates (a string full of ``}, {``) costs few decodes."""
    cands = _boundaries(buf, start, cut)
    n = len(cands)
    k = 1
    while k <= n:
        yield cands[n - k]
        if k == n:
            return
        k = k + 1 if k < _LINEAR_BACKOFF else min(2 * k, n)


def _find_deep(buf: bytes, start: int, end: int) -> int:
    """Locate the event too deep for msgspec in ``buf[start:end]``: the ``}`` of the first boundary
    whose prefix already fails with RecursionError (a monotone property, so bisect)."""
    cands = _boundaries(buf, start, end)
    lo, hi = 0, len(cands)
    while lo < hi:
        mid = (lo + hi) // 2
        if _is_deep(buf[start : cands[mid] + 1]):
            hi = mid
        else:
            lo = mid + 1
    return cands[lo] if lo < len(cands) else max(start, end - 1)


def _repair(
    buf: bytes, pos: int, at: int, limit: int, result: ReadResult, final: bool = False
) -> Generator[list[Event], None, Any]:
    """The event starting at ``pos`` is damaged at ``at``: re-read it leniently or skip it, and
    return where the next event starts (None at EOF when its end cannot be told)."""
    # Its end is the first candidate boundary after the damage that ends a readable region.
    cands = _boundaries(buf, at, limit)
    for c in cands[:_MAX_REPAIR_CUTS]:
        events = _lenient_events(buf[pos : c + 1], result)
        if events is not None:
            if events:
                yield events
            return _skip_separators(buf, c + 1)
    # Unreadable (too deep, or garbage): find its end by matching brackets outside strings.
    end = _event_end(buf, pos, limit)
    if end is not None:
        return (yield from _salvage(buf, pos, end + 1, result))
    if final and not cands:
        return None
    return (yield from _salvage(buf, pos, (cands[0] if cands else limit - 1) + 1, result))


_STRUCTURE = re.compile(rb'[\\"{}\[\]]')


def _event_end(buf: bytes, pos: int, limit: int) -> int | None:
    """The ``}`` closing the value that starts at ``pos``, when an event boundary or the end of the
    array follows it; None if the brackets do not match up before ``limit``."""
    depth = 0
    in_string = False
    escaped_at = -1
    for m in _STRUCTURE.finditer(buf, pos, limit):
        i = m.start()
        if i == escaped_at:
            continue
        c = buf[i]
        if in_string:
            if c == 0x5C:  # backslash
                escaped_at = i + 1
            elif c == 0x22:  # quote
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in b"{[":
            depth += 1
        elif c in b"}]":
            depth -= 1
            if depth <= 0:
                after = _skip_separators(buf, i + 1)
                ok = depth == 0 and c == 0x7D and (after >= len(buf) or buf[after] in b"{]")
                return i if ok else None
    return None


def _salvage(buf: bytes, start: int, end: int, result: ReadResult) -> Batches:
    """Re-read the damaged events of ``buf[start:end]`` leniently, or skip them."""
    events = _lenient_events(buf[start:end], result)
    if events is None:
        region = buf[start:end]
        if _is_deep(region):
            result.deep_events += 1
        else:
            result.skipped_events += 1
    elif events:
        yield events
    return _skip_separators(buf, end)


def _is_deep(region: bytes) -> bool:
    """Whether decoding ``region`` as events first fails for depth (as the failed batch did)."""
    chunk = b"[" + region + b"]"
    try:
        _typed_decoder.decode(chunk)
    except RecursionError:
        return True
    except msgspec.ValidationError:
        try:
            _raw_list_decoder.decode(chunk)
        except RecursionError:
            return True
        except (msgspec.DecodeError, UnicodeDecodeError):
            return False
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    return False


def _lenient_events(region: bytes, result: ReadResult) -> list[Event] | None:
    items = _lenient_items(b"[" + _fix_surrogates(region.strip(b" \t\r\n,"), result) + b"]")
    if items is None:
        return None
    events = _coerce_all(items, result)
    result.repaired_events += len(events)
    return events


_CLOSERS = (":", ",", "}", "]")
_CONSTANTS = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}


def _parse_float(text: str) -> float | str:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return value


_lenient_json = json.JSONDecoder(strict=False, parse_constant=_CONSTANTS.__getitem__, parse_float=_parse_float)


def _lenient_items(data: bytes) -> list[Any] | None:
    """Parse a JSON array with the standard library, leniently; None if it cannot be read."""
    text = data.decode("utf-8", "replace")
    for _ in range(_MAX_QUOTE_REPAIRS if len(text) <= _MAX_REPAIR_BYTES else 1):
        try:
            items = _lenient_json.decode(text)
        except json.JSONDecodeError as exc:
            # Kineto before 2026 did not escape double quotes in names (format doc §1.3): escape
            # the last quote before the error and try again. Not when the text ends inside a
            # string, nor for a quote followed by ":" "," "}" "]" (it ends a key or a value).
            if exc.msg.startswith("Unterminated string"):
                return None
            q = text.rfind('"', 1, exc.pos)
            if q <= 0 or text[q - 1] == "\\" or text[q + 1 : q + 2].strip() in _CLOSERS:
                return None
            text = text[:q] + "\\" + text[q:]
            continue
        except (ValueError, RecursionError):
            return None
        return items if isinstance(items, list) else None
    return None


def _decode_each(raws: list[msgspec.Raw], result: ReadResult) -> list[Event]:
    """The slow path of a batch with ill-typed events: one decode per event."""
    events: list[Event] = []
    for raw in raws:
        try:
            events.append(_event_decoder.decode(raw))
            continue
        except msgspec.ValidationError:
            pass
        except _JSON_ERRORS:
            result.dropped_events += 1
            continue
        try:
            item = _any_decoder.decode(raw)
        except _JSON_ERRORS:
            items = _lenient_items(b"[" + bytes(raw) + b"]")
            item = items[0] if items and len(items) == 1 else None
        events.extend(_coerce_all([item], result))
    return events


def _coerce_all(items: list[Any], result: ReadResult) -> list[Event]:
    events: list[Event] = []
    for item in items:
        ev = _coerce_event(item)
        if ev is None:
            result.dropped_events += 1
        else:
            events.append(ev)
    return events


def _coerce_event(item: Any) -> Event | None:
    """A parsed JSON value as an ``Event``: not an object → None; ``args`` not an object → dropped."""
    if not isinstance(item, dict):
        return None
    args = item.get("args")
    if args is not None and not isinstance(args, dict):
        item = {k: v for k, v in item.items() if k != "args"}
    try:
        return _event_decoder.decode(msgspec.json.encode(item))
    except (msgspec.MsgspecError, ValueError, TypeError, RecursionError, OverflowError):
        return None


# -- end -----------------------------------------------------------------------------------------
def _read_end(rest: bytes, legacy: bool, result: ReadResult) -> Iterator[list[Event]]:
    """Decode the last events and the tail keys after the array."""
    pos = _skip_separators(rest, 0)
    # Fast path: the last "]" followed by a valid tail closes the array (one decode of the events).
    p = len(rest)
    for _ in range(16):
        p = rest.rfind(b"]", pos, p)
        if p < 0:
            break
        tail = rest[p + 1 :].strip()
        if tail if legacy else _decode_tail(tail) is None:
            continue
        end = _rstrip_separators(rest, pos, p)
        kind, val = _attempt(rest, pos, end, result) if end > pos else (_OK, [])
        if kind == _OK:
            if val:
                yield val
            _read_tail(tail, legacy, result)
            return
        if kind != _WRONG_CUT:
            break  # damaged events: the general path below
    yield from _read_end_slow(rest, pos, legacy, result)


def _read_end_slow(rest: bytes, pos: int, legacy: bool, result: ReadResult) -> Iterator[list[Event]]:
    while True:
        kind, val = _attempt(rest, pos, len(rest), result, final=True)
        if kind == _OK:  # the array closes at the very end of the file
            if val:
                yield val
            tail_at = len(rest)
            break
        if kind == _END:
            yield from _take_all(rest, pos, val - 1, result, complete=True)
            tail_at = val
            break
        if kind == _TRUNCATED:
            yield from _take_all(rest, pos, len(rest), result, complete=False)
            result.cut_off("trace is cut off (no end of traceEvents); analysed the complete events before the cut")
            return
        at = val if kind == _DAMAGE else _find_deep(rest, pos, len(rest))
        pos = yield from _take(rest, pos, at, result)
        new = yield from _repair(rest, pos, at, len(rest), result, final=True)
        if new is not None:
            pos = new
            continue
        # The damaged event is the last one: find where the array closes.
        close = _find_array_end(rest, at, legacy)
        if close is None:
            yield from _salvage(rest, pos, len(rest), result)
            result.cut_off("trace is cut off (no end of traceEvents); analysed the complete events before the cut")
            return
        yield from _take_all(rest, pos, close, result, complete=True)
        tail_at = close + 1
        break
    _read_tail(rest[tail_at:], legacy, result)


def _take_all(buf: bytes, pos: int, end: int, result: ReadResult, complete: bool) -> Iterator[list[Event]]:
    """Decode every event of ``buf[pos:end]``, the last ones of the file. ``complete``: ``end`` is
    where the array closes, so a last event that does not decode is damaged, not cut off."""
    end = _rstrip_separators(buf, pos, end)
    if pos >= end:
        return
    kind, val = _attempt(buf, pos, end, result)
    if kind == _OK:
        if val:
            yield val
        return
    pos = yield from _take(buf, pos, end, result)
    if pos >= end:
        return
    kind, val = _attempt(buf, pos, end, result)
    if kind == _OK:
        if val:
            yield val
    elif complete:
        yield from _salvage(buf, pos, end, result)
    # else: the event that was being written when the file was cut off


def _rstrip_separators(buf: bytes, start: int, end: int) -> int:
    while end > start and buf[end - 1] in b" \t\r\n,":
        end -= 1
    return end


def _find_array_end(rest: bytes, start: int, legacy: bool) -> int | None:
    """Offset of the ``]`` closing traceEvents after ``start``: the first one followed by a valid tail."""
    p = start
    for _ in range(_MAX_TAIL_TRIES):
        p = rest.find(b"]", p)
        if p < 0:
            return None
        tail = rest[p + 1 :].strip()
        if (legacy and not tail) or (not legacy and _decode_tail(tail) is not None):
            return p
        p += 1
    return None


def _read_tail(tail: bytes, legacy: bool, result: ReadResult) -> None:
    tail = tail.strip()
    if legacy:
        if tail:
            result.warn(f"ignored {len(tail)} bytes after the event array")
        return
    if not tail:
        result.cut_off("trace is cut off after its events; analysed all events, lost the keys after traceEvents")
        return
    doc = _decode_tail(tail)
    if doc is not None:
        result.top.update(doc)
        return
    if tail[:1] == b"}":
        result.warn(f"ignored {len(tail) - 1} bytes of trailing data after the trace")
        return
    body = b"{" + tail[1:] if tail[:1] == b"," else tail
    try:
        _any_decoder.decode(body)
    except msgspec.DecodeError as exc:
        end = _trailing_at(exc, body)
        if end is not None:
            head = _decode_tail(b"," + body[1:end])
            if head is not None:
                result.top.update(head)
                result.warn(f"ignored {len(body) - end} bytes of trailing data after the trace")
                return
        if "truncated" in str(exc):
            result.cut_off("trace is cut off after its events; analysed all events, lost some keys after traceEvents")
    except (RecursionError, UnicodeDecodeError):
        pass
    # Damaged keys after the events (kineto's log arrays could hold unescaped quotes): pick the
    # keys the analysis needs one by one.
    for key in _TAIL_KEYS:
        value = _value_of(body, key)
        if value is not None:
            result.top[key] = value


def _decode_tail(tail: bytes) -> dict[str, Any] | None:
    if tail == b"}":
        return {}
    if not tail.startswith(b","):
        return None
    try:
        doc = _any_decoder.decode(b"{" + tail[1:])
    except _JSON_ERRORS:
        return None
    return doc if isinstance(doc, dict) else None


def _value_of(body: bytes, key: str) -> Any:
    """The value of ``"key":`` in damaged JSON text, if it reads on its own."""
    m = re.search(b'"' + re.escape(key.encode()) + rb'"\s*:\s*', body)
    if m is None:
        return None
    value = body[m.end() :]
    try:
        return _any_decoder.decode(value)
    except msgspec.DecodeError as exc:
        end = _trailing_at(exc, value)
        if end is None:
            return None
        try:
            return _any_decoder.decode(value[:end])
        except _JSON_ERRORS:
            return None
    except (RecursionError, UnicodeDecodeError):
        return None
