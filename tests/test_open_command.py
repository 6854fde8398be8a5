"""``traceadvisor open TRACE [--at FINDING] [--print]`` (issue 14): the trace served once over
loopback with Perfetto's CORS header, the URL's visible range from a finding's evidence.

Until the lead registers the command in ``cli.TOOL_COMMANDS``, the tests run it through a
one-command typer app in a subprocess (the command serves until fetched, so it runs beside the
test's client); one test runs ``python -m traceadvisor open`` once it is registered."""

from __future__ import annotations

import gzip
import json
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import typer
from typer.testing import CliRunner

from tests.fixture_paths import FIXTURE_TRACES
from traceadvisor.open_command import open_trace, perfetto_command

# Finding 1 is pageable-copy (MC101), its evidence the pageable H2D memcpy events; idle-gap and
# sync-point findings follow (tests below take the numbers from the JSON report, not from here).
PINNED = FIXTURE_TRACES / "p12_pinned_before_stack.json.gz"
# Finding 1 is launch-overhead (GK102), a per-step pattern with no evidence event.
ITEM = FIXTURE_TRACES / "p12_item_host_before_stack.json.gz"
ORIGIN = "https://ui.perfetto.dev"

APP = (
    "import typer\n"
    "from traceadvisor.open_command import open_trace\n"
    "app = typer.Typer()\n"
    "app.command(name='open')(open_trace)\n"
    "app()\n"
)


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command(name="open")(open_trace)
    return app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str  # the Perfetto URL the command printed
    trace_url: str  # the address Perfetto is told to fetch
    args: dict[str, str]  # the route arguments after "#!/?"


