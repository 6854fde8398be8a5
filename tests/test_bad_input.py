"""Bad input: a clear one-line error and exit 2, or, where the events before the damage can be
saved, warnings and an analysis of what was saved. Never a traceback, never a half-written report.

Every input is generated here from a small valid trace (or cut from a real one). The issue's list
runs through the real command line in subprocesses (in parallel, to keep the suite quick); more
hostile variants run through ``cli.main`` in-process, which is the same code path.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from traceadvisor import cli

STEPS, KERNELS_PER_STEP = 3, 8
KERNELS = STEPS * KERNELS_PER_STEP
VICTIM = "victim_kernel"  # the one kernel the damage cases break


# -- a small valid trace -----------------------------------------------------------------------------
def make_trace() -> dict[str, Any]:
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "thread 1 (python)"}},
    ]
    t = 4458676522690.655
    corr = 0
    for step in range(STEPS):
        start = t
        for k in range(KERNELS_PER_STEP):
            corr += 1
            name = VICTIM if (step, k) == (1, 3) else f"gemm_kernel_{k}"
            events += [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": round(t, 3), "dur": 20.0,
                 "args": {"External id": corr, "Input Dims": [[64, 64], [64, 64]]}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                 "ts": round(t + 1, 3), "dur": 5.0, "args": {"External id": corr, "correlation": corr, "cbid": 211}},
                {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": round(t + 10.125, 3),
                 "dur": 15.5, "args": {"External id": corr, "correlation": corr, "device": 0, "stream": 7,
                                       "grid": [64, 1, 1], "block": [256, 1, 1]}},
            ]  # fmt: skip
            t += 25.0
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
             "ts": round(start, 3), "dur": round(t - start, 3), "args": {"External id": 10_000 + step}}
        )  # fmt: skip
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "totalGlobalMem": 85_000_000_000,
                "computeMajor": 9,
                "computeMinor": 0,
                "numSms": 132,
            }
        ],
        "traceEvents": events,
        "distributedInfo": {"backend": "nccl", "rank": 5, "world_size": 8},
        "traceName": "/tmp/tmpabc.json",
        "baseTimeNanoseconds": 1711964646000000000,
    }


def render(doc: Any, victim: Callable[[str], str] | None = None) -> bytes:
    """The trace as JSON text; ``victim`` rewrites the text of the victim kernel's event."""
    if victim is None or not isinstance(doc, dict):
        return json.dumps(doc).encode()
    parts = []
    for e in doc["traceEvents"]:
        text = json.dumps(e)
        parts.append(victim(text) if e.get("name") == VICTIM else text)
    head = json.dumps({k: v for k, v in doc.items() if k != "traceEvents"})[:-1]
    return (head + ', "traceEvents": [' + ", ".join(parts) + "]}").encode("utf-8", "surrogateescape")


def sub(old: str, new: str) -> Callable[[str], str]:
    def fix(text: str) -> str:
        assert old in text, (old, text)
        return text.replace(old, new, 1)

    return fix


