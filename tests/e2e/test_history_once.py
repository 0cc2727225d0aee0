"""What history holds per attempt, on a real server: the task file, the workspace, make's
result (its claim) and a failed gate's evidence once, not again in each attempt's inputs;
the agent still gets all of it; and a host that lost the files they name is sent the step
again whole (docs/architecture.md, "What history holds").

How the inputs are cut and read back is in tests/unit/test_step_inputs.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import SIGNAL_EXTEND_BUDGET, ExtendBudgetSignal, TaskSpec, TaskState
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import write_agent
from tests.support.tasks import replays, result_of, task, wait_for
from worker import build_worker

pytestmark = pytest.mark.timeout(180)

READS_THE_EVIDENCE = """
prompt = pathlib.Path(os.environ["LOOP_PROMPT_FILE"]).read_text()
assert "Hello, World!" in prompt and "judged test by test" in prompt  # the goal, the gates
if attempt == 1:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return t.lower()\\n")
    out.write_text("fixed it")
else:
    fb = json.loads(pathlib.Path(os.environ["LOOP_FEEDBACK_FILE"]).read_text())
    evidence = fb["failed"][0]["evidence"]
    assert fb["failed"][0]["gate"] == "tests" and "AssertionError" in evidence["output_tail"]
    assert fb["previous_output"] == "fixed it", fb["previous_output"]
    assert "AssertionError" in prompt and "Brief" in prompt
    pathlib.Path("slugify.py").write_text(COMPLETE)
    out.write_text("fixed it properly")
"""
"""Fails ``tests`` first; then fixes the demo only if the goal, the gates, the brief, its
claim and the feedback's evidence all reached it."""


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
    # The task file's parts of the prompt go with it (kept on the host), not again.
    for step in sent["make"]:
        assert step["prompt"]["from_task"], step["prompt"]
        assert not {"goal", "gates", "instructions"} & step["prompt"].keys(), step["prompt"]
    # Make's result is in history once: verify is sent where make kept it.
    made = [a.make for a in result.attempts]
    for step, m in zip(sent["verify"], made, strict=True):
        assert m is not None and step["make_from"] == m.kept and Path(m.kept).is_file()
        assert step["make"] == {"commit": m.commit}
    fed = sent["make"][1]["prompt"]
    failed = fed["feedback"]["failed"]
    assert [f["gate"] for f in failed] == ["tests"] and "evidence" not in failed[0]
    assert fed["evidence_from"] == result.attempts[0].verdict.kept
    assert "previous_output" not in fed["feedback"] and fed["previous_from"] == made[0].kept
    # The record keeps the evidence whole: what the review page and the trace show.
    assert result.attempts[1].feedback is not None
    assert "AssertionError" in result.attempts[1].feedback.failed[0].evidence.output_tail
    assert result.attempts[1].feedback.previous_output == "fixed it"
    assert not [e for e in result.events if e.kind == "input-resent"]


async def test_a_run_folder_lost_under_a_task_sends_the_step_again_whole(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
):
    """Its run folder removed while it waits (a wiped disk, or another machine under the
    host's id): the next attempt's make names files the host no longer holds, so it is
    sent again whole from what history holds, said in the trace; the agent gets all of
    it (the goal, the brief, its claim, the evidence) and the task goes on."""
    spec = TaskSpec.model_validate(
        task(demo_repo, write_agent(tmp_path, READS_THE_EVIDENCE), budget={"max_attempts": 1})
    )
    async with build_worker(client, settings):
        handle, _ = await start_task(client, spec, settings.task_queue)
        await wait_for(handle, lambda s: s.state == TaskState.NEEDS_HUMAN)
        run_dir = settings.runs / spec.id
        assert any(run_dir.glob("context-*.json")) and (run_dir / "attempt-1/made.json").is_file()
        shutil.rmtree(run_dir)
        await handle.signal(SIGNAL_EXTEND_BUDGET, ExtendBudgetSignal(attempts=1))
        result = await result_of(handle, within=120)
        await replays(handle, "input_resent")
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    [resent] = [e for e in result.events if e.kind == "input-resent"]
    assert "make failed" in resent.detail and "unreadable on this host" in resent.detail
    assert "sent again whole" in resent.detail
    sent = (await inputs_of(client, handle.id))["make"]
    assert len(sent) == 3 and "task" not in sent[1] and sent[2]["task"]["id"] == spec.id
    whole = sent[2]["prompt"]
    assert whole["brief"] and "brief_path" not in whole and "evidence_from" not in whole
    assert whole["feedback"]["previous_output"] == "fixed it"
    assert whole["feedback"]["failed"][0]["evidence"]["exit_code"] == 1
    # The host keeps them again for the steps after it: verify went by reference.
    assert (await inputs_of(client, handle.id))["verify"][1]["make_from"]
