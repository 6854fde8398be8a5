"""Every key the loader reads, in every category, given each hostile kind of value.

From one small real trace (plus a few hand-written events of the categories it lacks), each test
writes a copy where every key of one category holds one hostile value (each key on its own copy
of the category's first event) and runs the real command line in-process with both decoders
(``TRACEADVISOR_NATIVE=1`` and ``=0``). The trace must be analysed (exit 0) with only warning
lines, and each value that is damage for its key must be named in a warning (the category or its
table, and the key); a value that is a valid reading of its key (a negative id, the string "NaN"
where Kineto writes non-finite numbers as strings, a big measure) must not be. Never an internal
error, and both decoders must warn alike.
"""

from __future__ import annotations

import copy
import gzip
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from traceadvisor import cli
from traceadvisor.trace import native
from traceadvisor.trace.columns import FAMILY

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "fixtures" / "traces" / "pair_pinned_after.json.gz"

# The hostile kinds of value.
KINDS: dict[str, Any] = {
    "list": [1, 2],
    "object": {"x": 1},
    "huge int": 2**70,
    "NaN string": "NaN",
    "bool": True,
    "negative": -5,
}

W, C = "warn", "clean"
# What each kind is for each type of key (schema.py): damage (a warning naming the key) or a valid
# reading (no warning about it). A time that cannot be read drops the event, with a warning; a
# negative duration is set to 0, with a warning. Strings are valid in number slots (Kineto writes
# "inf", "N/A", hex streams and marker pids there: format doc §1.3, §3.1).
EXPECT: dict[str, dict[str, str]] = {
    #          list  object  huge int  NaN string  bool  negative
    "id": dict(zip(KINDS, (W, W, W, C, W, C), strict=True)),
    "number": dict(zip(KINDS, (W, W, C, C, W, C), strict=True)),
    "ts": dict(zip(KINDS, (W, W, W, W, W, C), strict=True)),
    "dur": dict(zip(KINDS, (W, W, W, W, W, W), strict=True)),
    "text": dict(zip(KINDS, (W, W, W, C, W, W), strict=True)),
    "flag": dict(zip(KINDS, (W, W, W, W, C, W), strict=True)),
    "dim3": dict(zip(KINDS, (W, W, W, C, W, W), strict=True)),
    "args": dict(zip(KINDS, (W, C, W, W, W, W), strict=True)),
}
# Input Dims, Input type, Concrete Inputs are kept as raw JSON for the roofline, which models only
# the ops whose shapes it can read: any value must load and analyse (exit 0, warnings only).
RAW = "raw"

TYPES: dict[str, str] = {
    **dict.fromkeys(["ph", "cat", "name", "Collective name", "dtype", "Process Group Name"], "text"),
    **dict.fromkeys(["Process Group Ranks", "labels", "args.name"], "text"),
    **dict.fromkeys(["ts"], "ts"),
    **dict.fromkeys(["dur"], "dur"),
    **dict.fromkeys(["finished"], "flag"),
    **dict.fromkeys(["args"], "args"),
    **dict.fromkeys(["grid", "block"], "dim3"),
    **dict.fromkeys(["Input Dims", "Input type", "Concrete Inputs"], RAW),
    **dict.fromkeys(
        [
            "registers per thread", "shared memory", "blocks per SM", "warps per SM",
            "est. achieved occupancy %", "bytes", "Bytes", "Total Allocated", "Total Reserved",
            "In msg nelems", "Out msg nelems",
        ],
        "number",
    ),
    **dict.fromkeys(
        [
            "pid", "tid", "id", "External id", "correlation", "stream", "device", "cbid",
            "Sequence number", "Fwd thread id", "Record function id", "graph id", "Python id",
            "Python parent id", "Python module id", "wait_on_stream",
            "wait_on_cuda_event_record_corr_id", "Device Type", "Device Id", "Group size", "Seq",
        ],
        "id",
    ),
}  # fmt: skip

TOP = {"ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args"}
TIMED = ["ph", "cat", "name", "pid", "tid", "ts", "dur"]
IDS = ["External id", "correlation"]


