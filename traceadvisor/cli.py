"""The ``traceadvisor`` command line (typer). Commands stay thin: parse, call, render, exit.

Exit codes: 0 analysed; 1 only with ``--fail-on`` when a finding at or above it exists; 2 bad
input or usage, with one line on stderr and no traceback.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from traceadvisor.console import (
    EXIT_BAD_INPUT,
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    StepTimeOption,
    fail,
    stdout_to_devnull,
    warn,
)
from traceadvisor.errors import UsageError
from traceadvisor.report.finding import Severity
from traceadvisor.report.safe_text import one_line

if TYPE_CHECKING:
    from typer._click import Command, Context

    from traceadvisor.engine.registry import RuleSource

# Commands that analysis does not need, by name: (module, function, its command settings or "").
# Their modules (and what they import) load when the command is named or listed, so that
# ``traceadvisor analyze`` starts without them.
TOOL_COMMANDS: dict[str, tuple[str, str, str]] = {
    "capture": ("traceadvisor.capture.command", "capture", "COMMAND_SETTINGS"),
    "workloads": ("traceadvisor.workloads.command", "workloads", ""),
    "calibrate": ("traceadvisor.calibrate", "calibrate", ""),
    "whatif": ("traceadvisor.whatif_command", "whatif", ""),
    "diff": ("traceadvisor.diff_command", "diff", ""),
    "open": ("traceadvisor.open_command", "open_trace", ""),
}


# Each command's help ends with these invocations (its epilog, kept here so that every command,
# tool commands included, has one; a test checks it). typer keeps the line breaks of an epilog and
# reads it as rich markup, so no square brackets; lines fit an 80-column terminal.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "analyze": (
        "traceadvisor analyze trace.json.gz",
        "traceadvisor analyze runs/ --format markdown -o report.md",
        "traceadvisor analyze trace.json.gz --format html -o report.html",
        "traceadvisor analyze trace.json.gz --select SY --fail-on medium",
        "traceadvisor analyze trace.json.gz --all",
    ),
    "rules": ("traceadvisor rules", "traceadvisor rules --format json --rules-dir my_rules/"),
    "explain": ("traceadvisor explain sync-point", "traceadvisor explain GK102"),
    "capture": (
        "traceadvisor capture train.py --epochs 1",
        "traceadvisor capture --active 3 --repeat 2 -m my_pkg.train",
        "traceadvisor capture -f json -o report.json --workload mlp-train",
    ),
    "workloads": ("traceadvisor workloads", "traceadvisor workloads attention-naive"),
    "calibrate": ("traceadvisor calibrate", "traceadvisor calibrate --quick --device 1"),
    "whatif": (
        "traceadvisor whatif trace.json.gz --apply cuda-graphs",
        "traceadvisor whatif trace.json.gz --apply tf32,no-sync -f json",
    ),
    "diff": (
        "traceadvisor diff before.json.gz after.json.gz",
        "traceadvisor diff runs/before/ runs/after/ --fail-on-regression 5",
    ),
    "open": ("traceadvisor open trace.json.gz", "traceadvisor open trace.json.gz --at 1 --print"),
}


def examples_epilog(name: str) -> str:
    """The ``Examples:`` block that ends command ``name``'s help."""
    return "\n".join(["Examples:", *(f"  {line}" for line in EXAMPLES[name])])


class _Commands(TyperGroup):
    """The command group: the ``TOOL_COMMANDS`` are built on first use, listed after the others."""

    def list_commands(self, ctx: Context) -> list[str]:
        return [*(n for n in super().list_commands(ctx) if n not in TOOL_COMMANDS), *TOOL_COMMANDS]

    def invoke(self, ctx: Context) -> Any:
        # typer turns a KeyboardInterrupt raised in a command into a silent exit 130 (typer.core._main
        # catches it around this call); raised past it as _Interrupted, it reaches main(), which says so.
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted from None

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in self.commands:
            # A tool command is built when named; an unknown name builds them all, so that "did you
            # mean" can suggest them too.
            for name in [cmd_name] if cmd_name in TOOL_COMMANDS else TOOL_COMMANDS:
                if name not in self.commands:
                    self.add_command(_tool_command(name), name)
        return super().get_command(ctx, cmd_name)