def gzip_bomb(prefix: bytes, fill: bytes, inflated_gib: float) -> bytes:
    """A valid-looking gzip of ``prefix`` and gigabytes of ``fill``, built in milliseconds.

    One 1 MiB block is deflated after a full flush, which resets the compressor, so its output
    can be repeated as is. The trailer's CRC is left 0: the reader must give up long before it.
    """
    block = fill * ((1 << 20) // len(fill))
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    piece = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    n = int(inflated_gib * 1024)
    last = zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # an empty final block
    size = len(prefix) + n * len(block)
    return head + piece * n + last + struct.pack("<II", 0, size & 0xFFFFFFFF)


# -- running the command line -----------------------------------------------------------------------
@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss_mb: float

    def report(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.stdout)
        return doc


# Runs the CLI as a child of a small wrapper whose only child it is, so that the wrapper's
# RUSAGE_CHILDREN peak is the CLI's own peak memory.
_WRAPPER = """
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True)
sys.stdout.buffer.write(p.stdout)
sys.stderr.buffer.write(p.stderr)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
sys.stderr.buffer.write(b"\\n@peak_kb=%d@rc=%d" % (peak, p.returncode))
"""


def run_cli(*args: str, timeout: float = 120) -> Run:
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "traceadvisor", "analyze", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    seconds = time.monotonic() - t0
    stderr, _, tail = p.stderr.rpartition("\n@peak_kb=")
    peak, _, rc = tail.partition("@rc=")
    return Run(int(rc), p.stdout, stderr, seconds, int(peak) / 1024)


def assert_error(run: Run, *fragments: str) -> None:
    """Exit 2, exactly one line on stderr, ``traceadvisor: error:``, nothing on stdout."""
    assert "Traceback" not in run.stderr and "Traceback" not in run.stdout, run.stderr
    assert run.rc == 2, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and run.stderr.endswith("\n"), run.stderr
    assert lines[0].startswith("traceadvisor: error: "), run.stderr
    assert run.stdout == ""
    for fragment in fragments:
        assert fragment.lower() in lines[0].lower(), (fragment, lines[0])


def assert_salvaged(run: Run, *fragments: str, warn: bool = True) -> dict[str, Any]:
    """Exit 0, only warning lines on stderr, and a JSON report of what was read."""
    assert "Traceback" not in run.stderr and "Traceback" not in run.stdout, run.stderr
    assert run.rc == 0, run.stderr
    lines = run.stderr.splitlines()
    assert all(line.startswith("traceadvisor: warning: ") for line in lines), run.stderr
    assert bool(lines) == warn, run.stderr
    for fragment in fragments:
        assert fragment.lower() in run.stderr.lower(), (fragment, run.stderr)
    trace: dict[str, Any] = run.report()["traces"][0]
    return trace


# -- the inputs -------------------------------------------------------------------------------------
@dataclass
class Inputs:
    args: dict[str, list[str]]  # case -> CLI arguments
    nccl_kernels: int  # kernel count of the whole real trace the cut cases come from


def build_cases(tmp: Path, external: Path) -> dict[str, list[str]]:
    """Write every input; return case name -> CLI arguments."""
    doc = make_trace()
    good = render(doc)
    gz = (external / "hta" / "nccl_data.json.gz").read_bytes()
    nccl = gzip.decompress(gz)
    events_at = nccl.index(b'"traceEvents"')
    cases: dict[str, list[str]] = {}

    def put(name: str, data: bytes, *extra: str, suffix: str = ".json") -> None:
        path = tmp / f"{name}{suffix}"
        path.write_bytes(data)
        cases[name] = [str(path), "--format", "json", *extra]

    def damaged(old: str, new: str) -> bytes:
        return render(doc, sub(old, new))

    put("good", good)
    # not a trace at all
    put("empty", b"")
    put("blank", b" \n\t\r\n  ")
    put("bom_only", b"\xef\xbb\xbf")
    put("not_json", b"Hello, this is a text file, not a trace.\n")
    put("binary", b"\x00\x17" + random.Random(0).randbytes(4096))
    put("nul_bytes", bytes(1000))
    put("utf16", good.decode().encode("utf-16"))
    put("zstd", b"\x28\xb5\x2f\xfd" + bytes(100))
    put("top_level_number", b"42")
    put("top_level_string", b'"a trace"')
    # JSON without traceEvents, or with it not a list, or without usable events
    put("no_trace_events", json.dumps({"schemaVersion": 1, "deviceProperties": []}).encode())
    put("trace_events_object", json.dumps({"traceEvents": {"ph": "X"}}).encode())
    put("trace_events_string", json.dumps({"schemaVersion": 1, "traceEvents": "[]"}).encode())
    put("trace_events_null", b'{"traceEvents": null}')
    put("no_events", b'{"traceEvents": []}')
    put("array_of_numbers", b"[1, 2, 3]")
    put("only_metadata", b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 0, "args": {}}]}')
    # gzip damage
    put("corrupt_gzip", b"\x1f\x8b\x08\x00" + random.Random(1).randbytes(2000), suffix=".json.gz")
    put("gzip_header_only", gz[:12], suffix=".json.gz")
    put("gzip_of_gzip", gzip.compress(gzip.compress(good)), suffix=".json.gz")
    put("gzip_empty", gzip.compress(b""), suffix=".json.gz")
    crc_bad = gzip.compress(good)
    put("gzip_crc_mismatch", crc_bad[:-8] + bytes(4) + crc_bad[-4:], suffix=".json.gz")
    # nesting too deep to be a trace
    put("deep_top_level", b"[" * 100_000 + b"]" * 100_000)
    put("deep_head", b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b", " + good[1:])
    # a real trace cut off before its events
    put("cut_in_head", nccl[:1000])
    put("cut_after_array_open", nccl[: nccl.index(b"[", events_at) + 1])
    # paths and options
    (tmp / "empty_dir").mkdir()
    (tmp / "empty_dir" / "notes.txt").write_text("no traces here")
    (tmp / "empty_dir" / "sub.json").mkdir()  # a directory with a trace-like name is not a trace
    cases["empty_dir"] = [str(tmp / "empty_dir")]
    cases["missing_path"] = [str(tmp / "does_not_exist.json")]
    cases["max_size_tiny"] = [str(tmp / "good.json"), "--max-size", "0.000001"]
    cases["max_size_zero"] = [str(tmp / "good.json"), "--max-size", "0"]
    cases["max_size_nan"] = [str(tmp / "good.json"), "--max-size", "nan"]

    # damage to one event of the small trace: salvaged
    put("nan_literal", damaged('"dur": 15.5', '"dur": NaN'))
    put("infinity_literal", damaged('"dur": 15.5', '"dur": Infinity'))
    put("negative_infinity", damaged('"dur": 15.5', '"dur": -Infinity'))
    put("ts_not_a_number", damaged('"ts": ', '"ts": "abc", "x": '))
    put("ts_absurd", damaged('"ts": ', '"ts": 1e308, "x": '))
    put("ts_out_of_range", damaged('"ts": ', '"ts": 1e400, "x": '))
    put("dur_negative", damaged('"dur": 15.5', '"dur": -5'))
    put("ts_missing", render(doc, lambda t: t.replace('"ts": ', '"not_ts": ')))
    put("args_not_object", damaged('"args": {', '"args": [1, 2], "old_args": {'))
    put("args_string", damaged('"args": {', '"args": "text", "old_args": {'))
    put("deep_args", damaged('"args": {', '"args": {"deep": ' + "[" * 100_000 + "]" * 100_000 + ", "))
    put("deep_object_args", damaged('"args": {', '"args": {"d": ' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + ", "))
    put("deep_unclosed_args", damaged('"args": {', '"args": {"d": ' + "[" * 50_000 + ", "))
    put("events_not_objects", good.replace(b'"traceEvents": [', b'"traceEvents": [1, "two", null, [], ', 1))
    put("unescaped_quote", damaged(VICTIM, 'victim "quoted" kernel'))
    put("control_char_in_name", damaged(VICTIM, "line\nbreak\ttab"))
    put("bad_utf8", damaged(VICTIM, "victim \udcff\udcfe kernel"))
    put("broken_syntax", damaged('"dur": 15.5', '"dur": 15.5 15.5'))
    put("trailing_garbage", good + b"\n\x00garbage after the trace")
    put("two_documents", good + good)
    put("gzip_trailing_garbage", gzip.compress(good) + b"not gzip", suffix=".json.gz")
    put("head_not_json", b'{"schemaVersion": 1, "x": tru, ' + good[1:])
    # valid but unusual: read without a warning
    put("bom", b"\xef\xbb\xbf" + good)
    put("legacy_array", json.dumps(doc["traceEvents"]).encode())
    put("unicode_names", damaged(VICTIM, "ядро ☃ 😀 \\u00e9"))
    put("lone_surrogate", damaged(VICTIM, "\\ud83d lone"))
    put("huge_string", damaged(VICTIM, "k" * (8 << 20)))
    put("name_is_object", damaged(f'"name": "{VICTIM}"', '"name": {"a": [1, 2]}'))
    put("cat_is_number", damaged('"cat": "kernel"', '"cat": 7'))  # not a kernel any more
    put("pid_huge", damaged('"pid": 0', '"pid": 1e300'))
    put("ids_huge", damaged('"correlation": ', '"correlation": 123456789012345678901234567890, "x": '))
    put("grid_garbage", damaged('"grid": [64, 1, 1]', '"grid": [{}, "a", null, 5]'))
    put("duplicate_keys", damaged('"dur": 15.5', '"dur": 15.5, "dur": 16.5'))
    put("gzip_concatenated", gzip.compress(good[:5000]) + gzip.compress(good[5000:]), suffix=".json.gz")

    # a real trace cut off mid-write, as a crash leaves it; and its gzip truncated
    for frac in (0.5, 0.8, 0.999):
        put(f"cut_{frac}", nccl[: events_at + int((len(nccl) - events_at) * frac)])
    put("cut_in_tail", nccl[: nccl.rindex(b'"traceName"') + 5])
    for frac in (0.6, 0.95):
        put(f"gzip_cut_{frac}", gz[: int(len(gz) * frac)], suffix=".json.gz")
    at = int(len(gz) * 0.8)
    put("gzip_corrupt_middle", gz[:at] + random.Random(2).randbytes(64) + gz[at + 64 :], suffix=".json.gz")
    return cases


