"""Every gate kind has all its parts: a model, its rules, its evaluator, its docs.

A kind is one module per layer (``loop.contracts.gates``, ``loop.rules.gates``,
``activities.gates``); forgetting one of them must fail here, not silently turn the
gate into a failed one at run time.
"""

from __future__ import annotations

import importlib
import inspect
from typing import get_args

import pytest

from activities.gates import EVALUATORS
from loop.contracts import (
    GATE_KINDS,
    REFUSALS,
    Evidence,
    GateKind,
    GateResult,
    LlmReviewGate,
    TaskSpec,
    gate,
)
from loop.contracts.gates import KINDS
from loop.rules.gates import RULES, describe_gate, required_correction
from tests.support.repos import ROOT


def test_the_kinds_agree_everywhere() -> None:
    assert len(set(GATE_KINDS)) == len(GATE_KINDS)
    assert set(get_args(GateKind)) == set(GATE_KINDS), "GateKind lags behind the kind models"
    assert set(RULES) == set(GATE_KINDS), "a kind without loop.rules.gates module"
    judged_in_verify = {k.KIND for k in KINDS if k.CHECKED_IN_VERIFY}
    assert set(EVALUATORS) == judged_in_verify, "a kind without activities.gates module"
    # The one kind another step judges has that step (workflows/judge.py, the review
    # activity); a second would need one of its own.
    assert {k for k in KINDS if not k.CHECKED_IN_VERIFY} == {LlmReviewGate}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.KIND)
def test_each_kind_is_one_module_per_layer(kind: type) -> None:
    module = kind.__module__.rsplit(".", 1)[-1]
    assert kind.__module__ == f"loop.contracts.gates.{module}"
    rules = importlib.import_module(f"loop.rules.gates.{module}")
    assert rules.KIND == kind.KIND and RULES[kind.KIND].describe is rules.describe
    if kind.CHECKED_IN_VERIFY:
        evaluator = importlib.import_module(f"activities.gates.{module}")
        assert evaluator.KIND == kind.KIND and EVALUATORS[kind.KIND] is evaluator.evaluate
        assert inspect.iscoroutinefunction(evaluator.evaluate)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.KIND)
def test_each_kinds_example_is_valid_described_and_corrected(kind: type) -> None:
    example = gate(kind.EXAMPLE)
    assert type(example) is kind
    line = describe_gate(example)
    assert line.startswith(f"{example.name}: ") and len(line) > len(example.name) + 10
    failed = GateResult(name=example.name, kind=kind.KIND, passed=False)
    assert required_correction(failed).strip()
    spec = TaskSpec.model_validate(
        {
            "id": "t",
            "goal": "g",
            "repo": "/r",
            "agent": {"command": ["true"]},
            "verify": [kind.EXAMPLE, {"name": "other-tests", "run": "python -m pytest"}],
        }
    )
    assert spec.verify[0] == example
    # what a workflow's history holds comes back as the same gate
    assert TaskSpec.model_validate_json(spec.model_dump_json()).verify[0] == example


GATE_TABLE = ROOT / "docs" / "concepts" / "verdicts.md"
"""The page whose table says, per gate kind, when it passes and what failing it does."""


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.KIND)
def test_each_kind_is_documented(kind: type) -> None:
    rows = [line for line in GATE_TABLE.read_text().splitlines() if line.startswith("| `")]
    assert any(line.startswith(f"| `{kind.KIND}` |") for line in rows), (
        f"{kind.KIND} has no row in the gate table of {GATE_TABLE.relative_to(ROOT)}"
    )
    pages = "\n".join(p.read_text() for p in sorted((ROOT / "docs").rglob("*.md")))
    assert f"{kind.KIND}:" in pages, f"{kind.KIND} is in no task-file example of the docs"


def test_a_gate_recorded_before_kinds_were_models_reads_back() -> None:
    """A workflow's input in a stored history holds every field of the one old model."""
    recorded = {
        "name": "scope", "run": None, "timeout": 300, "diff_scope": {"allow": ["a/**"]},
        "no_removed_tests": None, "regression_test": None, "contains": None,
        "llm_review": None, "report": "auto", "fail_to_pass": "auto", "allow_constructs": [],
    }  # fmt: skip
    assert gate(recorded).kind == "diff_scope"


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"name": "g"}, "found: none"),
        ({"name": "g", "run": "x", "contains": ["a"]}, "found: run, contains"),
        ({"name": "g", "diff_scope": {}, "report": "exit"}, "report does not apply"),
        ({"name": "g", "contains": ["a"], "timeout": 5}, "timeout does not apply"),
        ({"name": "g", "no_removed_tests": False}, "found: none"),
    ],
)
def test_a_gate_of_no_kind_or_two_or_with_anothers_fields_is_refused(
    data: dict, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        gate(data)


@pytest.mark.parametrize("kind", REFUSALS)
def test_a_verdict_refused_before_any_gate_is_corrected_in_its_own_words(kind: str) -> None:
    """The results that end a verdict before the gates (an attempt past its disk limit,
    one git cannot store) have kinds of their own: the next attempt's feedback names the
    requirement and what broke it, and building it must not fail the workflow task."""
    g = GateResult(
        name=kind, kind=kind, passed=False, requirement="stay within 5 MB",
        evidence=Evidence(detail="the worktree grew by 9 MB"),
    )  # fmt: skip
    assert required_correction(g) == "stay within 5 MB: the worktree grew by 9 MB"
    assert kind not in GATE_KINDS


def test_a_result_of_a_kind_this_worker_does_not_know_still_gets_feedback() -> None:
    g = GateResult(name="future", kind="future", passed=False, evidence=Evidence(detail="x"))
    assert required_correction(g) == "x"