@contextmanager
def _serving(*args: str | Path, env: dict[str, str] | None = None, module: bool = False) -> Iterator[Served]:
    """Run the command with ``--print`` on a free port; yield once it has printed its URL."""
    port = _free_port()
    head = [sys.executable, "-m", "traceadvisor", "open"] if module else [sys.executable, "-c", APP]
    proc = subprocess.Popen(
        [*head, *map(str, args), "--print", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()  # printed once the socket is listening
        assert line.startswith(f"{ORIGIN}/#!/?"), (line, proc.stderr.read() if proc.stderr else "")
        query = parse_qs(line.split("#!/?", 1)[1])
        route = {k: v[0] for k, v in query.items()}
        assert urlsplit(route["url"]).port == port
        yield Served(proc, line, route["url"], route)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _get(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method, headers={"Origin": ORIGIN, **(headers or {})})
    with urllib.request.urlopen(req, timeout=30) as r:
        return int(r.status), {k.lower(): v for k, v in r.headers.items()}, r.read()


def _report(trace: Path) -> dict[str, Any]:
    p = subprocess.run(
        [sys.executable, "-m", "traceadvisor", "analyze", str(trace), "-f", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode in (0, 1), p.stderr
    return dict(json.loads(p.stdout))


def _raw_events(trace: Path) -> list[dict[str, Any]]:
    with gzip.open(trace, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if isinstance(e.get("ts"), int | float)]


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("traceadvisor: error:")]


# -- serving -------------------------------------------------------------------------------------
def test_serves_the_gz_file_once_with_the_cors_header_and_exits_0() -> None:
    with _serving(PINNED) as s:
        assert s.args["url"].endswith("/p12_pinned_before_stack.json.gz")
        assert urlsplit(s.trace_url).hostname == "127.0.0.1"
        # the preflight a browser sends before a cross-origin (and public -> local) fetch
        status, headers, body = _get(
            s.trace_url,
            "OPTIONS",
            {"Access-Control-Request-Method": "GET", "Access-Control-Request-Private-Network": "true"},
        )
        assert status == 204 and body == b""
        assert headers["access-control-allow-origin"] == ORIGIN
        assert "GET" in headers["access-control-allow-methods"]
        assert headers["access-control-allow-private-network"] == "true"
        assert s.proc.poll() is None  # a preflight is not the fetch: still serving
        status, headers, body = _get(s.trace_url)
        assert status == 200
        assert headers["access-control-allow-origin"] == ORIGIN
        # as on disk: still gzip (Perfetto sniffs the magic), no Content-Encoding for the browser
        assert body == PINNED.read_bytes() and body[:2] == b"\x1f\x8b"
        assert "content-encoding" not in headers
        assert s.proc.wait(timeout=30) == 0
        assert s.proc.stderr is not None and "fetched" in s.proc.stderr.read()
    with pytest.raises(urllib.error.URLError):  # served once: nobody listens any more
        _get(s.trace_url)


def test_serves_an_uncompressed_trace_as_is(tmp_path: Path) -> None:
    plain = tmp_path / "item host.json"  # a space: the served name must still be one URL path
    plain.write_bytes(gzip.decompress(ITEM.read_bytes()))
    with _serving(plain) as s:
        assert s.args["url"].endswith("/item_host.json")
        assert _get(s.trace_url)[2] == plain.read_bytes()
        assert s.proc.wait(timeout=30) == 0


def test_other_paths_get_404_and_do_not_end_the_serving() -> None:
    with _serving(PINNED) as s:
        other = s.trace_url.rsplit("/", 1)[0] + "/etc_passwd"
        with pytest.raises(urllib.error.HTTPError) as err:
            _get(other)
        assert err.value.code == 404
        assert s.proc.poll() is None
        assert _get(s.trace_url)[2] == PINNED.read_bytes()
        assert s.proc.wait(timeout=30) == 0


def test_without_a_fetch_the_timeout_ends_it_with_one_error_line() -> None:
    with _serving(PINNED, "--timeout-s", "1") as s:
        assert s.proc.wait(timeout=30) == 2
        assert s.proc.stderr is not None
        errors = _error_lines(s.proc.stderr.read())
    assert len(errors) == 1 and "did not fetch the trace within 1 s" in errors[0]


def test_a_port_in_use_is_one_error_line_exit_2() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = CliRunner().invoke(_app(), [str(PINNED), "--print", "--port", str(port), "--timeout-s", "1"])
    assert r.exit_code == 2
    errors = _error_lines(r.stderr)
    assert len(errors) == 1 and f"127.0.0.1:{port} (in use)" in errors[0]
    assert r.stdout == ""  # no URL for a server that never started


# -- --at: the visible range ----------------------------------------------------------------------
def test_at_1_shows_the_first_findings_evidence_on_perfettos_timeline() -> None:
    finding = _report(PINNED)["findings"][0]
    ev = finding["evidence"][0]
    start_ns, end_ns = round(ev["ts_us"] * 1000), round((ev["ts_us"] + ev["dur_us"]) * 1000)
    # The evidence is a real event of the file: Perfetto's JSON importer puts an event at its
    # raw ts x 1000 ns (baseTimeNanoseconds is not added), so the window must be around that.
    raw = [e for e in _raw_events(PINNED) if e.get("name") == ev["name"] and round(e["ts"] * 1000) == start_ns]
    assert len(raw) == 1 and round(raw[0]["dur"] * 1000) == end_ns - start_ns
    with _serving(PINNED, "--at", "1") as s:
        vis_start, vis_end = int(s.args["visStart"]), int(s.args["visEnd"])
        _get(s.trace_url)
        assert s.proc.wait(timeout=30) == 0
    assert vis_start < start_ns and end_ns < vis_end
    # the event is the point of the view: at least a third of it, centred
    dur = end_ns - start_ns
    assert vis_end - vis_start <= 3 * max(dur, 10_000) + 1
    assert abs((vis_start + vis_end) / 2 - (start_ns + end_ns) / 2) <= 1
    # and on the trace's own timeline, as Perfetto draws it
    lo = min(round(e["ts"] * 1000) for e in _raw_events(PINNED))
    hi = max(round((e["ts"] + e.get("dur", 0)) * 1000) for e in _raw_events(PINNED))
    assert lo <= vis_start and vis_end <= hi


def test_at_a_finding_without_evidence_shows_its_first_step() -> None:
    report = _report(ITEM)
    assert report["findings"][0]["evidence"] == []  # launch-overhead: a per-step pattern
    step = report["traces"][0]["steps"][0]
    lo = min(step["cpu_start_us"], step["gpu_start_us"])
    hi = max(step["cpu_start_us"] + step["cpu_dur_us"], step["gpu_start_us"] + step["gpu_dur_us"])
    with _serving(ITEM, "--at", "1") as s:
        assert (int(s.args["visStart"]), int(s.args["visEnd"])) == (round(lo * 1000), round(hi * 1000))
        _get(s.trace_url)
        assert s.proc.wait(timeout=30) == 0


def test_at_a_rule_code_or_name_picks_its_first_finding() -> None:
    findings = _report(ITEM)["findings"]
    n = next(i for i, f in enumerate(findings, 1) if f["rule"] == "idle-gap")
    ev = findings[n - 1]["evidence"][0]
    windows = []
    for at in (str(n), "idle-gap", findings[n - 1]["code"].lower()):
        with _serving(ITEM, "--at", at) as s:
            windows.append((int(s.args["visStart"]), int(s.args["visEnd"])))
            _get(s.trace_url)
            assert s.proc.wait(timeout=30) == 0
    assert len(set(windows)) == 1
    vis_start, vis_end = windows[0]
    assert vis_start < round(ev["ts_us"] * 1000) and round((ev["ts_us"] + ev["dur_us"]) * 1000) < vis_end


def test_without_at_the_url_has_no_visible_range() -> None:
    with _serving(ITEM) as s:
        assert "visStart" not in s.args and "visEnd" not in s.args
        _get(s.trace_url)
        assert s.proc.wait(timeout=30) == 0


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["fixtures/traces/no_such_trace.json.gz"], "no such file"),
        (["fixtures/traces/PROVENANCE.md"], "not"),
        (["fixtures/traces"], "is a directory"),
        ([str(PINNED), "--at", "99"], "no finding 99"),
        ([str(PINNED), "--at", "0"], "no finding 0"),
        ([str(PINNED), "--at", "no-such-rule"], "no finding of that rule"),
        ([str(PINNED), "--timeout-s", "0"], "--timeout-s"),
    ],
)
def test_bad_input_is_one_error_line_exit_2(args: list[str], says: str) -> None:
    r = CliRunner().invoke(_app(), [*args, "--print", "--port", str(_free_port())])
    assert r.exit_code == 2, r.output
    errors = _error_lines(r.stderr)
    assert len(errors) == 1 and says in errors[0], r.stderr
    assert r.stdout == ""  # nothing served, no URL


