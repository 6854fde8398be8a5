#!/usr/bin/env python3
"""How much reading with pread costs the native decoder against a memory map (issue 10).

The native path reads uncompressed traces with pread into a reused buffer (``native._Pread``); it
used to memory-map settled files, which dies of SIGBUS when another process truncates the file.
This times ``native.read_native`` (both decoding threads, columns built) with each byte source,
interleaved, in one process: wall time, and CPU time (both threads; steadier on a shared machine).
``_Mapped`` below is the removed memory-map source (git fa9fb48), kept here only to measure against.

    .venv/bin/python bench/make_traces.py --sizes 100,1000
    .venv/bin/python bench/byte_sources.py bench/.cache/nccl_data.100MB.json --repeat 7
    .venv/bin/python bench/byte_sources.py bench/.cache/nccl_data.1000MB.json --repeat 2
"""

from __future__ import annotations

import argparse
import mmap
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from traceadvisor.trace import native


class _Mapped(native._Pread):
    """The file as a memory map, decoded in place slice by slice (16 MiB, as it was), decoded pages
    released."""

    SLICE = 16 << 20

    def __init__(self, fd: int, size: int, cancelled: threading.Event) -> None:
        super().__init__(fd, size, cancelled)
        self.mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)

    def read(self, at: int, n: int) -> bytes:
        return self.mm[at : at + n]

    def decode(self, decoder: Any, start: int, end: int, final: bool) -> int:
        pos, step = start, self.SLICE
        dropped = start - start % mmap.PAGESIZE
        while True:
            stop_at = min(pos + step, end)
            last = stop_at == end
            new, closed = decoder.feed(self.mm, pos, stop_at, final and last)
            upto = new - new % mmap.PAGESIZE
            if upto > dropped:
                self.mm.madvise(mmap.MADV_DONTNEED, dropped, upto - dropped)
                dropped = upto
            if closed or last:
                return int(new)
            step = step * 2 if new == pos else self.SLICE
            pos = new


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sources = {"mmap": _Mapped, "pread": native._Pread}
    times: dict[str, list[float]] = {name: [] for name in sources}
    cpu: dict[str, list[float]] = {name: [] for name in sources}
    pread = native._Pread
    try:
        for _ in range(args.repeat):
            for name, source in sources.items():
                native._Pread = source  # type: ignore[misc]
                t0, c0 = time.perf_counter(), time.process_time()
                got = native.read_native(args.trace, 1 << 50)
                times[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
                assert got is not None, "the native decoder refused the trace"
                del got
    finally:
        native._Pread = pread  # type: ignore[misc]
    for label, table in (("wall", times), ("cpu", cpu)):
        medians = {name: statistics.median(t) for name, t in table.items()}
        for name, t in table.items():
            print(f"{label} {name:6} median {medians[name]:.3f} s  runs {' '.join(f'{x:.3f}' for x in t)}")
        print(f"{label} pread / mmap = {medians['pread'] / medians['mmap']:.3f}")


if __name__ == "__main__":
    main()
