"""``traceadvisor open TRACE [--at FINDING] [--print]``: hand one trace to the Perfetto UI.

The protocol is Perfetto's own ``tools/open_trace_in_ui``: serve the file once from
``http://127.0.0.1:9001`` (the only local origin the UI's Content Security Policy lets it fetch
from), with ``Access-Control-Allow-Origin: https://ui.perfetto.dev`` (a cross-origin fetch needs
it), open ``https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/<file>``, and stop after the
one GET. The file goes as it is: Perfetto recognises gzip by its magic bytes, so a ``.json.gz``
needs no ``Content-Encoding``. A page opened from ``file://`` (the HTML report) cannot do this
itself (Perfetto's postMessage hand-off refuses ``file://`` openers), so the report shows the
command instead (``perfetto_command``).

``--at FINDING`` adds ``visStart``/``visEnd`` to the URL: the initial visible range, in ns of the
trace's own timeline (Perfetto's deep-linking doc: "in ns with the boottime clock"). What was read
of Perfetto's JSON importer (``src/trace_processor/importers/json``): ``json_trace_utils.cc``
``CoerceToNs`` turns each event's ``ts`` (µs, the JSON trace format's unit unless a leading
``displayTimeUnit`` says otherwise; kineto writes none) into ns as ``int64(ts * 1000)``, truncated;
the tokenizer reads ``traceEvents``, ``systemTraceEvents``, ``metadata``, ``displayTimeUnit`` and
``otherData`` and nothing else at the top level, so kineto's ``baseTimeNanoseconds`` is never added.
Assumed from that: Perfetto's timeline is the trace's ``ts`` × 1000, relative to
``baseTimeNanoseconds`` exactly as kineto wrote it (since torch 2.4 kineto writes ``ts`` relative
to that base; older traces hold absolute µs, and the same mapping holds), with no clock
conversion for a JSON trace. The findings' ``Evidence.ts_us`` is that same ``ts`` (the tables keep
the trace's µs as exact ns, ``trace/tables.py``), so ``visStart = ts_us * 1000`` needs no offset.
Not checked in a browser here (no network): the mapping rests on the importer's source.

The visible window: the finding's first evidence event (rules list the most telling first),
widened by its own duration on each side (at least ``PAD_NS``) so that it fills the middle third;
a finding without evidence (a per-step pattern such as launch-overhead) gets the step around
it: its trace's first analysed step, CPU and GPU windows together; a trace without steps, the
analysis window.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
import webbrowser
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import quote, unquote, urlsplit

import typer

from traceadvisor.console import fail

if TYPE_CHECKING:
    from traceadvisor.report.finding import Finding
    from traceadvisor.report.model import Report, TraceSummary

PERFETTO_UI = "https://ui.perfetto.dev"
# The only port the Perfetto UI's CSP allows for a local trace server (tools/open_trace_in_ui).
PERFETTO_PORT = 9001
HOST = "127.0.0.1"
DEFAULT_TIMEOUT_S = 120.0
# Context around a short evidence event: a 1.5 µs kernel alone would fill the screen with nothing.
PAD_NS = 10_000
# A client that connects and sends nothing must not hold the single-threaded server past this.
REQUEST_TIMEOUT_S = 10.0
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Window:
    """A visible range on Perfetto's timeline, ns (the trace's ``ts`` × 1000)."""

    start_ns: int
    end_ns: int


def perfetto_command(trace_path: str | Path, finding_index: int | None = None) -> str:
    """The shell command that opens ``trace_path`` in Perfetto, at finding ``finding_index``
    (1-based, as the text report numbers it; None: the whole trace), quoted for a POSIX shell:
    for the HTML report to show, since a ``file://`` page cannot hand a trace to Perfetto."""
    cmd = f"traceadvisor open {shlex.quote(str(trace_path))}"
    return cmd if finding_index is None else f"{cmd} --at {int(finding_index)}"


def _ns(us: float) -> int:
    # the report's µs carry three decimals (whole ns): rounding recovers the exact ns
    return round(us * 1000)


