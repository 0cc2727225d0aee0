"""What history holds per attempt, on a real server: the task file, the workspace and a
failed gate's evidence once, not again in each attempt's inputs; the agent still gets all
of it (docs/architecture.md, "What history holds").

How the inputs are cut and read back is in tests/unit/test_step_inputs.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import TaskSpec, TaskState
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import write_agent
from tests.support.tasks import result_of, task
from worker import build_worker

pytestmark = pytest.mark.timeout(120)

READS_THE_EVIDENCE = """
if attempt == 1:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return t.lower()\\n")
    out.write_text("fixed it")
else:
    fb = json.loads(pathlib.Path(os.environ["LOOP_FEEDBACK_FILE"]).read_text())
    evidence = fb["failed"][0]["evidence"]
    assert fb["failed"][0]["gate"] == "tests" and "AssertionError" in evidence["output_tail"]
    assert "AssertionError" in pathlib.Path(os.environ["LOOP_PROMPT_FILE"]).read_text()
    pathlib.Path("slugify.py").write_text(COMPLETE)
    out.write_text("fixed it properly")
"""
"""Fails ``tests`` first; then fixes the demo only if the feedback's evidence reached it."""


async def inputs_of(client: Client, workflow_id: str) -> dict[str, list[dict]]:
    """Each activity's inputs as history holds them, by activity name."""
    sent: dict[str, list[dict]] = {}
    async for ev in client.get_workflow_handle(workflow_id).fetch_history_events():
        if ev.HasField("activity_task_scheduled_event_attributes"):
            scheduled = ev.activity_task_scheduled_event_attributes
            data = json.loads(scheduled.input.payloads[0].data)
            sent.setdefault(scheduled.activity_type.name, []).append(data)
    return sent


async def results_of(client: Client, workflow_id: str) -> dict[str, list[dict]]:
    """Each activity's results as history holds them, by activity name."""
    names: dict[int, str] = {}
    done: dict[str, list[dict]] = {}
    async for ev in client.get_workflow_handle(workflow_id).fetch_history_events():
        if ev.HasField("activity_task_scheduled_event_attributes"):
            names[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.HasField("activity_task_completed_event_attributes"):
            completed = ev.activity_task_completed_event_attributes
            data = json.loads(completed.result.payloads[0].data)
            done.setdefault(names[completed.scheduled_event_id], []).append(data)
    return done


async def test_two_attempts_send_the_task_and_the_evidence_once(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
):
    spec = TaskSpec.model_validate(task(demo_repo, write_agent(tmp_path, READS_THE_EVIDENCE)))
    async with build_worker(client, settings):
        handle, _ = await start_task(client, spec, settings.task_queue)
        result = await result_of(handle)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert len(result.attempts) == 2
    sent = await inputs_of(client, handle.id)
    [first] = sent["prepare_and_explore"]
    assert first["task"]["goal"] == spec.goal  # the first step on the host: whole
    [prepared] = (await results_of(client, handle.id))["prepare_and_explore"]
    kept = prepared["explored"]["context"]
    assert Path(kept).is_file() and json.loads(Path(kept).read_text())["task"]["id"] == spec.id
    for step in [*sent["make"], *sent["verify"]]:
        assert "task" not in step and "workspace" not in step, step.keys()
        assert step["context"] == kept
    failed = sent["make"][1]["prompt"]["feedback"]["failed"]
    assert [f["gate"] for f in failed] == ["tests"] and "evidence" not in failed[0]
    assert sent["make"][1]["prompt"]["evidence_from"] == result.attempts[0].verdict.kept
    # The record keeps the evidence whole: what the review page and the trace show.
    assert result.attempts[1].feedback is not None
    assert "AssertionError" in result.attempts[1].feedback.failed[0].evidence.output_tail
