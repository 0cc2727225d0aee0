"""SlackAnswerWorkflow: one Slack interaction's answer, sent durably.

``loop ui`` checks an interaction (Slack's signature, the allow-list) and starts this
workflow with an id made of what Slack's payload makes unique (``slack_answer_workflow_id``,
``REJECT_DUPLICATE``), then answers Slack within its 3 s. The answer itself goes
through the CLI's code path in an activity (``hook_answer``, the one GitHub's comments
use), retried by Temporal: an answer pressed while no worker polls is taken once one
starts, and the same interaction delivered twice is one answer.

A taken answer ends the task's wait, and the task rewrites its message itself with who
answered (``slack_close`` in ``TaskWorkflow``); writing it here as well would race that
update. A refused answer (the task no longer waits, or no longer exists) is said in the
message here, its buttons gone, and the task is left as it was.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from loop.contracts import (
        HOOK_ANSWER,
        PERMANENT,
        SLACK_ANSWER_WORKFLOW,
        SLACK_CLOSE,
        HookAnswerInput,
        HookAnswerResult,
        SlackAnswerInput,
        SlackAnswerResult,
        SlackCloseInput,
        slack_answer_workflow_id,
    )
    from workflows.steps import STEP_RETRY

ANSWER_TIME = timedelta(seconds=90)
"""An answer waits up to 30 s for the task's validator (``loop.tasks.ANSWER_TIMEOUT_S``)."""
ANSWER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=0,
    non_retryable_error_types=[PERMANENT],
)
"""Until the task takes it or refuses it: an answer not taken in time (the task's own
worker is down) is tried again, at most a minute apart, within the workflow's
execution timeout (``loop.ui.slack.ANSWER_TIMEOUT``, a day); a refusal is a result."""
SLACK_TIME = timedelta(seconds=30)
"""One ``chat.update`` (its client gives up after 10 s)."""


@workflow.defn(name=SLACK_ANSWER_WORKFLOW)
class SlackAnswerWorkflow:
    @workflow.run
    async def run(self, inp: SlackAnswerInput) -> SlackAnswerResult:
        # The interaction is the answer: pressed or submitted twice, the task takes it once.
        interaction = workflow.info().workflow_id.removeprefix(slack_answer_workflow_id(""))
        done: HookAnswerResult = await workflow.execute_activity(
            HOOK_ANSWER.name,
            HookAnswerInput(
                task_id=inp.task_id,
                answer=inp.answer,
                fields=inp.fields,
                by=inp.by,
                answer_id=f"slack:{interaction}",
            ),
            result_type=HOOK_ANSWER.output,
            start_to_close_timeout=ANSWER_TIME,
            retry_policy=ANSWER_RETRY,
            summary=f"{inp.answer} {inp.task_id}",
        )
        if done.refused and inp.message.ts:
            await workflow.execute_activity(
                SLACK_CLOSE.name,
                SlackCloseInput(
                    task_id=inp.task_id,
                    message=inp.message,
                    outcome=f"{inp.by} pressed {inp.answer}: nothing was done: {done.refused}",
                ),
                result_type=SLACK_CLOSE.output,
                start_to_close_timeout=SLACK_TIME,
                retry_policy=STEP_RETRY,
                summary=f"say the refused {inp.answer} in Slack",
            )
        return SlackAnswerResult(did=done.did, refused=done.refused)