@dataclass(frozen=True)
class Target:
    """The first event of ``category`` (and of ``name``, if given) and the keys read from it."""

    category: str
    keys: list[str]
    name: str | None = None

    @property
    def id(self) -> str:
        return self.category if self.name is None else f"{self.category}:{self.name}"


TARGETS = [
    Target("cpu_op", [*TIMED, "args", "External id", "Sequence number", "Fwd thread id", "Record function id",
                      "finished", "Input Dims", "Input type", "Concrete Inputs"]),
    Target("cpu_op", ["Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                      "Process Group Name", "Process Group Ranks", "Seq"], name="record_param_comms"),
    Target("user_annotation", [*TIMED, "External id", "Record function id"]),
    Target("python_function", [*TIMED, "Python id", "Python parent id", "Python module id"]),
    Target("cuda_runtime", [*TIMED, *IDS, "cbid", "stream"]),
    Target("cuda_driver", [*TIMED, *IDS, "cbid"]),
    Target("kernel", [*TIMED, *IDS, "device", "stream", "grid", "block", "registers per thread", "shared memory",
                      "blocks per SM", "warps per SM", "est. achieved occupancy %", "graph id"]),
    Target("gpu_memcpy", [*TIMED, *IDS, "device", "stream", "bytes"]),
    Target("gpu_memset", [*TIMED, "correlation", "device", "stream", "bytes"]),
    Target("gpu_user_annotation", [*TIMED, "External id"]),
    Target("cuda_sync", [*TIMED, *IDS, "device", "stream", "wait_on_stream", "wait_on_cuda_event_record_corr_id"]),
    Target("cpu_instant_event", ["ph", "pid", "tid", "ts", "Bytes", "Total Allocated", "Total Reserved",
                                 "Device Type", "Device Id"]),
    Target("overhead", TIMED),
    Target("fwdbwd", ["ph", "cat", "pid", "tid", "ts", "id"]),
    Target("Trace", ["ph", "name", "ts", "dur"]),  # a category the loader does not know
    Target("metadata", ["pid", "tid", "labels"], name="process_labels"),
    Target("metadata", ["args.name"], name="thread_name"),
]  # fmt: skip


def _extra_events(t: float) -> list[dict[str, Any]]:
    """Events of the categories the base trace lacks, in Kineto's layout (format doc §4)."""
    return [
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": t + 1, "dur": 1.5,
         "args": {"device": 0, "context": 1, "stream": 7, "correlation": 9001, "bytes": 4096}},
        {"ph": "s", "id": 77, "pid": 428, "tid": 428, "ts": t, "cat": "fwdbwd", "name": "fwdbwd"},
        {"ph": "f", "id": 77, "pid": 428, "tid": 428, "ts": t + 5, "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 428, "tid": 428, "ts": t,
         "args": {"Total Reserved": 2097152, "Total Allocated": 1024, "Bytes": 512, "Addr": 1234,
                  "Device Type": 1, "Device Id": 0}},
        {"ph": "X", "cat": "overhead", "name": "Instrumentation", "pid": -1, "tid": 0, "ts": t, "dur": 2.0},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 428, "tid": 428, "ts": t, "dur": 3.0,
         "args": {"External id": 9100, "Record function id": 0, "Collective name": "allreduce",
                  "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2, "dtype": "Float",
                  "Process Group Name": "0", "Process Group Ranks": "[0, 1]", "Seq": 1}},
    ]  # fmt: skip


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(BASE.read_bytes()))
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    doc["traceEvents"].extend(_extra_events(kernel["ts"]))
    return doc


def _category(event: dict[str, Any]) -> str:
    return "metadata" if event.get("ph") == "M" else str(event.get("cat"))


