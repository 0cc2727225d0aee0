"""Client-side task helpers shared by the CLI, the demo and the review page: start,
follow, worker check, and sending a person's answer (approve, reject, feedback, extend)."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import FailureError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from loop.contracts import (
    MAKE,
    QUERY_STATUS,
    QUERY_TRACE,
    SA_STATE,
    SIGNAL_APPROVE,
    SIGNAL_EXTEND_BUDGET,
    SIGNAL_FEEDBACK,
    SIGNAL_PULL_REQUEST_CLOSED,
    SIGNAL_REJECT,
    TASK_WORKFLOW,
    AnswerReply,
    ApproveSignal,
    CandidateView,
    ExtendBudgetSignal,
    FeedbackSignal,
    Progress,
    PullRequestClosedSignal,
    RejectSignal,
    TaskResult,
    TaskSpec,
    TaskState,
    TaskStatus,
    TraceEvent,
    is_valid_task_id,
    starting_attributes,
    workflow_id_for,
)
from loop.errors import BadInput, LoopError, UnknownTask
from loop.hardened import answers
from loop.rules import progress


async def start_task(
    client: Client, spec: TaskSpec, task_queue: str, *, rerun: bool = False, eager: bool = False
) -> tuple[WorkflowHandle, bool]:
    """Start the task's workflow; (handle, False) when it is already running (idempotent).

    ``eager``: a worker of this same client serves ``task_queue`` in this process (``loop
    demo``'s own), so the start asks for the first workflow task in its reply (Temporal's
    eager workflow start: no poll round trip before the first step is scheduled). Where
    the server cannot, the start is an ordinary one."""
    handle = client.get_workflow_handle(workflow_id_for(spec.id), result_type=TaskResult)
    # The start is the one request of the common case; an id already used is told apart
    # (open, or ended and not to be rerun) only when the server refuses it.
    reuse = (
        WorkflowIDReusePolicy.ALLOW_DUPLICATE if rerun else WorkflowIDReusePolicy.REJECT_DUPLICATE
    )
    try:
        started = await client.start_workflow(
            TASK_WORKFLOW,
            spec,
            result_type=TaskResult,
            id=workflow_id_for(spec.id),
            task_queue=task_queue,
            id_reuse_policy=reuse,
            memo={"goal": spec.goal},
            search_attributes=starting_attributes(spec.repo),
            static_summary=f"{spec.id}: {spec.goal.strip().splitlines()[0][:120]}",
            request_eager_start=eager,
        )
    except WorkflowAlreadyStartedError:
        desc = await handle.describe()
        if desc.status == WorkflowExecutionStatus.RUNNING or rerun:
            return handle, False
        raise BadInput(
            f"task {spec.id} already ended {task_state(desc)}; "
            "use --rerun to run it again or pick another id"
        ) from None
    return started, True


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
    client: Client | None = None,
    on_progress: Callable[[Progress | None], None] | None = None,
    on_quiet: Callable[[], Awaitable[None]] | None = None,
    quiet_s: float = 10.0,
) -> tuple[TaskResult, bool]:
    """Report each trace event (state changes, attempts, verdicts) until the task ends,
    or, with ``until_waiting``, until it waits for a person: (result so far, waiting).

    Each poll is one request the server answers alone (its description of the workflow);
    the ``trace`` query, which a worker answers, follows only when the history grew, for
    no event comes any other way. With ``client``, ``on_progress`` gets the running
    attempt's progress at each poll (its step's latest heartbeat, from that description).
    ``on_quiet`` runs whenever the history has not grown for ``quiet_s`` seconds. Events
    come from the result at the end too, so a task faster than the polling interval
    still shows every step.
    """
    seen, length = 0, -1
    quiet_since = time.monotonic()
    result_task = asyncio.ensure_future(handle.result())
    try:
        while not result_task.done():
            with contextlib.suppress(RPCError, TimeoutError):
                desc = await asyncio.wait_for(handle.describe(), 5)
                grown = desc.raw_description.workflow_execution_info.history_length
                if on_progress is not None and client is not None:
                    on_progress(await progress_of(client, desc))
                if grown != length:
                    trace = await asyncio.wait_for(
                        handle.query(QUERY_TRACE, result_type=TaskResult), 5
                    )
                    length, quiet_since = grown, time.monotonic()
                    for event in trace.events[seen:]:
                        on_event(event)
                    seen = max(seen, len(trace.events))
                    if until_waiting and trace.state.waiting and not result_task.done():
                        return trace, True
            if on_quiet is not None and time.monotonic() - quiet_since >= quiet_s:
                quiet_since = time.monotonic()
                await on_quiet()
            await asyncio.wait([result_task], timeout=every)
    finally:
        if not result_task.done():
            result_task.cancel()
    result: TaskResult = result_task.result()
    for event in result.events[seen:]:
        on_event(event)
    return result, False


# --------------------------------------------------------------------------- answers

ANSWERS = {
    "approve": SIGNAL_APPROVE,
    "reject": SIGNAL_REJECT,
    "feedback": SIGNAL_FEEDBACK,
    "extend": SIGNAL_EXTEND_BUDGET,
}
"""The answers a person gives a task, and the update (and signal) name that carries each."""
FROM_GITHUB = {"pull_request_closed": SIGNAL_PULL_REQUEST_CLOSED}
"""Answers only a GitHub delivery gives (signed by the worker as a person's are): no
form or command offers them."""
UPDATES = ANSWERS | FROM_GITHUB

ANSWER_TIMEOUT_S = 30
"""How long an answer waits for the task to take it: a worker normally does in
milliseconds (the check of its signature is a local activity)."""

P = TypeVar("P", bound=BaseModel)


def signed(payload: P, task_id: str, answer: str, by: str, key_file: Path | None) -> P:
    """``payload`` as it is sent: who answers, when, and (with an answer key) the signature
    the worker checks (``loop.hardened.answers``). ``answer``: ``approve``, ``reject``,
    ``feedback`` or ``extend``."""
    stamped = payload.model_copy(
        update={"by": by, "at": datetime.now(UTC).isoformat(), "signature": ""}
    )
    if key_file is None:
        return stamped
    try:
        key = answers.read_key(key_file)
    except answers.AnswerKeyError as e:
        raise BadInput(str(e)) from None
    fields = stamped.model_dump(mode="json")
    signature = answers.sign(key, workflow_id_for(task_id), UPDATES[answer], fields)
    return stamped.model_copy(update={"signature": signature})


async def answer(
    client: Client, task_id: str, what: str, payload: BaseModel, by: str, key_file: Path | None
) -> AnswerReply:
    """Send ``what`` (``approve``, ``reject``, ``feedback``, ``extend``) as an update from
    ``by``, signed with ``key_file`` where there is one, and return what it did. The
    workflow decides whether it applies and whether its signature holds (its validator,
    before anything is written to history); a refusal is ``BadInput`` with the
    workflow's reason. No state is read first: a check here could go stale before the
    answer lands."""
    handle, desc = await find(client, task_id)
    if desc.status != WorkflowExecutionStatus.RUNNING:
        raise BadInput(f"task {task_id} has ended {task_state(desc)}; {what} does not apply")
    try:
        return await handle.execute_update(
            UPDATES[what],
            signed(payload, task_id, what, by, key_file),
            result_type=AnswerReply,
            rpc_timeout=timedelta(seconds=ANSWER_TIMEOUT_S),
        )
    except WorkflowUpdateFailedError as e:
        raise BadInput(_refused(e)) from None
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise LoopError(
            f"task {task_id} did not take the {what} within {ANSWER_TIMEOUT_S} s: is a "
            "worker running (`loop worker`)? It may still take it when one starts; "
            f"see `loop status {task_id}`"
        ) from None
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:  # it ended between the look and the answer
            raise BadInput(f"task {task_id} has ended; {what} does not apply") from None
        raise


def payload_for(answer: str, form: dict[str, str], by: str, answer_id: str = "") -> Any:
    """The signal's payload from a form (an approval's ``commit`` among its fields), as
    answer ``answer_id``; ``BadInput`` with one line when it is incomplete."""
    if answer == "approve":
        commit = form.get("commit", "").strip()
        return ApproveSignal(
            note=form.get("note", "").strip(),
            by=by,
            commit=commit,
            answer_id=answer_id,
            candidate=form.get("candidate", "").strip(),
        )
    if answer == "reject":
        reason = form.get("reason", "").strip()
        if not reason:
            raise BadInput("say why it is rejected (the reason is recorded in the trace)")
        return RejectSignal(reason=reason, by=by, answer_id=answer_id)
    if answer == "feedback":
        text = form.get("text", "").strip()
        if not text:
            raise BadInput("feedback text is empty; say what the agent should do differently")
        return FeedbackSignal(text=text, by=by, answer_id=answer_id)
    if answer == "extend":
        fields = {"attempts": int, "seconds": int, "tokens": int, "cost_usd": float}
        values: dict[str, Any] = {}
        for name, kind in fields.items():
            raw = form.get(name, "").strip()
            try:
                values[name] = kind(raw) if raw else kind(0)
            except ValueError:
                raise BadInput(f"{name}: {raw!r} is not a number") from None
            if values[name] < 0:
                raise BadInput(f"{name}: must not be negative")
        payload = ExtendBudgetSignal(**values, by=by, answer_id=answer_id)
        if payload.model_copy(update={"by": "", "answer_id": ""}) == ExtendBudgetSignal():
            raise BadInput("nothing to add; give attempts, seconds, tokens or cost")
        return payload
    if answer == "pull_request_closed":
        merged = form.get("merged") == "true"
        return PullRequestClosedSignal(
            merged=merged, who=form.get("who", ""), by=by, answer_id=answer_id
        )
    raise BadInput(f"unknown answer {answer!r}")


def new_answer_id(path: str) -> str:
    """A fresh id for an answer a person gives now through ``path`` (``cli``, ``page``)."""
    return f"{path}:{uuid.uuid4().hex}"


async def approvable(client: Client, task_id: str) -> TaskStatus | None:
    """The task's status as an approval reads it (the commit waiting, since when); None
    when it has ended (the answer is then refused with the reason)."""
    handle, desc = await find(client, task_id)
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return None
    return await live_status(handle)


def _refused(e: WorkflowUpdateFailedError) -> str:
    """The reason the workflow gave (its validator's or its handler's ``ApplicationError``),
    else what the SDK said (a payload the workflow could not read, say)."""
    cause = e.cause
    return cause.message if isinstance(cause, FailureError) else str(cause)


def checked_id(task_id: str) -> str:
    if not is_valid_task_id(task_id):
        raise BadInput(f"{task_id!r} is not a task id ([a-z0-9][a-z0-9._-]{{0,62}})")
    return task_id


async def find(client: Client, task_id: str) -> tuple[WorkflowHandle, Any]:
    """The task's workflow (its latest run) and its description; ``UnknownTask`` when the
    server has none: the one lookup the CLI, the answers and the review page share."""
    handle = client.get_workflow_handle(
        workflow_id_for(checked_id(task_id)), result_type=TaskResult
    )
    try:
        desc = await handle.describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise UnknownTask(
                f"no task {task_id!r} (workflow {handle.id}) on this server"
            ) from None
        raise
    return handle, desc


async def live_status(
    handle: WorkflowHandle, desc: Any = None, client: Client | None = None
) -> TaskStatus:
    """The ``status`` query of an open task (a worker must answer it within 10 s); with
    the workflow's description ``desc`` (read just before) and its ``client``, its
    figures as of now and the running attempt's progress (``loop.rules.progress``)."""
    try:
        st = await asyncio.wait_for(handle.query(QUERY_STATUS, result_type=TaskStatus), 10)
    except TimeoutError:
        raise LoopError(
            f"task {handle.id} did not answer its status query: is a worker running "
            "(`loop worker`)?"
        ) from None
    if desc is None or client is None:
        return st
    return progress.live(st, await progress_of(client, desc), datetime.now(UTC))


