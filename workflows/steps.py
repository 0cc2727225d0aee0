"""Running one activity from a workflow: option presets, the call, a failure in one line.

A short first retry and heartbeats of a few seconds make a dead worker cost
seconds, not minutes; permanent failures and policy violations are never retried
(docs/architecture.md, "Temporal rules"). ``act`` is how the task loop calls a
step: typed stub in, typed result out, a cancellation passed on as one, and a
failure that retries could not fix raised as ``StepFailed`` with its reason.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError, FailureError

from loop.contracts import ESCALATE, PERMANENT, POLICY_VIOLATION, ActivityDef, EscalateInput

Out = TypeVar("Out", bound=BaseModel)

STEP_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=6,
    non_retryable_error_types=[PERMANENT, POLICY_VIOLATION],
)
"""Git, gates, agents, files: transient failures are short-lived or not transient."""

MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=8,
    non_retryable_error_types=[PERMANENT, POLICY_VIOLATION],
)
"""Model endpoints rate-limit and have outages: more patience, a server's Retry-After wins."""

NOTIFY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=6,
)
"""A webhook: about a minute of tries, then the failure is recorded."""

HEARTBEAT = timedelta(seconds=5)
SHORT = timedelta(seconds=120)


class StepFailed(Exception):
    """An activity failed for good: the task cannot go on by itself."""


def failure_reason(e: BaseException) -> str:
    """The innermost cause of a failure, in one line."""
    while e.__cause__ is not None:
        e = e.__cause__
    text = e.message if isinstance(e, FailureError) else str(e)
    return text.splitlines()[0] if text else type(e).__name__


async def act(
    d: ActivityDef[Any, Out], inp: BaseModel, *, summary: str, seconds: float | None = None
) -> Out:
    """Run one step; a cancellation stays one, anything retries could not fix is
    ``StepFailed("<name> failed: <reason>")``."""
    try:
        return await workflow.execute_activity(
            d.name,
            inp,
            result_type=d.output,
            start_to_close_timeout=timedelta(seconds=seconds) if seconds else SHORT,
            heartbeat_timeout=HEARTBEAT,
            retry_policy=STEP_RETRY,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=summary,
        )
    except ActivityError as e:
        if isinstance(e.cause, CancelledError):
            # Cancelled by the wall-clock timer or a cancel request, not a failure.
            raise asyncio.CancelledError from e
        raise StepFailed(f"{d.name} failed: {failure_reason(e)}") from e


async def notify(inp: EscalateInput) -> str:
    """Send an escalation to people; "" when it went out, else why it did not (after about a
    minute of tries: a failing sink is recorded, never fatal)."""
    try:
        await workflow.execute_activity(
            ESCALATE.name,
            inp,
            result_type=ESCALATE.output,
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=HEARTBEAT,
            retry_policy=NOTIFY_RETRY,
            summary="escalate",
        )
    except ActivityError as e:
        return failure_reason(e)
    return ""
