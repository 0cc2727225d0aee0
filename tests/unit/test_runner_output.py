"""The runner's own output against the records its process sent
(``loop.rules.runner_output``): real pytest and unittest output, honest and forged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loop.contracts import CaseResult, SuiteReport
from loop.rules import runner_output

SUITE = """\
def test_ok():
    assert 1


def test_bad():
    assert 0


def test_also_ok():
    print("F")
    assert 1
"""


def report(**outcomes: str) -> SuiteReport:
    tests = {
        f"tests/test_s.py::{name}": CaseResult(id=f"tests/test_s.py::{name}", outcome=o)  # type: ignore[arg-type]
        for name, o in outcomes.items()
    }
    return SuiteReport(runner="pytest", sessions=1, finished=1, tests=tests)


QUIET_ENV = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
"""pytest's own output, without this environment's plugins (they only slow it down here)."""
HONEST = report(test_ok="passed", test_bad="failed", test_also_ok="passed")
FORGED = report(test_ok="passed", test_bad="passed", test_also_ok="passed")


def pytest_output(tmp_path: Path, *options: str) -> list[str]:
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_s.py").write_text(SUITE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *options, "tests"],
        cwd=tmp_path, capture_output=True, text=True, check=False, env=QUIET_ENV,
    )  # fmt: skip
    return (done.stdout + done.stderr).splitlines()


@pytest.mark.parametrize("options", [("-q",), (), ("-v",), ("-qq",), ("-q", "-rA")])
def test_pytest_output_agrees_with_an_honest_report_and_not_with_a_forged_one(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    lines = pytest_output(tmp_path, *options)
    assert runner_output.contradictions(HONEST, lines) == [], lines
    found = runner_output.contradictions(FORGED, lines)
    assert found, lines
    assert any("failure mark" in f or "failure(s)" in f or "printed" in f for f in found), found


def test_a_forger_that_prints_a_summary_of_its_own_is_still_caught_by_the_marks() -> None:
    lines = [".F.                                                  [100%]", "3 passed in 0.01s"]
    assert runner_output.contradictions(FORGED, lines) == [
        "pytest printed 1 failure mark(s) (F or E) but the report has no failing test"
    ]


def test_a_run_that_printed_nothing_of_its_own_is_not_taken_on_its_word() -> None:
    found = runner_output.contradictions(HONEST, ["some other program's output"])
    assert found and found[0].startswith("pytest printed no result of its own")
    cut = runner_output.contradictions(HONEST, ["[output cut: 5 more bytes not kept]"])
    assert cut[0].startswith("pytest's output was larger than the log keeps")


def test_what_the_tests_printed_in_their_failure_sections_is_not_a_mark() -> None:
    lines = [
        "..F                                                  [100%]",
        "=================================== FAILURES ===================================",
        "____________________________________ test_c ____________________________________",
        "----------------------------- Captured stdout call -----------------------------",
        "FFFF",
        "....",
        "1 failed, 2 passed in 0.02s",
    ]
    honest = report(test_a="passed", test_b="passed", test_c="failed")
    assert runner_output.contradictions(honest, lines) == []


def test_unittest_output(tmp_path: Path) -> None:
    (tmp_path / "test_u.py").write_text(
        "import unittest\n\nclass T(unittest.TestCase):\n"
        "    def test_ok(self):\n        pass\n"
        "    def test_bad(self):\n        self.fail('no')\n"
    )
    done = subprocess.run([sys.executable, "-m", "unittest", "test_u"], cwd=tmp_path,
                          capture_output=True, text=True, check=False)  # fmt: skip
    lines = (done.stdout + done.stderr).splitlines()

    def unit(**outcomes: str) -> SuiteReport:
        tests = {f"test_u.T.{n}": CaseResult(id=f"test_u.T.{n}", outcome=o)  # type: ignore[arg-type]
                 for n, o in outcomes.items()}  # fmt: skip
        return SuiteReport(runner="unittest", sessions=1, finished=1, tests=tests)

    assert runner_output.contradictions(unit(test_ok="passed", test_bad="failed"), lines) == []
    forged = runner_output.contradictions(unit(test_ok="passed", test_bad="passed"), lines)
    assert "unittest's summary counts 1 failure(s) but the report has none" in forged


def test_coloured_output_is_read_as_plain(tmp_path: Path) -> None:
    lines = pytest_output(tmp_path, "-q", "--color=yes")
    assert any("\x1b[" in line for line in lines)
    assert runner_output.contradictions(HONEST, lines) == [], lines
    assert runner_output.contradictions(FORGED, lines)