async def progress_of(client: Client, desc: Any) -> Progress | None:
    """What the running attempt's agent has done so far: the latest heartbeat of the
    workflow's pending ``make`` step, as the server's description ``desc`` has it (no
    request of its own); None while none runs or it has not said yet."""
    for pending in desc.raw_description.pending_activities:
        if pending.activity_type.name != MAKE.name or not pending.heartbeat_details.payloads:
            continue
        try:
            (found,) = await client.data_converter.decode(
                list(pending.heartbeat_details.payloads), [Progress]
            )
        except Exception:  # sealed, or a worker from before progress: nothing to show
            return None
        return found if isinstance(found, Progress) else None
    return None


async def with_live_candidates(client: Client, st: TaskStatus) -> TaskStatus:
    """The task's status with each running candidate's own figures so far (its attempt,
    phase, spend and last verdict), from its workflow's ``status`` query; one that does
    not answer keeps what its task knows (as of its last round)."""

    async def live(view: CandidateView) -> CandidateView:
        if view.state != TaskState.RUNNING or not view.workflow_id:
            return view
        handle = client.get_workflow_handle(view.workflow_id)
        with contextlib.suppress(RPCError, TimeoutError):
            own = await asyncio.wait_for(handle.query(QUERY_STATUS, result_type=TaskStatus), 5)
            used = own.budget.used
            return view.model_copy(
                update={"attempt": own.attempt, "phase": own.phase,
                        "tokens": used.tokens or 0, "cost_usd": used.cost_usd or 0.0,
                        "last_verdict": own.last_verdict or view.last_verdict}
            )  # fmt: skip
        return view

    views = await asyncio.gather(*(live(v) for v in st.candidates))
    return st.model_copy(update={"candidates": list(views)})


def task_state(wf: Any) -> str:
    """A listed or described task's state in Loopwork's words: its ``LoopState``; for a
    workflow that closed without Loopwork saying how (terminated from outside, timed
    out), Temporal's status."""
    state = str(wf.typed_search_attributes.get(SA_STATE) or "")
    if wf.status != WorkflowExecutionStatus.RUNNING and state in ("", str(TaskState.RUNNING)):
        return wf.status.name if wf.status else "UNKNOWN"
    return state or str(TaskState.RUNNING)


def local_user() -> str:
    """Who answers from this machine, for the trace (``by``)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"
