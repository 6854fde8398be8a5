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
* an event nested ``MAX_DEPTH`` levels deep or more is skipped (the reader counts the depth
  itself: msgspec's limit follows the interpreter's, which differs between Python versions);
* an event larger than ``MAX_EVENT_BYTES`` is skipped without being held (``_skip_event``);
* a gzip member's CRC-32 and length are checked after its data was read: a mismatch, or a
  missing trailer, is a warning about data that was all analysed;
* ill-typed events are decoded one by one in their batch: an event that is not an object is
  dropped; a value of the wrong type (a list where an id belongs, ``args`` not an object...) is
  dropped from its event, which is kept (``schema.py`` says which types each key takes).

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
import numpy as np

from traceadvisor.errors import TraceError
from traceadvisor.trace.schema import EVENT_LIST, Event

BLOCK_BYTES = 4 << 20
# The head (keys before traceEvents) holds deviceProperties and user metadata: tiny in practice.
MAX_HEAD_BYTES = 64 << 20
# An event larger than this is not a profiler event: the largest in the fixtures and the shared
# external traces is 7 KB (a cpu_op with its Input Dims, types and concrete inputs), so 16 MiB
# leaves three orders of magnitude and bounds what the reader holds of one event. Such an event is
# skipped with a warning (the native decoder refuses it, so this path reads the file). It also
# bounds blank space between events (a gzip bomb of spaces stops here).
MAX_EVENT_BYTES = 16 << 20
# An event whose containers nest this deep (the event object is level 1) is not a profiler event:
# real ones nest five levels (event, args, Input Dims, a shape). The native decoder refuses at the
# same depth (_kineto.c MAX_DEPTH).
MAX_DEPTH = 64
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
    oversized_events: int = 0
    surrogates: bool = False
    # (category, key, what the value was) -> events whose value of that key was dropped
    bad_values: dict[tuple[str, str, str], int] = field(default_factory=dict)

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
    """Inflate every gzip member of the file, refusing output beyond ``max_bytes``.

    Headers and trailers (RFC 1952) are read here and the deflate data inflated raw: zlib's own
    gzip mode checks the trailer inside the call that returns the last data, so a damaged checksum
    lost that data with it, and on a small file (one read) every event. Here the data comes first,
    then a bad CRC-32 or length is a warning about data that was all read."""
    src = _Input(path, fh, pending)
    out = _Inflated(path, size, max_bytes)
    while True:
        _gzip_header(src, out.total)
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        crc = member = 0
        while not inflater.eof:
            raw = src.chunk()
            if not raw:
                if out.total == 0:
                    raise TraceError(f"{path}: gzip file is cut off before any data")
                result.cut_off(
                    f"gzip stream ends early after {out.total} inflated bytes (file cut off?); "
                    "analysed the events before the cut"
                )
                result.bytes_read = out.total
                return
            before, done = inflater.copy(), 0
            try:
                for data in _inflated(inflater, raw):
                    done += len(data)
                    crc, member = zlib.crc32(data, crc), member + len(data)
                    yield out.add(data, src.consumed() - len(inflater.unconsumed_tail))
            except zlib.error as exc:
                # zlib raises for the whole call, losing what it inflated before the damage: inflate
                # the same input again from the state before it, a little at a time, to keep that.
                for data in _inflated_before_damage(before, raw, skip=done):
                    yield out.add(data, src.consumed())
                if out.total == 0:
                    raise TraceError(f"{path}: corrupt gzip data ({exc})") from None
                result.cut_off(
                    f"gzip stream is corrupt after {out.total} inflated bytes; analysed the events before it"
                )
                result.bytes_read = out.total
                return
        src.unread(inflater.unused_data)
        _check_trailer(src.take(8), crc, member, out.total, result)
        if not src.starts_with(GZIP_MAGIC):
            # Another member (pigz/bgzip output, or gzip files appended) is read like the first.
            if src.chunk().strip(b"\0"):
                result.warn("ignored trailing data after the gzip stream")
            break
    result.bytes_read = out.total


