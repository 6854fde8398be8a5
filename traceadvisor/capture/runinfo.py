"""The run folder: where traces go, which rank wrote them, and ``run.json`` describing the run.

Layout: ``cycle{C}/rank{R}.json.gz`` per profiler cycle (counted from 1) and rank, the same names
the in-loop advisor writes (``trace_path`` decides both), so ``traceadvisor analyze <run>/cycle{C}``
reads every rank of one cycle; ``window/rank{R}.json.gz`` for the time window of a program without
steps; and ``run.json`` (``run-rank{R}.json`` for ranks other than
0, so the ranks of one ``torchrun`` share the folder without overwriting each other). ``run.json``
is rewritten, atomically, whenever a trace lands, so a run killed later still describes what it
left.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import socket
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from traceadvisor.atomic import write_bytes
from traceadvisor.errors import UsageError

RUN_SCHEMA_VERSION = 1
RUNS_DIR = "traceadvisor-runs"


def env_rank() -> tuple[int | None, int | None, int | None]:
    """``(rank, world_size, local_rank)`` from the launcher's environment (torchrun, SLURM via torchrun)."""
    return _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK")


def current_rank() -> int:
    """This process's rank: ``torch.distributed`` once initialised, else ``RANK``/``LOCAL_RANK``, else 0."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    rank, _, local = env_rank()
    return rank if rank is not None else (local if local is not None else 0)


def under_launcher() -> bool:
    """True under torchrun (or another launcher that sets the rank environment)."""
    return any(v is not None for v in env_rank())


def run_file_name(rank: int) -> str:
    return "run.json" if rank == 0 else f"run-rank{rank}.json"


def trace_path(rank: int, kind: str = "cycle", cycle: int | None = None) -> PurePosixPath:
    """Where a trace goes, relative to the run folder (capture) or the output folder (the advisor):
    ``cycle{C}/rank{R}.json.gz`` for profiling cycle ``cycle`` (the first is 1) of rank ``rank``,
    ``window/rank{R}.json.gz`` for capture's time window (``kind="window"``, no cycle). One folder
    per cycle holds that cycle's ranks: analysing the folder analyses the cycle across ranks."""
    if kind == "cycle":
        if cycle is None or cycle < 1:
            raise ValueError(f"cycles are counted from 1, not {cycle}")
        return PurePosixPath(f"cycle{cycle}", f"rank{rank}.json.gz")
    if kind == "window" and cycle is None:
        return PurePosixPath("window", f"rank{rank}.json.gz")
    raise ValueError(f"no trace path for kind {kind!r}, cycle {cycle}")


def rank_traces(folder: Path, rank: int) -> list[Path]:
    """The traces ``rank`` left in ``folder`` (any cycle, or the window), by ``trace_path``'s layout."""
    return sorted(folder.glob(f"*/rank{rank}.json.gz"))


def default_run_dir(label: str, now: dt.datetime | None = None) -> Path:
    """``./traceadvisor-runs/<label>-<YYYYmmdd-HHMMSS>``.

    Under torchrun every rank must pick the same folder, so the time is the launcher's start time
    (the ranks' common parent process, read from /proc) rather than each rank's own clock.
    """
    stamp = None
    if under_launcher():
        stamp = _parent_start_time()
    when = stamp or now or dt.datetime.now()
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("._") or "run"
    base = Path(RUNS_DIR) / f"{safe}-{when.strftime('%Y%m%d-%H%M%S')}"
    if stamp is not None:
        return base
    candidate, n = base, 2
    while candidate.exists():  # two runs in one second
        candidate, n = base.with_name(f"{base.name}-{n}"), n + 1
    return candidate


def prepare_run_dir(path: Path, rank: int, overwrite: bool) -> None:
    """Create the folder; refuse to mix this run's traces with an earlier run's (unless ``overwrite``)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        previous = [path / run_file_name(rank), *rank_traces(path, rank)]
        previous = [p for p in previous if p.exists()]
        if previous and not overwrite:
            raise UsageError(f"{path}: already holds a capture of rank {rank}; use another --out or --overwrite")
        for p in previous:
            p.unlink()
        probe = path / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the run folder ({exc.strerror or exc})") from None


class RunRecord:
    """``run.json``: what ran, with which versions and settings, what it left, how it ended."""

    def __init__(self, folder: Path, rank: int, data: dict[str, Any]) -> None:
        self.folder = folder
        self.rank = rank
        self.data: dict[str, Any] = {
            "schema_version": RUN_SCHEMA_VERSION,
            **data,
            "files": [],
            "exit": {"status": "running", "code": None, "exception": None},
            "warnings": [],
        }

    @property
    def path(self) -> Path:
        return self.folder / run_file_name(self.rank)

    def add_file(self, entry: dict[str, Any]) -> None:
        self.data["files"].append(entry)
        self.write()

    def warn(self, message: str) -> None:
        if message not in self.data["warnings"]:
            self.data["warnings"].append(message)

    def write(self) -> None:
        self.data["updated_at"] = now_iso()
        write_bytes(self.path, (json.dumps(self.data, indent=2, default=str) + "\n").encode())


def describe_run(command: list[str], target: dict[str, Any]) -> dict[str, Any]:
    """The parts of ``run.json`` known before the program starts."""
    rank, world, local = env_rank()
    return {
        "command": command,
        "target": target,
        "cwd": str(Path.cwd()),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started_at": now_iso(),
        "rank": rank if rank is not None else 0,
        "world_size": world if world is not None else 1,
        "local_rank": local,
    }


def versions() -> dict[str, str | None]:
    """Versions of python, torch, CUDA/ROCm, cuDNN, triton and traceadvisor, without importing triton."""
    import torch

    from traceadvisor import __version__

    cudnn = None
    backend: Any = torch.backends.cudnn
    try:
        if backend.is_available():
            cudnn = str(backend.version())
    except Exception:
        pass
    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "cudnn": cudnn,
        "triton": _dist_version("triton") or _dist_version("pytorch-triton"),
        "traceadvisor": __version__,
    }


def devices() -> list[dict[str, Any]]:
    """The GPUs the program used.

    Queried only once the program has initialised CUDA itself: initialising it here, before the
    program runs, would create a context on GPU 0 in every rank and ignore a
    ``CUDA_VISIBLE_DEVICES`` the program sets at start-up.
    """
    import torch

    cuda: Any = torch.cuda
    if not cuda.is_available() or not cuda.is_initialized():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(
            {
                "index": i,
                "name": p.name,
                "compute_capability": f"{p.major}.{p.minor}",
                "memory_bytes": int(p.total_memory),
                "sm_count": int(p.multi_processor_count),
            }
        )
    return out


def now_iso() -> str:
    """The local time with its offset, to the millisecond."""
    return dt.datetime.now().astimezone().isoformat(timespec="milliseconds")


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else None


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _parent_start_time() -> dt.datetime | None:
    """Start time of the parent process (the torchrun agent) on Linux; None elsewhere."""
    try:
        stat = Path(f"/proc/{os.getppid()}/stat").read_text()
        # Field 22 (starttime, clock ticks since boot) follows the parenthesised command name.
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
        boot = next(
            int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        )
        return dt.datetime.fromtimestamp(boot + ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