def finding_window(finding: Finding, trace: TraceSummary | None) -> Window | None:
    """Where ``finding`` is on Perfetto's timeline (module docstring); None: no time to show."""
    if finding.evidence:
        e = finding.evidence[0]
        start, dur = _ns(e.ts_us), max(_ns(e.dur_us), 0)
        pad = max(dur, PAD_NS)
        return Window(start - pad, start + dur + pad)
    if trace is None:
        return None
    if trace.steps:
        s = trace.steps[0]
        lo, hi = _ns(s.cpu_start_us), _ns(s.cpu_start_us + s.cpu_dur_us)
        if s.gpu_start_us is not None and s.gpu_dur_us is not None and s.gpu_dur_us > 0:
            lo, hi = min(lo, _ns(s.gpu_start_us)), max(hi, _ns(s.gpu_start_us + s.gpu_dur_us))
        return Window(lo, hi)
    if trace.window_us > 0:
        return Window(_ns(trace.window_start_us), _ns(trace.window_start_us + trace.window_us))
    return None


def pick_finding(report: Report, at: str) -> tuple[int, Finding]:
    """The finding ``at`` names: its number in the text report (1-based, the report's order) or a
    rule code or name (the first, highest-ranked, finding of that rule). Raises ``ValueError``."""
    findings = report.findings
    text = at.strip()
    if text.isdigit():
        n = int(text)
        if not 1 <= n <= len(findings):
            have = f"1-{len(findings)}" if findings else "none: the trace has no findings"
            raise ValueError(f"--at {text}: no finding {n} in the report (findings: {have})")
        return n, findings[n - 1]
    for i, f in enumerate(findings, 1):
        if text.lower() in (f.code.lower(), f.rule.lower()):
            return i, f
    listed = ", ".join(dict.fromkeys(f"{f.code} {f.rule}" for f in findings)) or "none"
    raise ValueError(f"--at {text}: no finding of that rule in the report (findings: {listed})")


def served_name(trace: Path) -> str:
    """The file name in the served URL: the trace's, with characters that a URL or Perfetto's
    hash-route arguments would have to escape replaced (Perfetto titles the trace with it)."""
    name = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in trace.name)
    return name or "trace.json"


def perfetto_url(port: int, name: str, window: Window | None) -> str:
    """The UI address that makes Perfetto fetch ``name`` from the local server (and show
    ``window``). Route arguments go after ``#!/?``: the UI routes on the fragment."""
    url = f"{PERFETTO_UI}/#!/?url={quote(f'http://{HOST}:{port}/{name}', safe=':/')}&referrer=traceadvisor"
    if window is not None:
        url += f"&visStart={window.start_ns}&visEnd={window.end_ns}"
    return url