# case -> fragments of the one error line
ERRORS = {
    "empty": ["empty"],
    "blank": ["blank"],
    "bom_only": ["empty"],
    "not_json": ["not a JSON trace", "Hello"],
    "binary": ["not a JSON trace"],
    "nul_bytes": ["not a JSON trace"],
    "utf16": ["UTF-16"],
    "zstd": ["zstd"],
    "top_level_number": ["not a JSON trace"],
    "top_level_string": ["not a JSON trace"],
    "no_trace_events": ["no traceEvents"],
    "trace_events_object": ["traceEvents is an object, not a list"],
    "trace_events_string": ["traceEvents is a string, not a list"],
    "trace_events_null": ["traceEvents is null"],
    "no_events": ["no usable events"],
    "array_of_numbers": ["no usable events"],
    "only_metadata": ["no usable events"],
    "corrupt_gzip": ["corrupt gzip"],
    "gzip_header_only": ["cut off"],
    "gzip_of_gzip": ["compressed twice"],
    "gzip_empty": ["empty"],
    "deep_top_level": ["nested too deeply"],
    "deep_head": ["nested too deeply"],
    "cut_in_head": ["cut off before its events"],
    "cut_after_array_open": ["cut off"],
    "empty_dir": ["no .json"],
    "missing_path": ["no such file"],
    "max_size_tiny": ["larger than", "--max-size"],
    "max_size_zero": ["--max-size"],
    "max_size_nan": ["--max-size"],
}

