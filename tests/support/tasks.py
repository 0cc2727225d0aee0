"""Tasks for tests: task files, starting a task, and waiting on it with a bound."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from loop.contracts import (
    CHECK_ANSWER,
    QUERY_STATUS,
    TaskSpec,
    TaskStatus,
)
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.host import DEFAULT_SANDBOX
from tests.support.model_server import ScriptedModel

UNITTEST = f"{sys.executable} -m unittest discover -s tests -t ."
"""The demo repository's tests, as a ``run`` gate or a ``run`` tool command."""
ASK_S = 10
"""How long ``where_is`` waits for each answer about a task that did not end."""


def task(repo: Path, agent: list[str], **overrides: object) -> dict:
    """A task file (as a dict) for the demo repository: fix slugify, three gates."""
    spec: dict = {
        "id": f"t-{uuid.uuid4().hex[:8]}",
        "goal": 'slugify("Hello, World!") must return "hello-world".',
        "repo": str(repo),
        "base": "main",
        "agent": {"backend": "command", "command": agent, "timeout": 60},
        "verify": [
            {"name": "tests", "run": UNITTEST, "timeout": 60},
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
    """``task()`` with the openai backend, talking to the scripted ``model``."""
    data = task(repo, ["true"])
    data["agent"] = {
        "backend": "openai",
        "model": "gpt-4o-mini",
        "base_url": model.url,
        "timeout": 60,
    }
    data.update(overrides)
    return TaskSpec.model_validate(data)


async def start(
    client: Client, settings: Settings, spec: dict | TaskSpec, *, rerun: bool = False
) -> WorkflowHandle:
    """Start the task on the settings' queue; it must be a new one (``rerun``: a new run
    of an id that has ended)."""
    spec = spec if isinstance(spec, TaskSpec) else TaskSpec.model_validate(spec)
    handle, started = await start_task(client, spec, settings.task_queue, rerun=rerun)
    assert started, f"{spec.id} was already running"
    return handle


async def wait_for(
    handle: WorkflowHandle, pred: Callable[[TaskStatus], object], within: float = 60
) -> TaskStatus:
    """Poll the task's ``status`` query until ``pred`` holds; fail after ``within`` seconds
    with the last status seen. A query the server cannot answer yet (the workflow's first
    task has not run) counts as "not yet"."""
    deadline = time.monotonic() + within
    while True:
        try:
            st: TaskStatus | str = await handle.query(QUERY_STATUS, result_type=TaskStatus)
            if pred(st):  # type: ignore[arg-type]
                return st  # type: ignore[return-value]
        except RPCError as e:
            st = f"no answer to the status query ({e})"
        assert time.monotonic() < deadline, f"gave up waiting; last status {st}"
        await asyncio.sleep(0.2)


async def result_of(handle: WorkflowHandle, within: float = 90) -> Any:
    """The workflow's result, waited for at most ``within`` seconds.

    A task that does not end in time fails the test at once, saying where it is: the
    server's view (execution status, pending activities) and the task's own ``status``
    query (state, phase, attempt, reason), instead of the test's timeout with no message.
    Works for any workflow; one without the ``status`` query reports the server's view.
    """
    try:
        return await asyncio.wait_for(handle.result(), within)
    except TimeoutError:
        where = await where_is(handle)
    pytest.fail(f"{handle.id} did not end within {within:g} s: {where}", pytrace=False)


async def where_is(handle: WorkflowHandle) -> str:
    """One line on where a workflow is: the server's description and the task's status
    (each asked for at most ``ASK_S`` seconds: a query waits for a worker to answer)."""
    parts: list[str] = []
    try:
        desc = await asyncio.wait_for(handle.describe(), ASK_S)
        status = desc.status.name if desc.status is not None else "unknown"
        pending = [
            f"{p.activity_type.name} (try {p.attempt})"
            for p in desc.raw_description.pending_activities
        ]
        parts.append(f"execution {status}")
        parts.append("pending activities: " + (", ".join(pending) or "none"))
    except TimeoutError:
        parts.append(f"the server did not describe it within {ASK_S} s")
    except Exception as e:  # the server may be what is wrong
        parts.append(f"describe failed: {type(e).__name__}: {e}")
    try:
        st = await asyncio.wait_for(handle.query(QUERY_STATUS, result_type=TaskStatus), ASK_S)
        parts.append(
            f"state {st.state}, phase {st.phase}, attempt {st.attempt}, "
            f"reason {st.reason!r}, waiting for {st.waiting_for!r}, "
            f"last verdict {st.last_verdict!r}"
        )
    except TimeoutError:
        parts.append(f"no answer to the status query within {ASK_S} s (is a worker running?)")
    except Exception as e:  # not a task, or the server is what is wrong
        parts.append(f"status query failed: {type(e).__name__}: {e}")
    return "; ".join(parts)


async def answers_in_history(handle: WorkflowHandle) -> list[str]:
    """Every answer the task's history holds (``signal approve``, ``update approve``) and
    every signature check it ran: what an answer that was refused before history must
    not leave."""
    found = []
    for e in (await handle.fetch_history()).events:
        if e.HasField("workflow_execution_signaled_event_attributes"):
            found.append(f"signal {e.workflow_execution_signaled_event_attributes.signal_name}")
        elif e.HasField("workflow_execution_update_admitted_event_attributes"):
            name = e.workflow_execution_update_admitted_event_attributes.request.input.name
            found.append(f"update {name}")
        elif e.HasField("workflow_execution_update_accepted_event_attributes"):
            accepted = e.workflow_execution_update_accepted_event_attributes
            found.append(f"update {accepted.accepted_request.input.name}")
        elif _local_activity(e) == CHECK_ANSWER.name:
            found.append("signature check")
    return found


def _local_activity(e: HistoryEvent) -> str:
    """The activity a local activity's marker records, or ""."""
    marker = e.marker_recorded_event_attributes
    if marker.marker_name != "core_local_activity":
        return ""
    return json.loads(marker.details["data"].payloads[0].data).get("activity_type", "")


async def replays(handle: WorkflowHandle, name: str) -> None:
    """The run replays on the code that made it; ``LOOP_RECORD_HISTORIES=DIR`` keeps it as
    ``DIR/<name>.json`` (for tests/workflow/histories)."""
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Replayer

    from worker import WORKFLOWS

    history = await handle.fetch_history()
    replayed = await Replayer(
        workflows=WORKFLOWS, data_converter=pydantic_data_converter
    ).replay_workflow(history)
    assert replayed.replay_failure is None
    keep = os.environ.get("LOOP_RECORD_HISTORIES")
    if keep:
        (Path(keep) / f"{name}.json").write_text(history.to_json())
