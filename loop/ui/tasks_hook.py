"""``POST /hooks/tasks``: any tracker's or alert's webhook starts a task, as triage would.

Enabled only when ``LOOP_HOOKS_TOKEN_FILE`` names the bearer token (otherwise 404). A
request is taken only with ``Authorization: Bearer <token>``, compared in constant time:
anything else is 401 and starts nothing. The body is one JSON object holding an issue's
goal-level fields (``loop.contracts.tasks_hook``) and the ``source`` of ``--sources`` whose
template makes the task; a key beyond those, a source that is not there, or a body that is
not such an object is 400 with the reason in one line, and starts nothing.

Nothing slow happens here: the body is handed to a ``TaskHookWorkflow`` (202 with its
id and the task id it decides on); the workflow builds the item, asks triage's policy and
starts ``task-<source>-<id>`` at most once.
"""

from __future__ import annotations

import hmac
import uuid
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from temporalio.client import Client
from temporalio.service import RPCError

from loop.contracts import (
    TriageSources,
)
from loop.contracts.tasks_hook import (
    HOOK_BODY_KEYS,
    TASK_HOOK_WORKFLOW,
    TaskHook,
    TaskHookResult,
    task_hook_workflow_id,
)
from loop.rules import triage
from loop.ui import bodies
from loop.ui.bodies import said

PATH = "/hooks/tasks"
MAX_BODY = 256 << 10
"""Bytes read of a body: an issue's goal, not its attachments."""
HOOK_TIMEOUT = timedelta(minutes=30)
MAX_ID = 64


def token_ok(expected: str, header: str) -> bool:
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        expected.encode(), given.strip().encode()
    )


class TasksHook:
    def __init__(
        self, token: str, tasked: dict[str, TriageSources], client: Client, task_queue: str
    ) -> None:
        self.token = token
        self.tasked = tasked
        self.client = client
        self.task_queue = task_queue

    async def handle(self, request: Request) -> Response:
        if not token_ok(self.token, request.headers.get("authorization", "")):
            return said(401, "refused: send Authorization: Bearer <LOOP_HOOKS_TOKEN_FILE's token>")
        body = await bodies.capped(request, MAX_BODY)
        if body is None:
            return said(413, f"refused: a body is at most {MAX_BODY} bytes")
        data, refusal = bodies.parsed(body)
        if refusal is not None:
            return refusal
        why = self.refused(data)
        if why:
            return said(400, f"refused: {why}")
        fields = {k: v for k, v in data.items() if k not in ("source", "body")}
        hook = TaskHook(
            sources=self.tasked[data["source"]],
            source=data["source"],
            fields=fields,
            body=str(data.get("body") or ""),
        )
        task_id = triage.task_id_for(hook.source, str(data["id"]))
        wid = task_hook_workflow_id(uuid.uuid4().hex)
        try:
            await self.client.start_workflow(
                TASK_HOOK_WORKFLOW,
                hook,
                id=wid,
                task_queue=self.task_queue,
                result_type=TaskHookResult,
                execution_timeout=HOOK_TIMEOUT,
                static_summary=f"POST /hooks/tasks: {task_id}",
            )
        except RPCError as e:
            return said(503, f"not taken: Temporal did not answer ({e.message or e.status})")
        return JSONResponse(
            {"message": f"taken: workflow {wid}", "workflow_id": wid, "task_id": task_id},
            status_code=202,
        )

    def refused(self, data: Any) -> str:
        """Why the body starts nothing, in one line; "" when it is an issue to decide on."""
        if not isinstance(data, dict):
            return "the body is not a JSON object"
        extra = sorted(set(data) - HOOK_BODY_KEYS)
        if extra:
            allowed = ", ".join(sorted(HOOK_BODY_KEYS))
            return (
                f"a body may not set {extra[0]!r}; it gives goal-level fields only ({allowed}); "
                "the source's template configures the task"
            )
        source = data.get("source")
        if not isinstance(source, str) or source not in self.tasked:
            names = ", ".join(sorted(self.tasked))
            return f"source {source!r} is not a source of --sources (one of: {names})"
        key = data.get("id")
        if not isinstance(key, str | int) or not str(key).strip() or len(str(key)) > MAX_ID:
            return f"id must be the item's id in its tracker (text, 1 to {MAX_ID} characters)"
        if not any(
            isinstance(data.get(k), str) and data[k].strip() for k in ("goal", "title", "body")
        ):
            return "say what must be true when done: goal, or title and body"
        return ""
