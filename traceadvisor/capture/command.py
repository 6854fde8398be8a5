"""The ``traceadvisor capture`` command. Importing this module does not import torch.

Registered in ``traceadvisor/cli.py`` with ``app.command("capture", **COMMAND_SETTINGS)(capture)``.

Everything after the program (``SCRIPT``, ``-m MODULE`` or ``--workload NAME``) belongs to the
program, as with python itself: ``traceadvisor capture --active 3 train.py --active 7`` gives the
profiler 3 active steps and the script ``sys.argv[1:] == ["--active", "7"]``.

Exit status: the program's own (0, ``sys.exit(n)``, 1 for an uncaught exception, 130 when
interrupted); 2 for our errors (a missing script, bad options, an unwritable run folder, or a run
that captured nothing), with one line on stderr.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from traceadvisor.capture import stepon
from traceadvisor.capture.options import CaptureOptions, Schedule
from traceadvisor.capture.stdout import ProgramStdout
from traceadvisor.console import EXIT_BAD_INPUT, error, fail, warn
from traceadvisor.errors import UsageError

# Capture analyses its own fresh trace: the size cap is analyze's --max-size 16.
MAX_ANALYSIS_BYTES = 16 * 2**30
# "html" analyses with the sampled timeline the page draws (``_analyze``). The program's stdout is
# kept off any report but text (``ProgramStdout``), an HTML page included.
FORMATS = ("text", "json", "markdown", "html")
_PROGRAM_OPTIONS = ("-m", "--module", "--workload")


class CaptureCommand(TyperCommand):
    """Stops option parsing at the program: ``-m MODULE``/``--workload NAME`` end our options too."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        value_options = {
            name
            for p in self.params
            if getattr(p, "param_type_name", "") == "option" and not getattr(p, "is_flag", False)
            for name in getattr(p, "opts", [])
        }
        return super().parse_args(ctx, end_options_at_program(args, value_options))


COMMAND_SETTINGS: dict[str, Any] = {
    "cls": CaptureCommand,
    # Parsing stops at the first positional (SCRIPT): what follows is the program's, untouched. Unknown
    # options before it stay errors (a typo in our options must not become the script's name).
    "context_settings": {"allow_extra_args": True, "allow_interspersed_args": False},
}


def end_options_at_program(args: list[str], value_options: set[str]) -> list[str]:
    """Insert ``--`` after ``-m MODULE`` / ``--workload NAME`` so what follows is the program's."""
    out = list(args)
    i = 0
    while i < len(out):
        arg = out[i]
        if arg == "--":
            break
        if arg in _PROGRAM_OPTIONS:
            if i + 1 < len(out):  # without a value, click reports the missing value
                out.insert(i + 2, "--")
            break
        if arg.startswith(("--module=", "--workload=")) or (arg.startswith("-m") and not arg.startswith("--")):
            out.insert(i + 1, "--")
            break
        if arg in value_options:
            i += 2
        elif arg.startswith("-") and arg != "-":
            i += 1
        else:
            break  # SCRIPT: click stops here by itself
    return out


