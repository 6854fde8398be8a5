"""The shape of one Kineto trace event, as msgspec decodes it.

Only the keys the analysis reads are declared: msgspec skips every other key without building
Python objects for it, which is what makes the loader faster than a generic ``json.loads``.
Fields are typed ``Any`` where real traces put strings in numeric slots (``"inf"``, ``"N/A"``,
ROCm's hex ``"0x0"`` streams, format doc §1.3); ``columns.py`` coerces them. Shapes and types of
operator inputs stay ``msgspec.Raw`` (unparsed bytes) until a rule asks for them.
"""

from __future__ import annotations

from typing import Any

import msgspec

NULL = msgspec.Raw(b"null")


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys of every category that the trace model uses (format doc §4)."""

    external_id: Any = msgspec.field(name="External id", default=None)
    external_id_lower: Any = msgspec.field(name="external id", default=None)
    correlation: Any = None
    stream: Any = None
    device: Any = None
    cbid: Any = None
    cid: Any = None
    kernel: Any = None
    # kernels
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(name="registers per thread", default=None)
    shared_memory: Any = msgspec.field(name="shared memory", default=None)
    blocks_per_sm: Any = msgspec.field(name="blocks per SM", default=None)
    warps_per_sm: Any = msgspec.field(name="warps per SM", default=None)
    occupancy: Any = msgspec.field(name="est. achieved occupancy %", default=None)
    graph_id: Any = msgspec.field(name="graph id", default=None)
    queued: Any = None
    # copies
    bytes: Any = None
    size: Any = None
    kind: Any = None
    bandwidth: Any = msgspec.field(name="memory bandwidth (GB/s)", default=None)
    # cpu ops
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=NULL)
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=NULL)
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=NULL)
    sequence_number: Any = msgspec.field(name="Sequence number", default=None)
    fwd_thread_id: Any = msgspec.field(name="Fwd thread id", default=None)
    record_function_id: Any = msgspec.field(name="Record function id", default=None)
    finished: Any = None
    kernel_backend: Any = None
    kernel_file: Any = None
    # python frames
    python_id: Any = msgspec.field(name="Python id", default=None)
    python_parent_id: Any = msgspec.field(name="Python parent id", default=None)
    python_module_id: Any = msgspec.field(name="Python module id", default=None)
    # cuda_sync
    sync_kind: Any = msgspec.field(name="cuda_sync_kind", default=None)
    wait_on_stream: Any = None
    wait_on_event_corr: Any = msgspec.field(name="wait_on_cuda_event_record_corr_id", default=None)
    # memory instants
    mem_bytes: Any = msgspec.field(name="Bytes", default=None)
    total_allocated: Any = msgspec.field(name="Total Allocated", default=None)
    total_reserved: Any = msgspec.field(name="Total Reserved", default=None)
    device_type: Any = msgspec.field(name="Device Type", default=None)
    device_id: Any = msgspec.field(name="Device Id", default=None)
    # collectives (record_param_comms and NCCL kernels, §4.9)
    collective_name: Any = msgspec.field(name="Collective name", default=None)
    in_msg_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_msg_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    group_size: Any = msgspec.field(name="Group size", default=None)
    dtype: Any = None
    pg_name: Any = msgspec.field(name="Process Group Name", default=None)
    pg_name_old: Any = msgspec.field(name="Process Group ID", default=None)
    pg_ranks: Any = msgspec.field(name="Process Group Ranks", default=None)
    seq: Any = msgspec.field(name="Seq", default=None)
    # metadata events (ph "M")
    name: Any = None
    labels: Any = None
    sort_index: Any = None


class Event(msgspec.Struct, gc=False):
    """One element of ``traceEvents``."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: Args | None = None


EVENT_LIST = list[Event]
