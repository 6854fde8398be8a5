"""The default ``--max-size``: from the memory this process may use, not a fixed size.

A trace's inflated size bounds what ``analyze`` reads, not what it holds: the peak memory of an
analysis is the interpreter and pandas (about 90 MB) plus the columns, tables and summary, measured
at 0.85-1.70 times the inflated size (peak RSS of the process tree / bytes of JSON, both decoders,
``bench/peak_memory.py``): 0.85-0.87 x on the 1 GB bench trace (``nccl_data``, Kineto's indented
JSON); 1.32-1.70 x on real traces' events repeated to 300 MB of compact JSON, the most for
``planted_launch_storm`` (Python stacks: many small events) on the native path, 1.52-1.56 x gzipped.
The fixed 16 GiB admitted traces needing up to 29 GB on a 24 GB machine. The default is half the memory:
room for the worst factor measured, for traces heavier per byte, and for the rest of the machine.
"""

from __future__ import annotations

import os
from pathlib import Path

# Bytes of memory allowed per inflated byte of trace: the default limit is memory / this.
MEMORY_PER_TRACE_BYTE = 2.0
# Where the memory cannot be read (no sysconf, no /proc): the limit it had before.
FALLBACK_MAX_BYTES = 16 << 30
_CGROUP_V2 = (Path("/sys/fs/cgroup"), "memory.max")
_CGROUP_V1 = (Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes")


def default_max_bytes() -> tuple[int, str]:
    """The default limit on a trace's inflated size, in bytes, and why it is that (a clause for an
    error message)."""
    physical = _physical_memory()
    cgroup = _cgroup_memory_limit()
    if cgroup is not None and (physical is None or cgroup < physical):
        memory, what = cgroup, "the memory limit of this process's cgroup"
    elif physical is not None:
        memory, what = physical, "this machine's memory"
    else:
        return FALLBACK_MAX_BYTES, "the default limit (this machine's memory is unknown)"
    why = (
        f"the default limit is half of {what} ({memory / 2**30:.3g} GiB): analysing a trace takes up to "
        "about twice its inflated size in memory"
    )
    return int(memory / MEMORY_PER_TRACE_BYTE), why


def _physical_memory() -> int | None:
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):  # no sysconf (Windows), or not these names
        return None
    return pages * page if pages > 0 and page > 0 else None


def _cgroup_memory_limit() -> int | None:
    """The lowest memory limit set on this process's cgroup or its ancestors (Linux; cgroup v2
    ``memory.max``, v1 ``memory.limit_in_bytes``), None if there is none. A container's limit is
    usually far below the host's memory, which is what sysconf reports inside it."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    limits: list[int] = []
    for line in lines:  # "hierarchy-id:controllers:path"; v2's line is "0::path"
        _, controllers, where = line.split(":", 2) if line.count(":") >= 2 else ("", "-", "")
        if controllers == "":
            limits += _limits_up(*_CGROUP_V2, where)
        elif "memory" in controllers.split(","):
            limits += _limits_up(*_CGROUP_V1, where)
    return min(limits, default=None)


def _limits_up(root: Path, name: str, where: str) -> list[int]:
    """The limits in file ``name`` of cgroup ``where`` and its ancestors up to ``root`` ("max", and
    v1's near-2**63 "unlimited", are no limit worth reading)."""
    if ".." in Path(where).parts:  # a cgroup outside this namespace's root: not under ``root`` here
        return []
    leaf = root / where.lstrip("/")
    limits = []
    for folder in (leaf, *leaf.parents):
        if folder != root and root not in folder.parents:
            break
        try:
            text = (folder / name).read_text().strip()
        except OSError:
            continue  # not mounted there, or no limit file at the root
        if text.isdigit() and int(text) < 1 << 60:
            limits.append(int(text))
    return limits