def capture(
    ctx: typer.Context,
    script: Annotated[
        str | None,
        typer.Argument(metavar="SCRIPT [ARGS]...", help="The script to run, then its arguments.", show_default=False),
    ] = None,
    module: Annotated[
        str | None,
        typer.Option("-m", "--module", help="Run a module as 'python -m' does; the arguments after it are its own."),
    ] = None,
    workload: Annotated[
        str | None, typer.Option("--workload", help="Run a reference workload (see 'traceadvisor workloads').")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Run folder. Default: ./traceadvisor-runs/<program>-<YYYYmmdd-HHMMSS>/."),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an earlier capture in --out (this rank's files).")
    ] = False,
    skip_first: Annotated[
        int, typer.Option("--skip-first", help="Steps to skip before the first cycle (start-up, autotuning).")
    ] = Schedule.skip_first,
    wait: Annotated[int, typer.Option("--wait", help="Idle steps at the start of each cycle.")] = Schedule.wait,
    warmup: Annotated[
        int, typer.Option("--warmup", help="Steps the profiler runs but discards, per cycle.")
    ] = Schedule.warmup,
    active: Annotated[int, typer.Option("--active", help="Steps recorded per cycle.")] = Schedule.active,
    repeat: Annotated[int, typer.Option("--repeat", help="Cycles to record; 0 = until the program ends.")] = (
        Schedule.repeat
    ),
    record_shapes: Annotated[
        bool, typer.Option("--record-shapes/--no-record-shapes", help="Record op input shapes.")
    ] = True,
    with_stack: Annotated[
        bool, typer.Option("--with-stack/--no-with-stack", help="Record Python stacks (source lines).")
    ] = True,
    profile_memory: Annotated[
        bool, typer.Option("--profile-memory/--no-profile-memory", help="Record allocations (costly).")
    ] = False,
    sync_events: Annotated[
        bool, typer.Option("--sync-events/--no-sync-events", help="Record CUDA synchronization events.")
    ] = True,
    step_on: Annotated[
        str | None,
        typer.Option(
            "--step-on",
            help="Each call of this function is a step: NAME (defined in the script) or package.module:NAME.",
        ),
    ] = None,
    window_delay: Annotated[
        float, typer.Option("--window-delay", help="Without steps: seconds to wait before the time window.")
    ] = 30.0,
    window_s: Annotated[float, typer.Option("--window-s", help="Without steps: length of the time window, s.")] = 10.0,
    analyze: Annotated[
        bool, typer.Option("--analyze/--no-analyze", help="Analyse the captured trace and print the report.")
    ] = True,
    fmt: Annotated[str, typer.Option("--format", "-f", help="Report format: text, json or markdown.")] = "text",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report here.")] = None,
    select: Annotated[list[str] | None, typer.Option("--select", help="Run only these rules.")] = None,
    ignore: Annotated[list[str] | None, typer.Option("--ignore", help="Skip these rules.")] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="List every finding, also those with no predicted saving.")
    ] = False,
) -> None:
    """Run a script (or module, or reference workload) under a scheduled profiler, then analyse it."""
    command = ["traceadvisor", *sys.argv[1:]]
    # The program may chdir; what the command line names is relative to where it was typed.
    start = Path.cwd()
    if output is not None and str(output) != "-":
        output = output.absolute()
    try:
        options = CaptureOptions(
            schedule=Schedule(skip_first=skip_first, wait=wait, warmup=warmup, active=active, repeat=repeat),
            record_shapes=record_shapes,
            with_stack=with_stack,
            profile_memory=profile_memory,
            sync_events=sync_events,
            step_on=step_on,
            window_delay_s=window_delay,
            window_s=window_s,
        )
        options.validate()
        spec = stepon.parse(step_on) if step_on else None
        target = _target(script, module, workload, list(ctx.args))
        if fmt not in FORMATS:
            raise UsageError(f"unknown format {fmt!r}: use {', '.join(FORMATS)}")
        if analyze:
            _check_rule_selection(select, ignore)
    except UsageError as exc:
        raise fail(str(exc)) from None
    code = _run(
        command, target, spec, options, out, overwrite, analyze, fmt, output, select, ignore, start, show_all=show_all
    )
    if code:
        raise typer.Exit(code=code)