class _Interrupted(BaseException):
    """Ctrl-C during a command (a BaseException, as KeyboardInterrupt: ``except Exception`` lets it by)."""


def _tool_command(name: str) -> Command:
    """The click command of a ``TOOL_COMMANDS`` entry, built as ``app.command(name, **settings)`` would."""
    module_name, function, settings = TOOL_COMMANDS[name]
    module = import_module(module_name)
    options: dict[str, Any] = dict(getattr(module, settings)) if settings else {}
    options.setdefault("epilog", examples_epilog(name))
    scratch = typer.Typer()
    scratch.command(name, **options)(getattr(module, function))
    return typer.main.get_command_from_info(
        scratch.registered_commands[0],
        pretty_exceptions_short=app.pretty_exceptions_short,
        rich_markup_mode=app.rich_markup_mode,
    )


app = typer.Typer(
    name="traceadvisor",
    cls=_Commands,
    help="Read PyTorch profiler traces and say what slows the GPU workload down, where, and what to change.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class Format(StrEnum):
    """Output formats of ``analyze``. ``html`` analyses with the sampled timeline the page draws
    (``pipeline.analyze(..., timeline=True)``); the others never build it."""

    text = "text"
    json = "json"
    markdown = "markdown"
    html = "html"


def _print_version(value: bool) -> None:
    if value:
        from traceadvisor import __version__

        typer.echo(f"traceadvisor {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Read PyTorch profiler traces and say what slows the GPU workload down."""


@app.command(epilog=examples_epilog("analyze"))
def analyze(
    traces: Annotated[
        list[Path], typer.Argument(help="Trace files (.json, .json.gz) or directories (one rank per file).")
    ],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Report format.")] = Format.text,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report here (atomically); - is stdout.")
    ] = None,
    fail_on: Annotated[
        Severity | None, typer.Option("--fail-on", help="Exit 1 when a finding at or above this severity exists.")
    ] = None,
    max_size_gib: Annotated[
        float | None,
        typer.Option(
            "--max-size",
            help="Refuse traces larger than this many GiB once inflated (default: half the memory, or cgroup limit).",
        ),
    ] = None,
    select: Annotated[
        list[str] | None, typer.Option("--select", help="Run only these rules (code, code prefix or name).")
    ] = None,
    ignore: Annotated[
        list[str] | None, typer.Option("--ignore", help="Skip these rules (code, prefix or name).")
    ] = None,
    rules_dir: Annotated[
        list[Path] | None, typer.Option("--rules-dir", help="A folder of your own rule files.")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="Configuration file (TOML), trusted to run its rules-dir. Also TRACEADVISOR_CONFIG."
        ),
    ] = None,
    isolated: Annotated[
        bool, typer.Option("--isolated", help="Read no configuration file: only the command line's options.")
    ] = False,
    trust_config: Annotated[
        bool,
        typer.Option(
            "--trust-config",
            help="Load the rules-dir of a discovered configuration (its code runs). Also TRACEADVISOR_TRUST_CONFIG=1.",
        ),
    ] = False,
    rule_timeout: Annotated[
        float | None,
        typer.Option("--rule-timeout", help="Seconds one rule may run on one trace (default 60; config rule-timeout)."),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            help="Several traces: reduce each to a summary in N worker processes (default: the cores), then combine.",
        ),
    ] = None,
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            help="Build the rank summaries on Dask: 'dask' (a local cluster) or the scheduler's tcp://host:port.",
        ),
    ] = None,
    rank: Annotated[
        int | None, typer.Option("--rank", help="Focus on one rank: its trace and the findings that name it.")
    ] = None,
    cache: Annotated[
        bool,
        typer.Option(
            "--cache/--no-cache",
            help="Several traces: keep each rank's summary beside its trace (<trace>.tasummary) and reuse it.",
        ),
    ] = True,
    gpus_per_node: Annotated[
        int | None,
        typer.Option("--gpus-per-node", help="Ranks per host (host = rank // N) where a trace names no host."),
    ] = None,
    show_all: Annotated[
        bool,
        typer.Option("--all", help="List every finding, also those with no predicted saving (text, Markdown)."),
    ] = False,
    step_time: Annotated[str | None, StepTimeOption] = None,
) -> None:
    """Analyse traces and report GPU time, steps and findings."""
    from traceadvisor.console import analyze_or_fail, report_destination, report_width, to_terminal, write_report
    from traceadvisor.pipeline import configure
    from traceadvisor.report import render

    max_bytes, why_limit = _max_bytes(max_size_gib)
    output = report_destination(output, traces)
    try:
        cfg = configure(
            config, select=select, ignore=ignore, rules_dirs=rules_dir, isolated=isolated, trust=trust_config
        )
        if gpus_per_node is not None:
            if gpus_per_node < 1:
                raise UsageError(f"--gpus-per-node must be at least 1, not {gpus_per_node}")
            cfg.gpus_per_node = gpus_per_node
        if rule_timeout is not None:
            from traceadvisor.config import parse_rule_timeout

            cfg.rule_timeout = parse_rule_timeout(rule_timeout, "--rule-timeout")
        if step_time is not None:
            from traceadvisor.config import parse_step_time

            cfg.step_time_us = parse_step_time(step_time)
    except UsageError as exc:
        raise fail(str(exc)) from None
    if fmt is Format.html and to_terminal(output):
        raise fail("--format html writes a web page: give it a file with -o report.html (or redirect stdout)")
    report = analyze_or_fail(
        traces, cfg, max_bytes, why_limit, jobs=jobs, executor=executor, cache=cache, timeline=fmt is Format.html
    )
    if rank is not None:
        from traceadvisor.ranks.report import focus

        if not any(t.rank == rank for t in report.traces):
            known = ", ".join(str(t.rank) for t in report.traces if t.rank is not None) or "none"
            raise fail(f"--rank {rank}: no trace of that rank (ranks: {known})")
        report = focus(report, rank)
    data = render(report, fmt, color=to_terminal(output), width=report_width(output), show_all=show_all)
    write_report(data, output)
    global _report_written
    _report_written = True
    worst = report.worst_severity()
    if fail_on is not None and worst is not None and worst.rank >= fail_on.rank:
        tripped = [f for f in report.findings if f.severity.rank >= fail_on.rank]
        codes = ", ".join(dict.fromkeys(f"{f.rule} ({f.code})" for f in tripped))
        line = f"--fail-on {fail_on.value}: {len(tripped)} finding(s) at or above it: {codes}"
        sys.stderr.write(f"traceadvisor: {line}\n")
        raise typer.Exit(code=EXIT_FINDINGS)


