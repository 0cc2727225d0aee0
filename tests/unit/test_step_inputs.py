"""An attempt's activity inputs go without their models' defaults, and come back whole.

``MakeInput`` and ``VerifyInput`` are sent once per attempt; the task file in them
(with its sandbox limits, tool policy and every other default) was most of an
attempt's history. What the activity reads must be exactly what the workflow meant.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_core import to_json
from temporalio.contrib.pydantic import pydantic_data_converter

from loop.cli.demo import demo_task
from loop.contracts import (
    AgentLimits,
    Evidence,
    FailedRequirement,
    Feedback,
    MakeInput,
    MakeResult,
    PromptParts,
    TaskSpec,
    VerifyInput,
    Workspace,
    gate,
)
from loop.contracts.gates import KINDS


def inputs() -> tuple[MakeInput, VerifyInput]:
    spec = TaskSpec.model_validate(
        {**demo_task(Path("/r"), Path("/a.py"), {"mode": "strict"}),
         "budget": {"max_attempts": 3, "max_tokens": 5000},
         "agent": {"command": ["a"], "provider": {"api": "openai"}, "timeout": 60}}
    )  # fmt: skip
    ws = Workspace(task_id=spec.id, repo="/r", path="/w", branch="loop/x", base_ref="main",
                   base_commit="c" * 40, run_dir="/runs/x", byproducts=[".aider*"])  # fmt: skip
    feedback = Feedback(
        after_attempt=1, previous_output="fixed it",
        failed=[FailedRequirement(gate="tests", requirement="tests must pass",
                                  evidence=Evidence(exit_code=1, output_tail="FAIL: test_a"),
                                  required_correction="make test_a pass")],
        passing=["scope"],
    )  # fmt: skip
    prompt = PromptParts(goal=spec.goal, gates=["tests: ..."], feedback=feedback)
    made = MakeResult(attempt=2, commit="d" * 40, changed_files=["slugify.py"])
    return (
        MakeInput(task=spec, workspace=ws, attempt=2, prompt=prompt, limits=AgentLimits(tokens=9)),
        VerifyInput(task=spec, workspace=ws, attempt=2, make=made),
    )


def test_the_activity_reads_what_the_workflow_sent() -> None:
    for sent in inputs():
        payload = pydantic_data_converter.payload_converter.to_payloads([sent])[0]
        [read] = pydantic_data_converter.payload_converter.from_payloads([payload], [type(sent)])
        assert read == sent


def test_the_defaults_stay_out_of_the_payload() -> None:
    make, verify = inputs()
    sent = json.loads(to_json(make))
    assert "limits" not in sent["task"]["sandbox"] and "tools" not in sent["task"]["agent"]
    assert sent["task"]["sandbox"] == {"mode": "strict"}
    assert sent["task"]["budget"] == {"max_tokens": 5000}  # what was given, even a default
    assert sent["limits"] == {"tokens": 9} and sent["attempt"] == 2
    assert len(json.dumps(sent["task"])) < len(make.task.model_dump_json()) * 0.6
    assert "outside_writes" not in json.loads(to_json(verify))["make"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.KIND)
def test_every_gate_kind_is_still_itself_without_its_defaults(kind: type) -> None:
    """A gate's kind is told by its keys: none may be lost with the defaults."""
    make, verify = inputs()
    # A run gate with per-test results, as regression_test needs, named apart from the example.
    tests = make.task.verify[0].model_copy(update={"name": "unit"})
    spec = make.task.model_copy(update={"verify": [tests, gate(kind.EXAMPLE)]})
    for sent in (make.model_copy(update={"task": spec}), verify.model_copy(update={"task": spec})):
        [read] = pydantic_data_converter.payload_converter.from_payloads(
            pydantic_data_converter.payload_converter.to_payloads([sent]), [type(sent)]
        )
        assert type(read.task.verify[1]) is kind and read == sent