def _run(
    command: list[str],
    target: Any,
    spec: stepon.StepOnSpec | None,
    options: CaptureOptions,
    out: Path | None,
    overwrite: bool,
    analyze: bool,
    fmt: str,
    output: Path | None,
    select: list[str] | None,
    ignore: list[str] | None,
    start: Path,
    *,
    show_all: bool = False,
) -> int:
    import importlib.util

    # Found, not imported: our own errors below (a missing --step-on function, a taken run folder) come
    # without waiting for torch; the session imports it when the program starts.
    if importlib.util.find_spec("torch") is None:
        raise fail("traceadvisor capture needs torch: pip install 'traceadvisor[capture]'")
    from traceadvisor.capture import runinfo
    from traceadvisor.capture.session import CaptureSession
    from traceadvisor.capture.target import Program, outcome_of
    from traceadvisor.capture.watcher import RunWatcher

    rank = runinfo.current_rank()
    folder = (out if out is not None else runinfo.default_run_dir(target.label)).absolute()
    description = runinfo.describe_run(command, target.to_dict())
    description.update(
        {
            "out": str(folder),
            "versions": None,  # filled in once torch is imported
            "schedule": options.schedule.to_dict(),
            "flags": options.flags(),
            "step_on": options.step_on,
            "window": {"delay_s": options.window_delay_s, "length_s": options.window_s},
        }
    )
    record = runinfo.RunRecord(folder, rank, description)
    watcher = RunWatcher()
    session = CaptureSession(options, folder, record)
    wrapper = stepon.StepOnWrapper(session.clock) if spec is not None else None
    program = Program(target, spec)
    # A report on stdout that a program parses (json, markdown): the program's own prints go to stderr.
    program_stdout = ProgramStdout(analyze and fmt != "text" and (output is None or str(output) == "-"))
    program_stdout.to_stderr()
    with _python_warnings(), program.installed():
        try:
            program.prepare(wrapper)
        except UsageError as exc:
            raise fail(str(exc)) from None
        except BaseException as exc:  # the program's own code failed while being imported
            return outcome_of(exc).code
        if _asks_workload_help(target):
            # ``capture --workload NAME --help``: the workload's own help (its usage names capture), and
            # its exit status; nothing is profiled and no run folder is made for it.
            return program.run().code
        try:
            runinfo.prepare_run_dir(folder, rank, overwrite)
            record.write()
        except UsageError as exc:
            raise fail(str(exc)) from None
        except OSError as exc:
            raise fail(f"{record.path}: cannot write ({exc.strerror or exc})") from None
        # From here run.json says "running" until the final write below; a watcher process finishes it
        # if this process dies first (SIGKILL, os._exit, a crash), whatever the program does.
        watcher.start(record.path, _temporary_files(rank))
        outcome = session.run(program)
    if wrapper is not None and spec is not None:
        for what in wrapper.refused:
            record.warn(f"--step-on {spec.text}: bound to a {what}, not a function; left as it was")
        if not wrapper.wrapped and outcome.status == "ok":
            record.warn(f"--step-on {spec.text}: the program never defined it, so no call was a step")
    try:
        record.write()
    except OSError as exc:
        record.warn(f"could not write {record.path.name}: {exc.strerror or exc}")
    watcher.release()
    for message in record.data["warnings"]:
        warn(message)
    analysis_code = 0
    files = session.analysis_files()
    if files and _world_size() > 1:
        _write_rank_summaries([f.path for f in files])
    if analyze and files and rank == 0:
        analysis_code = _analyze(
            [f.path for f in files], fmt, output, select, ignore, start, program_stdout, show_all=show_all
        )
    elif analyze and files:
        sys.stderr.write(f"traceadvisor: rank {rank}: not analysing; rank 0 prints the report\n")
    if outcome.code:
        return outcome.code
    if not session.files:
        error("no trace was captured (see the warnings above)")
        return EXIT_BAD_INPUT
    return analysis_code


def _asks_workload_help(target: Any) -> bool:
    """Whether ``target`` is a reference workload asked for its help (``-h``/``--help`` among its
    arguments, before a ``--`` that would make the rest its data)."""
    from traceadvisor.capture.target import TargetKind

    if target.kind is not TargetKind.workload:
        return False
    args = list(target.args)
    args = args[: args.index("--")] if "--" in args else args
    return any(a in ("-h", "--help") for a in args)


