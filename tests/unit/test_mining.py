"""Which commits are fixes their tests prove (``loop.rules.mining``), and ``loop eval mine``'s
refusals of bad input (one line, exit 2, nothing started)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from loop.contracts import CaseResult, FixCandidate, SuiteReport
from loop.rules import mining
from tests.support.repos import git

CANDIDATE = FixCandidate(
    commit="c" * 40, parent="p" * 40, message="Pad cents\n\ncents(105) gave '1.5'.",
    test_files=["tests/test_money.py"],
)  # fmt: skip


def report(**outcomes: str) -> SuiteReport:
    tests = {}
    for name, outcome in outcomes.items():
        file, _, test = name.partition("__")
        case_id = f"tests/{file}.py::{test}"
        tests[case_id] = CaseResult(id=case_id, outcome=outcome, file=f"tests/{file}.py")  # type: ignore[arg-type]
    return SuiteReport(runner="pytest", sessions=1, finished=1, tests=tests)


PARENT = report(test_money__test_small="failed", test_money__test_round="passed",
                test_basics__test_a="passed")  # fmt: skip
FIX = report(test_money__test_small="passed", test_money__test_round="passed",
             test_basics__test_a="passed")  # fmt: skip


def test_a_fix_its_tests_prove() -> None:
    case, why = mining.judge(CANDIDATE, "textkit", [PARENT, PARENT], [FIX, FIX])
    assert why == "" and case is not None
    assert case.fail_to_pass == ["tests/test_money.py::test_small"]
    assert case.pass_to_pass == ["tests/test_basics.py::test_a", "tests/test_money.py::test_round"]
    assert case.goal.startswith("Pad cents") and case.id == "textkit-cccccccccc"


def test_tests_that_pass_on_the_parent_prove_nothing() -> None:
    case, why = mining.judge(CANDIDATE, "textkit", [FIX, FIX], [FIX, FIX])
    assert case is None and "pass on the parent's code too" in why


def test_a_test_of_the_fix_that_flips_drops_the_case() -> None:
    case, why = mining.judge(CANDIDATE, "textkit", [PARENT, FIX], [FIX, FIX])
    assert case is None and why.startswith("flaky: tests/test_money.py::test_small")


def test_a_flaky_test_elsewhere_is_left_out_of_pass_to_pass() -> None:
    other = report(test_money__test_small="passed", test_money__test_round="passed",
                   test_basics__test_a="failed")  # fmt: skip
    case, _ = mining.judge(CANDIDATE, "textkit", [PARENT, PARENT], [FIX, other])
    assert case is not None and "tests/test_basics.py::test_a" not in case.pass_to_pass


def test_a_cut_report_is_no_proof() -> None:
    cut = PARENT.model_copy(update={"finished": 0})
    case, why = mining.judge(CANDIDATE, "textkit", [PARENT, cut], [FIX, FIX])
    assert case is None and why == "the tests did not report whole at the parent"


def loop(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    binary = str(Path(sys.executable).parent / "loop")
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True,
                          check=False)  # fmt: skip


def test_bad_input_to_mine_is_one_line_and_exit_2(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    done = loop("eval", "mine", str(plain), cwd=tmp_path)
    assert done.returncode == 2 and "not a git repository" in done.stderr, done
    assert len(done.stderr.strip().splitlines()) == 1
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    inside = loop("eval", "mine", str(repo), "--out", str(repo / "suite"), cwd=tmp_path)
    assert inside.returncode == 2 and "inside the repository" in inside.stderr, inside
    named = loop("eval", "mine", str(repo), "--name", "Bad Name!", cwd=tmp_path)
    assert named.returncode == 2 and "--name" in named.stderr, named
