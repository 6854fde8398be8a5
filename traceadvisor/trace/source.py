"""Source locations: the user's Python line behind an event, from the ``with_stack`` frames."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from traceadvisor.trace.lanes import ThreadLanes

I64 = npt.NDArray[np.int64]

_FRAME_NAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")
# Frames from these locations are library code; the first frame outside them is the user's line.
_LIBRARY_PARTS = ("site-packages/", "dist-packages/", "torch/", "<built-in", "threading.py", "runpy.py")


def frame_locations(frames: pd.DataFrame) -> pd.DataFrame:
    """``file``, ``line``, ``function`` parsed from Python frame names, and ``is_user``."""
    names = pd.Series(frames["name"].cat.categories)
    parts = names.str.extract(_FRAME_NAME)
    user = parts["file"].notna() & ~parts["file"].fillna("").str.contains(
        "|".join(re.escape(p) for p in _LIBRARY_PARTS)
    )
    codes = frames["name"].cat.codes.to_numpy()
    return pd.DataFrame(
        {
            "file": parts["file"].to_numpy(dtype=object)[codes],
            "line": pd.to_numeric(parts["line"], errors="coerce").to_numpy()[codes],
            "function": parts["func"].to_numpy(dtype=object)[codes],
            "is_user": user.to_numpy()[codes],
        },
        index=frames.index,
    )


def user_frames_at(
    locations: pd.DataFrame, user_lanes: ThreadLanes, pid: I64, tid: I64, ts: I64
) -> list[dict[str, Any] | None]:
    """The innermost user frame (``locations`` rows with ``is_user``, grouped in ``user_lanes``)
    active at each ``ts`` on its thread, as ``file``/``line``/``function``; None where there is none."""
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
        }
    return out
