"""Reasons that name the cause (``loop.rules.reasons``): which gate kept failing and what
it saw; when a goal holds before any change."""

from __future__ import annotations

from typing import Any

import pytest

from loop.contracts import AttemptRecord, Evidence, GateResult, TaskSpec, Verdict
from loop.rules.reasons import met_at_base, repeated


def gate(
    name: str, passed: bool, detail: str = "", tail: str = "", kind: str = "run"
) -> GateResult:
    return GateResult(
        name=name, kind=kind, passed=passed, evidence=Evidence(detail=detail, output_tail=tail)
    )


def judged(n: int, *gates: GateResult) -> AttemptRecord:
    return AttemptRecord(
        attempt=n, verdict=Verdict(passed=all(g.passed for g in gates), gates=list(gates))
    )


SCOPE = "slugify.py outside src/**"


def test_the_gate_failing_in_a_row_is_named_with_what_it_saw_last() -> None:
    attempts = [
        judged(1, gate("tests", False, "1 test fails"), gate("scope", True)),
        judged(2, gate("tests", True), gate("scope", False, SCOPE, kind="diff_scope")),
        judged(3, gate("tests", True), gate("scope", False, SCOPE, kind="diff_scope")),
    ]
    assert repeated(attempts) == f"scope failed 2 times: {SCOPE}"


def test_a_run_of_failures_is_cut_by_an_attempt_that_was_not_judged() -> None:
    """An attempt whose agent crashed before verify is no failure of the gate: counting it
    would make "3 times" of two."""
    attempts = [
        judged(1, gate("scope", False, SCOPE)),
        AttemptRecord(attempt=2),
        judged(3, gate("scope", False, SCOPE)),
    ]
    assert repeated(attempts) == f"scope failed once: {SCOPE}"


def test_without_a_detail_the_output_says_what_failed_and_others_are_named() -> None:
    attempts = [
        judged(
            1, gate("tests", False, tail="ok\nAssertionError: 'a' != 'b'\n\n"), gate("lint", False)
        )
    ]
    assert repeated(attempts) == "tests failed once: AssertionError: 'a' != 'b'; lint failed too"


@pytest.mark.parametrize(
    "attempts",
    [[], [AttemptRecord(attempt=1)], [judged(1, gate("tests", True))]],
    ids=["none", "not judged", "passed"],
)
def test_nothing_repeated_says_nothing(attempts: list[AttemptRecord]) -> None:
    assert repeated(attempts) == ""


def spec(*verify: dict[str, Any]) -> TaskSpec:
    return TaskSpec.model_validate(
        {"id": "t", "goal": "g", "repo": "/tmp", "agent": {"command": ["true"]},
         "verify": list(verify)}
    )  # fmt: skip


TESTS = {"name": "tests", "run": "pytest"}
SCOPE_GATE = {"name": "scope", "diff_scope": {"allow": ["src/**"]}}
KEPT = {"name": "kept", "no_removed_tests": True}
AT_BASE = Verdict(passed=True, gates=[gate("tests", True, "12 passed")])


def test_a_goal_met_at_base_says_what_passed_and_what_to_do() -> None:
    said = met_at_base(spec(TESTS, SCOPE_GATE, KEPT), AT_BASE)
    assert said.startswith("goal already met at base: every gate passes before any change")
    assert "(tests: 12 passed)" in said and "add a test that fails at base" in said


@pytest.mark.parametrize(
    "other",
    [
        {"name": "claim", "contains": ["fixed"]},
        {"name": "review", "llm_review": {"rubric": "the fix is right"}},
        {"name": "regression", "regression_test": True},
    ],
    ids=["contains", "llm_review", "regression_test"],
)
def test_a_gate_that_needs_the_attempt_keeps_the_goal_open(other: dict[str, Any]) -> None:
    """The cheapest way to get a task stopped at explore would be tests passing at base;
    a gate only an attempt can pass means the goal is more than those tests."""
    assert met_at_base(spec(TESTS, other), AT_BASE) == ""


@pytest.mark.parametrize(
    "reproducer",
    [
        Verdict(passed=False, gates=[gate("tests", False, "1 test fails")]),
        Verdict(passed=True, gates=[]),
        Verdict(passed=True, gates=[gate("tests", True).model_copy(update={"uncertain": True})]),
    ],
    ids=["fails at base", "no gate ran", "uncertain"],
)
def test_a_base_that_does_not_pass_clearly_keeps_the_goal_open(reproducer: Verdict) -> None:
    assert met_at_base(spec(TESTS), reproducer) == ""


def test_without_a_run_gate_nothing_was_judged_at_base() -> None:
    assert met_at_base(spec(SCOPE_GATE), Verdict(passed=True)) == ""