# Set once `analyze` has written its report: the process may then end without the interpreter's
# teardown (see ``run``).
_report_written = False


def _max_bytes(max_size_gib: float | None) -> tuple[int, str]:
    """``--max-size`` in bytes, and, for the default, why it is that (said when a trace is refused
    for its size)."""
    if max_size_gib is None:
        from traceadvisor.limits import default_max_bytes

        return default_max_bytes()
    if not max_size_gib > 0:  # also NaN
        raise fail(f"--max-size must be a positive number of GiB, not {max_size_gib}")
    return (int(max_size_gib * 2**30) if max_size_gib < 2**32 else sys.maxsize), ""


# The options by which ``rules`` and ``explain`` find the rules a run would load: the same
# configuration resolution as ``analyze`` (a trusted configuration's rules-dir adds user rules).
RulesDirOption = Annotated[list[Path] | None, typer.Option("--rules-dir", help="Also load rules from this folder.")]
ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="Configuration file (TOML), trusted to run its rules-dir.")
]
IsolatedOption = Annotated[bool, typer.Option("--isolated", help="Read no configuration file.")]
TrustOption = Annotated[
    bool, typer.Option("--trust-config", help="Load the rules-dir of a discovered configuration (its code runs).")
]


@app.command("rules", epilog=examples_epilog("rules"))
def list_rules(
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, json or markdown.")] = "table",
    rules_dir: RulesDirOption = None,
    config: ConfigOption = None,
    isolated: IsolatedOption = False,
    trust_config: TrustOption = False,
) -> None:
    """List the available rules (built-in, --rules-dir, the configuration's rules-dir, entry points)."""
    from traceadvisor.report import render_rules

    if fmt not in ("table", "json", "markdown"):
        raise fail(f"unknown format {fmt!r}: use table, json or markdown")
    sources = _rule_sources(rules_dir, config, isolated, trust_config)
    sys.stdout.write(render_rules.render([s.cls for s in sources], fmt))