# case -> (fragments of the warnings, kernels analysed: the victim kernel lost or kept)
SALVAGED: dict[str, tuple[list[str], int]] = {
    "nan_literal": (["not valid JSON", "NaN", "absurd times"], KERNELS - 1),
    "infinity_literal": (["not valid JSON"], KERNELS - 1),
    "negative_infinity": (["not valid JSON"], KERNELS - 1),
    "ts_not_a_number": (["non-numeric"], KERNELS - 1),
    "ts_absurd": (["absurd times"], KERNELS - 1),
    "ts_out_of_range": (["absurd times"], KERNELS - 1),
    "dur_negative": (["negative durations"], KERNELS),
    "ts_missing": (["missing"], KERNELS - 1),
    "deep_args": (["nested too deeply"], KERNELS - 1),
    "deep_object_args": (["nested too deeply"], KERNELS - 1),
    "deep_unclosed_args": (["skipped"], KERNELS - 1),
    "events_not_objects": (["dropped 4 events"], KERNELS),
    "unescaped_quote": (["not valid JSON"], KERNELS),
    "control_char_in_name": (["not valid JSON"], KERNELS),
    "bad_utf8": (["not valid JSON"], KERNELS),
    "broken_syntax": (["skipped 1 damaged event"], KERNELS - 1),
    "trailing_garbage": (["trailing data"], KERNELS),
    "two_documents": (["trailing data"], KERNELS),
    "gzip_trailing_garbage": (["trailing data"], KERNELS),
    "head_not_json": (["keys before traceEvents"], KERNELS),
    "lone_surrogate": (["lone UTF-16 surrogates"], KERNELS),
    # every byte inflated and read; only the trailer's CRC-32 is wrong
    "gzip_crc_mismatch": (["checksum", "only the check failed"], KERNELS),
    # a value of the wrong type for its key (schema.py) is dropped from its event, with a warning
    "args_not_object": (["ill-typed 'args'", "a list"], KERNELS),
    "args_string": (["ill-typed 'args'", "a string"], KERNELS),
    "name_is_object": (["ill-typed 'name' in 1 kernel event", "an object"], KERNELS),
    "cat_is_number": (["ill-typed 'cat'"], KERNELS - 1),  # not a kernel any more
    "pid_huge": (["ill-typed 'pid' in 1 kernel event", "beyond int64"], KERNELS),
    "ids_huge": (["ill-typed 'correlation' in 1 kernel event", "beyond int64"], KERNELS),
    "grid_garbage": (["ill-typed 'grid' in 1 kernel event", "a list"], KERNELS),
}