class _OnceServer(HTTPServer):
    """Serves one file at one path until a GET of it has been answered in full."""

    def __init__(self, port: int, trace: Path, name: str) -> None:
        self.trace = trace
        self.route = f"/{name}"
        self.served = False
        self.failure: str | None = None
        super().__init__((HOST, port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _OnceServer
    timeout = REQUEST_TIMEOUT_S

    def _cors(self) -> None:
        self.send_header("Access-Control-Allow-Origin", PERFETTO_UI)
        # Chrome's Private Network Access: a public page (ui.perfetto.dev) reading from
        # 127.0.0.1 is preflighted with Access-Control-Request-Private-Network, answered so.
        self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Vary", "Origin")

    def _is_trace(self) -> bool:
        return unquote(urlsplit(self.path).path) == self.server.route

    def do_OPTIONS(self) -> None:
        """The CORS preflight: allow the UI's GET (with whatever headers it asks for)."""
        self.send_response(204)
        self._cors()
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        asked = self.headers.get("Access-Control-Request-Headers")
        if asked:
            self.send_header("Access-Control-Allow-Headers", asked)
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _head(self) -> int | None:
        if not self._is_trace():
            self.send_response(404)
            self._cors()
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        try:
            size = self.server.trace.stat().st_size
        except OSError as exc:
            self.server.failure = f"{self.server.trace}: cannot read ({exc.strerror or exc})"
            self.send_error(500)
            return None
        self.send_response(200)
        self._cors()
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        return size

    def do_HEAD(self) -> None:
        self._head()

    def do_GET(self) -> None:
        """The file's bytes as they are on disk; the one GET that ends the serving."""
        size = self._head()
        if size is None:
            return
        sent = 0
        try:
            with self.server.trace.open("rb") as fh:
                while chunk := fh.read(_CHUNK):
                    self.wfile.write(chunk)
                    sent += len(chunk)
        except OSError:
            # the browser went away mid-transfer (or the file did): not served; wait for another GET
            return
        self.server.served = sent == size

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the command's own lines say what happened."""


def _check_trace(trace: Path) -> None:
    """Fail (exit 2) unless ``trace`` is one readable file that starts like a profiler trace.
    Reads only the head (the reader's own check), not the events: serving needs no analysis."""
    from traceadvisor.errors import TraceError
    from traceadvisor.trace.reader import ReadResult, iter_blocks, read_head

    if trace.is_dir():
        raise fail(f"{trace}: is a directory; open takes one trace file (Perfetto opens one file)")
    result = ReadResult()
    blocks = iter_blocks(trace, result, max_bytes=1 << 62)  # the size is Perfetto's to limit
    try:
        read_head(trace, blocks, result)
    except TraceError as exc:
        raise fail(str(exc)) from None
    finally:
        close = getattr(blocks, "close", None)  # a generator: closing it closes the file
        if close is not None:
            close()


def _window_at(trace: Path, at: str) -> tuple[int, Window | None]:
    """Analyse ``trace`` as ``traceadvisor analyze`` does (the configuration it finds) and return
    the number of the finding ``at`` names and its window."""
    from traceadvisor.console import analyze_or_fail
    from traceadvisor.errors import UsageError
    from traceadvisor.pipeline import configure
    from traceadvisor.trace.reader import DEFAULT_MAX_INFLATED_BYTES

    try:
        cfg = configure()
    except UsageError as exc:
        raise fail(str(exc)) from None
    report = analyze_or_fail([trace], cfg, DEFAULT_MAX_INFLATED_BYTES)
    try:
        n, finding = pick_finding(report, at)
    except ValueError as exc:
        raise fail(str(exc)) from None
    summary = next((t for t in report.traces if t.path == finding.trace), report.traces[0] if report.traces else None)
    return n, finding_window(finding, summary)


def _serve(server: _OnceServer, timeout_s: float) -> bool:
    """Answer requests until the trace has been fetched once, a failure, or ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not server.served and server.failure is None:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        server.timeout = left
        server.handle_request()
    return server.served


def open_trace(
    trace: Annotated[Path, typer.Argument(help="One trace file (.json, .json.gz), served as it is.")],
    at: Annotated[
        str | None,
        typer.Option(
            "--at", help="Show this finding's time range: its number in the report (1: the first) or its rule."
        ),
    ] = None,
    print_url: Annotated[
        bool, typer.Option("--print", help="Print the Perfetto URL instead of opening a browser (still serves).")
    ] = False,
    port: Annotated[
        int, typer.Option("--port", help="Local port to serve on; the Perfetto UI only fetches from 9001.")
    ] = PERFETTO_PORT,
    timeout_s: Annotated[
        float, typer.Option("--timeout-s", help="Stop serving after this many seconds without the fetch.")
    ] = DEFAULT_TIMEOUT_S,
) -> None:
    """Open a trace in the Perfetto UI, served once from 127.0.0.1:9001.

    Example: traceadvisor open trace.json.gz --at 1
    """
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise fail(f"--timeout-s must be a positive number of seconds, not {timeout_s}")
    if not 0 < port < 65536:
        raise fail(f"--port must be between 1 and 65535, not {port}")
    _check_trace(trace)
    window = None
    label = ""
    if at is not None:
        n, window = _window_at(trace, at)
        label = f" at finding {n}" if window is not None else f" (finding {n} has no time range: whole trace)"
    name = served_name(trace)
    try:
        server = _OnceServer(port, trace, name)
    except OSError as exc:
        why = "in use" if getattr(exc, "errno", None) in (98, 48, 10048) else (exc.strerror or str(exc))
        raise fail(f"cannot serve on {HOST}:{port} ({why}); is another 'traceadvisor open' running?") from None
    with server:
        url = perfetto_url(server.server_address[1], name, window)
        if print_url:
            typer.echo(url)
            sys.stdout.flush()
        elif not webbrowser.open(url):
            sys.stderr.write("traceadvisor: no browser found; open this address:\n")
            typer.echo(url)
            sys.stdout.flush()
        sys.stderr.write(
            f"traceadvisor: serving {trace}{label} on http://{HOST}:{port}/{name} "
            f"until Perfetto fetches it (at most {timeout_s:g} s)\n"
        )
        sys.stderr.flush()
        served = _serve(server, timeout_s)
    if server.failure is not None:
        raise fail(server.failure)
    if not served:
        raise fail(f"Perfetto did not fetch the trace within {timeout_s:g} s; stopped serving {trace}")
    sys.stderr.write("traceadvisor: the trace was fetched; Perfetto has it now\n")
