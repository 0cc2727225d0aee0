"""Whether an answer a task received was signed with the answer key: checked twice.

- ``AnswerChecks``, a workflow interceptor, checks an answer sent as an update in its
  validator, before anything is written to history, so a forged, unsigned, replayed
  for another task or stale answer is refused and its sender hears why. It runs only
  when the update arrives (a replay never runs validators), so it may read the key.
- ``check_answer``, a local activity, checks it again in the handler, and every signalled
  answer: it runs on the worker that runs the workflow, reads the key there
  (``loop.hardened.answers``: the key never enters history or a payload), and gives the
  workflow one recorded verdict, so a replay decides the same way.

Both apply ``verdict``: an answer is accepted when its signature holds, it was signed
at most ``MAX_AGE_S`` before the workflow received it (and not after), and, with no
key on this worker, always (the trace then says it was unsigned).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from loop.contracts import (
    ANSWER_REFUSED,
    CHECK_ANSWER,
    SIGNAL_APPROVE,
    SIGNAL_EXTEND_BUDGET,
    SIGNAL_FEEDBACK,
    SIGNAL_PULL_REQUEST_CLOSED,
    SIGNAL_REJECT,
    TASK_WORKFLOW,
    CheckAnswerInput,
    CheckAnswerResult,
    workflow_id_for,
)
from loop.hardened import answers
from loop.settings import Settings

SKEW_S = 60
"""How far ahead of the worker's clock a person's clock may be."""
ANSWER_UPDATES = frozenset(
    {
        SIGNAL_APPROVE,
        SIGNAL_REJECT,
        SIGNAL_FEEDBACK,
        SIGNAL_EXTEND_BUDGET,
        SIGNAL_PULL_REQUEST_CLOSED,
    }
)


def verdict(path: Path | None, inp: CheckAnswerInput) -> CheckAnswerResult:
    """The check itself, with the key file at ``path`` (None: the worker has none)."""
    if path is None:
        return CheckAnswerResult(accepted=True, why="the worker has no answer key")
    try:
        key = answers.read_key(path)
    except answers.AnswerKeyError as e:
        # Every answer would be refused: say so rather than silently ignore people.
        return CheckAnswerResult(accepted=False, why=str(e))
    if not inp.fields.get("signature"):
        return CheckAnswerResult(accepted=False, why="unsigned")
    if not answers.valid(key, inp.workflow_id, inp.answer, inp.fields):
        return CheckAnswerResult(accepted=False, why="the signature does not hold")
    try:
        signed = datetime.fromisoformat(str(inp.fields.get("at", "")))
        received = datetime.fromisoformat(inp.received)
    except ValueError:
        return CheckAnswerResult(accepted=False, why="no time of signing")
    age = (received - signed).total_seconds()
    if age > answers.MAX_AGE_S or age < -SKEW_S:
        why = f"signed {age:.0f} s before it arrived (stale)"
        return CheckAnswerResult(accepted=False, why=why)
    return CheckAnswerResult(accepted=True, signed=True)


class AnswerActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=CHECK_ANSWER.name)
    async def check_answer(self, inp: CheckAnswerInput) -> CheckAnswerResult:
        return verdict(self.settings.answer_key, inp)


class AnswerChecks(Interceptor):
    """Refuses, in an answer update's validator, one whose signature does not hold."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        settings = self.settings

        class _Checking(WorkflowInboundInterceptor):
            def handle_update_validator(self, input: HandleUpdateInput) -> None:
                super().handle_update_validator(input)  # first: does it apply now at all?
                info = workflow.info()
                if info.workflow_type != TASK_WORKFLOW or input.update not in ANSWER_UPDATES:
                    return
                why = refused(settings, info.workflow_id, input.update, input.args)
                if why:
                    task_id = info.workflow_id.removeprefix(workflow_id_for(""))
                    raise ApplicationError(
                        f"task {task_id}: {input.update} refused: {why}",
                        type=ANSWER_REFUSED,
                        non_retryable=True,
                    )

        return _Checking


def refused(settings: Settings, workflow_id: str, name: str, args: Any) -> str:
    """Why an answer update's payload fails the check ("" when it passes)."""
    payload = args[0] if args else None
    if not isinstance(payload, BaseModel):
        return "no payload"
    # Outside the workflow sandbox's rules: the key is a file of this worker, read now
    # (as the activity does) so a key made after the worker started counts.
    with workflow.unsafe.sandbox_unrestricted():
        inp = CheckAnswerInput(
            workflow_id=workflow_id,
            answer=name,
            fields=payload.model_dump(mode="json"),
            received=workflow.now().isoformat(),
        )
        checked = verdict(settings.answer_key, inp)
    return "" if checked.accepted else checked.why
