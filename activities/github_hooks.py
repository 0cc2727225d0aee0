"""The activities a GitHub delivery needs: its issue as triage's item, a task cancelled,
a commenter's permission, one reply comment, and a person's answer sent as the CLI's.

The item is built by discovery's own code (``activities.discover``), so a webhook and a
poll of the same issue make the same task. The answer goes through ``loop.tasks``, the
path ``loop approve|reject|feedback|extend`` and the review page take: the task's own
validator decides whether it applies, and the worker's answer key signs it. GitHub is
called with githubkit and the source's token (``token_env``), its retries off, so that
Temporal's retry policy is the only one: a rate-limited answer waits until the reset.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError

from activities import github_issues
from activities.discover import github_item
from activities.host import github_sdk
from activities.pull_request import API_TIMEOUT_S, github_repo
from loop.contracts import (
    CANCEL_TASK,
    COMMIT_STATUS,
    COMMIT_STATUS_CONTEXT,
    GITHUB_COMMENT,
    GITHUB_PERMISSION,
    HOOK_ANSWER,
    HOOK_ITEM,
    PULL_HEAD,
    REVIEW_COMMENTS,
    STATUS_COMMENT,
    CancelTaskInput,
    CancelTaskResult,
    CommentInput,
    CommentResult,
    CommitStatusInput,
    CommitStatusResult,
    GitHubSource,
    HookAnswerInput,
    HookAnswerResult,
    HookItemInput,
    HookItemResult,
    PermissionInput,
    PermissionResult,
    PullHeadInput,
    PullHeadResult,
    ReviewComment,
    ReviewCommentsInput,
    ReviewCommentsResult,
    StatusCommentInput,
    StatusCommentResult,
    workflow_id_for,
)
from loop.errors import BadInput, UnknownTask, permanent
from loop.hardened import answers
from loop.hardened.text import for_github
from loop.rules import status
from loop.settings import Settings
from loop.tasks import answer, approvable, find, payload_for, task_state

ROLES = ("admin", "maintain", "write", "triage", "read")
PER_PAGE = 100
REVIEW_PAGES = 10
"""A thousand inline comments in one review: more are not read."""


class GitHubHookActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def _marker_key(self) -> bytes | None:
        """The answer key, which signs status comments' markers (None: the worker has none,
        or it cannot be read: the marker is then the plain one)."""
        path = self.settings.answer_key
        if path is None:
            return None
        try:
            return answers.read_key(path)
        except answers.AnswerKeyError:
            return None

    @activity.defn(name=HOOK_ITEM.name)
    async def github_hook_item(self, inp: HookItemInput) -> HookItemResult:
        return HookItemResult(item=github_item(inp.source, inp.issue))

    @activity.defn(name=CANCEL_TASK.name)
    async def cancel_task(self, inp: CancelTaskInput) -> CancelTaskResult:
        """Cancel the item's open task with the reason, which its trace then records."""
        client = activity.client()
        task_id = await known_as(client, inp.task_id, inp.former_id)
        try:
            handle, desc = await find(client, task_id)
        except UnknownTask:
            return CancelTaskResult(did=f"no task {task_id}")
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return CancelTaskResult(did=f"{task_id} already ended {task_state(desc)}")
        await handle.cancel(reason=inp.reason)
        return CancelTaskResult(did=f"cancelled {task_id}: {inp.reason}")

    @activity.defn(name=GITHUB_PERMISSION.name)
    async def github_permission(self, inp: PermissionInput) -> PermissionResult:
        """What the API says the commenter may do in the repository (404: nothing)."""
        owner, name = inp.repo.split("/", 1)
        async with hook_client(inp.repo, inp.token_env) as gh:
            try:
                resp = await gh.rest.repos.async_get_collaborator_permission_level(
                    owner, name, inp.login
                )
            except github_sdk.RequestFailed as e:
                if e.response.status_code == 404:
                    return PermissionResult(permission="none")
                raise failure(inp.repo, "read a collaborator's permission", e) from None
        data = resp.parsed_data
        role = data.role_name if isinstance(data.role_name, str) else ""
        # ``permission`` says ``write`` for a maintainer; ``role_name`` tells them apart
        # (a custom role's name says nothing Loopwork knows: its ``permission`` does).
        granted = role if role in ROLES else data.permission
        return PermissionResult(permission=granted)

    @activity.defn(name=GITHUB_COMMENT.name)
    async def github_comment(self, inp: CommentInput) -> CommentResult:
        owner, name = inp.repo.split("/", 1)
        async with hook_client(inp.repo, inp.token_env) as gh:
            try:
                resp = await gh.rest.issues.async_create_comment(
                    owner, name, inp.number, body=inp.body
                )
            except github_sdk.RequestFailed as e:
                raise failure(inp.repo, f"comment on #{inp.number}", e) from None
        return CommentResult(comment_id=resp.parsed_data.id)

    @activity.defn(name=STATUS_COMMENT.name)
    async def github_status_comment(self, inp: StatusCommentInput) -> StatusCommentResult:
        """The task's one comment on its issue, edited in place (made again if a person
        deleted it), with links to the task's review page and its Temporal UI page where
        ``LOOP_REVIEW_URL`` and ``LOOP_UI_URL`` say where people reach them (a worker's
        loopback address would mean nothing on GitHub)."""
        owner, name = inp.repo.split("/", 1)
        body = status.comment(inp.view, for_github)
        links = []
        if self.settings.review_url:
            page = f"{self.settings.review_url.rstrip('/')}/tasks/{inp.view.task_id}"
            links.append(f"[Review page]({page})")
        temporal = os.environ.get("LOOP_UI_URL", "").rstrip("/")
        if temporal:
            namespace = activity.info().workflow_namespace
            wid = workflow_id_for(inp.view.task_id)
            links.append(f"[Temporal UI]({temporal}/namespaces/{namespace}/workflows/{wid})")
        if links:
            body += "\n\n" + " · ".join(links)
        key = self._marker_key()
        marker = status_marker(inp.view.task_id, key, inp.repo, inp.number)
        body += "\n\n" + marker
        async with hook_client(inp.repo, inp.token_env) as gh:
            if inp.comment_id:
                try:
                    await gh.rest.issues.async_update_comment(
                        owner, name, inp.comment_id, body=body
                    )
                    return StatusCommentResult(comment_id=inp.comment_id)
                except github_sdk.RequestFailed as e:
                    if e.response.status_code != 404:
                        raise failure(inp.repo, f"edit comment {inp.comment_id}", e) from None
            if key is not None or activity.info().attempt > 1:
                # The task's comment may be there: made by an earlier run of the task (a
                # `/loop retry`), found by its signed marker, which no one else can write;
                # or, without a key, by a create whose answer was lost (a timeout).
                made = await _marked(gh, inp.repo, inp.number, marker)
                if made:
                    await _edit(gh, inp.repo, made, body)
                    return StatusCommentResult(comment_id=made)
            try:
                resp = await gh.rest.issues.async_create_comment(owner, name, inp.number, body=body)
            except github_sdk.RequestFailed as e:
                raise failure(inp.repo, f"comment on #{inp.number}", e) from None
        return StatusCommentResult(comment_id=resp.parsed_data.id)

    @activity.defn(name=COMMIT_STATUS.name)
    async def github_commit_status(self, inp: CommitStatusInput) -> CommitStatusResult:
        """``loopwork/verify`` on the commit: ``success`` when every gate passed, else
        ``failure``; its link is the task's review page where ``LOOP_REVIEW_URL`` says."""
        repo = inp.repo or github_repo(inp.remote)
        if not repo:
            return CommitStatusResult(posted=False, note="the commit is not on GitHub")
        owner, name = repo.split("/", 1)
        page = ""
        if self.settings.review_url:
            page = f"{self.settings.review_url.rstrip('/')}/tasks/{inp.task_id}"
        async with hook_client(repo, inp.token_env) as gh:
            try:
                await gh.rest.repos.async_create_commit_status(
                    owner,
                    name,
                    inp.sha,
                    state="success" if inp.passed else "failure",
                    description=inp.description[:140],
                    context=COMMIT_STATUS_CONTEXT,
                    **({"target_url": page} if page else {}),
                )
            except github_sdk.RequestFailed as e:
                raise failure(repo, f"set {COMMIT_STATUS_CONTEXT} on {inp.sha[:12]}", e) from None
        return CommitStatusResult(posted=True)

    @activity.defn(name=PULL_HEAD.name)
    async def github_pull_head(self, inp: PullHeadInput) -> PullHeadResult:
        """The branch of a pull request a ``/loop`` comment was made on: an
        ``issue_comment``'s payload does not carry it, and only a task's branch
        (``loop/<id>``) says which task the comment is for."""
        owner, name = inp.repo.split("/", 1)
        async with hook_client(inp.repo, inp.token_env) as gh:
            try:
                resp = await gh.rest.pulls.async_get(owner, name, inp.number)
            except github_sdk.RequestFailed as e:
                if e.response.status_code == 404:
                    return PullHeadResult(head_ref="")
                raise failure(inp.repo, f"read pull request #{inp.number}", e) from None
        return PullHeadResult(head_ref=resp.parsed_data.head.ref)

    @activity.defn(name=REVIEW_COMMENTS.name)
    async def github_review_comments(self, inp: ReviewCommentsInput) -> ReviewCommentsResult:
        """Every inline comment of one review (a review's payload carries none of them)."""
        owner, name = inp.repo.split("/", 1)
        found: list[ReviewComment] = []
        async with hook_client(inp.repo, inp.token_env) as gh:
            for page in range(1, REVIEW_PAGES + 1):
                try:
                    resp = await gh.rest.pulls.async_list_comments_for_review(
                        owner, name, inp.number, inp.review_id, per_page=PER_PAGE, page=page
                    )
                except github_sdk.RequestFailed as e:
                    raise failure(inp.repo, f"read review {inp.review_id}'s comments", e) from None
                listed = resp.parsed_data
                found += [
                    ReviewComment(
                        path=c.path,
                        line=c.line if isinstance(c.line, int) else None,
                        diff_hunk=c.diff_hunk,
                        body=c.body,
                    )
                    for c in listed
                ]
                if len(listed) < PER_PAGE:
                    break
        return ReviewCommentsResult(comments=found)

    @activity.defn(name=HOOK_ANSWER.name)
    async def hook_answer(self, inp: HookAnswerInput) -> HookAnswerResult:
        """The CLI's answer, from ``inp.by``, as answer ``inp.answer_id``; a refusal (the
        state does not take it, a malformed figure, an approval of another commit) is the
        result, not a failure: the person hears it where they answered."""
        client = activity.client()
        fields = dict(inp.fields)
        inp = inp.model_copy(update={"task_id": await known_as(client, inp.task_id, inp.former_id)})
        try:
            if inp.answer == "approve" and not fields.get("commit"):
                fields["commit"] = await waiting_commit(client, inp)
            payload = payload_for(inp.answer, fields, inp.by, inp.answer_id)
            reply = await answer(
                client, inp.task_id, inp.answer, payload, inp.by, self.settings.answer_key
            )
        except (BadInput, UnknownTask) as e:
            return HookAnswerResult(refused=str(e))
        return HookAnswerResult(did=reply.did)


