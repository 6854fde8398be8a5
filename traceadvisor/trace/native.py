"""The fast path of ``load``: the native columnar decoder (``_kineto.c``), with the GIL released.

The C decoder reads the events array straight into columns.py's column layout, without a Python
object per event, and releases the GIL while it runs. So a large uncompressed trace is decoded by
two threads, each taking half of the file (read with pread into a buffer it reuses), while the
main thread runs ``meanwhile`` (importing pandas and loading the rule pack); a gzip trace is
inflated by one thread and decoded by another (zlib releases the GIL too).

The split is proven, not guessed: the first half is decoded up to a candidate event boundary near
the middle, and its decoder must stop exactly there, at array level, for the second half to count.
If it does not (the candidate was inside a string), the first decoder reads on to the end.

What the C decoder does not read exactly as the Python path would, it refuses (``Unsupported``):
damaged or cut-off files, lone surrogates, values of odd types... Then this returns None and the
caller reads the file with the Python path (reader.py + columns.py), which warns about and
salvages damage. Events of categories the decoder does not table (metadata, unknown categories)
come back as JSON text and go through the Python path's column builders. ``TRACEADVISOR_NATIVE=0``
turns the native path off; the result is the same either way (tests/test_native.py).
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from queue import Empty, Full, Queue
from typing import Any

import msgspec
import numpy as np

from traceadvisor.trace.columns import ColumnSink
from traceadvisor.trace.reader import EVENT_BOUNDARY, GZIP_MAGIC, ReadResult, iter_blocks, read_head
from traceadvisor.trace.reader import _decode_tail as decode_tail
from traceadvisor.trace.schema import EVENT_LIST

# The contract between this module and _kineto.c (columns, export layout); a module built from an
# older source (an editable install not rebuilt) is ignored rather than trusted.
ABI = 2
_kineto: Any
try:
    from traceadvisor.trace import _kineto
except ImportError:  # not built (no C compiler at install): the Python path reads every trace
    _kineto = None
if _kineto is not None and getattr(_kineto, "ABI", None) != ABI:
    _kineto = None

# Below this one thread decodes: a second one costs more to start and merge than it saves.
SPLIT_MIN_BYTES = 8 << 20
# Files are read and decoded in slices of this size, into one buffer per decoding thread: small
# enough that the bytes pread copies in are still in the core's cache when the decoder reads them
# (16 MiB slices cost 7 % more decoding time than 1 MiB: bench/byte_sources.py), and the file adds
# next to nothing to the peak memory, whatever its size (issue 2: at most twice the JSON's).
SLICE_BYTES = 1 << 20
_HEAD_BLOCK = 1 << 20
# The C decoder's kind letters (tables.NATIVE_KIND) of the columns it exports as numbers; "R" and "S" are
# bytes, converted by _state.
_DTYPES = {"q": np.int64, "d": np.float64, "i": np.int32, "b": np.int8, "?": np.bool_}
_events_decoder = msgspec.json.Decoder(EVENT_LIST)
_string_decoder = msgspec.json.Decoder(str)


class _Refused(Exception):
    """The native decoder cannot read this file exactly: the Python path reads it."""


def available() -> bool:
    """Whether the native decoder is built and allowed (``TRACEADVISOR_NATIVE=0`` turns it off)."""
    return _kineto is not None and os.environ.get("TRACEADVISOR_NATIVE", "1") != "0"


def read_native(
    path: Path, max_bytes: int, meanwhile: Callable[[], object] | None = None
) -> tuple[ColumnSink, ReadResult] | None:
    """Columns and read result of ``path``, or None when the Python path must read it.

    ``meanwhile`` runs on the calling thread while the file decodes; it has run whenever this
    returns (also when it returns None), so the caller must not run it again.
    """
    if not available() or not hasattr(os, "pread"):
        return None
    try:
        # Only regular files: opening a FIFO would wait for (and then lose) its writer's data.
        if not stat.S_ISREG(path.stat().st_mode):
            return None
        fh = path.open("rb")
    except OSError:
        return None  # the Python path says what is wrong with it
    with fh:
        try:
            st = os.fstat(fh.fileno())
            regular = stat.S_ISREG(st.st_mode)
            magic = fh.read(2) if regular else b""
        except OSError:
            return None
        if not regular or st.st_size == 0:
            return None
        cancelled = threading.Event()
        if magic == GZIP_MAGIC:
            return _run(lambda: _read_gzip(path, max_bytes, cancelled), meanwhile, cancelled)
        if st.st_size > max_bytes:
            return None
        source = _Pread(fh.fileno(), st.st_size, cancelled)
        return _run(lambda: _read_plain(path, source), meanwhile, cancelled)


def _run(
    work: Callable[[], tuple[ColumnSink, ReadResult]],
    meanwhile: Callable[[], object] | None,
    cancelled: threading.Event,
) -> tuple[ColumnSink, ReadResult] | None:
    """``work()`` on a worker thread while ``meanwhile()`` runs here; None if the decoder refused.

    The worker has ended whenever this returns or raises: the caller then closes the file it reads.
    If ``meanwhile`` fails (a bad configuration) or Ctrl-C comes, ``cancelled`` makes the work stop
    at its next slice, instead of decoding on to the end of a large file first.
    """
    worker = _Background(work, "traceadvisor-decode", cancelled)
    try:
        if meanwhile is not None:
            meanwhile()
    except BaseException:
        cancelled.set()
        raise
    finally:
        worker.wait()
    try:
        return worker.result()  # type: ignore[no-any-return]
    except (_Refused, _kineto.Unsupported, OSError):  # OSError: a read failed; the Python path reports it
        return None


class _Background:
    """``fn()`` on a daemon thread; ``result()`` gives its value or raises its exception here."""

    def __init__(self, fn: Callable[[], Any], name: str, cancelled: threading.Event) -> None:
        self._fn = fn
        self._cancelled = cancelled
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._target, name=name, daemon=True)
        self._thread.start()

    def _target(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # re-raised by result() on the waiting thread
            self._error = exc
        finally:
            self._done.set()

    def wait(self) -> None:
        """Until ``fn`` has returned, even through Ctrl-C: a KeyboardInterrupt cancels the work, the
        wait goes on, and the interrupt is raised once it has ended. Not ``Thread.join``: in Python
        3.11 a join interrupted by KeyboardInterrupt marks a running thread as stopped (it releases
        the thread's lock, threading._wait_for_tstate_lock), so a second join returns at once,
        and the file would be closed under a decoder still reading it."""
        interrupted: BaseException | None = None
        while not self._done.is_set():
            try:
                self._done.wait()
            except BaseException as exc:  # KeyboardInterrupt, raised on the main thread only
                interrupted = exc
                self._cancelled.set()
        if interrupted is not None:
            raise interrupted

    def result(self) -> Any:
        self.wait()
        if self._error is not None:
            raise self._error
        return self._value


# -- uncompressed: two threads, one per half ----------------------------------------------------
class _Pread:
    """The file read with pread, slice by slice, into one buffer per decoding thread.

    Not a memory map: a mapped file that another process truncates or rewrites while it is read
    kills the reader with SIGBUS (mmap(2): a page beyond the file's end), whatever the file's age,
    with no message; a short read here makes the Python path take over and report the cut. The
    copy pread makes costs 3-7 % of the decoder's CPU time against a memory map (100 MB: 0.212
    against 0.197 s, wall 0.118 against 0.117 s; 1 GB: 2.09 against 2.02 s), under 2 % of
    ``analyze``'s CPU time (0.9 s and 4.9 s, bench/RESULTS.md): ``bench/byte_sources.py``.
    """

    def __init__(self, fd: int, size: int, cancelled: threading.Event | None = None) -> None:
        self.fd, self.size = fd, size
        self.cancelled = threading.Event() if cancelled is None else cancelled

    def read(self, at: int, n: int) -> bytes:
        data = os.pread(self.fd, n, at)
        if len(data) != n:
            raise _Refused("the file changed while it was read")
        return data

    def decode(self, decoder: Any, start: int, end: int, final: bool) -> int:
        """Decode ``[start, end)``; the offset after ``]`` (``final``) or where the decoder stopped."""
        buf = bytearray(min(SLICE_BYTES, end - start))
        held, at, read = 0, start, start  # buf[:held] holds the file's bytes [at, read)
        while True:
            if self.cancelled.is_set():
                raise _Refused("cancelled")
            if held == len(buf):  # one event longer than the buffer: widen it
                buf.extend(bytes(len(buf)))
            n = min(len(buf) - held, end - read)
            self._fill(buf, held, n, read)
            held, read = held + n, read + n
            last = read == end
            stop, closed = decoder.feed(buf, 0, held, final and last)
            if closed or last:
                return at + int(stop)
            buf[: held - stop] = buf[stop:held]  # the event cut by the slice's end, to the front
            held, at = held - stop, at + int(stop)

    def _fill(self, buf: bytearray, pos: int, n: int, offset: int) -> None:
        """``buf[pos:pos + n]`` = the file's bytes from ``offset``; refuse if the file is shorter now."""
        with memoryview(buf) as view:
            while n:
                got = _pread_into(self.fd, view[pos : pos + n], offset)
                if got == 0:
                    raise _Refused("the file changed while it was read")
                pos, offset, n = pos + got, offset + got, n - got


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    if hasattr(os, "preadv"):  # straight into the buffer
        return os.preadv(fd, [view], offset)
    data = os.pread(fd, len(view), offset)  # a platform without preadv(2): one copy more
    view[: len(data)] = data
    return len(data)


