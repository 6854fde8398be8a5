"""The rule class and its loading (issue 11): ``Rule[Options]`` binds the options, claims of idle
causes come from the loaded rules, the family promise holds, a rules folder's helper modules
import, and the engine takes capabilities from its caller.

Rule files are real files in temporary folders, loaded by the real registry; where the command
line's answer matters (one line, exit 2), through a real ``traceadvisor`` subprocess.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from traceadvisor.config import Config
from traceadvisor.engine import claimed_by
from traceadvisor.engine.registry import claims_of, discover, load_rule_file
from traceadvisor.engine.rule import Capability, NoOptions, trace_capabilities
from traceadvisor.engine.runner import instantiate, run
from traceadvisor.errors import UsageError
from traceadvisor.rules_api import IdleCause, Rule
from traceadvisor.trace.load import load_file

TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "train_step.json.gz"

# What analyses/idle.py's CLAIMED_BY table said before the claims moved onto the rules.
CLAIMED_BEFORE = {
    "sync": "sync-point",
    "data_loading": "data-loader-bound",
    "optimizer": "optimizer-not-fused",
    "launch_bound": "launch-overhead",
    "launch_latency": None,
    "cpu_op": "idle-gap",
    "unknown": "idle-gap",
    # added with issue 13: the host waiting for a collective (a gloo:/nccl: span)
    "communication": "exposed-communication",
}


def rule_file(folder: Path, stem: str, code: str, *, head: str = "", cls_line: str = "", body: str = "") -> Path:
    """A rule file ``stem.py``: ``head`` at the top, the class line, ``body`` in the class."""
    folder.mkdir(parents=True, exist_ok=True)
    name = stem.replace("_", "-")
    text = "\n".join(
        [
            "from dataclasses import dataclass",
            "from traceadvisor.rules_api import Capability, Finding, IdleCause, Rule, Trace",
            textwrap.dedent(head),
            cls_line or "class R(Rule):",
            '    """A rule of the engine tests."""',
            f'    code = "{code}"',
            f'    name = "{name}"',
            textwrap.indent(textwrap.dedent(body), "    "),
            "    def check(self, trace):",
            '        yield self.finding(trace, message=f"{self.options!r}", recommendation="none")',
            "",
        ]
    )
    path = folder / f"{stem}.py"
    path.write_text(text)
    return path


def cli(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceadvisor", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )


OPTIONS = """
@dataclass(frozen=True)
class Options:
    limit_us: float = 5.0
