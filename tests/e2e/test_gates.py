"""Gates that run commands: ``run`` gates in the sandbox, and ``evaluate`` over every kind.

The gates that judge without running anything (diff_scope, no_removed_tests,
contains) and failure fingerprints are in tests/unit/test_gates.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from activities.gates import evaluate
from activities.gates import run as run_gates
from loop.contracts import (
    ContainsGate,
    DiffScope,
    DiffScopeGate,
    Gate,
    GateResult,
    NoRemovedTestsGate,
    RunGate,
)
from loop.rules.fingerprint import fingerprint
from tests.support.gates import APP, GateRepo
from tests.support.repos import git

PYTHON = sys.executable


@pytest.fixture
def repo(tmp_path: Path) -> GateRepo:
    return GateRepo(tmp_path)


async def run_gate(gate: Gate, repo: GateRepo) -> GateResult:
    """One run gate on the repository as it is (base), in the sandbox."""
    return await run_gates.evaluate(gate, repo.judging(None, gate))


# --------------------------------------------------------------------------- run


async def test_run_gate_passes_with_evidence(repo: GateRepo) -> None:
    result = await run_gate(RunGate(name="ok", run="echo hello; exit 0"), repo)
    assert result.passed
    assert result.kind == "run"
    assert result.evidence.exit_code == 0
    assert "hello" in result.evidence.output_tail
    assert result.requirement == "`echo hello; exit 0` exits 0"
    assert result.evidence.detail.startswith("exit code 0 (the exit code alone decides")
    assert (repo.run_dir / "gate-ok.log").read_text().strip() == "hello"


async def test_run_gate_fails_with_exit_code_and_tail(repo: GateRepo) -> None:
    gate = RunGate(name="bad", run="echo first; echo 'it broke' >&2; exit 3")
    result = await run_gate(gate, repo)
    assert not result.passed
    assert not result.policy_violation
    assert result.evidence.exit_code == 3
    assert "it broke" in result.evidence.output_tail
    assert result.evidence.detail.startswith("exit code 3 (")


async def test_run_gate_runs_in_the_worktree(repo: GateRepo) -> None:
    result = await run_gate(RunGate(name="cwd", run="test -f src/app.py && pwd"), repo)
    assert result.passed
    assert result.evidence.output_tail.strip() == str(repo.path)


async def test_run_gate_times_out(repo: GateRepo) -> None:
    result = await run_gate(RunGate(name="slow", run="sleep 5", timeout=1), repo)
    assert not result.passed
    assert result.evidence.exit_code is None
    assert result.evidence.detail == "timed out after 1 s"
    assert result.evidence.duration_s < 4


async def test_pytest_gate_leaves_no_byproducts(
    repo: GateRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The gate itself must switch bytecode and pytest's cache off, whatever the worker has.
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    gate = RunGate(name="tests", run=f"{PYTHON} -m pytest -q tests")
    result = await run_gate(gate, repo)
    assert result.passed, result.evidence.output_tail
    assert "2 passed" in result.evidence.output_tail
    assert result.evidence.tests is not None and result.evidence.tests.counts == {"passed": 2}
    assert list(repo.path.rglob("__pycache__")) == []
    assert not (repo.path / ".pytest_cache").exists()
    assert git(repo.path, "status", "--porcelain", "--ignored") == ""


# --------------------------------------------------------------------------- evaluate


async def test_evaluate_runs_every_gate_in_order(repo: GateRepo) -> None:
    make = repo.agent_commit(
        {"src/app.py": APP + "\n# edit\n", "tests/test_app.py": None}, claim="done with Flask"
    )
    judging = repo.judging(
        make,
        RunGate(name="first", run="echo boom; exit 2"),
        DiffScopeGate(name="scope", diff_scope=DiffScope(allow=["src/**"])),
        ContainsGate(name="answer", contains=["Flask"]),
        NoRemovedTestsGate(name="keep-tests", no_removed_tests=True),
        RunGate(name="last", run="echo reached"),
    )
    judging.bench.log_dir = repo.run_dir / "logs"
    judging.bench.log_dir.mkdir()
    results = await evaluate(judging)
    assert [r.name for r in results] == ["first", "scope", "answer", "keep-tests", "last"]
    assert [r.kind for r in results] == ["run", "diff_scope", "contains", "no_removed_tests", "run"]
    assert [r.passed for r in results] == [False, False, True, False, True]
    assert results[1].evidence.files == ["tests/test_app.py"]
    assert results[3].evidence.files == ["tests/test_app.py"]
    assert "reached" in results[4].evidence.output_tail
    assert (repo.run_dir / "logs" / "gate-last.log").exists()
    assert all(r.requirement for r in results)


# --------------------------------------------------------------------------- fingerprint


async def test_fingerprint_same_for_reruns_of_a_real_failure(tmp_path: Path) -> None:
    prints = []
    for n in (1, 2):
        repo = GateRepo(tmp_path / f"r{n}")
        make = repo.agent_commit({"src/app.py": "def add(a, b):\n    return a - b\n"})
        gate = RunGate(name="tests", run=f"{PYTHON} -m pytest -q -p no:randomly tests")
        results = await evaluate(repo.judging(make, gate))
        assert not results[0].passed
        assert "2 failed" in results[0].evidence.output_tail
        prints.append(fingerprint(results))
    assert prints[0] == prints[1]
