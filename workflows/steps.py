"""Running one activity from a workflow: option presets, the call, a failure in one line.

A short first retry and heartbeats of a few seconds make a dead worker cost
seconds, not minutes; permanent failures and policy violations are never retried
(docs/architecture.md, "Temporal rules"). ``act`` is how the task loop calls a
step: typed stub in, typed result out, a cancellation passed on as one, and a
failure that retries could not fix raised as ``StepFailed`` with its reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    FailureError,
    TimeoutType,
)
from temporalio.exceptions import TimeoutError as StepTimeout

import workflows.patches as patches
from loop.contracts import (
    ESCALATE,
    INPUT_GONE,
    PERMANENT,
    PING,
    POLICY_VIOLATION,
    SLACK_CLOSE,
    SLACK_POST,
    ActivityDef,
    EscalateInput,
    PingInput,
    SlackCloseInput,
    SlackMessage,
    SlackPostInput,
    Workspace,
    ping_queue,
)

Out = TypeVar("Out", bound=BaseModel)
Step = TypeVar("Step", bound=BaseModel)
Tell = Callable[[str, str], None]
"""A trace event: kind, detail."""

RESEND = "history-by-reference"
"""The patch under which a step whose host lost a file its input names is sent again
whole (docs/architecture.md, "What history holds"); before it, such a step failed the
task. Asked for only then: what an input names issues no command of its own, so a task
whose host keeps its files records no marker."""

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
PING_WAIT = timedelta(seconds=5)
"""How long a host has to answer a ping once its queue went unpolled."""
SHORT = timedelta(seconds=120)
BOOKKEEPING = timedelta(seconds=30)
"""One try of a local step: a ledger's update answers in milliseconds when it is up."""


class StepFailed(Exception):
    """An activity failed for good: the task cannot go on by itself."""

    def __init__(self, reason: str, *, gone: bool = False) -> None:
        super().__init__(reason)
        self.gone = gone
        """Its host no longer holds a file the input named (``INPUT_GONE``)."""


def failure_reason(e: BaseException) -> str:
    """The innermost cause of a failure, in one line."""
    while e.__cause__ is not None:
        e = e.__cause__
    text = e.message if isinstance(e, FailureError) else str(e)
    return text.splitlines()[0] if text else type(e).__name__


class HostLost(Exception):
    """The host holding the task's worktree stopped polling its queue and does not answer
    a ping: the step never started there."""

    def __init__(self, host: str) -> None:
        super().__init__(f"host {host} lost")
        self.host = host


async def on_host(
    d: ActivityDef[Any, Out],
    inp: BaseModel,
    *,
    summary: str,
    limit: timedelta,
    retry: RetryPolicy,
    ws: Workspace | None,
) -> Out:
    """Run one activity where the worktree is: on ``ws``'s host queue (or the workflow's own
    queue for a workspace from before hosts, or none yet). A step that does not start
    within ``ws.host_lost_after`` asks the host's ping queue whether it is alive: a busy
    host gets the step again, a silent one is ``HostLost``."""
    queue = ws.host_queue if ws is not None else ""
    options: dict[str, Any] = {
        "result_type": d.output,
        "start_to_close_timeout": limit,
        "heartbeat_timeout": HEARTBEAT,
        "retry_policy": retry,
        "cancellation_type": workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        "summary": summary,
    }
    if queue:
        assert ws is not None
        options["task_queue"] = queue
        options["schedule_to_start_timeout"] = timedelta(seconds=ws.host_lost_after)
    while True:
        try:
            done: Out = await workflow.execute_activity(d.name, inp, **options)
            return done
        except ActivityError as e:
            if not queue or not _never_started(e):
                raise
            assert ws is not None
            if not await _answers(ws):
                raise HostLost(ws.host) from e


def _never_started(e: ActivityError) -> bool:
    cause = e.cause
    return isinstance(cause, StepTimeout) and cause.type == TimeoutType.SCHEDULE_TO_START


async def _answers(ws: Workspace) -> bool:
    try:
        await workflow.execute_activity(
            PING.name,
            PingInput(host=ws.host),
            result_type=PING.output,
            task_queue=ping_queue(ws.host_queue),
            schedule_to_start_timeout=PING_WAIT,
            start_to_close_timeout=PING_WAIT,
            retry_policy=RetryPolicy(maximum_attempts=1),
            summary=f"is host {ws.host} alive?",
        )
    except ActivityError:
        return False
    return True


