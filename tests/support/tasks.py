"""Task specs for the demo repository, and what tests read off a running or ended task."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from temporalio.client import WorkflowHandle
from temporalio.service import RPCError

from loop.contracts import QUERY_STATUS, TaskSpec, TaskStatus
from tests.support.levels import DEFAULT_SANDBOX
from tests.support.model_server import ScriptedModel

UNITTEST = f"{sys.executable} -m unittest discover -s tests -t ."
"""The demo repository's test command."""


def task(repo: Path, agent: list[str], **overrides: object) -> dict:
    """A task file's fields (a dict) for the demo repository's slugify bug."""
    spec: dict = {
        "id": f"t-{uuid.uuid4().hex[:8]}",
        "goal": 'slugify("Hello, World!") must return "hello-world".',
        "repo": str(repo),
        "base": "main",
        "agent": {"backend": "command", "command": agent, "timeout": 60},
        "verify": [
            {
                "name": "tests",
                "run": UNITTEST,
                "timeout": 60,
            },
            {
                "name": "scope",
                "diff_scope": {
                    "allow": ["slugify.py", "tests/**", "notes/**"],
                    "protect": ["tests/test_slugify.py"],
                },
            },
            {"name": "keep-tests", "no_removed_tests": True},
        ],
        "budget": {"max_attempts": 3, "max_stalled_attempts": 3},
        "autonomy": "report",
        "sandbox": dict(DEFAULT_SANDBOX),
    }
    spec.update(overrides)
    return spec


def model_task(repo: Path, model: ScriptedModel, **overrides: object) -> TaskSpec:
    """``task()`` with the openai backend, against the scripted model server."""
    data = task(repo, ["true"])
    data["agent"] = {
        "backend": "openai",
        "model": "gpt-4o-mini",
        "base_url": model.url,
        "timeout": 60,
    }
    data.update(overrides)
    return TaskSpec.model_validate(data)


async def wait_for(
    handle: WorkflowHandle, pred: Callable[[TaskStatus], bool], within: float = 60
) -> TaskStatus:
    """Query the task's status until ``pred`` holds; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            st = await handle.query(QUERY_STATUS, result_type=TaskStatus)
            if pred(st):
                return st
        except RPCError:
            st = None  # the first workflow task may not have run yet
        assert time.monotonic() < deadline, f"gave up waiting; last status {st}"
        await asyncio.sleep(0.1)


async def finished_tries(handle: WorkflowHandle) -> dict[str, list[int]]:
    """Per activity type, the try number each execution of it finished on (1 = no retry)."""
    names: dict[int, str] = {}
    tries: dict[str, list[int]] = {}
    async for ev in handle.fetch_history_events():
        if ev.HasField("activity_task_scheduled_event_attributes"):
            attrs = ev.activity_task_scheduled_event_attributes
            names[ev.event_id] = attrs.activity_type.name
        elif ev.HasField("activity_task_started_event_attributes"):
            started = ev.activity_task_started_event_attributes
            tries.setdefault(names[started.scheduled_event_id], []).append(started.attempt)
    return tries