def _inflated(inflater: Any, raw: bytes) -> Iterator[bytes]:
    """What ``raw`` inflates to, in pieces of at most ``BLOCK_BYTES``."""
    data = inflater.decompress(raw, BLOCK_BYTES)
    while True:
        if data:
            yield data
        # At the end of the stream the bytes after it are in unused_data (the unconsumed tail may
        # still hold a stale copy when the output limit was hit).
        if inflater.eof or not inflater.unconsumed_tail:
            return
        data = inflater.decompress(inflater.unconsumed_tail, BLOCK_BYTES)


# Compressed bytes per call when damaged input is inflated again: deflate expands at most 1032:1,
# so a call returns at most about 1 MiB, and at most this much input's output is lost.
_REPLAY_BYTES = 1024


def _inflated_before_damage(inflater: Any, raw: bytes, skip: int) -> Iterator[bytes]:
    """What ``raw`` inflates to up to the damage zlib stops at, less the ``skip`` bytes already had."""
    for at in range(0, len(raw), _REPLAY_BYTES):
        try:
            data = inflater.decompress(raw[at : at + _REPLAY_BYTES])
        except zlib.error:
            return
        cut = min(skip, len(data))
        skip -= cut
        if len(data) > cut:
            yield data[cut:]


class _Inflated:
    """The inflated size so far, checked against the limits as it grows."""

    def __init__(self, path: Path, size: int | None, max_bytes: int) -> None:
        self.path, self.size, self.max_bytes = path, size, max_bytes
        self.total = 0

    def add(self, data: bytes, consumed: int) -> bytes:
        """``data``, counted (``consumed``: compressed bytes it came from, for the ratio check)."""
        if self.total == 0 and data.startswith(GZIP_MAGIC):
            raise TraceError(f"{self.path}: compressed twice (a gzip inside a gzip); gunzip it once first")
        self.total += len(data)
        if self.total > self.max_bytes:
            raise _too_big(self.path, self.max_bytes)
        if self.size is not None and self.total >= _ESTIMATE_AFTER:
            _check_ratio(self.path, consumed, self.total, self.size, self.max_bytes)
        return data


