"""Screenshots of the HTML report for the README: the three reports the browser tests open.

    .venv/bin/python docs/make_screenshots.py [--out docs/screenshots]

For each of a single-GPU training step, a multi-rank run with a straggler and a CPU-only capture
(``tests/test_html_browser.py``'s cases, analysed the same way), headless Chromium
(``tests/browser.py``) opens the rendered page 1400 px wide and takes two PNGs:

- ``<case>.png``: the top of the page, the verdict and the first findings;
- ``<case>_timeline.png``: the timeline section after a real click on finding 1's "Show in timeline"
  (the first finding that has the button, when finding 1 has none).

Each PNG must stay under 400 kB (the repository carries them); the script fails otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the browser client and the cases live with the tests

from browser import Browser, BrowserError, Page, find_chromium  # noqa: E402
from test_html_browser import CASES, Case, analyse  # noqa: E402

from traceadvisor.atomic import write_bytes  # noqa: E402
from traceadvisor.report import render  # noqa: E402

WIDTH, HEIGHT = 1400, 1000
MAX_BYTES = 400_000


def _shoot(page: Page, case: Case, out: Path) -> list[Path]:
    page.wait_for("window.traceadvisor && (window.traceadvisor.ready || window.traceadvisor.error)", timeout=60)
    error = page.evaluate("window.traceadvisor.error")
    if error:
        raise BrowserError(f"{case.name}: the page failed: {error}")
    page.evaluate("window.scrollTo(0, 0)")
    top = out / f"{case.name}.png"
    write_bytes(top, page.screenshot())
    n = page.evaluate(
        "(document.querySelector('#finding-1 button.show-in-timeline')"
        " || document.querySelector('button.show-in-timeline') || {dataset: {}}).dataset.finding || null"
    )
    shots = [top]
    if n is not None:
        draws = page.evaluate("window.traceadvisor.draws")
        page.click(f'#finding-{n} button.show-in-timeline[data-finding="{n}"]')
        page.wait_for(f"window.traceadvisor.draws > {draws}", timeout=10)
        timeline = out / f"{case.name}_timeline.png"
        write_bytes(timeline, page.screenshot(selector="#timeline", pad=12))
        shots.append(timeline)
    if page.console_errors:
        raise BrowserError(f"{case.name}: console errors: {page.console_errors}")
    return shots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    args = parser.parse_args()
    if find_chromium() is None:
        print("chromium not found on PATH (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    # Traces named relative to the repository, so that the pages show fixtures/traces/..., not this
    # machine's checkout path.
    os.chdir(REPO)
    cases = [Case(c.name, tuple(p.relative_to(REPO) for p in c.paths), c.multi_rank) for c in CASES]
    with tempfile.TemporaryDirectory() as tmp, Browser() as browser:
        for case in cases:
            html = Path(tmp) / f"{case.name}.html"
            html.write_bytes(render(analyse(case), "html"))
            page = browser.new_page(width=WIDTH, height=HEIGHT)
            try:
                page.goto(html.as_uri())
                written += _shoot(page, case, args.out)
            finally:
                page.close()
    too_big = False
    for p in written:
        size = p.stat().st_size
        print(f"{p.relative_to(REPO) if p.is_relative_to(REPO) else p}: {size / 1000:.0f} kB")
        too_big |= size > MAX_BYTES
    if too_big:
        print(f"a screenshot is over {MAX_BYTES // 1000} kB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
