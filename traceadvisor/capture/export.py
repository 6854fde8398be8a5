"""Exporting a profiler's trace to a file, with kineto's silent failures turned into errors.

Kineto writes a Chrome trace to ``<path>.tmp`` and renames it to ``<path>`` when done. When a write
fails (a full disk), it logs ``Failed to write to log file!`` on stderr, skips the rename, and
returns normally: ``export_chrome_trace`` raises nothing, ``<path>`` does not exist, and the
partial ``<path>.tmp`` stays behind. Reading ``<path>`` afterwards then fails with a misleading
``FileNotFoundError``. ``export_chrome_json`` checks the result, removes the partial file and raises
an ``OSError`` that says what happened.

Removing the partial file is not enough to give the space back: kineto's results object keeps the
file open until the profiler object is freed (measured on torch 2.13: a 48 KiB tmpfs stayed full
after the unlink, and the next small write, ``run.json``, failed too). The file is truncated first,
through ``/proc/self/fd`` (Linux); the stream is in a failed state and writes nothing more.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

# Less free space than this after a failed export: the disk is (as good as) full.
_FULL_BELOW_BYTES = 16 << 20


def export_chrome_json(prof: Any, path: Path) -> None:
    """``prof.export_chrome_trace(path)`` (plain JSON); raises ``OSError`` if no complete file was written."""
    partial = Path(f"{path}.tmp")  # kineto's temporary name
    try:
        prof.export_chrome_trace(str(path))
    except BaseException:
        _remove(path, partial)
        raise
    if path.is_file() and not partial.exists():
        return
    error = _export_error(path)  # before the cleanup below frees the space kineto filled
    _remove(path, partial)
    raise error


def _export_error(path: Path) -> OSError:
    """The error for an export that left no file: ENOSPC when the disk is nearly full, else EIO."""
    try:
        free: int | None = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    if free is not None and free < _FULL_BELOW_BYTES:
        return OSError(
            errno.ENOSPC,
            f"the profiler could not write the trace: no space left on the device ({_size(free)} free)",
            str(path.parent),
        )
    where = f"{_size(free)} free" if free is not None else "free space unknown"
    return OSError(
        errno.EIO, f"the profiler could not write the trace (kineto wrote no complete file; {where})", str(path)
    )


def _remove(*paths: Path) -> None:
    for p in paths:
        _truncate_open_copies(p)
        try:
            p.unlink(missing_ok=True)
        except OSError:
            pass


def _truncate_open_copies(path: Path) -> None:
    """Truncate ``path`` through each descriptor of this process that has it open (Linux)."""
    fd_dir = Path("/proc/self/fd")
    try:
        if not path.exists() or not fd_dir.is_dir():
            return
        target = os.path.realpath(path)
        entries = list(fd_dir.iterdir())
    except OSError:
        return
    for entry in entries:
        try:
            if str(entry.readlink()) == target:
                os.truncate(entry, 0)
        except OSError:  # closed meanwhile, or not a file
            continue


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


__all__ = ["export_chrome_json"]