@app.command(epilog=examples_epilog("explain"))
def explain(
    rule: Annotated[str, typer.Argument(help="Rule code or name.")],
    rules_dir: RulesDirOption = None,
    config: ConfigOption = None,
    isolated: IsolatedOption = False,
    trust_config: TrustOption = False,
) -> None:
    """Show a rule's documentation: what it detects, why it matters, how to fix it."""
    from traceadvisor.report import render_rules

    sources = _rule_sources(rules_dir, config, isolated, trust_config)
    match = [s.cls for s in sources if rule in (s.cls.code, s.cls.name)]
    if not match:
        raise fail(f"no rule {rule!r}; see 'traceadvisor rules'")
    sys.stdout.write(render_rules.explain(match[0]))


def _rule_sources(rules_dir: list[Path] | None, config: Path | None, isolated: bool, trust: bool) -> list[RuleSource]:
    """The rules ``analyze`` with these options would load (before ``--select``)."""
    from traceadvisor.engine.registry import discover
    from traceadvisor.pipeline import configure

    try:
        cfg = configure(config, rules_dirs=rules_dir, isolated=isolated, trust=trust)
        for w in cfg.origin.warnings:
            warn(w)
        return discover(cfg.rules_dirs)
    except UsageError as exc:
        raise fail(str(exc)) from None


def run() -> None:
    """The process entry point (console script, ``python -m traceadvisor``): ``main``, then, after
    ``analyze`` has written its report, ``os._exit`` with the exit status. An interpreter's normal
    teardown frees every table object by object (about 0.1 s after a 100 MB trace, measured) for
    nothing; output is flushed first, no atexit handler of ours matters for ``analyze``, and the
    report file is already complete (written atomically). Other commands (``capture`` runs the
    user's program, whose atexit handlers must run) end normally."""
    import os

    try:
        main()
    except SystemExit as exc:
        if not _report_written:
            raise
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_BAD_INPUT)
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:  # None: started with it closed
                    stream.flush()
        except (OSError, ValueError):
            raise exc from None  # let the interpreter report (or swallow) the broken stream as usual
        os._exit(code)


def main() -> None:
    """Command-line entry point: usage errors exit 2 with one line, as bad input does.

    Never a traceback: an unexpected exception is reported in one line too (exit 2), and
    ``TRACEADVISOR_DEBUG=1`` shows its traceback. Library warnings (numpy overflow on absurd
    values, which the loader already counts and reports) stay off stderr.
    """
    import os
    import warnings

    debug = bool(os.environ.get("TRACEADVISOR_DEBUG"))
    if not debug:
        warnings.simplefilter("ignore")
    try:
        rc = app(standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt, _Interrupted):
        sys.stderr.write("traceadvisor: interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # The reader of stdout went away (``| head``): not an error; keep Python quiet at exit.
        stdout_to_devnull()
        sys.exit(EXIT_OK)
    except Exception as exc:
        # Usage errors from typer's (vendored) click: one line, exit 2.
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            if type(exc).__name__ == "NoArgsIsHelpError":
                sys.stderr.write("traceadvisor: error: missing arguments; see 'traceadvisor --help'\n")
            else:
                message = one_line(" ".join(str(exc.format_message()).split()))  # echoes the user's argument
                sys.stderr.write(f"traceadvisor: error: {message}\n")
            sys.exit(EXIT_BAD_INPUT)
        if debug:
            raise
        # A bug, most likely on unusual input: one line that says so, no traceback.
        detail = one_line(" ".join(str(exc).split())[:200])
        sys.stderr.write(
            f"traceadvisor: error: internal error ({type(exc).__name__}: {detail}); "
            "rerun with TRACEADVISOR_DEBUG=1 for the traceback and please report it\n"
        )
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(rc if isinstance(rc, int) else EXIT_OK)
