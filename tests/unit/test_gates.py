"""Gates that judge without running a command, on real git repositories, and failure
fingerprints. ``run`` gates (they run in the sandbox) and ``evaluate`` are in
tests/e2e/test_gates.py; no_removed_tests by the runner's report in
tests/e2e/test_verdicts.py. Here it reads the test files: the task has no run gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.gates import gate_env
from activities.gates import kept as kept_gate
from activities.gates.contains import judge as contains_gate
from activities.gates.kept import is_test_file, parse_tests
from activities.gates.scope import judge as diff_scope_gate
from loop.contracts import (
    ContainsGate,
    DiffScope,
    DiffScopeGate,
    Evidence,
    Gate,
    GateResult,
    NoRemovedTestsGate,
)
from loop.rules.fingerprint import fingerprint, normalise
from tests.support.gates import APP, TESTS, GateRepo
from tests.support.repos import git


@pytest.fixture
def repo(tmp_path: Path) -> GateRepo:
    return GateRepo(tmp_path)


# --------------------------------------------------------------------------- gate environment


def test_gate_env_keeps_existing_pytest_addopts() -> None:
    env = gate_env({"PATH": "/bin", "PYTEST_ADDOPTS": "-x --tb=short"})
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTEST_ADDOPTS"] == "-p no:cacheprovider -x --tb=short"
    assert env["PATH"] == "/bin"
    assert gate_env({})["PYTEST_ADDOPTS"] == "-p no:cacheprovider"


# --------------------------------------------------------------------------- diff_scope


def scope_gate(allow: list[str] | None = None, protect: list[str] | None = None) -> Gate:
    scope = DiffScope(allow=allow or ["**"], protect=protect or [])
    return DiffScopeGate(name="scope", diff_scope=scope)


def test_diff_scope_inside_allow_passes(repo: GateRepo) -> None:
    make = repo.agent_commit({"src/app.py": APP + "\n# more\n", "tests/test_new.py": "x = 1\n"})
    result = diff_scope_gate(scope_gate(["src/**", "tests/**"]), make.changed_files)
    assert result.passed
    assert result.evidence.files == ["src/app.py", "tests/test_new.py"]
    assert result.requirement == "changes stay within src/**, tests/**"


def test_diff_scope_outside_allow_is_recoverable(repo: GateRepo) -> None:
    make = repo.agent_commit(
        {"src/app.py": APP + "\n# more\n", "README.md": "hi\n", "docs/x.md": "x\n"}
    )
    result = diff_scope_gate(scope_gate(["src/**", "tests/**"]), make.changed_files)
    assert not result.passed
    assert not result.policy_violation
    assert result.evidence.files == ["README.md", "docs/x.md"]
    assert result.evidence.detail == "README.md, docs/x.md outside src/** and tests/**"


def test_diff_scope_protected_path_is_a_policy_violation(repo: GateRepo) -> None:
    make = repo.agent_commit({"tests/test_app.py": TESTS + "\n# weakened\n", "NOTES": "x\n"})
    gate = scope_gate(["src/**", "tests/**"], protect=["tests/test_app.py"])
    result = diff_scope_gate(gate, make.changed_files)
    assert not result.passed
    assert result.policy_violation
    assert result.evidence.files == ["tests/test_app.py"]
    assert result.evidence.detail == "protected path touched: tests/test_app.py"
    assert "leave tests/test_app.py untouched" in result.requirement


def test_diff_scope_deleting_a_protected_file_counts(repo: GateRepo) -> None:
    make = repo.agent_commit({"tests/test_app.py": None})
    result = diff_scope_gate(scope_gate(protect=["tests/*.py"]), make.changed_files)
    assert result.policy_violation
    assert result.evidence.files == ["tests/test_app.py"]


def test_diff_scope_glob_semantics() -> None:
    gate = scope_gate(["src/**", "*.md"], protect=["secrets/"])
    assert diff_scope_gate(gate, ["src/a/b/c.py", "docs/deep/x.md", "./README.md"]).passed
    assert not diff_scope_gate(gate, ["srcx/a.py"]).passed
    assert diff_scope_gate(gate, ["secrets/key.pem"]).policy_violation
    assert diff_scope_gate(scope_gate(), []).passed


# --------------------------------------------------------------------------- no_removed_tests

KEEP = NoRemovedTestsGate(name="keep-tests", no_removed_tests=True)


async def keep_tests(repo: GateRepo, files: dict[str, str | None]) -> GateResult:
    make = repo.agent_commit(files)
    return await kept_gate.evaluate(KEEP, repo.judging(make, KEEP))


async def test_unchanged_tests_pass(repo: GateRepo) -> None:
    result = await keep_tests(repo, {"src/app.py": "def add(a, b):\n    return b + a\n"})
    assert result.passed
    assert result.evidence.files == []
    assert result.requirement == (
        "no test present at base is removed, newly skipped, xfailed or deselected"
    )
    assert "by reading the test files" in result.evidence.detail


async def test_added_tests_pass(repo: GateRepo) -> None:
    more = TESTS + "\n\ndef test_three():\n    assert add(0, 0) == 0\n"
    new = "class TestMore:\n    def test_four(self):\n        assert True\n"
    result = await keep_tests(repo, {"tests/test_app.py": more, "tests/test_more.py": new})
    assert result.passed, result.evidence.detail


async def test_removed_test_function_fails(repo: GateRepo) -> None:
    result = await keep_tests(repo, {"tests/test_app.py": TESTS.split("\n\ndef test_two")[0]})
    assert not result.passed
    assert not result.policy_violation
    assert result.evidence.files == ["tests/test_app.py::test_two"]
    assert "tests removed: tests/test_app.py::test_two" in result.evidence.detail


async def test_renamed_test_function_counts_as_removed(repo: GateRepo) -> None:
    result = await keep_tests(repo, {"tests/test_app.py": TESTS.replace("test_one", "check_one")})
    assert not result.passed
    assert result.evidence.files == ["tests/test_app.py::test_one"]


async def test_removed_test_file_fails(repo: GateRepo) -> None:
    result = await keep_tests(repo, {"tests/test_app.py": None})
    assert not result.passed
    assert result.evidence.files == ["tests/test_app.py"]
    assert "test files removed: tests/test_app.py" in result.evidence.detail


@pytest.mark.parametrize(
    "decorator",
    [
        "@pytest.mark.skip(reason='later')",
        "@pytest.mark.skip",
        "@pytest.mark.skipif(True, reason='never')",
        "@pytest.mark.xfail",
        "@unittest.skip('no')",
    ],
)
async def test_newly_skipped_by_decorator_fails(repo: GateRepo, decorator: str) -> None:
    text = "import pytest\nimport unittest\n" + TESTS.replace(
        "def test_one", f"{decorator}\ndef test_one"
    )
    result = await keep_tests(repo, {"tests/test_app.py": text})
    assert not result.passed
    assert result.evidence.files == ["tests/test_app.py::test_one"]
    assert "tests newly skipped: tests/test_app.py::test_one" in result.evidence.detail


async def test_newly_skipped_by_pytest_skip_in_body_fails(repo: GateRepo) -> None:
    text = "import pytest\n" + TESTS.replace(
        "def test_two():\n", 'def test_two():\n    """Docstring."""\n    pytest.skip("flaky")\n'
    )
    result = await keep_tests(repo, {"tests/test_app.py": text})
    assert not result.passed
    assert result.evidence.files == ["tests/test_app.py::test_two"]


async def test_newly_skipped_by_module_pytestmark_fails(repo: GateRepo) -> None:
    text = "import pytest\n\npytestmark = [pytest.mark.skip(reason='x')]\n" + TESTS
    result = await keep_tests(repo, {"tests/test_app.py": text})
    assert not result.passed
    assert sorted(result.evidence.files) == [
        "tests/test_app.py::test_one",
        "tests/test_app.py::test_two",
    ]


async def test_skip_present_at_base_is_not_new(repo: GateRepo) -> None:
    skipped = "import pytest\n" + TESTS.replace("def test_one", "@pytest.mark.skip\ndef test_one")
    repo.agent_commit({"tests/test_app.py": skipped})
    repo.base = git(repo.path, "rev-parse", "HEAD")
    result = await keep_tests(repo, {"tests/test_app.py": skipped + "\n# touched\n"})
    assert result.passed, result.evidence.detail


async def test_unparsable_test_file_counts_as_removing_its_tests(repo: GateRepo) -> None:
    result = await keep_tests(repo, {"tests/test_app.py": TESTS + "\ndef broken(:\n"})
    assert not result.passed
    assert sorted(result.evidence.files) == [
        "tests/test_app.py::test_one",
        "tests/test_app.py::test_two",
    ]
    assert "no longer parses: tests/test_app.py: SyntaxError" in result.evidence.detail


def test_parse_tests_finds_class_methods_and_class_skips() -> None:
    source = b"""\