# -- opening a browser ----------------------------------------------------------------------------
def _browser_env(tmp_path: Path, browser: str) -> dict[str, str]:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    # BROWSER is webbrowser's first choice; PATH empty of console browsers (lynx, w3m ...)
    env.update(BROWSER=browser, PATH=str(empty))
    return env


def test_without_print_the_browser_gets_the_url(tmp_path: Path) -> None:
    got = tmp_path / "url.txt"
    record = tmp_path / "browser.py"  # a "browser" that writes down the address it was given
    record.write_text(f"import sys\nopen({str(got)!r}, 'w').write(sys.argv[1])\n")
    browser = f"{shlex.quote(sys.executable)} {shlex.quote(str(record))} %s"
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", APP, str(PINNED), "--port", str(port), "--timeout-s", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_browser_env(tmp_path, browser),
    )
    try:
        assert proc.stderr is not None
        assert "serving" in proc.stderr.readline()  # written after the browser was started
        deadline = time.monotonic() + 30
        while not (got.exists() and got.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)  # the browser command runs beside the server
        url = got.read_text()
        assert url.startswith(f"{ORIGIN}/#!/?url=http://127.0.0.1:{port}/")
        trace_url = parse_qs(url.split("#!/?", 1)[1])["url"][0]
        assert _get(trace_url)[2] == PINNED.read_bytes()
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0 and out == ""  # the URL went to the browser, not stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_without_a_browser_it_prints_the_url_and_serves_anyway(tmp_path: Path) -> None:
    env = _browser_env(tmp_path, str(tmp_path / "no-such-browser"))
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", APP, str(PINNED), "--port", str(port), "--timeout-s", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith(f"{ORIGIN}/#!/?url=http://127.0.0.1:{port}/")
        trace_url = parse_qs(url.split("#!/?", 1)[1])["url"][0]
        assert _get(trace_url)[2] == PINNED.read_bytes()
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "no browser" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- the command for the HTML report, and the registered command -----------------------------------
def test_perfetto_command_is_a_shell_line_that_names_the_trace_and_finding() -> None:
    cmd = perfetto_command("runs/my run/rank0.json.gz", 3)
    assert cmd == "traceadvisor open 'runs/my run/rank0.json.gz' --at 3"
    assert shlex.split(cmd) == ["traceadvisor", "open", "runs/my run/rank0.json.gz", "--at", "3"]
    assert perfetto_command(Path("t.json.gz"), None) == "traceadvisor open t.json.gz"


def test_python_m_traceadvisor_open_serves_the_trace() -> None:
    from traceadvisor.cli import TOOL_COMMANDS

    if "open" not in TOOL_COMMANDS:
        pytest.skip("not registered yet")
    with _serving(PINNED, "--at", "1", module=True) as s:
        assert "visStart" in s.args
        assert _get(s.trace_url)[2] == PINNED.read_bytes()
        assert s.proc.wait(timeout=30) == 0
