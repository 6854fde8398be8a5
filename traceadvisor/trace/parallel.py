"""Read a trace into columns; a large uncompressed one with two processes, each taking half.

Decoding JSON and building columns hold the GIL, so threads would not help; a forked child does.
The split point is an event boundary near the middle of the events array, proven by decoding a run
of events on each side of it: a candidate inside a string or a nested value cannot decode on both
sides. The child reads from there to the end of the file (the tail keys too) and sends its columns
back through a pipe: pickle protocol 5 with the numpy buffers written out of band, so they are not
copied into the pickle. The parent appends them after its own columns, so tables keep file order,
and re-codes the child's interned names into its own name tables.

The split is used only where it pays and is safe: a regular, uncompressed file of at least
``PARALLEL_MIN_BYTES``, two CPUs available to the process, ``os.fork`` present, and no other Python
thread running (fork copies only the calling thread: a lock held by another would stay locked in
the child). If the child fails in any way but a ``TraceError``, the parent reads the whole file
itself, so the result never depends on the split. ``TRACEADVISOR_JOBS=1`` turns it off. The child
dies with the parent (``_die_with_parent``): a killed ``analyze`` leaves no reader decoding on.
"""

from __future__ import annotations

import os
import pickle
import signal
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from traceadvisor.errors import TraceError
from traceadvisor.trace.columns import ColumnSink
from traceadvisor.trace.native import read_native
from traceadvisor.trace.reader import (
    BLOCK_BYTES,
    EVENT_BOUNDARY,
    GZIP_MAGIC,
    ReadResult,
    iter_blocks,
    read_body,
    read_events,
    read_head,
    summarise,
)
from traceadvisor.trace.schema import EVENT_LIST

# Below this a second process costs more (fork, transfer) than it saves.
PARALLEL_MIN_BYTES = 32 << 20
# Bytes read around the middle to find the split, events decoded on each side to prove it, and
# candidates tried before giving up (then the file is read by one process).
_WINDOW = 1 << 20
_PROOF_EVENTS = 64
_MAX_CANDIDATES = 32
_HEADER = struct.Struct("<QQ")
# The parent's share of the events when it has other work first (importing pandas and loading the
# rule pack cost about a tenth of decoding a 100 MB trace on one core; measured in bench/RESULTS.md).
_PARENT_SHARE_BUSY = 0.45
_decoder = msgspec.json.Decoder(EVENT_LIST)


def read_columns(
    path: Path,
    max_bytes: int,
    min_bytes: int = PARALLEL_MIN_BYTES,
    meanwhile: Callable[[], object] | None = None,
) -> tuple[ColumnSink, ReadResult]:
    """Every event of ``path`` as columns, and what the reader found besides them.

    ``meanwhile`` is called once before the parent decodes anything: while the child decodes, if
    the file is split (and then the parent takes a smaller share), else before the serial read.
    The command line imports the analysis modules and loads the rules there, overlapping them
    with the decoding instead of paying for them first.
    """
    if meanwhile is not None:
        meanwhile = _once(meanwhile)
    native = read_native(path, max_bytes, meanwhile)
    if native is not None:
        return native
    if _can_split(path, min_bytes):
        split = _read_split(path, max_bytes, meanwhile)
        if split is not None:
            return split
    if meanwhile is not None:
        meanwhile()
    return _read_serial(path, max_bytes)