import pytest

def helper(): pass

class TestA:
    def test_x(self): pass
    async def test_y(self): pass
    def util(self): pass

@pytest.mark.skip
class TestB:
    def test_z(self): pass

class Other:
    def test_not_collected(self): pass

async def test_top():
    assert True
"""
    found = parse_tests("t/test_m.py", source)
    assert found.tests == {
        "t/test_m.py::TestA::test_x": False,
        "t/test_m.py::TestA::test_y": False,
        "t/test_m.py::TestB::test_z": True,
        "t/test_m.py::test_top": False,
    }
    assert parse_tests("x.py", b"def (:\n").error.startswith("SyntaxError")


def test_is_test_file() -> None:
    assert is_test_file("test_a.py")
    assert is_test_file("pkg/a_test.py")
    assert is_test_file("tests/helpers.py")
    assert is_test_file("src/tests/unit/x.py")
    assert not is_test_file("tests/conftest.py")
    assert not is_test_file("tests/__init__.py")
    assert not is_test_file("src/app.py")
    assert not is_test_file("tests/data.json")


# --------------------------------------------------------------------------- contains


def test_contains_passes_when_all_present() -> None:
    gate = ContainsGate(name="answer", contains=["Flask", "Django"])
    result = contains_gate(gate, "Use Flask or Django.")
    assert result.passed
    assert result.requirement == "the final answer contains: Flask, Django"
    assert result.evidence.output_tail == ""  # the claim is the attempt's, stored once


def test_contains_reports_missing_case_sensitively() -> None:
    gate = ContainsGate(name="answer", contains=["Flask", "Django", "FastAPI"])
    claim = "flask and Django " + "x" * 2000
    result = contains_gate(gate, claim)
    assert not result.passed
    assert result.evidence.detail == "missing: Flask, FastAPI"
    assert result.evidence.output_tail == ""


# --------------------------------------------------------------------------- fingerprint


def failed(tail: str, name: str = "tests", exit_code: int = 1, detail: str = "") -> GateResult:
    return GateResult(
        name=name,
        kind="run",
        passed=False,
        evidence=Evidence(
            exit_code=exit_code, output_tail=tail, detail=detail, duration_s=exit_code * 0.1
        ),
    )


RUN_A = """\
F.                                                                       [100%]
=================================== FAILURES ===================================
___________________________________ test_one ___________________________________
/tmp/pytest-of-ci/pytest-12/test_x0/repo/tests/test_app.py:5: in test_one
    assert add(1, 2) == 4
