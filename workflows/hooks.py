"""GitHubDeliveryWorkflow: one GitHub webhook delivery, acted on durably.

``loop ui`` checks a delivery's signature and starts this workflow with what the
delivery is about (its key, from the signed body) in its workflow id, then answers
GitHub at once; whatever takes time (asking GitHub
who the commenter is, starting or answering a task) happens here, retried by Temporal.

- ``issues`` opened, labeled or reopened: the issue becomes triage's item (discovery's
  own code), triage's policy decides on it (``loop.rules.triage.plan``: the source's
  labels, the cool-down, ``max_running``) and its task is started as triage starts one,
  a child with id ``task-<source>-<number>`` that the server never lets run twice.
- ``issues`` closed: the item's open task is cancelled with the reason, who closed it.
- ``issue_comment`` beginning with ``/loop``: done only for someone the API says may
  write to the repository; anyone else gets one reply saying why, and nothing happens.
  ``run`` starts the item's task whatever its labels, ``retry`` also past the
  cool-down or a task that ended; answers go through the CLI's code path, with the
  delivery's key as the answer's id (a task takes it once); ``/loop approve`` approves
  the commit waiting only if it was waiting when the comment was made; the outcome
  is one reply on the issue. On a task's pull request (its branch ``loop/<id>``, asked
  of the API) an answer goes to that task, with the same check and one reply there.
- ``pull_request_review`` submitted on a task's pull request (its branch ``loop/<id>``)
  with changes requested or comments, by someone who may write: **one** feedback for
  the whole review, its body and every inline comment with path, line and diff hunk
  (read from the API: the payload has none of them), and one reply saying what the
  task did with it. An approving review is not an approval (a person merging is),
  unless the source says ``approve_on_review``: then a writer's approving review is the
  CLI's ``approve`` of the commit reviewed, for a task awaiting approval of that commit.
- ``check_suite`` / ``check_run`` / ``workflow_run`` completed: on a task's branch,
  recorded (its ``github_checks`` gate polls); on the base branch, where the source names
  ``ci_checks``, one CI-regression task per commit (``<source>-ci-<sha12>``) when the API
  says one of them failed there, its goal the failed checks' own words, fenced and cut.
- ``pull_request`` closed on a task's pull request: merged, the task (waiting for its
  pull request's outcome) ends ``DONE_WITH_EVIDENCE`` with ``merged_by_person``; closed
  unmerged by someone who may write, it ends ``REJECTED`` with who closed it. Sent as a
  signed answer (``pull_request_closed``) through the CLI's code path; nothing is said on
  the closed pull request.
"""

from __future__ import annotations

import re
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import workflows.patches as patches
    from loop.contracts import (
        CANCEL_TASK,
        CANDIDATE_NAME_PATTERN,
        CHECK_EVENTS,
        CI_ITEM,
        GITHUB_COMMENT,
        GITHUB_DELIVERY_WORKFLOW,
        GITHUB_PERMISSION,
        HOOK_ANSWER,
        HOOK_ITEM,
        LOOKUP_TASKS,
        PULL_HEAD,
        REVIEW_COMMENTS,
        CancelTaskInput,
        CancelTaskResult,
        CiItemInput,
        CommentInput,
        CommentResult,
        GitHubDelivery,
        GitHubDeliveryResult,
        GitHubSource,
        HookAnswerInput,
        HookAnswerResult,
        HookItemInput,
        LabelFilter,
        LookupInput,
        PermissionInput,
        PermissionResult,
        PullHeadInput,
        PullHeadResult,
        ReviewCommentsInput,
        ReviewCommentsResult,
        TriageItem,
        TriageSources,
        branch_for,
        is_valid_task_id,
    )
    from loop.rules import hooks, triage
    from workflows.steps import STEP_RETRY
    from workflows.triage import start_planned

