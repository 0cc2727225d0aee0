"""Feedback building and prompt rendering: structured, never "try again"."""

from __future__ import annotations

import json

import pytest

from loop.contracts import (
    CaseResult,
    ContainsGate,
    DiffScope,
    DiffScopeGate,
    Evidence,
    Feedback,
    GateResult,
    LlmReview,
    LlmReviewGate,
    MakeResult,
    NoRemovedTestsGate,
    PromptParts,
    RegressionTestGate,
    RunGate,
    SuiteSummary,
    Verdict,
)
from loop.rules.feedback import build, feedback_json, render_prompt
from loop.rules.gates import describe_gate, required_correction

TAIL = "FAIL: test_punctuation (tests.test_slugify.SlugifyTest)\nAssertionError: 'hello, world!'"


def failed_run(detail: str = "exit code 1", exit_code: int | None = 1) -> GateResult:
    return GateResult(
        name="tests",
        kind="run",
        passed=False,
        requirement="`python -m unittest` exits 0",
        evidence=Evidence(exit_code=exit_code, output_tail=TAIL, detail=detail, duration_s=0.4),
    )


def passing_scope() -> GateResult:
    return GateResult(
        name="scope",
        kind="diff_scope",
        passed=True,
        requirement="changes stay within slugify.py, tests/**",
        evidence=Evidence(files=["slugify.py"], detail="1 file within scope"),
    )


@pytest.fixture
def verdict() -> Verdict:
    return Verdict(passed=False, gates=[failed_run(), passing_scope()], artifact="abc123")


@pytest.fixture
def make() -> MakeResult:
    return MakeResult(attempt=1, exit_code=0, output_tail="agent log", claim="I fixed slugify")


# --------------------------------------------------------------------------- build


def test_failed_requirement_names_the_gate_and_carries_evidence(make, verdict) -> None:
    fb = build(1, make, verdict, [])
    assert fb.after_attempt == 1
    assert len(fb.failed) == 1
    failed = fb.failed[0]
    assert failed.gate == "tests"
    assert failed.requirement == "`python -m unittest` exits 0"
    assert failed.evidence.exit_code == 1
    assert failed.evidence.output_tail == TAIL
    assert "exits 0" in failed.required_correction
    assert "exited 1" in failed.required_correction
    assert "try again" not in failed.required_correction.lower()


def test_passing_gates_are_listed(make, verdict) -> None:
    fb = build(1, make, verdict, [])
    assert fb.passing == ["scope"]
    assert [f.gate for f in fb.failed] == ["tests"]


def test_several_failures_keep_gate_order(make) -> None:
    scope_fail = GateResult(
        name="scope",
        kind="diff_scope",
        passed=False,
        evidence=Evidence(files=["setup.py"]),
    )
    v = Verdict(
        passed=False,
        gates=[scope_fail, failed_run(), passing_scope().model_copy(update={"name": "keep"})],
    )
    fb = build(2, make, v, [])
    assert [f.gate for f in fb.failed] == ["scope", "tests"]
    assert fb.passing == ["keep"]
    assert fb.after_attempt == 2


def test_human_feedback_is_carried(make, verdict) -> None:
    human = ["use re.findall", "keep the API"]
    fb = build(1, make, verdict, human)
    assert fb.human_feedback == human
    human.append("later")  # a copy, not the caller's list
    assert fb.human_feedback == ["use re.findall", "keep the API"]


def test_previous_output_prefers_the_claim(make, verdict) -> None:
    assert build(1, make, verdict, []).previous_output == "I fixed slugify"
    no_claim = make.model_copy(update={"claim": ""})
    assert build(1, no_claim, verdict, []).previous_output == "agent log"


def test_previous_output_is_bounded_to_its_tail(verdict) -> None:
    long = "x" * 10_000 + "THE END"
    fb = build(1, MakeResult(attempt=1, claim=long), verdict, [])
    assert 0 < len(fb.previous_output) <= 2_000
    assert fb.previous_output.endswith("THE END")
    assert len(fb.previous_output) < len(long)


def test_feedback_json_is_the_model(make, verdict) -> None:
    fb = build(1, make, verdict, ["hint"])
    data = json.loads(feedback_json(fb))
    assert data["failed"][0]["gate"] == "tests"
    assert data["failed"][0]["evidence"]["exit_code"] == 1
    assert Feedback.model_validate(data) == fb


