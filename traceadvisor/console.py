"""What every command says on stderr, the exit codes it ends with, and where its report goes.

One helper for ``analyze``, ``capture``, ``calibrate`` and ``workloads``: an error is one line
``traceadvisor: error: ...`` and exit code 2, a warning one line ``traceadvisor: warning: ...``.
``analyze`` and ``capture`` also share how an analysis is run for a command (``analyze_or_fail``)
and how its rendered report is written (``report_destination``, ``write_report``).
A message may quote a file name, an event name or a program's exception, which can hold a newline
(a forged second line) or terminal escapes (which drive the terminal), so every line goes through
``report/safe_text.one_line`` first.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING

import typer

from traceadvisor.report.safe_text import one_line

if TYPE_CHECKING:
    from traceadvisor.config import Config
    from traceadvisor.report.model import Report

EXIT_OK = 0
EXIT_FINDINGS = 1  # analyze --fail-on: a finding at or above the threshold
EXIT_BAD_INPUT = 2  # bad input or usage, our own errors
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell reports a process the signal ended


def error(message: object) -> None:
    """Write one ``traceadvisor: error:`` line (no exit: for callers that return a code)."""
    sys.stderr.write(f"traceadvisor: error: {one_line(message)}\n")


def fail(message: object) -> typer.Exit:
    """Write the error line; return the exit (code 2) for the caller to ``raise``, so that a type
    checker sees the command end there."""
    error(message)
    return typer.Exit(code=EXIT_BAD_INPUT)


def warn(message: object) -> None:
    """Write one ``traceadvisor: warning:`` line."""
    sys.stderr.write(f"traceadvisor: warning: {one_line(message)}\n")


@contextmanager
def library_warnings_printed() -> Iterator[None]:
    """While the block runs, what the library logs at WARNING (``traceadvisor.*`` loggers: a file
    skipped in a directory) is printed as a ``traceadvisor: warning:`` line."""
    import logging

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warn(record.getMessage())

    logger = logging.getLogger("traceadvisor")
    handler = Lines(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def analyze_or_fail(
    paths: list[Path],
    config: Config,
    max_bytes: int,
    why_limit: str = "",
    jobs: int | None = None,
    executor: str | None = None,
    cache: bool | None = None,
    timeline: bool = False,
) -> Report:
    """``pipeline.analyze`` as a command runs it: the configuration's warnings and the library's
    printed as warning lines, bad input as one error line (``fail``), each trace's load warnings
    printed after. ``why_limit`` says why ``max_bytes`` is what it is (added to a size refusal);
    ``timeline`` keeps the sampled timeline the HTML report draws."""
    from traceadvisor.errors import TraceError, UsageError
    from traceadvisor.pipeline import analyze, analyze_scaled

    for w in config.origin.warnings:
        warn(w)
    try:
        with library_warnings_printed():
            # Several traces (the ranks of a run): each reduced to its summary in a process pool
            # sized to the cores (or --jobs, or Dask), cached beside it; one trace: in this process.
            if jobs is not None or executor is not None or (cache is not None and _several(paths)):
                report = analyze_scaled(
                    paths,
                    config,
                    jobs=jobs,
                    executor=executor,
                    max_bytes=max_bytes,
                    cache=cache is not False,
                    timeline=timeline,
                )
            else:
                report = analyze(paths, config, max_bytes=max_bytes, timeline=timeline)
    except (TraceError, UsageError) as exc:
        message = str(exc)
        raise fail(f"{message} ({why_limit})" if why_limit and "--max-size" in message else message) from None
    except MemoryError:
        raise fail("out of memory while reading the trace; try a smaller trace or more memory") from None
    except RecursionError:
        raise fail("trace structure nested too deeply to analyse") from None
    for t in report.traces:
        for w in t.warnings:
            warn(f"{t.path}: {w}")
    # What is wrong with the set of ranks (a rank claimed by two files, ranks missing from the world):
    # the report's ranks section says it too, but a JSON report on stdout is read by a program.
    for problem in report.ranks.problems if report.ranks is not None else ():
        warn(problem)
    return report


def _several(paths: list[Path]) -> bool:
    """Whether ``paths`` name or hold more than one trace file (a missing one: not here, analyze says)."""
    import logging

    from traceadvisor.errors import TraceError
    from traceadvisor.trace.load import expand_paths

    log = logging.getLogger("traceadvisor.trace.load")
    was, log.disabled = log.disabled, True  # its skipped-entry warnings come once, from the analysis
    try:
        return len(expand_paths(paths)) > 1
    except TraceError:
        return False
    finally:
        log.disabled = was


def report_destination(output: Path | None, traces: list[Path]) -> Path | None:
    """Where ``-o``/``--output`` sends the report: None for stdout (``-`` too). Fails, before any
    analysis, when stdout is closed or ``output`` would replace an input trace."""
    if output is not None and str(output) == "-":
        output = None
    if output is None and sys.stdout is None:  # started with stdout closed (>&-): Python sets it None
        raise fail("cannot write the report to stdout (stdout is closed)")
    if output is not None:
        _refuse_replacing_an_input(output, traces)
    return output


def write_report(data: bytes, output: Path | None) -> None:
    """The rendered report to ``output`` (atomically: a reader never sees half a report), or to
    stdout when None."""
    if output is None:
        _report_to_stdout(data)
        return
    from traceadvisor.atomic import write_bytes

    try:
        write_bytes(output, data)
    except OSError as exc:
        raise fail(f"{output}: cannot write report ({exc.strerror or exc})") from None


def to_terminal(output: Path | None) -> bool:
    """Whether the report goes to a terminal (the text report is then coloured)."""
    return output is None and sys.stdout is not None and sys.stdout.isatty()


# Columns of a text report written to a file or a pipe (COLUMNS overrides it, as it does a terminal's).
DEFAULT_COLUMNS = 120


def report_width(output: Path | None) -> int:
    """Columns of the text report: the terminal's when it goes to one, else ``COLUMNS`` when set,
    else ``DEFAULT_COLUMNS`` (at least 40)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return max(40, int(env))
    if to_terminal(output):
        return max(40, shutil.get_terminal_size((DEFAULT_COLUMNS, 24)).columns)
    return DEFAULT_COLUMNS


def stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush finds no broken pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _refuse_replacing_an_input(output: Path, traces: list[Path]) -> None:
    """``-o`` naming an input trace, or a trace in an input directory, through any link: the
    report would replace the trace it was made from."""
    try:
        if not S_ISREG(output.stat().st_mode):
            return  # a device or pipe is written through, never replaced
    except OSError:
        return  # a new file (or one write_bytes reports): nothing to lose
    for given in traces:
        for f in _trace_candidates(given):
            if _same_file(f, output):
                raise fail(f"{output}: is the input trace {f}; the report would replace it (choose another --output)")


def _trace_candidates(given: Path) -> list[Path]:
    """``given``, or the trace-named entries of the directory ``given``."""
    try:
        return [f for f in given.iterdir() if f.name.endswith((".json", ".json.gz"))] if given.is_dir() else [given]
    except OSError:
        return []  # the analysis reports it


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False


def _report_to_stdout(data: bytes) -> None:
    """Write the report to stdout; a reader that went away (``| head``) is no error, anything else
    (a full disk, a stdout not open for writing) is one line."""
    try:
        _write_stdout(data)
    except BrokenPipeError:
        stdout_to_devnull()
        raise typer.Exit(EXIT_OK) from None
    except OSError as exc:
        raise fail(f"cannot write the report to stdout ({exc.strerror or exc})") from None


def _write_stdout(data: bytes) -> None:
    """``data`` straight to stdout's file descriptor, after what Python had buffered: a failed
    write leaves nothing buffered, which the interpreter would write again at exit and report in a
    second message. Through ``sys.stdout`` where it is no file (a test runner's capture)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, io.UnsupportedOperation):
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    sys.stdout.flush()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# ``--step-time`` (analyze, whatif): what a user's own timing says the step takes without the profiler
StepTimeOption = typer.Option(
    "--step-time",
    help="The step time you measured without the profiler (12.3ms, 850us, 0.25s, 3.5it/s; a bare number is ms): "
    "the prediction is calibrated to it, for traces that carry no measured steps of their own.",
)