async def act(
    d: ActivityDef[Any, Out],
    inp: BaseModel,
    *,
    summary: str,
    seconds: float | None = None,
    ws: Workspace | None = None,
) -> Out:
    """Run one step (on ``ws``'s host when given); a cancellation stays one, a lost host is
    ``HostLost``, anything retries could not fix is ``StepFailed("<name> failed: …")``."""
    try:
        return await on_host(
            d,
            inp,
            summary=summary,
            limit=timedelta(seconds=seconds) if seconds else SHORT,
            retry=STEP_RETRY,
            ws=ws,
        )
    except ActivityError as e:
        raise _ended(d, e) from e


def _ended(d: ActivityDef[Any, Any], e: ActivityError) -> BaseException:
    """What a step's failure is to the task loop."""
    if isinstance(e.cause, CancelledError):
        # Cancelled by the wall-clock timer or a cancel request, not a failure.
        return asyncio.CancelledError()
    return StepFailed(f"{d.name} failed: {failure_reason(e)}", gone=_gone(e))


def _gone(e: BaseException | None) -> bool:
    """An ``INPUT_GONE`` anywhere in the failure: raised by the activity, or while its input
    was read (the SDK wraps that in "Failed decoding arguments")."""
    while e is not None:
        if isinstance(e, ApplicationError) and e.type == INPUT_GONE:
            return True
        e = e.__cause__
    return False


async def act_kept(
    d: ActivityDef[Any, Out],
    inp: Step,
    *,
    whole: Callable[[], Step] | None = None,
    tell: Tell,
    summary: str,
    seconds: float | None = None,
    ws: Workspace | None = None,
) -> Out:
    """``act`` for an input that names files its host kept (the task file and workspace,
    the brief, make's result, the last verdict). Where the host no longer holds one, the
    step goes again as ``whole()`` makes it (by default ``inp`` with the task file and
    workspace), everything in it from what history holds, and the trace says why."""
    try:
        return await act(d, inp, summary=summary, seconds=seconds, ws=ws)
    except StepFailed as e:
        if not e.gone or not patches.patched(RESEND):
            raise
        tell("input-resent", f"{e}; sent again whole")
        again = whole() if whole is not None else inp.model_copy(update={"by_reference": False})
        return await act(d, again, summary=f"{summary} (sent whole)", seconds=seconds, ws=ws)


async def bookkeeping(d: ActivityDef[Any, Out], inp: BaseModel, *, summary: str) -> Out:
    """Run a short step that touches no worktree (a ledger's reservation) as a local
    activity: no task queue round trip, and one marker in history instead of an
    activity's three events and a workflow task."""
    try:
        done: Out = await workflow.execute_local_activity(
            d.name,
            inp,
            result_type=d.output,
            start_to_close_timeout=BOOKKEEPING,
            schedule_to_close_timeout=SHORT,
            retry_policy=STEP_RETRY,
            summary=summary,
        )
    except ActivityError as e:
        raise _ended(d, e) from e
    return done


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
            summary=f"tell people: {inp.state} (a message; the wait is the timer beside it)",
        )
    except ActivityError as e:
        return failure_reason(e)
    return ""


async def post_slack(inp: SlackPostInput) -> tuple[SlackMessage | None, str]:
    """A waiting task's Slack message: (where it is, ""), or (None, why not) after about a
    minute of tries (Slack unreachable: the task waits all the same)."""
    try:
        posted: SlackMessage = await workflow.execute_activity(
            SLACK_POST.name,
            inp,
            result_type=SLACK_POST.output,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=NOTIFY_RETRY,
            summary=f"Slack: {inp.state} (a message with answer buttons)",
        )
    except ActivityError as e:
        return None, failure_reason(e)
    return posted, ""


async def close_slack(task_id: str, message: SlackMessage, outcome: str) -> str:
    """Rewrite a wait's Slack message to say how it ended; "" or why it could not."""
    try:
        await workflow.execute_activity(
            SLACK_CLOSE.name,
            SlackCloseInput(task_id=task_id, message=message, outcome=outcome),
            result_type=SLACK_CLOSE.output,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=NOTIFY_RETRY,
            summary=f"Slack: {outcome[:60]}",
        )
    except ActivityError as e:
        return failure_reason(e)
    return ""