E   assert 3 == 4
  File "/home/alice/.loop/worktrees/t/src/app.py", line 17, in add
<function add at 0x7f3a2b1c9d30> pid 4242 workdir /tmp/tmpa8_x9k2q
=========================== 1 failed, 1 passed in 0.12s ===========================
2024-05-01T12:00:03.123Z took 3.41 seconds
"""
RUN_B = """\
F.                                                                       [100%]
=================================== FAILURES ===================================
___________________________________ test_one ___________________________________
/tmp/pytest-of-ci/pytest-7/test_y3/repo/tests/test_app.py:9: in test_one
    assert add(1, 2) == 4
E   assert 3 == 4
  File "/home/bob/.loop/worktrees/t/src/app.py", line 31, in add
<function add at 0x55d0c0ffee00> pid 77 workdir /tmp/tmpzz9_3jkw
========================= 1 failed, 1 passed in 10.57s =========================
2024-05-02T08:15:59.001Z took 12.0 seconds
"""


def test_fingerprint_ignores_timings_lines_addresses_and_paths() -> None:
    assert fingerprint([failed(RUN_A)]) == fingerprint([failed(RUN_B)])
    assert len(fingerprint([failed(RUN_A)])) == 16
    # passing gates around it, and their order, do not matter
    ok = GateResult(name="lint", kind="run", passed=True)
    assert fingerprint([ok, failed(RUN_A)]) == fingerprint([failed(RUN_B)])


def test_fingerprint_ignores_the_cut_of_a_truncated_tail() -> None:
    body = "\n".join(f"line of output number {i}" for i in range(200)) + "\nE   assert 3 == 4\n"
    a = "[… 5000 earlier bytes in the log]\nber 12\n" + body
    b = "[… 5123 earlier bytes in the log]\nr output number 12\n" + body
    assert fingerprint([failed(a)]) == fingerprint([failed(b)])


def test_fingerprint_tells_different_failures_apart() -> None:
    base = fingerprint([failed(RUN_A)])
    assert fingerprint([failed(RUN_A.replace("assert 3 == 4", "assert 3 == 5"))]) != base
    assert fingerprint([failed(RUN_A.replace("1 failed, 1 passed", "2 failed"))]) != base
    assert fingerprint([failed(RUN_A, name="other")]) != base
    assert fingerprint([failed(RUN_A, exit_code=2)]) != base
    assert fingerprint([failed(RUN_A), failed("x", name="lint")]) != base
    assert fingerprint([GateResult(name="tests", kind="run", passed=True)]) == ""


def test_normalise_examples() -> None:
    assert normalise("ok in 0.12s") == normalise("ok in 3.41 seconds") == "ok in <t>"
    assert normalise("app.py:123  line 45") == "app.py:N line N"
    assert normalise("at 0x7f00ab") == "at 0x?"
    assert normalise("/tmp/tmpab12cd/x/app.py") == "<path>/app.py"
    assert normalise("see src/app.py") == "see src/app.py"
    assert normalise("http://host/a/b") == "http://host/a/b"