# --------------------------------------------------------------------------- required_correction


def test_correction_for_run_timeout_differs_from_exit() -> None:
    timed_out = required_correction(failed_run(detail="timed out after 300 s", exit_code=None))
    exited = required_correction(failed_run(detail="exit code 2", exit_code=2))
    assert "timed out after 300 s" in timed_out and "finish in time" in timed_out
    assert "exited" not in timed_out
    assert "exited 2" in exited and "exits 0" in exited
    assert timed_out != exited


def test_correction_for_diff_scope_lists_the_files() -> None:
    g = GateResult(
        name="scope",
        kind="diff_scope",
        passed=False,
        evidence=Evidence(files=["setup.py", "docs/x.md"]),
    )
    text = required_correction(g)
    assert "setup.py" in text and "docs/x.md" in text
    assert "revert" in text


def test_correction_for_no_removed_tests_lists_the_tests() -> None:
    g = GateResult(
        name="keep",
        kind="no_removed_tests",
        passed=False,
        evidence=Evidence(files=["tests/test_a.py::test_one"]),
    )
    text = required_correction(g)
    assert "restore" in text and "tests/test_a.py::test_one" in text


def test_correction_for_contains_names_the_output_file_and_missing_strings() -> None:
    g = GateResult(
        name="answer",
        kind="contains",
        passed=False,
        evidence=Evidence(detail="missing: Django, FastAPI"),
    )
    text = required_correction(g)
    assert "LOOP_OUTPUT_FILE" in text
    assert "Django" in text and "FastAPI" in text


def test_correction_for_unknown_kind_falls_back_to_detail() -> None:
    g = GateResult(
        name="review", kind="llm_review", passed=False, evidence=Evidence(detail="not evaluated")
    )
    assert required_correction(g) == "not evaluated"
    assert required_correction(g.model_copy(update={"evidence": Evidence()})) == (
        "satisfy the reviewer's rubric"
    )


# --------------------------------------------------------------------------- describe_gate


def test_describe_run_gate() -> None:
    text = describe_gate(RunGate(name="tests", run="make check", timeout=60, report="exit"))
    assert text == "tests: `make check` must exit 0 (timeout 60 s)"


def test_describe_run_gate_with_per_test_results() -> None:
    text = describe_gate(RunGate(name="tests", run="pytest -q", timeout=60))
    assert text.startswith("tests: `pytest -q` (timeout 60 s), judged test by test against base")
    assert "every test failing at base must pass" in text and "ending the test process" in text
    named = describe_gate(RunGate(name="tests", run="pytest", fail_to_pass=["tests/t.py::test_a"]))
    assert "these must pass: tests/t.py::test_a" in named


def test_describe_regression_test_gate() -> None:
    text = describe_gate(RegressionTestGate(name="new-test", regression_test=True))
    assert text.startswith("new-test: ") and "fails on base's code" in text


def failing_tests() -> GateResult:
    cases = [
        CaseResult(
            id=f"tests/test_x.py::test_{i}",
            outcome="failed",
            message=f"def test_{i}():\n>       assert f({i}) == 1\nE       assert {i} == 1\n",
            at_base="passed" if i else "failed",
        )
        for i in range(3)
    ]
    tests = SuiteSummary(runner="pytest", counts={"failed": 3}, failing=cases, more_failing=4)
    return GateResult(
        name="tests",
        kind="run",
        passed=False,
        evidence=Evidence(exit_code=1, detail="3 failed (pytest)", tests=tests),
    )


def test_feedback_names_each_failing_test_with_its_assertion(make) -> None:
    fb = build(1, make, Verdict(passed=False, gates=[failing_tests()]), [])
    correction = fb.failed[0].required_correction
    assert "these tests pass: tests/test_x.py::test_0, tests/test_x.py::test_1" in correction
    assert "(and 4 more)" in correction
    text = render_prompt(PromptParts(goal="g", feedback=fb), 2)
    assert "- `tests/test_x.py::test_1` (failed, at base: passed): assert 1 == 1" in text
    assert "- … and 4 more" in text
    data = json.loads(feedback_json(fb))
    assert data["failed"][0]["evidence"]["tests"]["failing"][2]["id"] == "tests/test_x.py::test_2"


