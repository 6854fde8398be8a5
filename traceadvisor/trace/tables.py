"""The table schema: the columns of each event table, in order, with their dtypes.

(Moved out of ``model.py`` unchanged; issue 11 makes this the one declaration that the empty
tables, ``columns.py``'s builders and the C decoder are checked against.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

EMPTY_TABLE_COLUMNS: dict[str, list[str]] = {
    "host": [
        "ts_ns",
        "dur_ns",
        "end_ns",
        "name",
        "is_annotation",
        "pid",
        "tid",
        "ext_id",
        "seq_nr",
        "fwd_tid",
        "rf_id",
        "unfinished",
        "input_dims",
        "input_types",
        "concrete_inputs",
    ],
    "frames": ["ts_ns", "dur_ns", "end_ns", "name", "pid", "tid", "py_id", "py_parent", "module_id"],
    "runtime": [
        "ts_ns",
        "dur_ns",
        "end_ns",
        "name",
        "is_driver",
        "pid",
        "tid",
        "correlation",
        "ext_id",
        "cbid",
        "stream_arg",
    ],
    "gpu": [
        "ts_ns",
        "dur_ns",
        "end_ns",
        "name",
        "kind",
        "device",
        "stream",
        "correlation",
        "ext_id",
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "registers",
        "shared_mem",
        "blocks_per_sm",
        "warps_per_sm",
        "occupancy_pct",
        "graph_id",
        "bytes",
    ],
    "gpu_annotations": ["ts_ns", "dur_ns", "end_ns", "name", "device", "stream", "ext_id"],
    "syncs": [
        "ts_ns",
        "dur_ns",
        "end_ns",
        "name",
        "device",
        "stream",
        "correlation",
        "ext_id",
        "wait_on_stream",
        "wait_on_event_corr",
    ],
    "memory": ["ts_ns", "name", "pid", "tid", "bytes", "total_allocated", "total_reserved", "device_type", "device_id"],
    "collectives": [
        "ts_ns",
        "dur_ns",
        "end_ns",
        "on_gpu",
        "pid",
        "tid",
        "correlation",
        "ext_id",
        "collective",
        "in_nelems",
        "out_nelems",
        "dtype",
        "group_size",
        "pg_name",
        "pg_ranks",
        "seq",
    ],
    "flows": ["ts_ns", "is_start", "is_fwdbwd", "flow_id", "pid", "tid"],
    "overhead": ["ts_ns", "dur_ns", "end_ns", "name"],
    "other": ["ts_ns", "dur_ns", "end_ns", "name", "category"],
}

_INT_COLUMNS = {
    "ts_ns",
    "dur_ns",
    "end_ns",
    "pid",
    "tid",
    "ext_id",
    "seq_nr",
    "fwd_tid",
    "rf_id",
    "py_id",
    "py_parent",
    "module_id",
    "correlation",
    "cbid",
    "stream_arg",
    "device",
    "stream",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "graph_id",
    "wait_on_stream",
    "wait_on_event_corr",
    "device_type",
    "device_id",
    "flow_id",
    "group_size",
    "seq",
}


def empty_table(family: str) -> pd.DataFrame:
    cols = EMPTY_TABLE_COLUMNS[family]
    data: dict[str, Any] = {}
    for c in cols:
        if c in _INT_COLUMNS:
            data[c] = np.empty(0, np.int64)
        elif c in ("is_annotation", "unfinished", "is_driver", "on_gpu", "is_start", "is_fwdbwd"):
            data[c] = np.empty(0, bool)
        elif c == "kind":
            data[c] = np.empty(0, np.int8)
        elif c == "name":
            data[c] = pd.Categorical([])
        elif c in (
            "input_dims",
            "input_types",
            "concrete_inputs",
            "collective",
            "dtype",
            "pg_name",
            "pg_ranks",
            "category",
        ):
            data[c] = np.empty(0, object)
        else:
            data[c] = np.empty(0, np.float64)
    return pd.DataFrame(data)