def damaged(doc: dict[str, Any], target: Target, value: Any) -> dict[str, Any]:
    """``doc`` with a copy of ``target``'s event after it for each of its keys, holding ``value``."""
    out = copy.deepcopy(doc)
    events = out["traceEvents"]
    at = next(
        i
        for i, e in enumerate(events)
        if _category(e) == target.category and (target.name is None or e.get("name") == target.name)
    )
    copies = []
    for key in target.keys:
        ev = copy.deepcopy(events[at])
        if key in TOP:
            ev[key] = value
        else:
            ev.setdefault("args", {})[key.removeprefix("args.")] = value
        copies.append(ev)
    events[at + 1 : at + 1] = copies
    return out


@dataclass
class Run:
    rc: int
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stderr.splitlines()


def run_cli(path: Path, decoder: str, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    monkeypatch.setenv("TRACEADVISOR_NATIVE", decoder)
    monkeypatch.setattr(sys, "argv", ["traceadvisor", "analyze", str(path), "--format", "json"])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    _, err = capfd.readouterr()
    code = exc.value.code
    return Run(code if isinstance(code, int) else 1, err.replace(str(path), "TRACE"))


def _names(target: Target, key: str) -> list[str]:
    """How a warning may name the category: itself (the tables' names list their categories:
    times are checked per table), "unknown-category" for one the loader does not know, and
    "uncategorised" for an event whose category is the damaged value."""
    if key == "cat":
        return ["uncategorised"]
    known = target.category in FAMILY or target.category == "metadata"
    return [target.category] if known else [target.category, "unknown-category"]


def test_the_base_trace_reads_cleanly_both_ways(
    base: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(base))
    if native.available():
        assert native.read_native(path, 1 << 30) is not None  # the native decoder reads it itself
    for decoder in ("1", "0"):
        run = run_cli(path, decoder, capfd, monkeypatch)
        assert run.rc == 0 and run.stderr == "", run.stderr
    present = {_category(e) for e in base["traceEvents"]}
    assert {t.category for t in TARGETS} <= present


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.id)
def test_hostile_values_are_salvaged_with_a_warning_naming_them(
    base: dict[str, Any],
    target: Target,
    kind: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(damaged(base, target, KINDS[kind])))
    runs = {decoder: run_cli(path, decoder, capfd, monkeypatch) for decoder in ("1", "0")}
    for decoder, run in runs.items():
        where = f"TRACEADVISOR_NATIVE={decoder}: {run.stderr}"
        assert run.rc == 0 and "internal error" not in run.stderr, where
        assert all(line.startswith("traceadvisor: warning: ") for line in run.lines), where
        for key in target.keys:
            kind_of_key = TYPES[key]
            if kind_of_key == RAW:
                continue
            quoted = f"'{key.removeprefix('args.')}'"
            mentions = [line for line in run.lines if quoted in line]
            if EXPECT[kind_of_key][kind] == W:
                assert any(any(n in line for n in _names(target, key)) for line in mentions), (key, where)
            else:
                assert not mentions, (key, where)
    assert runs["1"].stderr == runs["0"].stderr  # both decoders warn alike


def test_input_dims_with_a_product_beyond_int64_leave_the_op_out_of_the_roofline(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shapes whose element count does not fit int64 (2^80 here) are damage: the op is left out of
    the roofline with a warning naming it; the other ops are still placed."""
    src = ROOT / "fixtures" / "traces" / "planted_fp32_matmul.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("name") == "aten::mm"]
    ops[0]["args"]["Input Dims"] = [[2**40, 2**40], [2**40, 2**40]]
    path = tmp_path / "dims.json"
    path.write_text(json.dumps(doc))
    for decoder in ("1", "0"):
        monkeypatch.setenv("TRACEADVISOR_NATIVE", decoder)
        monkeypatch.setattr(sys, "argv", ["traceadvisor", "analyze", str(path), "--format", "json"])
        with pytest.raises(SystemExit) as exc:
            cli.main()
        out, err = capfd.readouterr()
        assert exc.value.code == 0, err
        assert err.count("\n") == 1 and "left out of the roofline" in err and "aten::mm" in err, err
        placed = json.loads(out)["traces"][0]["roofline"]
        assert placed and "aten::mm" in json.dumps(placed)  # the other matmuls are still on it
