"""A verified result's way out, by the task's autonomy (docs/architecture.md, "The task
loop"): ``report`` leaves it in the worktree; otherwise it is committed on the task's
branch, waits for approval where the task is ``assisted``, and is merged into base (a
merge a person must sort out waits for one) or handed over as a pull request, whose
outcome on GitHub the task waits for ("A pull request's outcome"). ``TaskWorkflow``
(``workflows.task``) calls ``run`` once an attempt passed.
"""

from __future__ import annotations

from typing import Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import workflows.patches as patches
    from loop.contracts import (
        COMMIT,
        MERGE,
        PULL_REQUEST,
        REMOVE_WORKSPACE,
        WAITING_APPROVAL,
        WAITING_PULL_REQUEST,
        Autonomy,
        CommitInput,
        Feedback,
        FinalAction,
        MergeInput,
        Phase,
        PullRequestInput,
        RemoveInput,
        TaskResult,
        TaskSpec,
        TaskState,
        Verdict,
        Workspace,
    )
    from loop.rules.record import commit_message, merge_message, pull_request
    from workflows.record import Waits
    from workflows.steps import HostLost, act


class Task(Waits, Protocol):
    """What of the task (``workflows.task.TaskWorkflow``) its finalize uses."""

    spec: TaskSpec
    result: TaskResult
    ws: Workspace | None
    last_verdict: Verdict | None
    next_feedback: Feedback | None
    phase: Phase | None
    max_attempts: int
    stalled: int
    last_fingerprint: str
    pull_request_url: str

    def approved(self) -> bool: ...
    def _end(self, state: TaskState, reason: str) -> None: ...
    def _event(self, kind: str, detail: str = "") -> None: ...
    def _verified_on_github(self, sha: str, verdict: Verdict) -> None: ...


async def run(task: Task) -> bool:
    """What the loop may do with a verified result, by autonomy; True when a review of
    its pull request asks for another attempt."""
    assert task.ws is not None and task.last_verdict is not None
    task.phase = Phase.FINALIZE
    artifact = task.last_verdict.artifact
    if task.spec.autonomy == Autonomy.REPORT:
        task.result.final_action = FinalAction.LEFT_IN_WORKTREE
        task._end(TaskState.DONE_WITH_EVIDENCE, "verified; change left in the worktree")
        return False
    committed = await act(
        COMMIT,
        CommitInput(
            task=task.spec,
            workspace=task.ws,
            artifact=artifact,
            message=commit_message(task.spec, task.last_verdict),
        ),
        summary="commit on branch",
        ws=task.ws,
    )
    task.result.branch, task.result.commit = committed.branch, committed.commit
    task._event("committed", f"{committed.branch} at {committed.commit[:12]}")
    if task.spec.finalize.pull_request:
        task._verified_on_github(committed.commit, task.last_verdict)  # the PR's head

    if task.spec.autonomy == Autonomy.ASSISTED and not task.approved():
        decision = await task._wait_for_person(
            f"verified; {committed.branch} is ready to merge",
            WAITING_APPROVAL,
            state=TaskState.AWAITING_APPROVAL,
        )
        if decision is None:
            task.result.final_action = FinalAction.BRANCH_READY
            task._end(
                TaskState.DONE_WITH_EVIDENCE,
                "verified; no approval within approval_timeout, branch kept for review",
            )
            return False
        if decision.kind == "reject":
            task._end(TaskState.REJECTED, decision.text or "rejected")
            return False

    if task.spec.finalize.pull_request:
        return await _hand_over(task, committed.commit)

    while True:
        task.phase = Phase.FINALIZE
        merged = await act(
            MERGE,
            MergeInput(
                workspace=task.ws,
                commit=committed.commit,
                message=merge_message(committed.branch, task.spec),
            ),
            summary="merge into base",
            ws=task.ws,
        )
        if merged.merged:
            task.result.final_action = FinalAction.MERGED
            task.result.commit = merged.commit
            task._event("merged", f"{merged.how} into {task.ws.base_ref}")
            await _remove(task, delete_branch=True)
            task._end(TaskState.DONE_WITH_EVIDENCE, f"verified and merged into {task.ws.base_ref}")
            return False
        # A merge a person must sort out: approve retries it, reject ends the task.
        decision = await task._wait_for_person(f"cannot merge: {merged.reason}", WAITING_APPROVAL)
        if decision is None:
            task.result.final_action = FinalAction.BRANCH_READY
            task._end(TaskState.NEEDS_HUMAN, f"cannot merge: {merged.reason}")
            return False
        if decision.kind == "reject":
            task._end(TaskState.REJECTED, decision.text or "rejected")
            return False