"""


# -- Rule[Options] ------------------------------------------------------------------------------


def test_class_line_binds_the_options(tmp_path: Path) -> None:
    cls = load_rule_file(rule_file(tmp_path, "bound", "XB101", head=OPTIONS, cls_line="class R(Rule[Options]):"))
    assert cls.Options.__name__ == "Options" and dataclasses.is_dataclass(cls.Options)
    rule = cls()
    assert rule.options == cls.Options(limit_us=5.0)
    assert cls.make_options({"limit_us": 7}) == cls.Options(limit_us=7.0)


def test_rule_without_argument_has_no_options(tmp_path: Path) -> None:
    cls = load_rule_file(rule_file(tmp_path, "plain", "XB102"))
    assert cls.Options is NoOptions
    assert isinstance(cls().options, NoOptions)


def test_module_options_left_unbound_is_a_load_error_naming_the_file(tmp_path: Path) -> None:
    """Before issue 11 this loaded, and failed only when check() read ``self.options.limit_us``."""
    path = rule_file(tmp_path / "mine", "unbound", "XB103", head=OPTIONS, cls_line="class R(Rule):")
    p = cli(tmp_path, "rules", "--rules-dir", tmp_path / "mine", "--isolated")
    assert p.returncode == 2, p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("traceadvisor: error: ") and str(path) in lines[0]
    assert "class R(Rule[Options])" in lines[0]


def test_binding_something_else_than_a_dataclass_fails_at_class_creation() -> None:
    with pytest.raises(TypeError, match="must bind a dataclass"):

        class Bad(Rule[int]):  # type: ignore[type-var]
            """Bad."""


def test_a_body_options_that_disagrees_with_the_class_line_fails() -> None:
    @dataclasses.dataclass(frozen=True)
    class A:
        x: int = 1

    @dataclasses.dataclass(frozen=True)
    class B:
        y: int = 2

    with pytest.raises(TypeError, match="disagrees"):

        class Bad(Rule[A]):
            """Bad."""

            Options = B


def test_every_builtin_rule_with_options_binds_them() -> None:
    for s in discover(include_entry_points=False):
        module = sys.modules[s.cls.__module__]
        own = getattr(module, "Options", None)
        if own is not None:
            assert s.cls.Options is own, s.origin


# -- claims ---------------------------------------------------------------------------------------


def test_builtin_claims_reproduce_the_old_table() -> None:
    assert claims_of(discover(include_entry_points=False)) == CLAIMED_BEFORE


def test_claimed_by_lists_every_cause_even_unclaimed() -> None:
    assert claimed_by([]) == {c.value: None for c in IdleCause}


def test_a_user_rule_can_claim_an_unclaimed_cause(tmp_path: Path) -> None:
    rule_file(tmp_path, "latency", "XC101", body="claims = frozenset({IdleCause.launch_latency})")
    sources = discover([tmp_path], include_entry_points=False)
    assert claims_of(sources)["launch_latency"] == "latency"
    assert claims_of(sources)["sync"] == "sync-point"


def test_two_rules_claiming_one_cause_is_a_load_error_naming_both(tmp_path: Path) -> None:
    theirs = rule_file(tmp_path / "mine", "my_sync", "XC102", body="claims = frozenset({IdleCause.sync})")
    p = cli(tmp_path, "rules", "--rules-dir", tmp_path / "mine", "--isolated")
    assert p.returncode == 2
    line = p.stderr.strip()
    assert "'sync' is claimed by two rules" in line and "sync-point" in line and str(theirs) in line
    assert "sy101_sync_point.py" in line


def test_a_claim_that_is_not_an_idle_cause_is_a_load_error(tmp_path: Path) -> None:
    path = rule_file(tmp_path, "stringly", "XC103", body='claims = frozenset({"sync"})')
    with pytest.raises(UsageError, match="not an IdleCause") as exc:
        discover([tmp_path], include_entry_points=False)
    assert str(path) in str(exc.value)


def test_rules_receive_the_claims_of_all_loaded_rules_not_only_the_selected() -> None:
    sources = discover(include_entry_points=False)
    gap = next(s.cls for s in sources if s.cls.code == "GK101")
    (rule,) = instantiate([gap], Config(), claims_of(sources))
    assert rule.claimed_by == CLAIMED_BEFORE
    (alone,) = instantiate([gap], Config())  # without the map: only what the rule itself claims
    assert alone.claimed_by["sync"] is None and alone.claimed_by["cpu_op"] == "idle-gap"


def test_report_idle_section_names_claims_whatever_is_selected(tmp_path: Path) -> None:
    """The report's ``claimed_by`` comes from the loaded rules, so ``--select`` leaves it alone, and
    a user rule's claim shows there."""
    rule_file(tmp_path / "mine", "latency", "XC104", body="claims = frozenset({IdleCause.launch_latency})")
    p = cli(tmp_path, "analyze", TRACE, "-f", "json", "--isolated", "--select", "TQ102", "--rules-dir", "mine")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["traces"][0]["idle_breakdown"]
    owners = {r["cause"]: r["claimed_by"] for r in rows}
    assert owners, rows
    for cause, owner in owners.items():
        want = "latency" if cause == "launch_latency" else CLAIMED_BEFORE[cause]
        assert owner == want, (cause, owner)


# -- families and helper modules ----------------------------------------------------------------


def test_user_code_in_a_builtin_family_is_refused(tmp_path: Path) -> None:
    path = rule_file(tmp_path, "mine", "GK901")
    with pytest.raises(UsageError, match="built-in family GK") as exc:
        discover([tmp_path], include_entry_points=False)
    assert str(path) in str(exc.value)


def test_a_rule_file_imports_a_helper_module_beside_it_and_each_folder_has_its_own(tmp_path: Path) -> None:
    for n, folder in enumerate(("one", "two")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "_helpers.py").write_text(f"WORD = {folder!r}\n")
        rule_file(
            tmp_path / folder, f"helped_{folder}", f"XH10{n}", head="import _helpers", body="word = _helpers.WORD"
        )
    sources = discover([tmp_path / "one", tmp_path / "two"], include_entry_points=False)
    words = {s.cls.code: s.cls.word for s in sources if s.cls.code.startswith("XH")}  # type: ignore[attr-defined]
    assert words == {"XH100": "one", "XH101": "two"}
    assert "_helpers" not in sys.modules  # the folder's modules do not outlive its loading
    assert str(tmp_path / "one") not in sys.path


# -- capabilities come from the caller ----------------------------------------------------------


def test_peaks_capability_is_the_callers_to_give() -> None:
    trace = load_file(TRACE)
    assert Capability.peaks not in trace_capabilities(trace)
    assert Capability.peaks in trace_capabilities(trace, has_peaks=True)


def test_run_skips_a_rule_whose_capability_the_caller_did_not_give(tmp_path: Path) -> None:
    cls = load_rule_file(rule_file(tmp_path, "needs_peaks", "XP101", body="requires = frozenset({Capability.peaks})"))
    trace = load_file(TRACE)
    without = run([cls()], [trace], capabilities=[trace_capabilities(trace)])
    assert not without.findings and without.skipped[0].code == "XP101"
    assert "gpu_peaks" in without.skipped[0].reason
    given = run([cls()], [trace], capabilities=[trace_capabilities(trace, has_peaks=True)])
    assert [f.code for f in given.findings] == ["XP101"] and not given.skipped
    with pytest.raises(ValueError, match="capability sets"):
        run([cls()], [trace], capabilities=[])
