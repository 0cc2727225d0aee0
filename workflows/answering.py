"""How a task takes a person's answers: approve, reject, feedback, extend_budget and a
pull request's close, each an update and a signal of the same name.

The update is what Loopwork's tools send: its validator refuses, before anything is
written to history, an answer that does not apply (``loop.rules.answers``) or whose
signature was used before; the worker's ``AnswerChecks`` interceptor, which holds the
answer key, refuses one whose signature does not hold in the same validator. The handler
checks the signature again (a local activity, so the verdict is in history) and tells the
caller what the answer did, or why it no longer applies. The signal is kept for histories
recorded before and for `temporal workflow signal`; an answer that does not apply is then
only a trace event. Both follow the same rule and take an answer the same way
(``_approve`` ... ``_extend``). ``TaskWorkflow`` (``workflows.task``) is the process that
waits for them; docs/architecture.md ("Answers") says why it is built so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError
from temporalio.workflow import HandlerUnfinishedPolicy

with workflow.unsafe.imports_passed_through():
    import workflows.candidates as candidates
    import workflows.patches as patches
    from loop.contracts import (
        ANSWER_REFUSED,
        CHECK_ANSWER,
        SIGNAL_APPROVE,
        SIGNAL_EXTEND_BUDGET,
        SIGNAL_FEEDBACK,
        SIGNAL_PULL_REQUEST_CLOSED,
        SIGNAL_REJECT,
        AnswerReply,
        ApproveSignal,
        CheckAnswerInput,
        CheckAnswerResult,
        ExtendBudgetSignal,
        FeedbackSignal,
        PullRequestClosedSignal,
        RejectSignal,
        TaskState,
    )
    from loop.rules import answers, budget
    from workflows.record import Decision, TaskRecord, now

ABANDON = HandlerUnfinishedPolicy.ABANDON
"""A signalled answer still being checked when the task ends is moot: the task has decided."""
UNEXPECTED = HandlerUnfinishedPolicy.WARN_AND_ABANDON
"""An answer update is never left running: the task waits for it before it closes, so its
sender hears why it was refused (the task has ended), not the server's "workflow
completed". One still running at the close is a bug: the worker warns."""
Answer = (
    ApproveSignal | RejectSignal | FeedbackSignal | ExtendBudgetSignal | PullRequestClosedSignal
)
A = TypeVar(
    "A",
    ApproveSignal,
    RejectSignal,
    FeedbackSignal,
    ExtendBudgetSignal,
    PullRequestClosedSignal,
)
Take = Callable[[A, str], str]
"""Takes an answer that applies, credited as ``by``; returns what it did, in a few words."""
BOUND_ANSWERS = "bound-answers"
"""The patch under which an answer is taken once by its ``answer_id`` and an approval
must name the commit waiting (before it, each answer was taken as it came)."""


@dataclass
class _Checked:
    """An answer's signature check: how the trace credits it, or why it is refused."""

    by: str = ""
    signed: bool = False
    refused: str = ""


