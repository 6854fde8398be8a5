"""Source locations: the user's Python line behind an event, from the ``with_stack`` frames.

What a frame's name says. The profiler's Python tracer (torch/csrc/autograd/profiler_python.cpp)
names a frame ``file(line): function`` with ``PyFrame_GetLineNumber`` taken when it records the
frame: for a call made while tracing (``PyTrace_CALL``) that is the function's first line (its
``def``, or its first decorator); for the frames already on the stack when tracing starts (walked
once in ``PythonTracer::start``) it is the line each was executing then, e.g. the ``prof.step()``
that opened the window. Neither is the line inside the function that did the work. In the
fixtures: ``capture_gpu.py(505): step`` is ``def step():`` of the script as captured (commit
54957e7), and ``capture_gpu.py(193): capture`` is its ``prof.step()`` line.

Which frames are the user's. The tracer strips the longest ``sys.path`` or site-packages prefix
from each file name (``torch.profiler.python_tracer._prefix_regex``), so library files arrive as
``torchvision/models/resnet.py`` or ``threading.py``, without ``site-packages/``. A frame is
library code when its path says so by its segments: a known package or standard-library module as
the first segment of a relative path, a ``site-packages``/``dist-packages``/``lib/pythonX.Y``
folder, TorchInductor's generated code, or a pseudo-file (``<frozen os>``, ``<built-in ...>``,
``<string>``). A name only contained in a segment (``my_torch_utils.py``, ``torchy/train.py``) is
the user's.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.trace.lanes import ThreadLanes
from traceadvisor.trace.library_files import is_library_file

I64 = npt.NDArray[np.int64]

_FRAME_NAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")


def frame_locations(frames: pd.DataFrame) -> pd.DataFrame:
    """``file``, ``line``, ``function`` parsed from Python frame names, ``is_user`` (a frame of the
    user's code, with a line) and ``line_kind`` (what its line is)."""
    names = pd.Series(frames["name"].cat.categories)
    parts = names.str.extract(_FRAME_NAME)
    files = parts["file"]
    library = {f: is_library_file(f) for f in files.dropna().unique().tolist()}
    user = files.notna() & ~files.map(library).fillna(True).astype(bool)
    codes = frames["name"].cat.codes.to_numpy()
    at_start = _recorded_at_trace_start(frames)
    return pd.DataFrame(
        {
            "file": files.to_numpy(dtype=object)[codes],
            "line": pd.to_numeric(parts["line"], errors="coerce").to_numpy()[codes],
            "function": parts["func"].to_numpy(dtype=object)[codes],
            "is_user": user.to_numpy()[codes] & (codes >= 0),
            "line_kind": np.where(at_start, "trace_start", "function_start"),
        },
        index=frames.index,
    )


def _recorded_at_trace_start(frames: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """Frames that were already on the stack when the tracer started.

    ``PythonTracer::start`` records them (with the GIL held, for every thread) before it installs
    its profile function, so each comes before the first C-function call the tracer records
    (``<built-in ...>``: only ``PyTrace_C_CALL`` produces one) in its process. Without any C call
    recorded there is no boundary to draw, and no frame is taken for a start frame."""
    out = np.zeros(len(frames), dtype=bool)
    if not len(frames):
        return out
    names = frames["name"]
    c_call = np.asarray(names.cat.categories.astype(str).str.startswith("<built-in"), dtype=bool)
    codes = names.cat.codes.to_numpy()
    is_c = np.append(c_call, False)[codes]  # code -1 (no name): not a C call
    pid, ts = frames["pid"].to_numpy(), frames["ts_ns"].to_numpy()
    for p in np.unique(pid[is_c]).tolist():
        first_c = ts[is_c & (pid == p)].min()
        out |= (pid == p) & (ts < first_c)
    return out


def user_frames_at(
    locations: pd.DataFrame, user_lanes: ThreadLanes, pid: I64, tid: I64, ts: I64
) -> list[dict[str, Any] | None]:
    """The innermost user frame (``locations`` rows with ``is_user``, grouped in ``user_lanes``)
    active at each ``ts`` on its thread, as ``file``/``line``/``function``/``line_kind``; None where
    there is none."""
    out: list[dict[str, Any] | None] = [None] * len(ts)
    if not len(ts):
        return out
    rows = user_lanes.innermost(pid, tid, ts)
    for k in np.flatnonzero(rows >= 0).tolist():
        r = rows[k]
        out[k] = {
            "file": locations.at[r, "file"],
            "line": int(locations.at[r, "line"]),
            "function": locations.at[r, "function"],
            "line_kind": locations.at[r, "line_kind"],
        }
    return out