async def known_as(client: Client, task_id: str, former_id: str) -> str:
    """The id the item's task has: ``task_id``, or, where no task has it, the id a task
    started before ids named the repository still has (``former_id``, when there is one)."""
    if not former_id:
        return task_id
    for candidate in (task_id, former_id):
        try:
            await find(client, candidate)
        except UnknownTask:
            continue
        return candidate
    return task_id


async def waiting_commit(client: Client, inp: HookAnswerInput) -> str:
    """The commit an approval that names none (a ``/loop approve`` comment) approves: the
    one waiting, if it was waiting when the person said it (``inp.said_at``); an older
    comment, redelivered after the task moved on to another commit, approves nothing.
    "" when no commit waits (the task then says why the approval does not apply)."""
    st = await approvable(client, inp.task_id)
    if st is None or not st.commit:
        return ""
    if inp.said_at and st.waiting_since and _when(inp.said_at) < _when(st.waiting_since):
        raise BadInput(
            f"this approval was said at {inp.said_at}, before commit {st.commit[:12]} "
            f"waited for one (since {st.waiting_since}); approve it again to approve it"
        )
    return st.commit


def _when(iso: str) -> datetime:
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        raise BadInput(f"{iso[:40]!r} is not a time") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def status_marker(task_id: str, key: bytes | None = None, repo: str = "", number: int = 0) -> str:
    """The hidden last line of a task's status comment: how a later run of the task (or a
    retried create) finds the comment made before. With the worker's answer key it is
    signed for the issue and the task, so a marker someone typed into a comment of their
    own is never taken for it. Task ids are ``[A-Za-z0-9._-]``: it cannot end the HTML
    comment early."""
    if key is None:
        return f"<!-- loopwork:{task_id} -->"
    said = f"status-comment\0{repo}#{number}\0{task_id}".encode()
    return f"<!-- loopwork:{task_id} {hmac.new(key, said, hashlib.sha256).hexdigest()[:32]} -->"


