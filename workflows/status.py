"""The task's status comment on its GitHub issue, kept beside the task, never in its way.

A task started from a ``github`` source's issue (``spec.github_issue``) runs this as a
coroutine of its own: whenever what the comment would say changes (``loop.rules.status``:
state, attempt, reason, verdict table), the one comment is made, then edited in place.
``commit_status`` sets ``loopwork/verify`` on each pushed commit the gates judged.
Changes that come while an edit is on its way are coalesced into the next one, so a
slow or rate-limited GitHub delays the comment, never the task; a comment that keeps
failing is a trace event. When the task ends, its last word is sent before it closes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from loop.contracts import (
        COMMIT_STATUS,
        PERMANENT,
        STATUS_COMMENT,
        CommitStatusInput,
        GitHubIssueRef,
        StatusCommentInput,
        TaskStatusView,
    )
    from workflows.steps import failure_reason

STATUS_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=6,
    non_retryable_error_types=[PERMANENT],
)
"""About a minute of tries (a rate limit waits for its reset, ``github_hooks._failure``);
a refusal (no such issue, a token that may not comment) is not retried."""


class StatusComment:
    def __init__(
        self,
        ref: GitHubIssueRef,
        view: Callable[[], TaskStatusView],
        record: Callable[[str, str], None],
    ) -> None:
        self.ref, self.view, self.record = ref, view, record
        self.closing = False
        self.comment_id = 0
        self.said: TaskStatusView | None = None

    async def run(self) -> None:
        while True:
            await workflow.wait_condition(lambda: self.view() != self.said or self.closing)
            now = self.view()
            if now != self.said:
                await self._say(now)
                self.said = now
            elif self.closing:
                return

    async def _say(self, view: TaskStatusView) -> None:
        try:
            posted = await workflow.execute_activity(
                STATUS_COMMENT.name,
                StatusCommentInput(
                    repo=self.ref.repo,
                    token_env=self.ref.token_env,
                    number=self.ref.number,
                    comment_id=self.comment_id,
                    view=view,
                ),
                result_type=STATUS_COMMENT.output,
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=STATUS_RETRY,
                summary=f"status comment on #{self.ref.number}",
            )
        except ActivityError as e:
            self.record("status-comment-failed", failure_reason(e))
            return
        if not self.comment_id:
            self.record("status-comment", f"on {self.ref.repo}#{self.ref.number}")
        self.comment_id = posted.comment_id


async def commit_status(inp: CommitStatusInput) -> str:
    """``loopwork/verify`` on a pushed commit; "" when it was set (or the commit is not on
    GitHub), else why not. Run beside the task, like a notification: never fatal."""
    try:
        await workflow.execute_activity(
            COMMIT_STATUS.name,
            inp,
            result_type=COMMIT_STATUS.output,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=STATUS_RETRY,
            summary=f"loopwork/verify on {inp.sha[:12]}",
        )
    except ActivityError as e:
        return failure_reason(e)
    return ""
