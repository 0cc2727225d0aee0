"""Per-test verdicts: the commit judged against base by test id (``loop.rules.verdicts``)."""

from __future__ import annotations

import pytest

from loop.contracts import CaseResult, RunGate, SuiteReport
from loop.rules import verdicts


def report(outcomes: dict[str, str], *, finished: bool = True, **extra: object) -> SuiteReport:
    tests = {
        i: CaseResult(id=i, outcome=o, file=i.split("::")[0], message=f"E   assert {i}")  # type: ignore[arg-type]
        for i, o in outcomes.items()
    }
    return SuiteReport(
        runner="pytest",
        sessions=1,
        finished=1 if finished else 0,
        collected={i: c.file for i, c in tests.items()},
        tests=tests,
        **extra,  # type: ignore[arg-type]
    )


BASE = report({"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "failed"})
GATE = RunGate(name="tests", run="pytest -q")


def test_a_fix_that_keeps_every_test_passes() -> None:
    now = report({"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "passed"})
    judged = verdicts.judge(GATE, now, BASE, 0)
    assert judged.passed, judged.detail
    assert judged.detail == (
        "3 passed (pytest); against base: 2 passing still pass, 1 required now pass"
    )


def test_exit_code_zero_without_the_end_of_the_session_fails() -> None:
    now = report({"t.py::a": "passed"}, finished=False)
    judged = verdicts.judge(GATE, now, BASE, 0)
    assert not judged.passed
    assert judged.detail == (
        "the test run ended before it reported: exit code 0, 1 of 1 tests reported; "
        "1 test session(s) never reported their end"
    )
    nothing = verdicts.judge(GATE, None, BASE, 0)
    assert nothing.detail.startswith("the test run ended before it reported: exit code 0, 0 of 3")


def test_records_that_fail_their_check_make_the_report_untrusted() -> None:
    now = report({"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "passed"})
    now.problems.append("2 record(s) failed authentication")
    judged = verdicts.judge(GATE, now, BASE, 0)
    assert not judged.passed and "failed authentication" in judged.detail


def test_a_test_passing_at_base_must_still_pass_by_id() -> None:
    for outcome in ("skipped", "xfailed", "failed", "error"):
        now = report({"t.py::a": outcome, "t.py::b": "passed", "t.py::c": "passed"})
        judged = verdicts.judge(GATE, now, BASE, 0)
        assert not judged.passed, outcome
        first = judged.failing[0]
        assert (first.id, first.outcome, first.at_base) == (
            "t.py::a",
            outcome,
            "passed",
        )
    gone = report({"t.py::b": "passed", "t.py::c": "passed"})
    judged = verdicts.judge(GATE, gone, BASE, 0)
    assert judged.failing[0].outcome == "missing"
    assert "t.py::a (missing: not collected or not run)" in judged.detail
    deselected = report({"t.py::b": "passed", "t.py::c": "passed"}, deselected=["t.py::a"])
    assert verdicts.judge(GATE, deselected, BASE, 0).failing[0].message == "deselected"


def test_fail_to_pass_auto_requires_every_base_failure_to_pass() -> None:
    now = report({"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "failed"})
    judged = verdicts.judge(GATE, now, BASE, 1)
    assert not judged.passed
    assert "1 required test(s) not passing: t.py::c (failed: assert t.py::c)" in judged.detail


def test_fail_to_pass_named_tolerates_other_known_failures() -> None:
    base = report({"t.py::a": "passed", "t.py::c": "failed", "t.py::flaky": "failed"})
    gate = RunGate(name="tests", run="pytest", fail_to_pass=["t.py::c"])
    now = report({"t.py::a": "passed", "t.py::c": "passed", "t.py::flaky": "failed"})
    judged = verdicts.judge(gate, now, base, 1)
    assert judged.passed, judged.detail
    assert "1 failing at base still fail" in judged.detail
    # ... but a known failure does not excuse a new one, nor the named test failing
    worse = report({"t.py::a": "passed", "t.py::c": "failed", "t.py::flaky": "failed"})
    assert not verdicts.judge(gate, worse, base, 1).passed
    new = report({"t.py::a": "passed", "t.py::c": "passed", "t.py::flaky": "failed",
                  "t.py::new": "failed"})  # fmt: skip
    assert "1 test(s) failing: t.py::new" in verdicts.judge(gate, new, base, 1).detail


def test_a_glob_that_names_no_test_fails() -> None:
    gate = RunGate(name="tests", run="pytest", fail_to_pass=["t.py::nothing*"])
    now = report({"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "passed"})
    judged = verdicts.judge(gate, now, BASE, 0)
    assert not judged.passed and "fail_to_pass names no test: t.py::nothing*" in judged.detail


def test_protected_tests_must_each_pass() -> None:
    base = report({"t.py::a": "passed", "p.py::guard": "skipped"})
    now = report({"t.py::a": "passed", "p.py::guard": "skipped"})
    judged = verdicts.judge(GATE, now, base, 0, protected={"p.py::guard"})
    assert not judged.passed
    assert judged.failing[0].id == "p.py::guard"


def test_a_non_zero_exit_with_no_failure_fails() -> None:
    now = report({"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "passed"})
    judged = verdicts.judge(GATE, now, BASE, 2)
    assert not judged.passed and judged.detail.endswith("; exit code 2")


def test_without_base_no_test_may_fail() -> None:
    assert verdicts.judge(GATE, report({"t.py::x": "passed"}), None, 0).passed
    judged = verdicts.judge(GATE, report({"t.py::x": "failed"}), None, 1)
    assert not judged.passed and "1 test(s) failing: t.py::x" in judged.detail


def test_collection_errors_fail() -> None:
    error = CaseResult(id="t.py", outcome="error", file="t.py", message="ImportError: x")
    now = report({"u.py::a": "passed"}, collect_errors=[error])
    judged = verdicts.judge(GATE, now, None, 2)
    assert (
        not judged.passed and "1 collection error(s): t.py (error: ImportError: x)" in judged.detail
    )


def test_lost_tests_by_the_runners_collection() -> None:
    base = report({"a": "passed", "b": "passed", "c": "skipped", "d": "failed", "e": "passed"})
    now = report({"a": "skipped", "c": "skipped", "d": "xfailed"}, deselected=["e"])
    lost = verdicts.lost_tests(base, now)
    assert lost.missing == ["b"]
    assert lost.deselected == ["e"]
    assert lost.skipped == ["a", "d"]
    assert not lost.ok
    assert verdicts.lost_tests(base, base).ok


def test_regressions_are_tests_the_attempt_added_or_changed_that_fail_on_base() -> None:
    now = report({"tests/t.py::old": "passed", "tests/n.py::new": "passed", "x.py::y": "passed",
                  "tests/n.py::kept": "passed"})  # fmt: skip
    overlay = report(
        {
            "tests/t.py::old": "passed",
            "tests/n.py::new": "failed",
            "x.py::y": "failed",
            "tests/n.py::kept": "failed",
        }
    )
    overlay.tests["tests/n.py::new"].exception = "AssertionError"
    touched = {"tests/t.py": {"old"}, "tests/n.py": {"new"}}
    found = verdicts.regressions(now, overlay, touched, set(), set())
    assert found.candidates == ["tests/n.py::new", "tests/t.py::old"]
    assert [c.id for c in found.proven] == ["tests/n.py::new"]
    assert found.untouched == 1  # tests/n.py::kept fails at base, but the attempt left it alone
    broken = CaseResult(id="tests/n.py", outcome="error", file="tests/n.py", message="ImportError")
    uncollectable = SuiteReport(sessions=1, finished=1, collect_errors=[broken])
    refused = verdicts.regressions(now, uncollectable, {"tests/n.py": {"new"}}, set(), set())
    assert not refused.proven
    assert refused.refused == ["tests/n.py::new: it is not collected on base's code (ImportError)"]


@pytest.mark.parametrize(
    ("exception", "message", "raised_at", "counted"),
    [
        ("AssertionError", "E   assert 'a, b' == 'a-b'", "tests/t.py", True),
        ("_pytest.outcomes.Failed", "E   Failed: DID NOT RAISE", "tests/t.py", True),
        ("ValueError", "E   ValueError: bad", "src/slug.py", True),  # base's own code raised
        ("ModuleNotFoundError", "E   ModuleNotFoundError: No module named 'src.helper'",
         "tests/t.py", False),
        ("ImportError", "E   ImportError: cannot import name 'helper' from 'src.slug'",
         "tests/t.py", False),
        ("AttributeError", "E   AttributeError: module 'src.slug' has no attribute 'helper'",
         "tests/t.py", False),
        ("TypeError", "E   TypeError: slug() got an unexpected keyword argument 'sep'",
         "tests/t.py", False),
    ],
)  # fmt: skip
def test_a_failure_at_base_counts_only_by_assertion_or_an_error_of_bases_code(
    exception: str, message: str, raised_at: str, counted: bool
) -> None:
    case = CaseResult(id="tests/t.py::test_x", outcome="failed", file="tests/t.py",
                      message=message, exception=exception, raised_at=raised_at)  # fmt: skip
    why = verdicts.why_not_counted(case, {"helper"}, {"src/slug.py"})
    assert (why == "") is counted, why
    errored = case.model_copy(update={"outcome": "error"})
    assert verdicts.why_not_counted(errored, set(), {"src/slug.py"}).startswith("it errors")


def test_expects_report_for_the_runners_loopwork_reports() -> None:
    for line in ("pytest -q", "python3 -m pytest tests", "cd x && .venv/bin/pytest",
                 "python -m unittest discover -s tests"):  # fmt: skip
        assert verdicts.expects_report(RunGate(name="t", run=line)), line
    for line in ("make test", "ruff check .", "echo pytest"):
        assert not verdicts.expects_report(RunGate(name="t", run=line)), line
    assert not verdicts.expects_report(RunGate(name="t", run="pytest", report="exit"))
    assert verdicts.expects_report(RunGate(name="t", run="go test", report={"junit": "j.xml"}))


def test_headline_is_the_assertion() -> None:
    pytest_text = ">       assert add(1, 2) == 4\nE       assert 3 == 4\n\nt.py:5: AssertionError"
    assert verdicts.headline(pytest_text) == "assert 3 == 4"
    unittest_text = "Traceback ...\n  File x\nAssertionError: 'a' != 'b'\n- a\n+ b\n"
    assert verdicts.headline(unittest_text) == "AssertionError: 'a' != 'b'"
    assert verdicts.headline("") == ""


def test_the_second_observation_must_see_each_pass_again() -> None:
    now = report({"tests/t.py::a": "passed", "tests/t.py::b": "passed", "tests/u.py::c": "passed"})
    seen = report({"tests/t.py::a": "passed", "tests/t.py::b": "failed", "tests/u.py::c": "passed"})
    seen.tests["tests/t.py::b"].message = "E   assert slug('a, b') == 'a-b'"
    seen.tests["tests/u.py::c"].outcome = "missing"
    seen.tests["tests/u.py::c"].message = "it needs the fixture caplog"
    ids = ["tests/t.py::a", "tests/t.py::b", "tests/u.py::c"]
    assert verdicts.disagreements(now, seen, ids, set()) == [
        "tests/t.py::b: passed under the runner, failed without it: assert slug('a, b') == 'a-b'"
    ]
    changed = verdicts.disagreements(now, seen, ids, {"tests/u.py"})
    assert changed[-1].startswith("tests/u.py::c: passed under the runner; the witness could not")
    cut = report({"tests/t.py::a": "passed"}, finished=False)
    assert verdicts.disagreements(now, cut, ids, set())[0].startswith(
        "the second observation of 3 test(s) outside the runner did not finish"
    )
    assert "reported nothing" in verdicts.disagreements(now, None, ids, set())[0]


def test_set_aside_tests_neither_block_nor_count_as_fixed() -> None:
    base = report({"t.py::a": "passed", "t.py::net": "failed", "t.py::bug": "failed"})
    now = report({"t.py::a": "passed", "t.py::net": "failed", "t.py::bug": "passed"})
    aside = {"t.py::net": "pre-existing at base (network): ConnectionRefusedError"}
    judged = verdicts.judge(GATE, now, base, 1, aside=aside)
    assert judged.passed, judged.detail
    assert judged.fixed() == ["t.py::bug"]
    assert "set aside, not counted: t.py::net (pre-existing at base (network)" in judged.detail
    assert [c.id for c in judged.set_aside] == ["t.py::net"]
    assert not verdicts.judge(GATE, now, base, 1).passed  # without it, the network test blocks


def test_a_tracebacks_headline_is_what_it_raised_never_traceback_alone() -> None:
    network = (
        "Traceback (most recent call last):\n"
        '  File "/x/test_net.py", line 4, in test_fetch\n'
        "    socket.create_connection(('pypi.org', 443))\n"
        "socket.gaierror: [Errno -3] Temporary failure in name resolution\n"
    )
    assert verdicts.headline(network) == (
        "socket.gaierror: [Errno -3] Temporary failure in name resolution"
    )
    assert verdicts.raised_type(network) == "socket.gaierror"
    chained = network + "\nDuring handling of the above exception, another exception occurred:\n\n"
    chained += "Traceback (most recent call last):\n  File x\nurllib.error.URLError: <urlopen>\n"
    assert verdicts.headline(chained) == "urllib.error.URLError: <urlopen>"
    assert verdicts.headline("Traceback (most recent call last):\n") == ""