async def _hand_over(task: Task, commit: str) -> bool:
    """A pull request instead of a merge (``finalize.pull_request``). One opened on
    GitHub keeps the task waiting for its outcome there (``finalize.pull_request_wait``),
    so a review reaches a live task as feedback (True: attempt again, pushing to the
    same branch, which updates the pull request) and its merge or close ends it."""
    assert task.ws is not None
    title, body = pull_request(task.spec, task.result)
    pr = await act(
        PULL_REQUEST,
        PullRequestInput(
            workspace=task.ws, commit=commit, title=title, body=body,
            github=task.spec.finalize.github,
        ),
        summary="open a pull request",
        ws=task.ws,
    )  # fmt: skip
    task.result.final_action = FinalAction.PULL_REQUEST
    task.pull_request_url = pr.url
    where = f"opened: {pr.url}" if pr.url else f"written to {pr.path}"
    task._event("pull-request", where + (f" ({pr.note})" if pr.note else ""))
    if pr.url and task.spec.finalize.pull_request_wait and patches.patched("pull-request-outcome"):
        return await _await_outcome(task, pr.url)
    await _remove(task, delete_branch=False)
    task._end(TaskState.DONE_WITH_EVIDENCE, f"verified; pull request {where}")
    return False


async def _await_outcome(task: Task, url: str) -> bool:
    """Wait for the pull request's merge or close on GitHub, a review, or a rejection."""
    wait = task.spec.finalize.pull_request_wait
    decision = await task._wait_for_person(
        f"verified; pull request {url} waits for review",
        WAITING_PULL_REQUEST,
        state=TaskState.AWAITING_APPROVAL,
        limit=(wait, "finalize.pull_request_wait"),
    )
    if decision is not None and decision.kind == "feedback":
        # The review's text is in human_feedback; the verified result is judged again.
        task.max_attempts = max(task.max_attempts, len(task.result.attempts) + 1)
        task.last_verdict, task.next_feedback = None, None
        task.stalled, task.last_fingerprint = 0, ""
        return True
    await _remove(task, delete_branch=False)
    if decision is None:
        task._end(
            TaskState.DONE_WITH_EVIDENCE,
            f"verified; pull request {url} still open after {wait} s (pull_request_wait)",
        )
    elif decision.kind == "merged":
        task.result.final_action = FinalAction.MERGED_BY_PERSON
        task._end(
            TaskState.DONE_WITH_EVIDENCE, f"verified; {url} merged on GitHub by {decision.text}"
        )
    elif decision.kind == "closed":
        task._end(TaskState.REJECTED, f"closed on GitHub by {decision.text}")
    else:
        task._end(TaskState.REJECTED, decision.text or "rejected")
    return False


async def _remove(task: Task, *, delete_branch: bool) -> None:
    """The finished task's worktree goes; a host lost meanwhile keeps it (its worker
    removes it when it starts again, reconciling)."""
    assert task.ws is not None
    try:
        removed = await act(
            REMOVE_WORKSPACE,
            RemoveInput(workspace=task.ws, delete_branch=delete_branch),
            summary="remove worktree",
            ws=task.ws,
        )
    except HostLost as e:
        task._event("worktree", f"kept: {e}")
        return
    task._event("worktree", "removed" if removed.removed else removed.reason)