class Answering(TaskRecord):
    @workflow.update(name=SIGNAL_APPROVE, unfinished_policy=UNEXPECTED)
    async def approve_update(self, payload: ApproveSignal) -> AnswerReply:
        return await self._answer(SIGNAL_APPROVE, payload, self._approve)

    @approve_update.validator
    def _approve_applies(self, payload: ApproveSignal) -> None:
        self._validate(SIGNAL_APPROVE, payload)

    @workflow.update(name=SIGNAL_REJECT, unfinished_policy=UNEXPECTED)
    async def reject_update(self, payload: RejectSignal) -> AnswerReply:
        return await self._answer(SIGNAL_REJECT, payload, self._reject)

    @reject_update.validator
    def _reject_applies(self, payload: RejectSignal) -> None:
        self._validate(SIGNAL_REJECT, payload)

    @workflow.update(name=SIGNAL_FEEDBACK, unfinished_policy=UNEXPECTED)
    async def feedback_update(self, payload: FeedbackSignal) -> AnswerReply:
        return await self._answer(SIGNAL_FEEDBACK, payload, self._feedback)

    @feedback_update.validator
    def _feedback_applies(self, payload: FeedbackSignal) -> None:
        self._validate(SIGNAL_FEEDBACK, payload)

    @workflow.update(name=SIGNAL_EXTEND_BUDGET, unfinished_policy=UNEXPECTED)
    async def extend_budget_update(self, payload: ExtendBudgetSignal) -> AnswerReply:
        return await self._answer(SIGNAL_EXTEND_BUDGET, payload, self._extend)

    @extend_budget_update.validator
    def _extend_budget_applies(self, payload: ExtendBudgetSignal) -> None:
        self._validate(SIGNAL_EXTEND_BUDGET, payload)

    @workflow.update(name=SIGNAL_PULL_REQUEST_CLOSED, unfinished_policy=UNEXPECTED)
    async def pull_request_closed_update(self, payload: PullRequestClosedSignal) -> AnswerReply:
        return await self._answer(SIGNAL_PULL_REQUEST_CLOSED, payload, self._pr_closed)

    @pull_request_closed_update.validator
    def _pull_request_closed_applies(self, payload: PullRequestClosedSignal) -> None:
        self._validate(SIGNAL_PULL_REQUEST_CLOSED, payload)

    @workflow.signal(name=SIGNAL_PULL_REQUEST_CLOSED, unfinished_policy=ABANDON)
    async def pull_request_closed(self, payload: PullRequestClosedSignal) -> None:
        await self._signalled(SIGNAL_PULL_REQUEST_CLOSED, payload, self._pr_closed)

    @workflow.signal(name=SIGNAL_APPROVE, unfinished_policy=ABANDON)
    async def approve(self, payload: ApproveSignal) -> None:
        await self._signalled(SIGNAL_APPROVE, payload, self._approve)

    @workflow.signal(name=SIGNAL_REJECT, unfinished_policy=ABANDON)
    async def reject(self, payload: RejectSignal) -> None:
        await self._signalled(SIGNAL_REJECT, payload, self._reject)

    @workflow.signal(name=SIGNAL_FEEDBACK, unfinished_policy=ABANDON)
    async def feedback(self, payload: FeedbackSignal) -> None:
        await self._signalled(SIGNAL_FEEDBACK, payload, self._feedback)

    @workflow.signal(name=SIGNAL_EXTEND_BUDGET, unfinished_policy=ABANDON)
    async def extend_budget(self, payload: ExtendBudgetSignal) -> None:
        await self._signalled(SIGNAL_EXTEND_BUDGET, payload, self._extend)

    def _validate(self, name: str, payload: Answer) -> None:
        """An update's validator: refuse, with the reason, what can be known not to apply
        from the task's state alone (validators may not run activities or change state).
        An answer taken before, signed anew, is let by: its handler says what it did then."""
        if payload.signature and payload.signature in self.seen_signatures:
            why = f"task {self.spec.id}: {name} refused: replayed (that signature was used before)"
            raise _refused(self._refusal(name) or why)
        if payload.answer_id and payload.answer_id in self.answered:
            return
        why = self._refusal(name) or self._unbound(name, payload)
        if why:
            raise _refused(why)

    def _unbound(self, name: str, payload: Answer) -> str:
        """Why an approval does not approve the commit waiting ("" when it does, and for
        any other answer)."""
        if name != SIGNAL_APPROVE or not isinstance(payload, ApproveSignal):
            return ""
        among = candidates.unapproved(self, payload)  # candidates waiting side by side
        if among is not None:
            return among
        return answers.unapproved(self.spec.id, payload.commit, self.awaiting_commit())

    def _taken_before(self, payload: Answer) -> str | None:
        """What the answer did when it was taken before (None: it was not). Runs from
        before answers had ids take each as it comes, as they did."""
        if not payload.answer_id or not patches.patched(BOUND_ANSWERS):
            return None
        return self.answered.get(payload.answer_id)

    async def _answer(self, name: str, payload: A, take: Take[A]) -> AnswerReply:
        """An update's handler: the signature is checked, then whether the answer was
        taken before (it is not taken again: its sender hears what it did), then whether
        it still applies (the task may have moved on meanwhile, or another answer come
        first) and, for an approval, whether it names the commit waiting."""
        self.answering += 1
        try:
            checked = await self._checked(name, payload)
            if checked.refused:
                raise _refused(f"task {self.spec.id}: {name} refused: {checked.refused}")
            earlier = self._taken_before(payload)
            if earlier is not None:
                return AnswerReply(did=f"already taken: {earlier}", signed=checked.signed)
            why = self._refusal(name) or self._bound_refusal(name, payload)
            if why:
                self._event("answer-refused", f"{name}: {why}")
                raise _refused(why)
            return AnswerReply(did=self._take(payload, take, checked), signed=checked.signed)
        finally:
            self.answering -= 1

    async def _signalled(self, name: str, payload: A, take: Take[A]) -> None:
        """A signal's handler: an answer that does not apply, or was taken before, is a
        trace event, no more."""
        checked = await self._checked(name, payload)
        if checked.refused:
            return
        if self._taken_before(payload) is not None:
            self._event("signal-ignored", f"{name}: answer {payload.answer_id} was taken before")
        elif answers.applies(name, self.state, self.waiting_for):
            why = self._bound_refusal(name, payload)
            if why:
                self._event("answer-refused", f"{name}: {why}")
            else:
                self._take(payload, take, checked)
        else:
            self._ignored(name)

    def _bound_refusal(self, name: str, payload: Answer) -> str:
        """``_unbound``, in runs that record it (runs from before took any approval); an
        approval naming no commit asks for no patch (``_unbound`` has nothing to say)."""
        if not isinstance(payload, ApproveSignal) or not (payload.commit or self.choosing()):
            return ""
        if name != SIGNAL_APPROVE or not patches.patched(BOUND_ANSWERS):
            return ""
        return self._unbound(name, payload)

    def _take(self, payload: A, take: Take[A], checked: _Checked) -> str:
        did = take(payload, checked.by)
        if payload.answer_id:
            self.answered[payload.answer_id] = did
        return did

    def _approve(self, payload: ApproveSignal, by: str) -> str:
        if self.choosing():
            return candidates.approve(self, payload, by)
        if self.state == TaskState.NEEDS_HUMAN:
            did = "approved; merge requested again"
        elif self.spec.finalize.pull_request:
            did = "approved; pull request requested"
        else:
            # Requested, not done: the merge may still fail (a dirty checkout of base).
            base = self.ws.base_ref if self.ws is not None else "base"
            did = f"approved; merge of {self.result.branch} into {base} requested"
        self._decide(Decision("approve", payload.note, by), f"approve: {payload.note}{by}")
        return did

    def _pr_closed(self, payload: PullRequestClosedSignal, by: str) -> str:
        who = payload.who or "someone"
        if payload.merged:
            self._decide(Decision("merged", who), f"pull_request_closed: merged by {who}{by}")
            return "merged; the task ends DONE_WITH_EVIDENCE"
        self._decide(Decision("closed", who), f"pull_request_closed: closed by {who}{by}")
        return "closed unmerged; the task ends REJECTED"

    def _reject(self, payload: RejectSignal, by: str) -> str:
        self._decide(Decision("reject", payload.reason, by), f"reject: {payload.reason}{by}")
        return "rejected; the task ends REJECTED"

    def _feedback(self, payload: FeedbackSignal, by: str) -> str:
        parked = self.state == TaskState.NEEDS_HUMAN
        self.human_feedback.append(payload.text)
        self._grant_attempt_if_waiting()
        self._decide(Decision("feedback", payload.text, by), f"feedback: {payload.text}{by}")
        if parked:
            return "one more attempt with your feedback"
        return "your feedback goes into the next attempt"

    def _extend(self, payload: ExtendBudgetSignal, by: str) -> str:
        parked = self.state == TaskState.NEEDS_HUMAN
        self.max_attempts += payload.attempts
        if patches.patched("extend-adds-only"):
            # "No limit" stays no limit: an extension adds to limits that exist.
            self.clock.limit = budget.extended(self.clock.limit, payload.seconds)
            self.max_tokens = budget.extended(self.max_tokens, payload.tokens)
            self.max_cost = budget.extended(self.max_cost, payload.cost_usd)
        else:
            if payload.seconds:
                self.clock.limit = (self.clock.limit or self.clock.used) + payload.seconds
            if payload.tokens:
                self.max_tokens = (self.max_tokens or self.result.tokens) + payload.tokens
            if payload.cost_usd:
                self.max_cost = (self.max_cost or self.result.cost_usd) + payload.cost_usd
        added = payload.model_dump_json(exclude={"by", "at", "signature", "answer_id"})
        self._decide(Decision("extend", "", by), f"extend_budget: {added}{by}")
        more = answers.extension(payload)
        return (
            f"budget extended: {more}; the loop goes on" if parked else f"budget extended: {more}"
        )

    async def _checked(self, name: str, payload: Answer) -> _Checked:
        """Who an answer proves it comes from, as the trace credits it (`` (by alice)``,
        `` (unsigned)``), or why it is refused. Checked with the worker's answer key in
        a local activity (``loop.hardened.answers``), so the verdict is in history and a
        replay decides the same way; a signature is good once."""
        if not patches.patched("signed-answers"):
            return _Checked(f" (by {payload.by})" if payload.by else "")  # as before
        if payload.signature and payload.signature in self.seen_signatures:
            return self._refuse_answer(name, "replayed (that signature was used before)")
        if payload.signature:
            # Taken before the check, so the same answer sent twice at once counts once.
            self.seen_signatures.append(payload.signature)
        checked = await workflow.execute_local_activity(
            CHECK_ANSWER.name,
            CheckAnswerInput(
                workflow_id=workflow.info().workflow_id,
                answer=name,
                fields=payload.model_dump(mode="json"),
                received=now(),
            ),
            result_type=CheckAnswerResult,
            start_to_close_timeout=timedelta(seconds=10),
            summary=f"check answer: {name}",
        )
        if not checked.accepted:
            return self._refuse_answer(name, checked.why)
        by = f" (by {payload.by})" if checked.signed else " (unsigned)"
        return _Checked(by, signed=checked.signed)

    def _refuse_answer(self, name: str, why: str) -> _Checked:
        self._event("answer-refused", f"{name}: {why}")
        return _Checked(refused=why)

    def _grant_attempt_if_waiting(self) -> None:
        """Feedback to a parked task grants one more attempt carrying that text."""
        if self.state == TaskState.NEEDS_HUMAN:
            self.max_attempts = max(self.max_attempts, len(self.result.attempts) + 1)

    def _decide(self, decision: Decision, detail: str) -> None:
        self._event("signal", detail)
        if self.state.waiting:
            self.decision = decision

    def _ignored(self, name: str) -> None:
        self._event("signal-ignored", f"{name} does not apply while {self.state}")


def _refused(why: str) -> ApplicationError:
    """An answer update's refusal: the caller gets ``why`` back (in the validator, before
    anything is written to history; in the handler, as the update's failure)."""
    return ApplicationError(why, type=ANSWER_REFUSED, non_retryable=True)