SHORT = timedelta(seconds=120)
ANSWER_TIME = timedelta(seconds=90)
"""An answer waits up to 30 s for the task's validator (``loop.tasks.ANSWER_TIMEOUT_S``)."""
STARTS = ("opened", "labeled", "reopened")
PULL_COMMANDS = "pull-request-commands"
"""The patch under which a ``/loop`` answer on a task's pull request reaches the task
(before it, the comment was answered with a pointer to the task's issue)."""
REVIEW_APPROVES = "approving-review"
"""The patch under which an approving review is the approval where the source says
``approve_on_review`` (before it, every approving review was ignored)."""
CANDIDATE_BRANCHES = "candidate-branches"
"""A pull request of ``loop/<id>/<name>`` (a task's chosen candidate) is the task's; before
it, such a branch was no task's."""


@workflow.defn(name=GITHUB_DELIVERY_WORKFLOW)
class GitHubDeliveryWorkflow:
    @workflow.run
    async def run(self, d: GitHubDelivery) -> GitHubDeliveryResult:
        self.d = d
        self.source = next(
            s for s in d.sources.sources if isinstance(s, GitHubSource) and s.name == d.source
        )
        self.number = int(d.issue.get("number") or 0)  # CHECK_EVENTS name no issue
        self.task_id = triage.task_id_for(self.source.name, str(self.number), self.source.repo)
        self.former_id = triage.task_id_for(self.source.name, str(self.number))
        """The issue's task id before ids named the repository: a task still under it is
        answered and cancelled as the issue's (``known_as``)."""
        if d.event == "issues" and d.action == "closed":
            did = await self._cancel(f"issue closed on GitHub by {d.sender}")
        elif d.event == "issues" and d.action in STARTS:
            did = await self._start(d.sources)
        elif d.event == "issue_comment" and hooks.addressed(d.comment):
            did = await self._command(hooks.parse(d.comment))
        elif d.event == "pull_request_review" and d.action == "submitted":
            did = await self._review()
        elif d.event == "pull_request" and d.action == "closed":
            did = await self._closed()
        elif d.event in CHECK_EVENTS and d.action == "completed":
            did = await self._checks_completed()
        else:
            did = f"ignored: {d.event} {d.action}"
        return GitHubDeliveryResult(did=[did])

    async def _start(self, sources: TriageSources) -> str:
        """Triage's decision on this one item, and its start when the decision is to."""
        found = await workflow.execute_activity(
            HOOK_ITEM.name,
            HookItemInput(source=self.source, issue=self.d.issue),
            result_type=HOOK_ITEM.output,
            start_to_close_timeout=SHORT,
            retry_policy=STEP_RETRY,
            summary=f"item {self.task_id}",
        )
        return await self._plan(found.item, sources)

    async def _checks_completed(self) -> str:
        """CI completed on a commit. On a task's branch it is only recorded: the task's
        ``github_checks`` gate polls the commit's checks from inside verify (an activity,
        which a signal to the task could not reach without ending the durable wait).
        On the base branch, with ``ci_checks`` named, one CI-regression task per commit
        when one of them failed there, as the API says."""
        d, base = self.d, str(self.source.template.get("base") or "")
        sha = d.head_sha[:12]
        if d.head_branch.startswith(branch_for("")):
            return (
                f"recorded: {d.event} {d.conclusion} on {sha} of a task's branch (its gate polls)"
            )
        if not base or d.head_branch != base:
            return f"ignored: {d.event} on a branch that is not {base or 'the base'}"
        if not self.source.ci_checks:
            return "ignored: the source names no ci_checks"
        found = await workflow.execute_activity(
            CI_ITEM.name,
            CiItemInput(source=self.source, sha=d.head_sha, base=base),
            result_type=CI_ITEM.output,
            start_to_close_timeout=SHORT,
            retry_policy=STEP_RETRY,
            summary=f"checks of {sha}",
        )
        self.task_id, self.former_id = found.item.task_id, found.item.former_id
        return await self._plan(found.item, self._asked("run"))

    async def _plan(self, item: TriageItem, sources: TriageSources) -> str:
        lookup = await workflow.execute_activity(
            LOOKUP_TASKS.name,
            LookupInput(
                task_ids=[self.task_id],
                task_queue=workflow.info().task_queue,
                former={self.task_id: item.former_id} if item.former_id else {},
            ),
            result_type=LOOKUP_TASKS.output,
            start_to_close_timeout=SHORT,
            retry_policy=STEP_RETRY,
            summary=f"look up {self.task_id}",
        )
        (planned,) = triage.plan([item], sources, lookup, workflow.now())
        decision = planned.decision
        if decision.action == "start" and planned.spec is not None:
            decision = await start_planned(decision, planned.spec, planned.rerun)
        if decision.action == "started":
            return f"started {decision.task_id}: {decision.reason}"
        return f"not started {decision.task_id}: {decision.reason}"

    async def _cancel(self, reason: str) -> str:
        done: CancelTaskResult = await workflow.execute_activity(
            CANCEL_TASK.name,
            CancelTaskInput(task_id=self.task_id, reason=reason, former_id=self.former_id),
            result_type=CANCEL_TASK.output,
            start_to_close_timeout=SHORT,
            retry_policy=STEP_RETRY,
            summary=f"cancel {self.task_id}",
        )
        return done.did

    async def _permission(self) -> PermissionResult:
        granted: PermissionResult = await workflow.execute_activity(
            GITHUB_PERMISSION.name,
            PermissionInput(
                repo=self.source.repo, token_env=self.source.token_env, login=self.d.sender
            ),
            result_type=GITHUB_PERMISSION.output,
            start_to_close_timeout=SHORT,
            retry_policy=STEP_RETRY,
            summary=f"permission of {self.d.sender}",
        )
        return granted

    async def _command(self, command: hooks.Command) -> str:
        granted = await self._permission()
        if not granted.may_write:
            return await self._reply(
                f"`{_login(self.d.sender)}` may not write to {self.source.repo} (the API says "
                f"`{granted.permission}`), so nothing was done: only people with write "
                "access may run or answer Loopwork's tasks."
            )
        if command.error:
            return await self._reply(f"nothing was done: {command.error}")
        if self.d.issue.get("pull_request"):
            if not patches.patched(PULL_COMMANDS):
                return await self._reply(
                    f"nothing was done: answer on the task's issue (`/loop {command.verb}` there)."
                )
            return await self._on_pull(command)
        if command.verb in ("run", "retry"):
            return await self._reply(await self._start(self._asked(command.verb)))
        return await self._answer(command.verb, command.fields)

    async def _answer(self, verb: str, fields: dict[str, str], *, reply: bool = True) -> str:
        """The CLI's answer from the sender, and one reply with what the task did."""
        d = self.d
        done: HookAnswerResult = await workflow.execute_activity(
            HOOK_ANSWER.name,
            HookAnswerInput(
                task_id=self.task_id,
                answer=verb,
                fields=fields,
                by=f"github:{d.sender}",
                answer_id=f"github:{d.key}" if d.key else "",
                said_at=d.said_at,
                former_id=self.former_id,
            ),
            result_type=HOOK_ANSWER.output,
            start_to_close_timeout=ANSWER_TIME,
            retry_policy=STEP_RETRY,
            summary=f"{verb} {self.task_id}",
        )
        if not reply:
            return f"{verb} not sent: {done.refused}" if done.refused else done.did
        if done.refused:
            return await self._reply(f"`{verb}` not sent: {done.refused}")
        return await self._reply(f"{self.task_id}: {done.did}")

    async def _on_pull(self, command: hooks.Command) -> str:
        """A writer's ``/loop`` answer on a task's pull request: the task is the one its
        branch names (asked of the API: the comment's payload does not say), and the
        answer and its one reply are the issue's. ``run`` and ``retry`` start an issue's
        task, so they are said on the issue."""
        if command.verb in ("run", "retry"):
            return await self._reply(
                f"nothing was done: `/loop {command.verb}` starts an issue's task; "
                "say it on the issue."
            )
        head: PullHeadResult = await workflow.execute_activity(
            PULL_HEAD.name,
            PullHeadInput(
                repo=self.source.repo, token_env=self.source.token_env, number=self.number
            ),
            result_type=PULL_HEAD.output,
            start_to_close_timeout=SHORT,
            retry_policy=STEP_RETRY,
            summary=f"branch of #{self.number}",
        )
        if self._task_of_branch(head.head_ref):
            # The branch is GitHub's text: not repeated in the reply.
            return await self._reply(
                "nothing was done: this pull request is not a Loopwork task's "
                "(its branch is not `loop/<task id>`)."
            )
        return await self._answer(command.verb, command.fields)

    def _task_of_branch(self, head_ref: str | None = None) -> str:
        """Why the pull request is not a task's ("" when it is: ``self.task_id`` is set)."""
        ref = self.d.head_ref if head_ref is None else head_ref
        prefix = branch_for("")
        task_id, candidate = ref.removeprefix(prefix), ""
        if "/" in task_id and patches.patched(CANDIDATE_BRANCHES):
            # A chosen candidate's branch, ``loop/<id>/<name>``: its task's pull request.
            task_id, _, candidate = task_id.partition("/")
        if (
            not ref.startswith(prefix)
            or not is_valid_task_id(task_id)
            or (candidate and not re.fullmatch(CANDIDATE_NAME_PATTERN, candidate))
        ):
            return f"ignored: {ref} is not a task's branch"
        self.task_id, self.former_id = task_id, ""  # the branch names the task itself
        return ""

    async def _closed(self) -> str:
        """A task's pull request merged (only a writer can: no check needed) or closed
        unmerged (its author may close it too: only a writer's close rejects the task)."""
        not_a_task = self._task_of_branch()
        if not_a_task:
            return not_a_task
        if not self.d.merged:
            granted = await self._permission()
            if not granted.may_write:
                return f"ignored: {self.d.sender} may not write to {self.source.repo}"
        fields = {"merged": "true" if self.d.merged else "false", "who": self.d.sender}
        return await self._answer("pull_request_closed", fields, reply=False)

    async def _review(self) -> str:
        """A review of a task's pull request as one feedback (quietly nothing when the
        reviewer may not write: a public repository's reviews are anyone's)."""
        not_a_task = self._task_of_branch()
        if not_a_task:
            return not_a_task
        approval = (
            self.d.review_state == "approved"
            and self.source.approve_on_review
            and patches.patched(REVIEW_APPROVES)
        )
        if self.d.review_state not in hooks.REVIEW_STATES and not approval:
            return f"ignored: a review that {self.d.review_state} (merging is the approval)"
        granted = await self._permission()
        if not granted.may_write:
            return f"ignored: {self.d.sender} may not write to {self.source.repo}"
        if approval:
            note = f"approving review on GitHub by {self.d.sender}"
            return await self._answer("approve", {"note": note, "commit": self.d.commit})
        found: ReviewCommentsResult = await workflow.execute_activity(
            REVIEW_COMMENTS.name,
            ReviewCommentsInput(
                repo=self.source.repo,
                token_env=self.source.token_env,
                number=self.number,
                review_id=self.d.review_id,
            ),
            result_type=REVIEW_COMMENTS.output,
            start_to_close_timeout=SHORT,
            retry_policy=STEP_RETRY,
            summary=f"comments of review {self.d.review_id}",
        )
        text = hooks.review_feedback(
            self.d.sender, self.d.review_state, self.d.comment, found.comments
        )
        if not text:
            return "ignored: the review said nothing"
        return await self._answer("feedback", {"text": text})

    def _asked(self, verb: str) -> TriageSources:
        """The sources as a writer's ``run`` (any labels) or ``retry`` (also past the
        cool-down, and after a task that ended done) has triage see them."""
        sources = self.d.sources.model_copy(deep=True)
        for s in sources.sources:
            s.labels = LabelFilter()
        if verb == "retry":
            sources.policy.cooldown = 0
            sources.policy.retry_done = True
        return sources

    async def _reply(self, text: str) -> str:
        """One comment on the issue: Loopwork's words, with GitHub's names quoted inert."""
        posted: CommentResult = await workflow.execute_activity(
            GITHUB_COMMENT.name,
            CommentInput(
                repo=self.source.repo,
                token_env=self.source.token_env,
                number=self.number,
                body=f"Loopwork: {text}",
            ),
            result_type=GITHUB_COMMENT.output,
            start_to_close_timeout=SHORT,
            retry_policy=STEP_RETRY,
            summary=f"reply on #{self.number}",
        )
        return f"replied in comment {posted.comment_id}: {text}"


def _login(login: str) -> str:
    """A login as a code span: never an ``@mention``, never out of its quote."""
    return login.replace("`", "'")[:40]
