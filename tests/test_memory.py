"""Memory across runs: one task's lessons reach the next task's brief; writes are atomic."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.host.files import update_atomic
from loop.contracts import TaskSpec
from loop.rules import memory
from loop.settings import Settings
from loop.tasks import start_task
from tests.conftest import task, write_agent
from tests.test_task_e2e import PASS_ON_SECOND
from worker import build_worker

pytestmark = pytest.mark.timeout(120)


async def run(client: Client, settings: Settings, spec: dict):
    async with build_worker(client, settings):
        handle, _ = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
        return await handle.result()


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
    again = json.loads(settings.memory.read_text())["repos"][str(demo_repo)]
    assert next(iter(again["failures"].values()))["count"] == 2


def test_fold_is_idempotent_per_task_run(tmp_path: Path):
    from loop.contracts import TaskResult, TaskState

    result = TaskResult(task_id="a", state=TaskState.BLOCKED, spec_hash="f" * 64)
    once = memory.fold("", "/r", result, "t1")
    assert memory.fold(once, "/r", result, "t2") == once


def test_a_crash_mid_write_leaves_the_previous_version(tmp_path: Path, monkeypatch):
    path = tmp_path / "memory.json"
    update_atomic(path, lambda _: '{"v": 1}')

    def crash(*args: object) -> None:
        raise OSError("disk pulled")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        update_atomic(path, lambda _: '{"v": 2}')
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == ["memory.json"]
