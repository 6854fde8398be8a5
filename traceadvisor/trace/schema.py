"""The shape of one Kineto trace event, as msgspec decodes it.

Only the keys the analysis reads are declared: msgspec skips every other key without building
Python objects for it, which is what makes the loader faster than a generic ``json.loads``.

Each key the column builders read is typed with the JSON types real traces put there, so msgspec
checks every value at C speed while it decodes. Numbers may be strings (``"inf"``, ``"N/A"``,
ROCm's hex ``"0x0"`` streams, marker pids such as ``"Spans"``: format doc §1.3, §3.1), which
``columns.py`` coerces. A list, an object or a boolean where a number or a name belongs, or an id
beyond int64, is damage: the reader drops that one value and says so in a warning
(``reader._coerce_event``); it never reaches a column. The native decoder (``_kineto.c``,
``types_ok``) accepts exactly these types and refuses a file with any other, so that this path
reads it and warns. Shapes and types of operator inputs stay ``msgspec.Raw`` (unparsed bytes)
until a rule asks for them; keys typed ``Any`` are not read by any column builder.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

NULL = msgspec.Raw(b"null")

# An id (pid, tid, correlation, stream...): an int64, a float that truncates into one (as
# columns._int reads it), or a string (hex streams, marker pids); null or absent is missing.
Id = (
    Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
    | Annotated[float, msgspec.Meta(gt=-9.0e18, lt=9.0e18)]
    | str
    | None
)
# A time or a measure: any number, or a string ("inf", "N/A", "2560").
Number = int | float | str | None
Text = str | None
Flag = bool | None
# grid/block: [x, y, z]; a string on the CPU ops that record Triton launches ("(16, 64, 1)").
Dim3 = tuple[Id, Id, Id] | str | None


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys of every category that the trace model uses (format doc §4)."""

    external_id: Id = msgspec.field(name="External id", default=None)
    external_id_lower: Id = msgspec.field(name="external id", default=None)
    correlation: Id = None
    stream: Id = None
    device: Id = None
    cbid: Id = None
    cid: Id = None
    kernel: Any = None
    # kernels
    grid: Dim3 = None
    block: Dim3 = None
    registers: Number = msgspec.field(name="registers per thread", default=None)
    shared_memory: Number = msgspec.field(name="shared memory", default=None)
    blocks_per_sm: Number = msgspec.field(name="blocks per SM", default=None)
    warps_per_sm: Number = msgspec.field(name="warps per SM", default=None)
    occupancy: Number = msgspec.field(name="est. achieved occupancy %", default=None)
    graph_id: Id = msgspec.field(name="graph id", default=None)
    queued: Any = None
    # copies
    bytes: Number = None
    size: Number = None
    kind: Any = None
    bandwidth: Any = msgspec.field(name="memory bandwidth (GB/s)", default=None)
    # cpu ops
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=NULL)
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=NULL)
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=NULL)
    sequence_number: Id = msgspec.field(name="Sequence number", default=None)
    fwd_thread_id: Id = msgspec.field(name="Fwd thread id", default=None)
    record_function_id: Id = msgspec.field(name="Record function id", default=None)
    finished: Flag = None
    kernel_backend: Any = None
    kernel_file: Any = None
    # python frames
    python_id: Id = msgspec.field(name="Python id", default=None)
    python_parent_id: Id = msgspec.field(name="Python parent id", default=None)
    python_module_id: Id = msgspec.field(name="Python module id", default=None)
    # cuda_sync
    sync_kind: Any = msgspec.field(name="cuda_sync_kind", default=None)
    wait_on_stream: Id = None
    wait_on_event_corr: Id = msgspec.field(name="wait_on_cuda_event_record_corr_id", default=None)
    # memory instants
    mem_bytes: Number = msgspec.field(name="Bytes", default=None)
    total_allocated: Number = msgspec.field(name="Total Allocated", default=None)
    total_reserved: Number = msgspec.field(name="Total Reserved", default=None)
    device_type: Id = msgspec.field(name="Device Type", default=None)
    device_id: Id = msgspec.field(name="Device Id", default=None)
    # collectives (record_param_comms and NCCL kernels, §4.9)
    collective_name: Text = msgspec.field(name="Collective name", default=None)
    in_msg_nelems: Number = msgspec.field(name="In msg nelems", default=None)
    out_msg_nelems: Number = msgspec.field(name="Out msg nelems", default=None)
    group_size: Id = msgspec.field(name="Group size", default=None)
    dtype: Text = None
    pg_name: Text = msgspec.field(name="Process Group Name", default=None)
    pg_name_old: Text = msgspec.field(name="Process Group ID", default=None)
    pg_ranks: Text = msgspec.field(name="Process Group Ranks", default=None)
    seq: Id = msgspec.field(name="Seq", default=None)
    # metadata events (ph "M")
    name: Text = None
    labels: Text = None
    sort_index: Any = None


class Event(msgspec.Struct, gc=False):
    """One element of ``traceEvents``."""

    ph: Text = None
    cat: Text = None
    name: Text = None
    pid: Id = None
    tid: Id = None
    ts: Number = None
    dur: Number = None
    id: Id = None
    args: Args | None = None


EVENT_LIST = list[Event]