async def _marked(gh: github_sdk.GitHub[object], repo: str, number: int, marker: str) -> int:
    """The newest comment on the issue that ends with ``marker`` (0: none). A plain marker
    (no answer key) is looked for only when a create is retried, so one someone else
    typed can at most be taken in that window; a signed one always."""
    owner, name = repo.split("/", 1)
    found = 0
    for page in range(1, REVIEW_PAGES + 1):
        try:
            resp = await gh.rest.issues.async_list_comments(
                owner, name, number, per_page=PER_PAGE, page=page
            )
        except github_sdk.RequestFailed as e:
            raise failure(repo, f"read the comments of #{number}", e) from None
        listed = resp.parsed_data
        for c in listed:
            if (c.body or "").rstrip().endswith(marker):
                found = c.id
        if len(listed) < PER_PAGE:
            break
    return found


async def _edit(gh: github_sdk.GitHub[object], repo: str, comment_id: int, body: str) -> None:
    owner, name = repo.split("/", 1)
    try:
        await gh.rest.issues.async_update_comment(owner, name, comment_id, body=body)
    except github_sdk.RequestFailed as e:
        raise failure(repo, f"edit comment {comment_id}", e) from None


def hook_client(repo: str, token_env: str) -> github_sdk.GitHub[object]:
    source = GitHubSource(name="hook", kind="github", repo=repo, token_env=token_env)
    return github_sdk.GitHub(
        github_issues.token_of(source),
        base_url=github_issues.api_base(),
        timeout=API_TIMEOUT_S,
        auto_retry=False,
        http_cache=False,
        user_agent="loopwork-hooks",
    )


def failure(repo: str, what: str, e: github_sdk.RequestFailed) -> ApplicationError:
    """Retried at the reset when rate-limited, retried when GitHub itself failed,
    otherwise not: the same request would get the same answer."""
    if isinstance(e, github_sdk.RateLimitExceeded):
        wait = max(e.retry_after, timedelta(seconds=1))
        return ApplicationError(
            f"GitHub's rate limit is spent; waiting {int(wait.total_seconds())} s to {what}",
            type=github_issues.RATE_LIMITED,
            next_retry_delay=wait,
        )
    status = e.response.status_code
    message = f"GitHub answered {status} when asked to {what} in {repo}"
    return ApplicationError(message) if status >= 500 else permanent(message)
