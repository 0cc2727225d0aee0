"""Replay: recorded histories of representative runs still replay on today's workflow code.

The histories in ``tests/workflow/histories/`` come from real runs (``make_histories.py``
says how each was made). A workflow code change that would break a task in
flight shows up here as a non-determinism error: guard it with
``workflow.patched(...)`` rather than regenerating the history. One stored
history is incompatible on purpose and must fail, so the check itself is
known to bite. A whole task run with no workflow cache, so that every workflow
task replays its history from the start, is in tests/e2e/test_task.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from worker import WORKFLOWS

HISTORIES = Path(__file__).parent / "histories"
INCOMPATIBLE = HISTORIES / "incompatible.json"
REPRESENTATIVE = {
    "pass_after_feedback",
    "budget_exhausted",
    "approval",
    "approval_by_update",
    "rejection",
    "crash_recovery",
    "model_loop",
    "model_loop_agent",
    "continue_as_new_agent_run1",
    "continue_as_new_agent_run2",
    "continue_as_new_ledger",
    # Recorded by the code before host affinity: tasks in flight during that upgrade.
    "before_hosts_approval",
    "before_hosts_pass_after_feedback",
    "before_hosts_model_loop",
    "before_hosts_model_loop_agent",
    # A wait's Slack message posted and closed (the slack-messages patch), recorded by
    # tests/e2e/test_slack.py with LOOP_RECORD_HISTORIES.
    "slack_approval",
    "slack_rejection",
    # SlackAnswerWorkflow: an answer from Slack taken, and one refused and said in the
    # message; recorded the same way.
    "slack_answer",
    "slack_refused",
    # A task with an environment: built at base, an attempt's setup failed on its changed
    # key files, the next attempt judged with one built for it (the environment patch);
    # recorded by tests/e2e/test_environment.py with LOOP_RECORD_HISTORIES.
    "environment",
    # A task with three candidates (choose: best, assisted: approved, merged) and its
    # chosen candidate's own workflow; one whose passing candidates waited side by side
    # and a person approved one by name (choose: person). Recorded by
    # tests/e2e/test_candidates.py with LOOP_RECORD_HISTORIES.
    "candidates_best",
    "candidates_best_two",
    "candidates_person",
    # Inputs by what the host kept (the history-by-reference patch): a make's prompt
    # without the task file's parts, verify sent make's result by its file, the claim
    # quoted from it; then the run folder removed while the task waited, and the next
    # make sent again whole. Recorded by tests/e2e/test_history_once.py with
    # LOOP_RECORD_HISTORIES.
    "input_resent",
}
CLOSED = {
    "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED",
    "EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW",
}


def stored() -> list[Path]:
    return sorted(p for p in HISTORIES.glob("*.json") if p != INCOMPATIBLE)


def load(path: Path) -> WorkflowHistory:
    """The history under its recorded workflow id (child ids are derived from it)."""
    text = path.read_text()
    started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
    return WorkflowHistory.from_json(started["workflowId"], text)


def replayer() -> Replayer:
    return Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)


def test_every_representative_run_is_stored() -> None:
    assert {p.stem for p in stored()} >= REPRESENTATIVE
    assert INCOMPATIBLE.exists()


@pytest.mark.parametrize("path", stored(), ids=lambda p: p.stem)
def test_history_is_a_whole_run(path: Path) -> None:
    """Each file holds a run from its start to its close, so replay covers all of it."""
    events = json.loads(path.read_text())["events"]
    assert events[0]["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED"
    assert events[-1]["eventType"] in CLOSED
    if "continue_as_new" in path.stem and not path.stem.endswith("_run2"):
        assert events[-1]["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW"


@pytest.mark.parametrize("path", stored(), ids=lambda p: p.stem)
async def test_history_replays(path: Path) -> None:
    result = await replayer().replay_workflow(load(path))
    assert result.replay_failure is None


async def test_incompatible_history_fails_to_replay() -> None:
    """pass_after_feedback with its first ``explore`` recorded as ``make``: the code disagrees."""
    history = load(INCOMPATIBLE)
    with pytest.raises(NondeterminismError, match="does not match activity type") as caught:
        await replayer().replay_workflow(history)
    assert "'make'" in str(caught.value) and "'explore'" in str(caught.value)
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert isinstance(result.replay_failure, NondeterminismError)
