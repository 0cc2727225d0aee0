"""Base's failures a fix is not asked to fix (``loop.rules.baseline``): pre-existing
failures of the environment, and flaky tests, each set aside with its reason."""

from __future__ import annotations

from loop.contracts import CaseResult, RunGate, SuiteReport
from loop.rules import baseline

GATE = RunGate(name="tests", run="python -m pytest -q")


def case(case_id: str, outcome: str, message: str = "", exception: str = "",
         raised_at: str = "") -> CaseResult:  # fmt: skip
    return CaseResult(id=case_id, outcome=outcome, file=case_id.split("::")[0],  # type: ignore[arg-type]
                      message=message, exception=exception, raised_at=raised_at)  # fmt: skip


def report(*cases: CaseResult) -> SuiteReport:
    return SuiteReport(runner="pytest", sessions=1, finished=1, tests={c.id: c for c in cases})


NETWORK = case("t.py::test_fetch", "failed", "E   urllib.error.URLError: <urlopen error [Errno -3] "
               "Temporary failure in name resolution>", "urllib.error.URLError")  # fmt: skip
GAI = case("t.py::test_dns", "failed", "Traceback (most recent call last):\n  File x\n"
           "socket.gaierror: [Errno -3] Temporary failure in name resolution\n")  # fmt: skip
READ_ONLY = case("t.py::test_cache", "failed", "E   OSError: [Errno 30] Read-only file system: "
                 "'tests/res/x'", "OSError")  # fmt: skip
MISSING = case("t.py::test_yaml", "error", "E   ModuleNotFoundError: No module named 'yaml'",
               "ModuleNotFoundError")  # fmt: skip
BUG = case("t.py::test_slug", "failed", "E   assert 'a, b' == 'a-b'", "AssertionError")
MISSING_FILE_IN_CODE = case("t.py::test_save", "failed", "E   FileNotFoundError: out.txt",
                            "FileNotFoundError", "src/save.py")  # fmt: skip


def test_errors_of_the_environment_are_pre_existing_and_assertions_are_required() -> None:
    first = report(NETWORK, GAI, READ_ONLY, MISSING, BUG, MISSING_FILE_IN_CODE)
    aside = baseline.set_aside(GATE, first, first, "fix slug", {"src/save.py"})
    assert set(aside) == {"t.py::test_fetch", "t.py::test_dns", "t.py::test_cache",
                          "t.py::test_yaml"}  # fmt: skip
    assert aside["t.py::test_dns"].startswith("pre-existing at base (network): socket.gaierror")
    assert aside["t.py::test_cache"].startswith("pre-existing at base (read-only file system)")
    assert aside["t.py::test_yaml"].startswith("pre-existing at base (missing module)")
    assert not baseline.only_environment(GATE, first, aside)  # the bug's test is left


def test_a_test_the_goal_names_stays_required() -> None:
    first = report(NETWORK, BUG)
    goal = "make test_fetch pass without the network"
    aside = baseline.set_aside(GATE, first, None, goal, set())
    assert "t.py::test_fetch" not in aside


def test_an_outcome_that_changes_between_the_two_base_runs_is_flaky() -> None:
    first = report(case("t.py::test_coin", "passed"), case("t.py::test_flip", "failed"), BUG)
    second = report(case("t.py::test_coin", "failed"), case("t.py::test_flip", "passed"), BUG)
    aside = baseline.set_aside(GATE, first, second, "", set())
    assert aside == {"t.py::test_coin": "flaky at base: passed, then failed",
                     "t.py::test_flip": "flaky at base: failed, then passed"}  # fmt: skip


def test_the_gate_names_known_flaky_tests() -> None:
    gate = RunGate(name="tests", run="pytest", flaky=["t.py::test_c*"])
    first = report(case("t.py::test_coin", "passed"), BUG)
    aside = baseline.set_aside(gate, first, None, "", set())
    assert aside == {"t.py::test_coin": "named flaky in the gate"}


def test_every_base_failure_of_the_environment_is_a_question_for_a_person() -> None:
    first = report(NETWORK, READ_ONLY, case("t.py::test_ok", "passed"))
    aside = baseline.set_aside(GATE, first, None, "", set())
    assert baseline.only_environment(GATE, first, aside)
    named = RunGate(name="tests", run="pytest", fail_to_pass=["t.py::test_fetch"])
    assert not baseline.only_environment(named, first, aside)