# case -> kernels analysed (no warning)
CLEAN = {
    "good": KERNELS,
    "bom": KERNELS,
    "legacy_array": KERNELS,
    "unicode_names": KERNELS,
    "huge_string": KERNELS,
    "duplicate_keys": KERNELS,
    "gzip_concatenated": KERNELS,
}

CUTS = ["cut_0.5", "cut_0.8", "cut_0.999", "cut_in_tail", "gzip_cut_0.6", "gzip_cut_0.95"]
CORRUPT = ["gzip_corrupt_middle"]

# The list, one case or more per item, runs through the real command line in subprocesses;
# the other cases run through cli.main in-process (same code, no interpreter start-up each).
SUBPROCESS = {
    "good", "empty", "not_json", "binary", "no_trace_events", "trace_events_object", "corrupt_gzip",
    "deep_top_level", "cut_in_head", "empty_dir", "missing_path", "max_size_tiny",
    "nan_literal", "ts_not_a_number", "deep_args", "cut_0.5", "gzip_cut_0.6",
}  # fmt: skip


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory, external_traces: Path) -> Inputs:
    from traceadvisor.pipeline import analyze

    args = build_cases(tmp_path_factory.mktemp("bad"), external_traces)
    assert set(args) == set(ERRORS) | set(SALVAGED) | set(CLEAN) | set(CUTS) | set(CORRUPT)
    full = analyze([external_traces / "hta" / "nccl_data.json.gz"]).traces[0].kernel_count
    return Inputs(args, full)


@pytest.fixture(scope="module")
def runs(inputs: Inputs) -> dict[str, Run]:
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {name: pool.submit(run_cli, *inputs.args[name]) for name in sorted(SUBPROCESS)}
        return {name: f.result() for name, f in futures.items()}


def run_in_process(args: list[str], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    monkeypatch.setattr(sys, "argv", ["traceadvisor", "analyze", *args])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    out, err = capfd.readouterr()
    code = exc.value.code
    return Run(code if isinstance(code, int) else 1, out, err, 0.0, 0.0)


@pytest.fixture
def run_case(
    runs: dict[str, Run], inputs: Inputs, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], Run]:
    def get(case: str) -> Run:
        return runs[case] if case in SUBPROCESS else run_in_process(inputs.args[case], capfd, monkeypatch)

    return get


@pytest.mark.parametrize("case", list(ERRORS))
def test_bad_input_is_one_line_and_exit_2(run_case: Callable[[str], Run], case: str) -> None:
    assert_error(run_case(case), *ERRORS[case])


@pytest.mark.parametrize("case", list(SALVAGED))
def test_damaged_events_are_salvaged_with_warnings(run_case: Callable[[str], Run], case: str) -> None:
    fragments, kernels = SALVAGED[case]
    trace = assert_salvaged(run_case(case), *fragments)
    assert trace["kernel_count"] == kernels
    assert trace["rank"] == 5  # distributedInfo, after the events, is still read


@pytest.mark.parametrize("case", list(CLEAN))
def test_valid_unusual_input_reads_cleanly(run_case: Callable[[str], Run], case: str) -> None:
    trace = assert_salvaged(run_case(case), warn=False)
    assert trace["kernel_count"] == CLEAN[case]
    assert len(trace["steps"]) == STEPS


@pytest.mark.parametrize("case", CUTS)
def test_cut_off_real_trace_analyses_saved_events(run_case: Callable[[str], Run], inputs: Inputs, case: str) -> None:
    run = run_case(case)
    trace = assert_salvaged(run, "cut off")
    assert len(run.stderr.splitlines()) == 1
    assert 0 < trace["kernel_count"] <= inputs.nccl_kernels
    if case == "cut_in_tail":
        assert trace["kernel_count"] == inputs.nccl_kernels  # every event was complete
        assert trace["rank"] == 0  # distributedInfo comes before the events in this trace


