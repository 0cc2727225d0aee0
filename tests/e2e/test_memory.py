"""Memory across runs on a real server: one task's lessons reach the next task's brief.

How lessons fold and how memory.json is written are in tests/unit/test_memory.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import TaskSpec
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import PASS_ON_SECOND, write_agent
from tests.support.tasks import result_of, task
from worker import build_worker

pytestmark = pytest.mark.timeout(120)


async def run(client: Client, settings: Settings, spec: dict):
    async with build_worker(client, settings):
        handle, _ = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
        return await result_of(handle)


async def test_what_one_task_learned_is_in_the_next_brief(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
):
    first = await run(client, settings, task(demo_repo, write_agent(tmp_path, PASS_ON_SECOND)))
    learned = json.loads(settings.memory.read_text())["repos"][str(demo_repo)]
    (pattern,) = learned["failures"].values()
    assert pattern["count"] == 1 and pattern["gates"] == ["tests"]
    assert f"task {first.task_id} passed after changing slugify.py" == pattern["fixed_by"]
    assert any(s["passed"] >= 1 for s in learned["commands"].values())

    second = await run(client, settings, task(demo_repo, write_agent(tmp_path, PASS_ON_SECOND)))
    brief = (settings.runs / second.task_id / "brief.md").read_text()
    assert "What earlier runs on this repository learned" in brief
    assert f"fixed when task {first.task_id} passed after changing slugify.py" in brief
    prompt = (settings.runs / second.task_id / "attempt-1" / "prompt.md").read_text()
    assert "Failure seen 1x in tests" in prompt  # the brief reaches the agent
    # ... from explore's file: history holds it once (explore's result), not per attempt.
    history = await client.get_workflow_handle(f"task-{second.task_id}").fetch_history()
    raw = b"".join(ev.SerializeToString() for ev in history.events)
    assert raw.count(b"What earlier runs on this repository learned") == 1
    again = json.loads(settings.memory.read_text())["repos"][str(demo_repo)]
    assert next(iter(again["failures"].values()))["count"] == 2
