"""How a task waits for a person: it says why and for what, tells people (the
escalation webhook and, where the worker has Slack, a message with buttons, both beside
the wait), parks on a durable timer until an answer that applies, and closes the
message however the wait ended. ``TaskWorkflow`` (``workflows.task``) decides when to
wait; ``workflows.answering`` takes the answers that end a wait.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import workflows.patches as patches
    from loop.contracts import EscalateInput, Escalation, SlackMessage, SlackPostInput, TaskState
    from loop.rules.answers import waiting_words
    from workflows.answering import Answering
    from workflows.record import Decision, now
    from workflows.steps import close_slack, notify, post_slack


class Waiting(Answering):
    async def _wait_for_person(
        self,
        reason: str,
        waiting_for: str,
        state: TaskState = TaskState.NEEDS_HUMAN,
        limit: tuple[int, str] | None = None,
    ) -> Decision | None:
        """Park on a person until a signal that applies, or ``approval_timeout`` (None);
        ``limit`` is another one, in seconds, and the task file's name for it."""
        seconds, named = limit or (self.spec.approval_timeout, "approval_timeout")
        # Cleared before the state says "waiting": an answer may arrive while we notify.
        self.decision = None
        self.state, self.reason, self.waiting_for = state, reason, waiting_for
        self.phase = None
        escalation = Escalation(at=now(), reason=reason, waiting_for=waiting_for)
        self.result.human_escalation.append(escalation)
        self._event("waiting", f"{state}: {reason} (waits for {waiting_words(waiting_for)})")
        self._publish()
        # Sent alongside the wait, not before it: a slow or failing sink never holds it up.
        notifying = asyncio.create_task(self._notify(reason, waiting_for))
        self.notifications.append(notifying)
        try:
            await workflow.wait_condition(
                lambda: self.decision is not None,
                timeout=timedelta(seconds=seconds),
                timeout_summary=(
                    f"waits for a person: {waiting_words(waiting_for)}, at most "
                    f"{seconds} s ({named})"
                ),
            )
        except TimeoutError:
            escalation.resolved_by = "timeout"
            self._close_message(notifying, "no answer within approval_timeout")
            return None
        except asyncio.CancelledError:
            self._close_message(notifying, "cancelled")
            raise
        decision, self.decision = self.decision, None
        assert decision is not None
        escalation.resolved_by = decision.kind
        self._close_message(notifying, decision.said())
        self.state, self.reason, self.waiting_for = TaskState.RUNNING, "", ""
        self._publish()
        return decision

    async def _notify(self, reason: str, waiting_for: str) -> SlackMessage | None:
        """Tell people; a sink that keeps failing is retried, then recorded, never fatal.
        The Slack message (where the worker has Slack) is posted beside the webhook, so a
        broken webhook does not hold it up; where it is, is returned for its close."""
        escalated = notify(
            EscalateInput(
                task_id=self.spec.id,
                goal=self.spec.goal,
                state=self.state,
                reason=reason,
                waiting_for=waiting_for,
                attempt=len(self.result.attempts),
                last_verdict=self.last_verdict.summary() if self.last_verdict else "",
            )
        )
        if not patches.patched("slack-messages"):
            failed = await escalated
            if failed:
                self._event("notify-failed", failed)
            return None
        verdict = self._latest_verdict()
        posting = post_slack(
            SlackPostInput(
                task_id=self.spec.id,
                goal=self.spec.goal,
                state=self.state,
                reason=reason,
                waiting_for=waiting_for,
                attempt=len(self.result.attempts),
                repo=self.spec.repo,
                channel=self.spec.slack_channel,
                commit=self.awaiting_commit(),
                verdict=verdict.summary() if verdict is not None else "",
            )
        )
        failed, (posted, slack_failed) = await asyncio.gather(escalated, posting)
        for why in (failed, slack_failed):
            if why:
                self._event("notify-failed", why)
        return posted

    def _close_message(self, notifying: asyncio.Task[SlackMessage | None], outcome: str) -> None:
        """Once the wait is over, its Slack message says how, its buttons gone; beside
        what comes next, and delivered before the task closes (``notifications``)."""

        async def close() -> None:
            posted = await notifying
            if posted is None or not posted.ts:
                return
            failed = await close_slack(self.spec.id, posted, outcome)
            if failed:
                self._event("notify-failed", failed)

        self.notifications.append(asyncio.create_task(close()))
