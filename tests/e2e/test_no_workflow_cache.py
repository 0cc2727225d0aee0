"""A whole task with no workflow cache: every workflow task replays the history from the start,
and the run it leaves behind replays too."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.enums.v1 import TaskQueueKind
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from loop.contracts import TaskSpec, TaskState
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import write_agent
from tests.support.tasks import task
from worker import WORKFLOWS, build_worker


def replayer() -> Replayer:
    return Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)


FAIL_THEN_PASS = """
if attempt == 1:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return t.lower()\\n")
else:
    pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text(f"attempt {attempt}")
"""


@pytest.mark.timeout(120)
async def test_full_task_without_a_workflow_cache(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """max_cached_workflows=0: every workflow task rebuilds the workflow from its history."""
    spec = TaskSpec.model_validate(task(demo_repo, write_agent(tmp_path, FAIL_THEN_PASS)))
    async with build_worker(client, settings, max_cached_workflows=0):
        handle, started = await start_task(client, spec, settings.task_queue)
        assert started
        result = await handle.result()
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert len(result.attempts) == 2
    assert [a.verdict.passed for a in result.attempts if a.verdict] == [False, True]
    history = await handle.fetch_history()
    # No workflow task went to a sticky queue: none found the workflow in a cache.
    sticky = [
        e
        for e in history.events
        if e.HasField("workflow_task_scheduled_event_attributes")
        and e.workflow_task_scheduled_event_attributes.task_queue.kind
        == TaskQueueKind.TASK_QUEUE_KIND_STICKY
    ]
    assert not sticky
    # And the run it left behind replays as well.
    replayed = await replayer().replay_workflow(history)
    assert replayed.replay_failure is None