class _Input:
    """The compressed bytes, read in ``_READ_BYTES`` pieces, with bytes put back (what followed
    a member's deflate data) read again first."""

    def __init__(self, path: Path, fh: IO[bytes], pending: bytes) -> None:
        self.path, self.fh, self.buf = path, fh, pending
        self.read_total = len(pending)

    def chunk(self) -> bytes:
        """The next bytes (b"" at the end of the file)."""
        data, self.buf = self.buf or self._read(), b""
        return data

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes, fewer at the end of the file."""
        while len(self.buf) < n:
            more = self._read()
            if not more:
                break
            self.buf += more
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def take_until(self, end: bytes, limit: int) -> bytes | None:
        """The bytes up to and including ``end`` (a header's zero-terminated name); None if not
        within ``limit`` bytes or before the end of the file."""
        while end not in self.buf[:limit]:
            more = self._read() if len(self.buf) < limit else b""
            if not more:
                return None
            self.buf += more
        return self.take(self.buf.index(end) + 1)

    def starts_with(self, prefix: bytes) -> bool:
        self.unread(self.take(len(prefix)))
        return self.buf.startswith(prefix)

    def unread(self, data: bytes) -> None:
        self.buf = data + self.buf

    def consumed(self) -> int:
        """Compressed bytes handed out so far."""
        return self.read_total - len(self.buf)

    def _read(self) -> bytes:
        data = _read(self.path, self.fh, _READ_BYTES)
        self.read_total += len(data)
        return data


# FLG bits of a gzip header (RFC 1952 §2.3.1)
_FHCRC, _FEXTRA, _FNAME, _FCOMMENT, _FRESERVED = 0x02, 0x04, 0x08, 0x10, 0xE0
_MAX_GZIP_NAME = 1 << 16


def _gzip_header(src: _Input, total: int) -> None:
    """Read past one member's header (``total``: bytes inflated from the members before it)."""
    fixed = src.take(10)
    path = src.path
    if len(fixed) < 10:
        raise TraceError(f"{path}: gzip file is cut off before any data") if total == 0 else _cut_header(path)
    flags = fixed[3]
    if fixed[:2] != GZIP_MAGIC or fixed[2] != 8 or flags & _FRESERVED:
        raise TraceError(f"{path}: corrupt gzip data (not a deflate stream: bad gzip header)")
    if flags & _FEXTRA:
        size = src.take(2)
        if len(size) < 2 or len(src.take(int.from_bytes(size, "little"))) < int.from_bytes(size, "little"):
            raise _cut_header(path)
    for flag in (_FNAME, _FCOMMENT):
        if flags & flag and src.take_until(b"\0", _MAX_GZIP_NAME) is None:
            raise _cut_header(path)
    if flags & _FHCRC and len(src.take(2)) < 2:
        raise _cut_header(path)


def _cut_header(path: Path) -> TraceError:
    return TraceError(f"{path}: gzip file is cut off (or damaged) in a member's header")


def _check_trailer(trailer: bytes, crc: int, size: int, total: int, result: ReadResult) -> None:
    """A member's CRC-32 and length (mod 2^32) against what was inflated: a warning if they differ
    or are missing. The data was all inflated and read either way; only the check failed."""
    if len(trailer) < 8:
        result.warn(
            f"gzip file ends before its checksum (cut off?): all {total} inflated bytes were read "
            "and analysed, but their CRC-32 could not be checked"
        )
    elif int.from_bytes(trailer[:4], "little") != crc or int.from_bytes(trailer[4:], "little") != size & 0xFFFFFFFF:
        result.warn(
            f"gzip checksum (CRC-32 or length) does not match: all {total} inflated bytes were read and "
            "analysed; only the check failed, so some data may be damaged"
        )


def _check_ratio(path: Path, consumed: int, total: int, size: int, max_bytes: int) -> None:
    estimate = total / max(1, consumed) * size
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
        pos = _skip_separators(buf, 0)
        while True:
            # A batch ends within MAX_EVENT_BYTES of its first event, so a larger event never
            # decodes: it is the one left when nothing decodes and that much text follows it.
            start = pos
            pos = yield from _take(buf, start, min(len(buf), start + MAX_EVENT_BYTES), result)
            if pos > start:
                idle = len(buf) - pos
                if len(buf) - pos > MAX_EVENT_BYTES:
                    continue  # more than a batch was left: decode on
                break
            if len(buf) - pos <= MAX_EVENT_BYTES or buf[pos : pos + 1] != b"{":
                break  # wait for more bytes; blank space or junk is refused below
            after = _skip_event(buf, pos, blocks)
            if after is None:  # the file ends inside it
                result.cut_off("trace is cut off (no end of traceEvents); analysed the complete events before the cut")
                return
            buf, pos = after[0], _skip_separators(after[0], after[1])
            result.oversized_events += 1
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
    if result.oversized_events:
        result.warn(
            f"skipped {_count(result.oversized_events, 'event')} larger than {MAX_EVENT_BYTES >> 20} MiB "
            "(too large to be profiler events)"
        )
    if result.deep_events:
        result.warn(
            f"skipped {_count(result.deep_events, 'event')} nested {MAX_DEPTH} levels deep or more "
            "(nested too deeply to be profiler events)"
        )
    for (label, key, kinds), n in _bad_value_lines(result.bad_values):
        result.warn(f"ill-typed '{key}' in {_count(n, f'{label} event')} ({kinds}): read as missing")
    if result.surrogates:
        result.warn("replaced invalid \\u escapes (lone UTF-16 surrogates) in strings with U+FFFD")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _bad_value_lines(bad: dict[tuple[str, str, str], int]) -> list[tuple[tuple[str, str, str], int]]:
    """One line per (category, key): its count and the kinds of value dropped, in a stable order."""
    lines: dict[tuple[str, str], tuple[list[str], int]] = {}
    for (label, key, kind), n in sorted(bad.items()):
        kinds, total = lines.get((label, key), ([], 0))
        lines[(label, key)] = ([*kinds, kind], total + n)
    return [((label, key, ", ".join(kinds)), n) for (label, key), (kinds, n) in lines.items()]


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
        if _bad_utf8(exc):
            raise TraceError(f"{path}: not valid UTF-8 JSON") from None
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
        events = _typed_decoder.decode(chunk)
        return (_DEEP, None) if _too_deep(chunk) else (_OK, events)
    except msgspec.ValidationError:
        pass  # ill-typed events: decoded one by one below
    except msgspec.DecodeError as exc:
        if _bad_utf8(exc):
            return _DAMAGE, start - 1 + _bad_utf8_at(chunk)
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
    if _too_deep(chunk):
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


def _bad_utf8(exc: Exception) -> bool:
    """Is a decode error invalid UTF-8 inside a string? msgspec raised ``UnicodeDecodeError`` for it
    up to 0.22 and raises a ``DecodeError`` saying "Invalid UTF-8 encoded string", with no byte
    offset, from 0.23 on: read as the offset-less kind of damage it is, not as a wrong cut (which
    re-read a whole batch of good events leniently, each counted as repaired)."""
    return isinstance(exc, UnicodeDecodeError) or (
        isinstance(exc, msgspec.DecodeError) and "invalid utf-8" in str(exc).lower()
    )


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
_BRACKET_OR_QUOTE = re.compile(rb'["{}\[\]]')


def _skip_event(buf: bytes, pos: int, blocks: Iterator[bytes]) -> tuple[bytes, int] | None:
    """Read past the event that starts at ``buf[pos]`` (``{``), taking blocks as needed and
    keeping none: the buffer holding its end and the offset after it; None if the file ends first.

    Strings are crossed with ``bytes.find`` for their closing quote (a quote after an odd run of
    backslashes is escaped; a run can span blocks), so a 200 MB name costs a few calls, not a
    Python step per byte."""
    depth, in_string, backslashes = 0, False, 0  # backslashes: ending the text scanned so far
    while True:
        while pos < len(buf):
            if in_string:
                q = buf.find(b'"', pos)
                text = buf[pos : len(buf) if q < 0 else q]
                run = len(text) - len(text.rstrip(b"\\"))
                run += backslashes if run == len(text) else 0
                if q < 0:
                    backslashes, pos = run, len(buf)
                    break
                backslashes, pos = 0, q + 1
                in_string = run % 2 == 1  # an escaped quote: still inside
                continue
            m = _BRACKET_OR_QUOTE.search(buf, pos)
            if m is None:
                pos = len(buf)
                break
            pos, c = m.end(), buf[m.start()]
            if c == 0x22:  # quote
                in_string = True
            else:
                depth += 1 if c in b"{[" else -1
                if depth == 0:
                    return buf, pos
        buf, pos = next(blocks, b""), 0
        if not buf:
            return None


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
    if _too_deep(chunk):
        return True
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


# Every byte but quotes and brackets (deleted); a string once only those are left; brackets as steps.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
_MARKED_STRING = re.compile(rb'"[^"]*"')
_TO_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def _too_deep(chunk: bytes) -> bool:
    """Whether ``chunk`` (events inside ``[`` ``]``) holds an event nested ``MAX_DEPTH`` deep or more."""
    return _nesting(chunk) > MAX_DEPTH  # the array around the events is one level more


def _nesting(data: bytes) -> int:
    """The deepest nesting of brackets in the JSON text ``data``, brackets inside strings not counted.

    It runs on every batch, so without a Python step per byte: escaped backslashes, then escaped
    quotes, are removed (pairs from the left, as JSON reads escapes); every byte but quotes and
    brackets is deleted, then empty strings (most of them by then), then the strings left (those
    holding brackets). A cumulative sum of +1/-1 over the brackets left, a few percent of the
    text, gives the depth: about 1.2 ms per MiB, some 10 % of this path's decoding time.
    """
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = data.translate(None, _NOT_STRUCTURE)
    if b'"' in marks:
        marks = _MARKED_STRING.sub(b"", marks.replace(b'""', b""))
    if not marks:
        return 0
    steps = np.frombuffer(marks.translate(_TO_STEP), dtype=np.int8)
    return int(np.cumsum(steps, dtype=np.int64).max())


def _depth_of(value: Any) -> int:
    """Nesting depth of a parsed JSON value (damaged text is measured after the lenient parse:
    unescaped quotes would mislead ``_nesting``); iterative, as the value can be deep."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        children = v.values() if isinstance(v, dict) else v
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def _lenient_events(region: bytes, result: ReadResult) -> list[Event] | None:
    items = _lenient_items(b"[" + _fix_surrogates(region.strip(b" \t\r\n,"), result) + b"]")
    if items is None or _depth_of(items) > MAX_DEPTH:
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
        ev = _coerce_event(item, result)
        if ev is None:
            result.dropped_events += 1
        else:
            events.append(ev)
    return events


# Where msgspec found a value of the wrong type: "Expected `int | ...`, got `array` - at `$.args.stream`".
_BAD_VALUE_AT = re.compile(r" - at `(\$[^`]*)`$")
_ITEM_INDEX = re.compile(r"(\[\d+\])+$")


def _coerce_event(item: Any, result: ReadResult) -> Event | None:
    """A parsed JSON value as an ``Event``; None when it is not an object.

    The one coercion of every category: each value msgspec refuses for its key's type
    (``schema.py``) is dropped and counted in ``result.bad_values``, and the rest of the event is
    kept, so a list where an id belongs never reaches a column (it would make a 2-D array there).
    """
    if not isinstance(item, dict):
        return None
    args = item.get("args")
    for _ in range(len(item) + (len(args) if isinstance(args, dict) else 0) + 1):  # a value a round
        try:
            return _event_decoder.decode(msgspec.json.encode(item))
        except msgspec.ValidationError as exc:
            if not _drop_bad_value(item, str(exc), result):
                return None
        except (msgspec.MsgspecError, ValueError, TypeError, RecursionError, OverflowError):
            return None
    return None


def _drop_bad_value(item: dict[str, Any], message: str, result: ReadResult) -> bool:
    """Remove from ``item`` the value msgspec's ``message`` points at, counting it; False if none."""
    m = _BAD_VALUE_AT.search(message)
    path = m.group(1) if m else ""
    owner: Any = item
    if path.startswith("$.args."):
        owner, key = item.get("args"), _ITEM_INDEX.sub("", path[len("$.args.") :])
    elif path.startswith("$."):
        key = _ITEM_INDEX.sub("", path[2:])
    else:
        return False
    if not isinstance(owner, dict) or key not in owner:
        return False
    bad = (_category_label(item), key, _value_kind(owner.pop(key), message))
    result.bad_values[bad] = result.bad_values.get(bad, 0) + 1
    return True


def _category_label(item: dict[str, Any]) -> str:
    cat = item.get("cat")
    if isinstance(cat, str):
        return cat
    return "metadata" if item.get("ph") == "M" else "uncategorised"


def _value_kind(value: Any, message: str) -> str:
    """What a refused value was, for the warning."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        # msgspec states the bound it checked: "Expected `int` <= 9223372036854775807"
        return "a number beyond int64" if "<" in message or ">" in message else "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "a string" if isinstance(value, str) else type(value).__name__


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
