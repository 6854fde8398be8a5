"""The package's top-level names: each resolves to what it says, lazily, and the library path
(``traceadvisor.analyze`` then ``traceadvisor.render``) gives the CLI's report byte for byte."""

from __future__ import annotations

import subprocess
import sys

from fixture_paths import FIXTURE_TRACES

import traceadvisor

TRACE = FIXTURE_TRACES / "planted_sync_in_loop.json.gz"


def test_every_public_name_resolves_and_nothing_else_is_offered() -> None:
    for name in traceadvisor.__all__:
        assert getattr(traceadvisor, name) is not None, name
    assert set(traceadvisor.__all__) <= set(dir(traceadvisor))
    assert traceadvisor.Report.__module__ == "traceadvisor.report.model"
    assert traceadvisor.analyze.__module__ == "traceadvisor.pipeline"


def test_importing_the_package_loads_neither_pandas_nor_torch() -> None:
    code = "import sys, traceadvisor; print('pandas' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_library_analyze_and_render_give_the_cli_report() -> None:
    report = traceadvisor.analyze([TRACE])
    assert isinstance(report, traceadvisor.Report)
    # the sync the trace was captured to show is found (launch-overhead may lead it: graphs between
    # the syncs save more on this launch-heavy loop, and findings are ranked by their savings)
    assert "SY101" in [f.code for f in report.findings]
    cli = subprocess.run(
        [sys.executable, "-m", "traceadvisor", "analyze", "-f", "json", str(TRACE)], capture_output=True, check=True
    ).stdout
    assert traceadvisor.render(report, "json") == cli