def _world_size() -> int:
    """The launcher's world size (torchrun and its kin set WORLD_SIZE; 1 without one)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _write_rank_summaries(paths: list[Path]) -> None:
    """In a multi-rank run each rank writes the summary of its own traces beside them
    (``<trace>.tasummary``, docs/multirank.md), here on the node that holds the trace: ``analyze
    --jobs``/``--executor`` then combine the summaries without moving or re-reading a trace. A
    failure costs only the summary (analyze builds it again) and is said in one line."""
    from traceadvisor.errors import TraceError
    from traceadvisor.pipeline import rank_summary
    from traceadvisor.ranks.summary_io import summary_path, write_summary

    for p in paths:
        try:
            write_summary(rank_summary(str(p)), summary_path(p))
        except (TraceError, OSError, ValueError) as exc:
            warn(f"{p}: no rank summary written ({exc})")


def _analyze(
    paths: list[Path],
    fmt: str,
    output: Path | None,
    select: list[str] | None,
    ignore: list[str] | None,
    start: Path,
    program_stdout: ProgramStdout | None = None,
    *,
    show_all: bool = False,
) -> int:
    """Analyse the captured traces and write the report as ``traceadvisor analyze`` would (the same
    library calls, warnings, errors and output), with the configuration found from ``start``, the
    folder capture was started in (the program may have changed its working folder). Returns the
    exit code: 0, or 2 after one error line."""
    from traceadvisor.console import analyze_or_fail, report_destination, report_width, to_terminal, write_report
    from traceadvisor.pipeline import configure
    from traceadvisor.report import render

    names = ", ".join(f"{p.parent.name}/{p.name}" for p in paths)  # cycle1/rank0.json.gz
    sys.stderr.write(f"traceadvisor: analysing {names}\n")
    sys.stderr.flush()
    try:
        with _working_folder(start):  # a relative --output is the start folder's too, as in analyze
            destination = report_destination(output, paths)
            try:
                cfg = configure(select=select, ignore=ignore)
            except UsageError as exc:
                raise fail(str(exc)) from None
            report = analyze_or_fail(paths, cfg, MAX_ANALYSIS_BYTES, timeline=fmt == "html")
            width = report_width(destination)
            data = render(report, fmt, color=to_terminal(destination), width=width, show_all=show_all)
            with (program_stdout or ProgramStdout(False)).report():  # only the report reaches stdout
                write_report(data, destination)
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    return 0


@contextmanager
def _working_folder(start: Path) -> Iterator[None]:
    """Run the analysis in ``start`` (configuration discovery starts from the working folder), then
    go back to the program's folder: its atexit handlers run after this and may use relative paths.

    The folder is changed, rather than handed to discovery, so that a discovered file keeps the
    rules of discovery (its rules-dir runs only when trusted); passing it as ``--config`` would trust it.
    """
    import os

    try:
        here = Path.cwd()
    except OSError:  # the program removed its working folder
        here = None
    if here == start:
        yield
        return
    try:
        os.chdir(start)
    except OSError as exc:
        sys.stderr.write(
            f"traceadvisor: warning: cannot go back to {start} ({exc.strerror or exc}); "
            "the configuration is looked for from the program's working folder\n"
        )
        yield
        return
    try:
        yield
    finally:
        if here is not None:
            try:
                os.chdir(here)
            except OSError:
                pass


def _temporary_files(rank: int) -> list[str]:
    """What this process may leave half-written in the run folder (see ``session._export`` and
    ``atomic.write_bytes``): glob patterns for the watcher to remove after an abnormal end."""
    import os

    from traceadvisor.capture.runinfo import run_file_name

    pid = os.getpid()
    # Traces go to <cycle or window folder>/rank{R}.json.gz (runinfo.trace_path).
    return [
        f"*/.rank{rank}.json.gz.{pid}.json.tmp",
        f"*/.rank{rank}.json.gz.{pid}.json.tmp.tmp",
        f"*/.rank{rank}.json.gz.*.tmp",
        f".{run_file_name(rank)}.*.tmp",
    ]


def _target(script: str | None, module: str | None, workload: str | None, args: list[str]) -> Any:
    from traceadvisor.capture.target import Target, TargetKind, check_script

    given = [x for x in (module, workload) if x is not None]
    if len(given) > 1:
        raise UsageError("give one of SCRIPT, -m MODULE or --workload NAME")
    if module is not None or workload is not None:
        # After -m/--workload, the positional is the program's first argument.
        rest = ([script] if script is not None else []) + args
        if module is not None:
            return Target(TargetKind.module, module, rest)
        assert workload is not None
        return Target(TargetKind.workload, workload, rest)
    if script is None:
        raise UsageError("missing SCRIPT (or -m MODULE, or --workload NAME); see 'traceadvisor capture --help'")
    check_script(script)
    return Target(TargetKind.script, script, args)


def _check_rule_selection(select: list[str] | None, ignore: list[str] | None) -> None:
    """Reject an unknown --select/--ignore before the program runs, not after an hour of training."""
    if not select and not ignore:
        return
    from traceadvisor.engine.registry import discover
    from traceadvisor.engine.runner import select as select_rules
    from traceadvisor.pipeline import configure

    cfg = configure(select=select, ignore=ignore)
    select_rules(discover(cfg.rules_dirs), cfg)


@contextmanager
def _python_warnings() -> Iterator[None]:
    """The program sees python's warning filters, not the ``ignore`` that ``cli.main`` sets for our output."""
    with warnings.catch_warnings():
        filters: Any = warnings.filters
        if filters and filters[0] == ("ignore", None, Warning, None, 0):
            if "ignore" not in sys.warnoptions:
                del filters[0]
                for name in ("_filters_mutated", "_filters_mutated_lock_held"):
                    mutated = getattr(warnings, name, None)
                    if callable(mutated):
                        mutated()
                        break
        # Torch warnings about what capture does, not the program: warmup 0 (capture warns itself), one
        # profiler reused across cycles, and torch.compile seeing capture's short-lived global forward
        # pre-hook (it fires for the compiled wrapper and the module; the hook runs once either way).
        warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events at the end of each cycle")
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
        yield