def test_gzip_corrupt_in_the_middle_analyses_the_events_before(run_case: Callable[[str], Run], inputs: Inputs) -> None:
    # These random bytes inflate (to garbage) without a deflate error: the whole stream is read,
    # the damaged events dropped, and the CRC-32 at the end says the data is damaged.
    run = run_case("gzip_corrupt_middle")
    trace = assert_salvaged(run, "gzip checksum", "does not match", "absurd times")
    assert "only the check failed" in run.stderr.splitlines()[0]
    assert 0 < trace["kernel_count"] <= inputs.nccl_kernels


def test_trace_from_a_pipe(tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    data = gzip.compress(render(make_trace()))
    for name in ("pipe.json", "pipe.json.gz"):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        payload = data if name.endswith(".gz") else gzip.decompress(data)
        writer = threading.Thread(target=fifo.write_bytes, args=(payload,))
        writer.start()
        run = run_in_process([str(fifo), "--format", "json"], capfd, monkeypatch)
        writer.join(timeout=10)
        assert run.rc == 0 and run.stderr == "", run.stderr
        assert run.report()["traces"][0]["kernel_count"] == KERNELS


def test_gzip_bomb_is_refused_fast_in_bounded_memory(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip_bomb(b'{"traceEvents": [', b" ", inflated_gib=4.1))
    assert bomb.stat().st_size < 8 << 20
    events_bomb = tmp_path / "events_bomb.json.gz"
    event = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 1.0}, '
    events_bomb.write_bytes(gzip_bomb(b'{"traceEvents": [', event, inflated_gib=4.1))
    args = {
        "default": [str(bomb)],
        "max_size_1": [str(bomb), "--max-size", "1"],
        "events_max_size_1": [str(events_bomb), "--max-size", "1"],
    }
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = dict(zip(args, pool.map(lambda a: run_cli(*a, timeout=90), args.values()), strict=True))
    assert_error(runs["default"], "blank space", "gzip bomb")
    assert_error(runs["max_size_1"])
    assert_error(runs["events_max_size_1"], "would inflate to about 4.1 GiB", "--max-size")
    for run in runs.values():
        assert run.peak_rss_mb < 400, run.peak_rss_mb
        assert run.seconds < 60


# -- output files: nothing written half ------------------------------------------------------------
def test_error_leaves_existing_output_untouched_and_no_temp_files(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    out = tmp_path / "report.json"
    out.write_text("previous report")
    assert_error(run_cli(str(bad), "--output", str(out)), "not a JSON trace")
    assert_error(run_in_process([str(tmp_path / "missing.json"), "-o", str(out)], capfd, monkeypatch), "no such")
    assert out.read_text() == "previous report"
    new = tmp_path / "new_report.json"
    assert_error(run_in_process([str(bad), "--format", "json", "--output", str(new)], capfd, monkeypatch))
    assert not new.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "report.json"]


def test_salvage_writes_complete_output_file(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "cut.json"
    bad.write_bytes(render(make_trace())[:-400])
    out = tmp_path / "report.json"
    out.write_text("previous report")
    run = run_in_process([str(bad), "--format", "json", "--output", str(out)], capfd, monkeypatch)
    assert run.rc == 0 and run.stdout == ""
    assert run.stderr.startswith("traceadvisor: warning: ") and "cut off" in run.stderr
    assert 0 < json.loads(out.read_text())["traces"][0]["kernel_count"] <= KERNELS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.json", "report.json"]


def test_output_into_missing_folder_is_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "good.json"
    good.write_bytes(render(make_trace()))
    run = run_in_process([str(good), "--output", str(tmp_path / "no" / "dir" / "r.json")], capfd, monkeypatch)
    assert_error(run, "cannot write report")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.json"]


def test_unexpected_exception_is_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import traceadvisor.pipeline

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("something\nunexpected")

    monkeypatch.setattr(traceadvisor.pipeline, "analyze", boom)
    monkeypatch.delenv("TRACEADVISOR_DEBUG", raising=False)
    good = tmp_path / "good.json"
    good.write_bytes(render(make_trace()))
    assert_error(
        run_in_process([str(good)], capfd, monkeypatch), "internal error", "ValueError", "something unexpected"
    )