def test_a_run_that_did_not_report_asks_for_a_whole_run(make) -> None:
    cut = failed_run(detail="the test run ended before it reported: exit code 0, 0 of 5 tests")
    correction = required_correction(cut)
    assert "report every test" in correction and "exited" not in correction
    uncertain = failed_run().model_copy(update={"uncertain": True})
    assert "remove what ends or steers the test process" in required_correction(uncertain)


def test_describe_diff_scope_gate() -> None:
    g = DiffScopeGate(
        name="scope",
        diff_scope=DiffScope(allow=["src/**", "tests/**"], protect=["tests/test_x.py"]),
    )
    text = describe_gate(g)
    assert text.startswith("scope: change only src/**, tests/**")
    assert "never touch tests/test_x.py" in text and "blocks" in text
    plain = describe_gate(DiffScopeGate(name="scope", diff_scope=DiffScope(allow=["src/**"])))
    assert plain == "scope: change only src/**"


def test_describe_no_removed_tests_gate() -> None:
    text = describe_gate(NoRemovedTestsGate(name="keep", no_removed_tests=True))
    assert text.startswith("keep: ") and "remove, skip, xfail or deselect" in text


def test_describe_contains_gate() -> None:
    text = describe_gate(ContainsGate(name="answer", contains=["Flask", "Django"]))
    assert text.startswith("answer: ") and "Flask, Django" in text


def test_describe_llm_review_gate_shows_its_rubric() -> None:
    g = LlmReviewGate(name="review", llm_review=LlmReview(rubric="cite evidence"))
    assert g.kind == "llm_review"
    assert describe_gate(g).startswith("review: a reviewer") and "cite evidence" in describe_gate(g)


# --------------------------------------------------------------------------- render_prompt

GATES = [
    describe_gate(RunGate(name="tests", run="python -m unittest", timeout=60)),
    describe_gate(DiffScopeGate(name="scope", diff_scope=DiffScope(allow=["slugify.py"]))),
]
GOAL = 'slugify("Hello, World!") must return "hello-world".'


def test_first_attempt_prompt_has_goal_and_gates_but_no_feedback() -> None:
    text = render_prompt(PromptParts(goal=GOAL, brief="3 files", gates=GATES), 1)
    assert "# Task (attempt 1)" in text
    assert GOAL in text
    for line in GATES:
        assert f"- {line}" in text
    assert "3 files" in text
    assert "Feedback from" not in text
    assert "### Failed" not in text
    assert "From a person" not in text
    assert "LOOP_OUTPUT_FILE" in text


def test_second_attempt_prompt_carries_feedback(make, verdict) -> None:
    fb = build(1, make, verdict, ["use re.findall"])
    parts = PromptParts(goal=GOAL, gates=GATES, feedback=fb, human_feedback=fb.human_feedback)
    text = render_prompt(parts, 2)
    assert "# Task (attempt 2)" in text
    assert GOAL in text
    assert "## Feedback from attempt 1" in text
    assert "Already passing: scope" in text
    assert "### Failed: tests" in text
    assert "- exit code: 1" in text
    assert fb.failed[0].required_correction in text
    assert TAIL in text  # the output tail, verbatim
    assert "I fixed slugify" in text  # the previous output
    assert "## From a person" in text and "- use re.findall" in text
    # Sections come in a readable order: goal, gates, feedback, person, protocol.
    order = [
        text.index(s)
        for s in (
            "## Goal",
            "## How the result is checked",
            "## Feedback from attempt 1",
            "## From a person",
            "## Protocol",
        )
    ]
    assert order == sorted(order)


def test_feedback_section_lists_files_and_detail() -> None:
    scope_fail = GateResult(
        name="scope",
        kind="diff_scope",
        passed=False,
        requirement="changes stay within slugify.py",
        evidence=Evidence(files=["setup.py"], detail="outside: setup.py"),
    )
    fb = build(3, MakeResult(attempt=3), Verdict(passed=False, gates=[scope_fail]), [])
    text = render_prompt(PromptParts(goal=GOAL, feedback=fb), 4)
    assert "## Feedback from attempt 3" in text
    assert "- files: setup.py" in text and "- detail: outside: setup.py" in text
    assert "Already passing" not in text
    assert "previous output" not in text  # nothing to show


def test_human_feedback_alone_without_a_verdict() -> None:
    text = render_prompt(PromptParts(goal=GOAL, human_feedback=["try the regex"]), 3)
    assert "## From a person" in text and "- try the regex" in text
    assert "Feedback from" not in text