def _once(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` that runs at most once (the native path may have run it before falling back)."""
    done = False

    def call() -> object:
        nonlocal done
        if done:
            return None
        done = True
        return fn()

    return call


def _read_serial(path: Path, max_bytes: int) -> tuple[ColumnSink, ReadResult]:
    batches, result = read_events(path, max_bytes=max_bytes)
    sink = ColumnSink()
    for batch in batches:
        sink.add_batch(batch)
    return sink, result


def _can_split(path: Path, min_bytes: int) -> bool:
    if os.environ.get("TRACEADVISOR_JOBS") == "1" or not hasattr(os, "fork"):
        return False
    if threading.active_count() != 1:
        return False
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cpus < 2:
        return False
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode) or st.st_size < min_bytes:
            return False
        with path.open("rb") as fh:
            return fh.read(2) != GZIP_MAGIC
    except OSError:
        return False  # the serial reader reports it


class _Counted:
    """Blocks passed through, counting their bytes (to know where the head ended in the file)."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self.blocks = blocks
        self.total = 0

    def __iter__(self) -> _Counted:
        return self

    def __next__(self) -> bytes:
        block = next(self.blocks)
        self.total += len(block)
        return block


def _read_split(
    path: Path, max_bytes: int, meanwhile: Callable[[], object] | None
) -> tuple[ColumnSink, ReadResult] | None:
    result = ReadResult()
    blocks = iter_blocks(path, result, max_bytes)
    counted = _Counted(blocks)
    buf, legacy = read_head(path, counted, result)
    events_at = counted.total - len(buf)
    blocks.close()  # type: ignore[attr-defined]
    size = path.stat().st_size
    share = _PARENT_SHARE_BUSY if meanwhile is not None else 0.5
    cut = _find_split(path, events_at + int((size - events_at) * share), events_at, size)
    if cut is None:
        return None
    first_end, second_at = cut
    parent, prctl = os.getpid(), _prctl()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        _die_with_parent(parent, prctl)
        os.close(read_fd)
        _child(path, second_at, size, legacy, write_fd)
    os.close(write_fd)
    done = False
    try:
        if meanwhile is not None:
            meanwhile()
        sink = ColumnSink()
        for batch in read_body(path, _range_blocks(path, events_at, first_end), b"", legacy, result, closes=False):
            sink.add_batch(batch)
        payload = _receive(read_fd)
        done = True
    finally:
        os.close(read_fd)
        if not done:
            _kill(pid)
        os.waitpid(pid, 0)
    if payload is None or payload[0] == "failed":
        # The child died or failed: read it all here (meanwhile has run: don't run it twice).
        return _read_serial(path, max_bytes)
    if payload[0] == "error":
        raise TraceError(payload[1])
    _, state, child_result = payload
    sink.absorb(state)
    _merge_results(result, child_result)
    result.bytes_read = size
    summarise(result)
    return sink, result


# prctl(2) option: the signal the calling process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def _prctl() -> Any:
    """libc's prctl on Linux, else None. Looked up before fork: dlopen in the child of a process
    with other (native) threads may wait forever on a loader lock that fork copied locked."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: only the two-process path needs it, not every start-up

    return ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent(parent: int, prctl: Any) -> None:
    """Make this forked child end when ``parent`` does (SIGKILL, timeout, OOM killer), instead of
    decoding on for nobody.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``. It is set after fork, so a parent that died in
    between is caught by comparing ``getppid()`` with the parent's pid, as prctl(2) advises. The
    signal comes when the thread that forked ends, not the process: here that is the main thread
    (``_can_split`` forks only when it is the one thread), whose end is the process's. Elsewhere a
    thread polls ``getppid()``, which changes when the parent dies and the child is re-parented.
    """
    if prctl is not None:
        if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(1)  # the parent reads the whole file itself
    else:
        threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()
    if os.getppid() != parent:
        os._exit(1)


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(1)


def _child(path: Path, start: int, end: int, legacy: bool, fd: int) -> None:
    """Read ``path[start:end]`` into columns and send them to the parent; exit without cleanup."""
    status = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
        try:
            result = ReadResult()
            sink = ColumnSink()
            for batch in read_body(path, _range_blocks(path, start, end), b"", legacy, result, closes=True):
                sink.add_batch(batch)
            payload: tuple[Any, ...] = ("ok", sink.export(), result)
        except TraceError as exc:
            payload = ("error", str(exc))
        except Exception as exc:  # the parent reads the file alone: the outcome never depends on us
            payload = ("failed", repr(exc))
        _send(fd, payload)
    except BaseException:
        status = 1
    finally:
        os._exit(status)


def _send(fd: int, payload: tuple[Any, ...]) -> None:
    buffers: list[pickle.PickleBuffer] = []
    meta = pickle.dumps(payload, protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]
    with os.fdopen(fd, "wb", buffering=0) as out:
        _write_all(out, _HEADER.pack(len(meta), len(views)))
        _write_all(out, struct.pack(f"<{len(views)}Q", *(v.nbytes for v in views)))
        _write_all(out, memoryview(meta))
        for v in views:
            _write_all(out, v)


def _write_all(out: Any, data: memoryview | bytes) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = out.write(view)
        view = view[n:]


def _receive(fd: int) -> tuple[Any, ...] | None:
    """The child's payload; None if it died before sending all of it."""
    try:
        header = _read_exact(fd, _HEADER.size)
        meta_len, count = _HEADER.unpack(header)
        sizes = struct.unpack(f"<{count}Q", _read_exact(fd, 8 * count))
        meta = _read_exact(fd, meta_len)
        buffers = [_read_exact(fd, n) for n in sizes]
        payload = pickle.loads(meta, buffers=buffers)
    except (EOFError, pickle.UnpicklingError, struct.error, ValueError):
        return None
    return payload if isinstance(payload, tuple) else None


def _read_exact(fd: int, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise EOFError
        got += k
    return buf


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _range_blocks(path: Path, start: int, end: int) -> Iterator[bytes]:
    try:
        with path.open("rb") as fh:
            fh.seek(start)
            left = end - start
            while left > 0:
                data = fh.read(min(BLOCK_BYTES, left))
                if not data:
                    return
                left -= len(data)
                yield data
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _find_split(path: Path, target: int, lo: int, hi: int) -> tuple[int, int] | None:
    """``(end of the first part, start of the second)``: a proven event boundary near ``target``."""
    at = max(lo, target - _WINDOW)
    try:
        with path.open("rb") as fh:
            fh.seek(at)
            window = fh.read(min(2 * _WINDOW, hi - at))
    except OSError:
        return None
    cuts = [(m.start(), m.end() - 1) for m in EVENT_BOUNDARY.finditer(window)]
    middle = next((i for i, (c, _) in enumerate(cuts) if c >= target - at), len(cuts))
    for i in range(middle, min(len(cuts), middle + _MAX_CANDIDATES)):
        if i < _PROOF_EVENTS or i + _PROOF_EVENTS >= len(cuts):
            continue
        close, open_ = cuts[i]
        before = window[cuts[i - _PROOF_EVENTS][1] : close + 1]
        after = window[open_ : cuts[i + _PROOF_EVENTS][0] + 1]
        if _decodes(before) and _decodes(after):
            return at + close + 1, at + open_
    return None


def _decodes(events: bytes) -> bool:
    try:
        return len(_decoder.decode(b"[" + events + b"]")) > 0
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return False


def _merge_results(into: ReadResult, other: ReadResult) -> None:
    into.top.update(other.top)  # the tail keys, read by the child
    for w in other.warnings:
        into.warn(w)
    into.truncated = into.truncated or other.truncated
    into.dropped_events += other.dropped_events
    into.repaired_events += other.repaired_events
    into.skipped_events += other.skipped_events
    into.deep_events += other.deep_events
    into.oversized_events += other.oversized_events
    for key, n in other.bad_values.items():  # values dropped for their type, per (category, key, kind)
        into.bad_values[key] = into.bad_values.get(key, 0) + n
    into.surrogates = into.surrogates or other.surrogates
