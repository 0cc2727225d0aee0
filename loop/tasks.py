"""Client-side task helpers shared by the CLI and the demo: start, follow, worker check."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from loop.contracts import (
    QUERY_TRACE,
    SA_REPO,
    SA_STATE,
    TASK_WORKFLOW,
    TaskResult,
    TaskSpec,
    TaskState,
    TraceEvent,
    workflow_id_for,
)
from loop.errors import BadInput


async def start_task(
    client: Client, spec: TaskSpec, task_queue: str, *, rerun: bool = False
) -> tuple[WorkflowHandle, bool]:
    """Start the task's workflow; (handle, False) when it is already running (idempotent)."""
    handle = client.get_workflow_handle(workflow_id_for(spec.id), result_type=TaskResult)
    with contextlib.suppress(RPCError):
        desc = await handle.describe()
        if desc.status == WorkflowExecutionStatus.RUNNING:
            return handle, False
        if not rerun:
            raise BadInput(
                f"task {spec.id} already ended ({desc.status.name}); "
                "use --rerun to run it again or pick another id"
            )
    try:
        handle = await client.start_workflow(
            TASK_WORKFLOW,
            spec,
            result_type=TaskResult,
            id=workflow_id_for(spec.id),
            task_queue=task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            memo={"goal": spec.goal},
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(SA_STATE, str(TaskState.RUNNING)),
                    SearchAttributePair(SA_REPO, spec.repo),
                ]
            ),
            static_summary=f"{spec.id}: {spec.goal.strip().splitlines()[0][:120]}",
        )
    except WorkflowAlreadyStartedError:
        return client.get_workflow_handle(workflow_id_for(spec.id), result_type=TaskResult), False
    return handle, True


async def has_worker(client: Client, task_queue: str) -> bool:
    """Whether any worker polls the queue (a task started without one just sits there)."""
    try:
        resp = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
    except RPCError:
        return True  # cannot tell; do not cry wolf
    return len(resp.pollers) > 0


async def follow(
    handle: WorkflowHandle,
    on_event: Callable[[TraceEvent], None],
    *,
    every: float = 0.5,
    until_waiting: bool = False,
) -> tuple[TaskResult, bool]:
    """Report each trace event (state changes, attempts, verdicts) until the task ends,
    or, with ``until_waiting``, until it waits for a person: (result so far, waiting).

    Events come from the ``trace`` query while the task runs and from the result at
    the end, so a task faster than the polling interval still shows every step.
    """
    seen = 0
    result_task = asyncio.ensure_future(handle.result())
    try:
        while not result_task.done():
            with contextlib.suppress(RPCError, TimeoutError):
                trace = await asyncio.wait_for(handle.query(QUERY_TRACE, result_type=TaskResult), 5)
                for event in trace.events[seen:]:
                    on_event(event)
                seen = max(seen, len(trace.events))
                if until_waiting and trace.state.waiting and not result_task.done():
                    return trace, True
            await asyncio.wait([result_task], timeout=every)
    finally:
        if not result_task.done():
            result_task.cancel()
    result: TaskResult = result_task.result()
    for event in result.events[seen:]:
        on_event(event)
    return result, False