def _read_plain(path: Path, source: _Pread) -> tuple[ColumnSink, ReadResult]:
    result = ReadResult()
    size = source.size
    events_at, legacy = _head(path, source, result)
    parts: list[Any] = []
    mid = None
    if size - events_at >= SPLIT_MIN_BYTES and _cpus() >= 2:
        mid = _candidate(source, events_at + (size - events_at) // 2)
    first = _kineto.Decoder()
    parts.append(first)
    if mid is None:
        close = source.decode(first, events_at, size, final=True)
    else:
        second = _kineto.Decoder()
        later = _Background(
            lambda: source.decode(second, mid, size, final=True), "traceadvisor-decode-2", source.cancelled
        )
        try:
            stop = source.decode(first, events_at, mid, final=False)
        finally:
            later.wait()
        if stop == mid:  # the first half ended exactly at the candidate: a true event boundary
            close = later.result()
            parts.append(second)
        else:  # the candidate was inside an event: the first decoder reads on alone
            del second
            close = source.decode(first, stop, size, final=True)
    _tail(source.read(close, size - close), legacy, result)
    sink = _sink(parts)
    result.bytes_read = size
    return sink, result


def _head(path: Path, source: _Pread, result: ReadResult) -> tuple[int, bool]:
    """Offset of the first event (after ``"traceEvents": [``) and whether the file is a bare array."""
    consumed = 0

    def blocks() -> Iterator[bytes]:
        nonlocal consumed
        while consumed < source.size:
            block = source.read(consumed, min(_HEAD_BLOCK, source.size - consumed))
            consumed += len(block)
            yield block

    rest, legacy = read_head(path, blocks(), result)
    return consumed - len(rest), legacy


def _candidate(source: _Pread, target: int) -> int | None:
    """The ``{`` of a ``}, {`` event boundary at or after ``target`` (proven later by decoding)."""
    m = EVENT_BOUNDARY.search(source.read(target, min(4 << 20, source.size - target)))
    return None if m is None else target + m.end() - 1


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# -- gzip: inflate and decode on one worker thread -----------------------------------------------
def _read_gzip(path: Path, max_bytes: int, cancelled: threading.Event) -> tuple[ColumnSink, ReadResult]:
    result = ReadResult()
    blocks = _inflated_ahead(iter_blocks(path, result, max_bytes))
    buf, legacy = read_head(path, blocks, result)
    decoder = _kineto.Decoder()
    pending = buf
    closed = False
    tail_parts: list[bytes] = []
    for block in blocks:
        if cancelled.is_set():
            raise _Refused("cancelled")
        if closed:
            tail_parts.append(block)
            continue
        data = pending + block if pending else block
        stop, closed = decoder.feed(data, 0, len(data), False)
        pending = data[stop:]
        if closed:
            tail_parts.append(pending)
    if result.truncated:
        raise _Refused("damaged gzip stream")
    if not closed:
        stop, closed = decoder.feed(pending, 0, len(pending), True)
        tail_parts.append(pending[stop:])
    _tail(b"".join(tail_parts), legacy, result)
    return _sink([decoder]), result


def _inflated_ahead(blocks: Iterator[bytes], depth: int = 4) -> Iterator[bytes]:
    """``blocks``, inflated by a producer thread up to ``depth`` blocks ahead of the consumer: zlib
    and the decoder both release the GIL, so inflating the next blocks overlaps decoding this one
    (100 MB of JSON: 0.22 s inflate, 0.3 s decode, one after the other before)."""
    queue: Queue[tuple[str, Any]] = Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for block in blocks:
                while not stop.is_set():
                    try:
                        queue.put(("block", block), timeout=0.1)
                        break
                    except Full:
                        continue
                if stop.is_set():
                    return
            queue.put(("end", None))
        except BaseException as exc:  # handed to the consumer, raised there (TraceError: too big...)
            queue.put(("error", exc))

    producer = threading.Thread(target=produce, name="traceadvisor-inflate", daemon=True)
    producer.start()
    try:
        while True:
            kind, value = queue.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        while producer.is_alive():  # unblock a producer waiting on a full queue, then let it end
            try:
                queue.get_nowait()
            except Empty:
                producer.join(0.05)


# -- after the array -----------------------------------------------------------------------------
def _tail(tail: bytes, legacy: bool, result: ReadResult) -> None:
    """The keys after the events array; anything but a clean end is left to the Python path."""
    tail = tail.strip()
    if legacy:
        if tail:
            raise _Refused("bytes after the event array")
        return
    doc = decode_tail(tail)
    if doc is None:
        raise _Refused("damaged keys after the events")
    result.top.update(doc)


def _sink(decoders: list[Any]) -> ColumnSink:
    """One ColumnSink with every decoder's columns in file order, then the punted events."""
    sink = ColumnSink()
    punted: list[bytes] = []
    for decoder in decoders:
        state = decoder.export()
        sink.absorb(_state(state))
        punted.extend(state["punted"])
    if punted:
        try:
            events = _events_decoder.decode(b"[" + b",".join(punted) + b"]")
        except (msgspec.DecodeError, RecursionError) as exc:
            raise _Refused(str(exc)) from None
        sink.add_batch(events)
    return sink


def _state(state: dict[str, Any]) -> dict[str, Any]:
    """The C decoder's export as ``ColumnSink.export()`` lays it out."""
    parts: dict[str, dict[str, list[Any]]] = {}
    for family, rows, columns in state["families"]:
        cols: dict[str, list[Any]] = {}
        for name, kind, data in columns:
            if kind == "R":
                cols[name] = [_objects(data, rows)]
            elif kind == "S":
                cols[name] = [_objects([_text(v) for v in data], rows)]
            else:
                cols[name] = [np.frombuffer(data, dtype=_DTYPES[kind])]
        parts[family] = cols
    names = {family: [None if raw is None else _text(raw) for raw in raws] for family, raws in state["names"].items()}
    return {
        "parts": parts,
        "names": names,
        "metadata": [],
        "other_categories": {},
    }


def _objects(values: list[Any], rows: int) -> np.ndarray[Any, np.dtype[np.object_]]:
    # fromiter takes each item as it is (a slice assignment inspects every item: 4x slower)
    return np.fromiter(values, dtype=object, count=rows)


def _text(raw: bytes | tuple[bytes] | None) -> str | None:
    """A JSON string body (escaped bodies come as a 1-tuple from string columns) as a str."""
    if raw is None:
        return None
    if isinstance(raw, tuple):
        raw = raw[0]
    elif b"\\" not in raw:
        return raw.decode("utf-8")
    try:
        return _string_decoder.decode(b'"' + raw + b'"')
    except msgspec.DecodeError as exc:
        raise _Refused(str(exc)) from None
