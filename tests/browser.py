"""A small Chrome DevTools Protocol client: headless Chromium driven over ``--remote-debugging-pipe``.

The HTML report is tested in a real browser (tests/test_html_browser.py) and the README's screenshots
are taken with the same client (docs/make_screenshots.py). No third-party dependency: Chromium reads
commands on its fd 3 and writes replies and events on its fd 4, each message one JSON object ended by
a NUL byte. A reader thread splits the stream; replies (with an ``id``) and events (with a ``method``)
arrive interleaved, so every wait is for a reply with one id, or for the next event that matches,
with a timeout, and ends at once with ``BrowserError`` when the pipe closes (Chromium died).

    with Browser() as browser:
        page = browser.new_page(width=1400, height=900)
        page.goto(Path("report.html").as_uri())
        page.wait_for("window.traceadvisor && window.traceadvisor.ready")
        page.click("#finding-1 .show-in-timeline")
        png = page.screenshot("shot.png")
        assert not page.console_errors
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DEFAULT_TIMEOUT_S = 30.0

JSON = dict[str, Any]


class BrowserError(RuntimeError):
    """Chromium failed: it did not start, a command failed or timed out, or the pipe closed."""


class JSError(BrowserError):
    """A page expression threw."""


def find_chromium() -> str | None:
    """The Chromium (or Chrome) executable on PATH, or None (``TRACEADVISOR_CHROMIUM`` names one)."""
    named = os.environ.get("TRACEADVISOR_CHROMIUM")
    if named:
        return shutil.which(named)
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class _Connection:
    """The pipe to Chromium: send a command, wait for its reply or for an event."""

    def __init__(self, to_browser: int, from_browser: int) -> None:
        self._out = to_browser
        self._in = from_browser
        self._next_id = 0
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: dict[int, JSON] = {}
        self._events: list[JSON] = []  # every event, in order; waiters keep their own position
        self._listeners: list[Callable[[JSON], None]] = []
        self.closed_reason: str | None = None
        self._reader = threading.Thread(target=self._read, name="cdp-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buf = b""
        try:
            while True:
                chunk = os.read(self._in, 1 << 16)
                if not chunk:
                    break
                buf += chunk
                while b"\0" in buf:
                    raw, buf = buf.split(b"\0", 1)
                    if raw:
                        self._dispatch(json.loads(raw))
        except (OSError, ValueError) as e:  # ValueError: a message that is not JSON
            reason = f"pipe from Chromium failed: {e}"
        else:
            reason = "Chromium closed the pipe (it exited or crashed)"
        with self._cond:
            self.closed_reason = reason
            self._cond.notify_all()

    def _dispatch(self, msg: JSON) -> None:
        if "id" in msg:
            with self._cond:
                self._replies[int(msg["id"])] = msg
                self._cond.notify_all()
            return
        for listener in list(self._listeners):
            listener(msg)  # outside the lock: a listener only records (console errors)
        with self._cond:
            self._events.append(msg)
            self._cond.notify_all()

    def add_listener(self, listener: Callable[[JSON], None]) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[JSON], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def event_mark(self) -> int:
        """A position in the event stream: ``wait_event(after=mark)`` sees only later events."""
        with self._cond:
            return len(self._events)

    def send(
        self, method: str, params: JSON | None = None, session: str | None = None, timeout: float = DEFAULT_TIMEOUT_S
    ) -> JSON:
        """Send one command and return its ``result``; ``BrowserError`` on an error reply or timeout."""
        with self._send_lock:
            self._next_id += 1
            msg_id = self._next_id
            msg: JSON = {"id": msg_id, "method": method, "params": params or {}}
            if session:
                msg["sessionId"] = session
            data = json.dumps(msg).encode() + b"\0"
            try:
                while data:
                    data = data[os.write(self._out, data) :]
            except OSError as e:
                raise BrowserError(f"{method}: cannot write to Chromium: {e}") from e
        deadline = time.monotonic() + timeout
        with self._cond:
            while msg_id not in self._replies:
                if self.closed_reason:
                    raise BrowserError(f"{method}: {self.closed_reason}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError(f"{method}: no reply in {timeout:g} s")
                self._cond.wait(left)
            reply = self._replies.pop(msg_id)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message')} ({reply['error'].get('data', '')})")
        result: JSON = reply.get("result", {})
        return result

    def wait_event(self, method: str, session: str | None, after: int, timeout: float = DEFAULT_TIMEOUT_S) -> JSON:
        """The first event ``method`` (of ``session``) after position ``after``."""
        deadline = time.monotonic() + timeout
        pos = after
        with self._cond:
            while True:
                while pos < len(self._events):
                    ev = self._events[pos]
                    pos += 1
                    if ev.get("method") == method and (session is None or ev.get("sessionId") == session):
                        params: JSON = ev.get("params", {})
                        return params
                if self.closed_reason:
                    raise BrowserError(f"waiting for {method}: {self.closed_reason}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError(f"no {method} event in {timeout:g} s")
                self._cond.wait(left)


class Page:
    """One tab, attached with a flat session: navigate, evaluate, click, wheel, screenshot."""

    def __init__(self, conn: _Connection, target_id: str, session: str) -> None:
        self._conn = conn
        self.target_id = target_id
        self.session = session
        self.console_errors: list[str] = []
        conn.add_listener(self._on_event)

    def _on_event(self, msg: JSON) -> None:
        if msg.get("sessionId") != self.session:
            return
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console_errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            exc = d.get("exception", {}).get("description") or d.get("text", "")
            self.console_errors.append(f"uncaught exception: {exc} (line {d.get('lineNumber')})")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            e = params["entry"]
            self.console_errors.append(f"log {e.get('source')}: {e.get('text')} {e.get('url', '')}".rstrip())

    def send(self, method: str, params: JSON | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> JSON:
        return self._conn.send(method, params, session=self.session, timeout=timeout)

    def close(self) -> None:
        """Close the tab (its session ends with it)."""
        self._conn.remove_listener(self._on_event)
        self._conn.send("Target.closeTarget", {"targetId": self.target_id})

    def goto(self, url: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """Navigate and wait for the page's load event."""
        mark = self._conn.event_mark()
        nav = self.send("Page.navigate", {"url": url}, timeout=timeout)
        if nav.get("errorText"):
            raise BrowserError(f"cannot open {url}: {nav['errorText']}")
        self._conn.wait_event("Page.loadEventFired", self.session, mark, timeout=timeout)

    def evaluate(self, expression: str, timeout: float = DEFAULT_TIMEOUT_S) -> Any:
        """The value of a JavaScript expression (promises awaited), as JSON; ``JSError`` if it throws."""
        r = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True, "userGesture": False},
            timeout=timeout,
        )
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise JSError(f"{expression!r} threw: {d.get('exception', {}).get('description') or d.get('text')}")
        return r.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = DEFAULT_TIMEOUT_S, interval: float = 0.05) -> Any:
        """Poll ``expression`` until it is truthy and return its value; ``BrowserError`` on timeout."""
        deadline = time.monotonic() + timeout
        value: Any = None
        while True:
            value = self.evaluate(expression, timeout=max(1.0, deadline - time.monotonic()))
            if value:
                return value
            if time.monotonic() >= deadline:
                raise BrowserError(f"{expression!r} still {value!r} after {timeout:g} s")
            time.sleep(interval)

    def box(self, selector: str) -> JSON:
        """The element's box in the viewport (CSS px) after scrolling it into view (centred)."""
        sel = json.dumps(selector)
        b = self.evaluate(
            f"""(() => {{
                const el = document.querySelector({sel});
                if (!el) return null;
                el.scrollIntoView({{block: 'center', inline: 'center'}});
                const r = el.getBoundingClientRect();
                return {{x: r.x, y: r.y, width: r.width, height: r.height,
                         scrollX: window.scrollX, scrollY: window.scrollY}};
            }})()"""
        )
        if b is None:
            raise BrowserError(f"no element matches {selector!r}")
        if b["width"] <= 0 or b["height"] <= 0:
            raise BrowserError(f"{selector!r} has an empty box: {b}")
        box: JSON = b
        return box

    def _mouse(self, kind: str, x: float, y: float, **extra: Any) -> None:
        self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, **extra})

    def click(self, selector: str) -> None:
        """A real click at the centre of the element: mouse moved, pressed, released (input events
        the page cannot tell from a user's; ``element.click()`` would skip hit-testing). Fails when
        another element covers that point, as the user's click would land there."""
        b = self.box(selector)
        x, y = b["x"] + b["width"] / 2, b["y"] + b["height"] / 2
        hit = self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            f" const at = document.elementFromPoint({x}, {y}); return !!at && el.contains(at); }})()"
        )
        if not hit:
            raise BrowserError(f"{selector!r} is covered at ({x:.0f}, {y:.0f}): a click would not reach it")
        self._mouse("mouseMoved", x, y)
        self._mouse("mousePressed", x, y, button="left", buttons=1, clickCount=1)
        self._mouse("mouseReleased", x, y, button="left", buttons=0, clickCount=1)

    def wheel(self, selector: str, delta_y: float, fx: float = 0.5, fy: float = 0.5) -> None:
        """A mouse wheel turn over the element, at fraction (fx, fy) of its box (negative: up)."""
        b = self.box(selector)
        x, y = b["x"] + b["width"] * fx, b["y"] + b["height"] * fy
        self._mouse("mouseMoved", x, y)
        self._mouse("mouseWheel", x, y, deltaX=0, deltaY=delta_y)

    def drag(self, selector: str, dx: float, fy: float = 0.5) -> None:
        """Press in the middle of the element, move by ``dx`` px in steps, release."""
        b = self.box(selector)
        x, y = b["x"] + b["width"] / 2, b["y"] + b["height"] * fy
        self._mouse("mouseMoved", x, y)
        self._mouse("mousePressed", x, y, button="left", buttons=1, clickCount=1)
        for i in range(1, 6):
            self._mouse("mouseMoved", x + dx * i / 5, y, button="left", buttons=1)
        self._mouse("mouseReleased", x + dx, y, button="left", buttons=0, clickCount=1)

    def screenshot(
        self, path: str | Path | None = None, full_page: bool = False, selector: str | None = None, pad: float = 0
    ) -> bytes:
        """A PNG of the viewport, the whole page (``full_page``) or one element's box (``selector``,
        widened by ``pad`` CSS px on each side); written to ``path`` when given, returned always."""
        params: JSON = {"format": "png"}
        if selector is not None:
            b = self.box(selector)
            # The clip is in document coordinates: the viewport box plus the scroll offset.
            left, top = b["x"] + b["scrollX"], b["y"] + b["scrollY"]
            x, y = max(left - pad, 0.0), max(top - pad, 0.0)
            params["clip"] = {
                "x": x,
                "y": y,
                "width": left + b["width"] + pad - x,
                "height": top + b["height"] + pad - y,
                "scale": 1,
            }
            if b["height"] + 2 * pad > self.evaluate("window.innerHeight"):
                params["captureBeyondViewport"] = True  # an element taller than the viewport
        elif full_page:
            m = self.send("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m["contentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            params["captureBeyondViewport"] = True
        data = base64.b64decode(self.send("Page.captureScreenshot", params, timeout=60)["data"])
        if path is not None:
            Path(path).write_bytes(data)
        return data


class Browser:
    """Headless Chromium for the duration of a ``with`` block; the process group is killed on exit."""

    def __init__(self, executable: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        found = executable or find_chromium()
        if not found:
            raise BrowserError("chromium not found on PATH")
        self.executable = found
        self.timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: _Connection | None = None
        self._profile: str | None = None
        self._stderr_path: str | None = None

    def __enter__(self) -> Browser:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> None:
        self._profile = tempfile.mkdtemp(prefix="ta-chromium-")
        cmd_r, cmd_w = os.pipe()  # we write commands to cmd_w; Chromium reads cmd_r as its fd 3
        ev_r, ev_w = os.pipe()  # Chromium writes ev_w as its fd 4; we read ev_r
        cmd_r, ev_w = _above_4(cmd_r), _above_4(ev_w)  # so that moving them to 3 and 4 clobbers neither
        args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",  # containers often have a 64 MB /dev/shm
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-crash-reporter",  # Debian's wrapper enables it; its handler still starts,
            "--disable-breakpad",  # in a session of its own, and leaves when the browser does
            "--hide-scrollbars",
            "--mute-audio",
            "--remote-debugging-pipe",
            f"--user-data-dir={self._profile}",
            "about:blank",
        ]
        # subprocess keeps passed fds at their own numbers; a tiny launcher moves them to 3 and 4,
        # closes the originals and execs Chromium (the Debian wrapper script execs the real binary in
        # turn). Not a shell: dash takes no fd number above 9.
        launcher = (
            "import os, sys; r, w = int(sys.argv[1]), int(sys.argv[2]); os.dup2(r, 3); os.dup2(w, 4);"
            " os.close(r); os.close(w); os.execv(sys.argv[3], sys.argv[3:])"
        )
        stderr = tempfile.NamedTemporaryFile(prefix="ta-chromium-", suffix=".log", delete=False)
        self._stderr_path = stderr.name
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", launcher, str(cmd_r), str(ev_w), self.executable, *args],
                pass_fds=(cmd_r, ev_w),
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                start_new_session=True,  # its own process group: close() kills renderers and all
                # Chromium's default profile folder (crash database, caches) inside ours, not in $HOME.
                env={**os.environ, "XDG_CONFIG_HOME": f"{self._profile}/xdg", "XDG_CACHE_HOME": f"{self._profile}/xdg"},
            )
        finally:
            stderr.close()
            os.close(cmd_r)  # ours are closed so that Chromium's exit closes the pipe (EOF)
            os.close(ev_w)
        self._conn = _Connection(cmd_w, ev_r)
        self._fds = (cmd_w, ev_r)
        try:
            self.send("Browser.getVersion", timeout=self.timeout)
        except BrowserError as e:
            log = self.log_tail()
            self.close()
            raise BrowserError(f"Chromium did not start: {e}\n{log}") from e

    def log_tail(self, chars: int = 2000) -> str:
        """The end of Chromium's stdout/stderr (for failure messages)."""
        if not self._stderr_path or not Path(self._stderr_path).exists():
            return ""
        return Path(self._stderr_path).read_text(errors="replace")[-chars:]

    def send(self, method: str, params: JSON | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> JSON:
        if self._conn is None:
            raise BrowserError("browser not started")
        return self._conn.send(method, params, timeout=timeout)

    @property
    def pid(self) -> int | None:
        """The browser process (its process group has the same id), while it runs."""
        return self._proc.pid if self._proc is not None else None

    def version(self) -> str:
        return str(self.send("Browser.getVersion")["product"])

    def new_page(self, width: int = 1400, height: int = 900) -> Page:
        """A new tab of ``width`` × ``height`` CSS px (scale 1), with the Page, Runtime and Log domains on."""
        assert self._conn is not None
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self._conn, target, session)
        for domain in ("Page", "Runtime", "Log"):
            page.send(f"{domain}.enable")
        page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return page

    def close(self) -> None:
        """Ask Chromium to close, then end its process group (TERM, then KILL), remove the profile."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if self._conn is not None and self._conn.closed_reason is None:
                try:
                    self._conn.send("Browser.close", timeout=3)
                except BrowserError:
                    pass  # it may close the pipe before replying
            try:
                proc.wait(3)
            except subprocess.TimeoutExpired:
                pass
            # The whole group, whether or not the browser process left: renderers and the zygote
            # can outlive it. TERM first (it cleans up), KILL what is still there.
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    break  # the group is empty
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
                if sig == signal.SIGTERM:
                    time.sleep(0.2)
            deadline = time.monotonic() + 2  # the group gone before the profile is removed
            while time.monotonic() < deadline:
                try:
                    os.killpg(proc.pid, 0)
                except (ProcessLookupError, PermissionError):
                    break
                time.sleep(0.05)
        if self._conn is not None:
            for fd in self._fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._conn = None
        if self._profile:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None
        if self._stderr_path:
            Path(self._stderr_path).unlink(missing_ok=True)
            self._stderr_path = None


def _above_4(fd: int) -> int:
    """``fd`` moved to a number of 10 or more (the original closed)."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, channels, pixels) of an 8-bit non-interlaced PNG (grey, RGB, grey+alpha or
    RGBA: what Chromium writes), pixels row after row, unfiltered. Pure Python: no Pillow needed."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat = 8, bytearray()
    width = height = depth = ctype = interlace = -1
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 4], "big")
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height = int.from_bytes(body[0:4], "big"), int.from_bytes(body[4:8], "big")
            depth, ctype, interlace = body[8], body[9], body[12]
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(ctype)
    if depth != 8 or channels is None or interlace != 0:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {ctype}, interlace {interlace}")
    raw = zlib.decompress(bytes(idat))
    stride = width * channels
    out = bytearray(height * stride)
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if f == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 0xFF
        elif f == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = prev[i]
                c = prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        elif f != 0:
            raise ValueError(f"bad PNG filter {f} in row {y}")
        out[y * stride : (y + 1) * stride] = line
        prev = line
    return width, height, channels, bytes(out)


def pixel_stats(png: bytes) -> tuple[int, float, int]:
    """(pixel count, share of pixels unlike the most common colour, distinct colours) of a PNG;
    alpha is ignored. The most common colour is taken as the background."""
    width, height, channels, px = decode_png(png)
    colour_bytes = min(channels, 3)
    counts: dict[bytes, int] = {}
    for i in range(0, len(px), channels):
        key = px[i : i + colour_bytes]
        counts[key] = counts.get(key, 0) + 1
    total = width * height
    background = max(counts.values()) if counts else 0
    return total, (total - background) / total if total else 0.0, len(counts)
