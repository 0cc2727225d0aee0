"""GitHub webhooks: what ``loop ui`` hands Temporal for one delivery, and the activities
that act on it.

``POST /hooks/github`` checks the signature and starts one ``GitHubDeliveryWorkflow``
per thing a delivery is about, keyed by its signed body (``loop.rules.hooks.delivery_key``:
the comment's or review's id and the action), never by the unsigned ``X-GitHub-Delivery``:
a redelivered or replayed delivery, under any delivery id, is refused by the server
rather than handled twice. The payload is
cut down to what the workflow reads: GitHub's text in it (titles, bodies, comments) is
data, never configuration or a command beyond the parsed ``/loop`` verb.
"""

import re
from typing import Any, Literal

from pydantic import Field

from loop.contracts.base import _Record
from loop.contracts.states import TaskState
from loop.contracts.triage import GitHubSource, TriageItem, TriageSources

GITHUB_DELIVERY_WORKFLOW = "GitHubDeliveryWorkflow"
DELIVERY_ID_PATTERN = r"^[A-Za-z0-9-]{1,64}$"
"""GitHub's delivery ids are GUIDs; anything else is refused before a workflow id is made."""


def delivery_workflow_id(key: str) -> str:
    """The one workflow a delivery may start: ``github-delivery-<key>``, its key from its
    body (runs from before were keyed by ``X-GitHub-Delivery``)."""
    return f"github-delivery-{key}"


def is_valid_delivery_id(delivery: str) -> bool:
    return re.fullmatch(DELIVERY_ID_PATTERN, delivery) is not None


HookEvent = Literal[
    "issues",
    "issue_comment",
    "pull_request_review",
    "pull_request",
    "check_run",
    "check_suite",
    "workflow_run",
]
CHECK_EVENTS = ("check_run", "check_suite", "workflow_run")
"""Deliveries that say a commit's CI completed; which checks failed is asked of the API."""


class GitHubDelivery(_Record):
    """One delivery, as ``loop ui`` read it after its signature held."""

    delivery: str
    event: HookEvent
    action: str
    sources: TriageSources
    """The sources file of the matching source, with that source alone: its policy and
    label filter decide as triage would."""
    source: str
    """The ``github`` source whose repository sent it."""
    issue: dict[str, Any]
    """The issue (or pull request) object of the payload, in the REST shape."""
    sender: str
    """The login of who acted on GitHub (who labeled, closed or commented)."""
    comment: str = ""
    """``issue_comment``: the comment's body; ``pull_request_review``: the review's. Untrusted
    text."""
    review_id: int = 0
    review_state: str = ""
    """``pull_request_review``: ``changes_requested``, ``commented`` or ``approved``."""
    head_ref: str = ""
    """``pull_request_review``, ``pull_request``: the pull request's branch (a task's is
    ``loop/<id>``)."""
    merged: bool = False
    """``pull_request`` closed: whether it was merged (GitHub's ``merged``)."""
    head_sha: str = ""
    """``CHECK_EVENTS``: the commit the CI ran on."""
    head_branch: str = ""
    """``CHECK_EVENTS``: the branch GitHub says the commit was pushed to."""
    conclusion: str = ""
    """``CHECK_EVENTS``: what the run or suite concluded (``failure``, ``success``…)."""
    key: str = ""
    """What the delivery is about, from its signed body (``delivery_key``): its workflow's
    id, and the id of the answer it sends, so a task takes it once ("": a delivery from
    before, keyed by ``delivery``)."""
    commit: str = ""
    """``pull_request_review``: the commit the review is of (``review.commit_id``)."""
    said_at: str = ""
    """``issue_comment``: when the comment was made (``comment.created_at``, ISO 8601)."""


class GitHubDeliveryResult(_Record):
    did: list[str] = Field(default_factory=list)
    """What the delivery did, a line each (``started gh-42``, ``ignored: …``)."""


class HookItemInput(_Record):
    source: GitHubSource
    issue: dict[str, Any]


class HookItemResult(_Record):
    item: TriageItem


class CancelTaskInput(_Record):
    task_id: str
    reason: str
    former_id: str = ""
    """The id the item's task had before ids named the repository: cancelled where no
    task has ``task_id``."""


class CancelTaskResult(_Record):
    did: str


class PermissionInput(_Record):
    repo: str
    token_env: str
    login: str


class PermissionResult(_Record):
    permission: str
    """``admin``, ``maintain``, ``write``, ``triage``, ``read`` or ``none``."""

    @property
    def may_write(self) -> bool:
        return self.permission in ("admin", "maintain", "write")


class CommentInput(_Record):
    repo: str
    token_env: str
    number: int
    body: str


class CommentResult(_Record):
    comment_id: int


class HookAnswerInput(_Record):
    task_id: str
    answer: str
    """``approve``, ``reject``, ``feedback`` or ``extend``."""
    fields: dict[str, str] = Field(default_factory=dict)
    """The answer's fields as a form gives them (``reason``, ``text``, ``attempts``,
    ``commit``…)."""
    by: str
    answer_id: str = ""
    """The answer's id: the same answer sent again (a redelivery, a retried step, a
    button pressed twice) has the same one, and the task takes it once ("": a new one)."""
    said_at: str = ""
    """When the person said it (a comment's time, ISO 8601): an ``approve`` naming no
    commit approves the one waiting only if it was already waiting then."""
    former_id: str = ""
    """The id the item's task had before ids named the repository: answered where no
    task has ``task_id``."""


class HookAnswerResult(_Record):
    did: str = ""
    refused: str = ""
    """Why the task (or the CLI's checks) did not take it; empty when it did."""


class StatusGate(_Record):
    name: str
    verdict: Literal["pass", "fail", "uncertain"]
    said: str = ""
    """A line of its evidence (untrusted: made inert when written)."""


class TaskStatusView(_Record):
    """What a task's status comment shows (``loop.rules.status``): a few lines."""

    task_id: str
    state: TaskState
    attempt: int
    max_attempts: int | None = None
    reason: str = ""
    waiting_for: str = ""
    gates: list[StatusGate] = Field(default_factory=list)
    more_gates: int = 0
    pull_request: str = ""
    commit: str = ""
    """The commit an approval would approve (while the task waits for one)."""


class StatusCommentInput(_Record):
    """A task's one status comment on its issue: made once, then edited in place."""

    repo: str
    token_env: str
    number: int
    comment_id: int = 0
    """The comment to edit; 0: make it (also when the one made before was deleted)."""
    view: TaskStatusView


class StatusCommentResult(_Record):
    comment_id: int


COMMIT_STATUS_CONTEXT = "loopwork/verify"


class CommitStatusInput(_Record):
    """The gates' verdict on a pushed commit, as GitHub's commit status
    ``loopwork/verify``."""

    repo: str
    """``owner/name``; "" to take it from ``remote`` (a GitHub URL)."""
    remote: str = ""
    token_env: str
    sha: str
    passed: bool
    description: str
    """One line (GitHub keeps 140 characters), inert."""
    task_id: str


class CommitStatusResult(_Record):
    posted: bool
    note: str = ""
    """Why nothing was posted (the commit is not on GitHub)."""


class PullHeadInput(_Record):
    """A pull request whose branch says which task it is (``loop/<id>``): an issue
    comment's payload names the pull request but not its branch."""

    repo: str
    token_env: str
    number: int


class PullHeadResult(_Record):
    head_ref: str
    """The pull request's branch; "" when the repository has no such pull request."""


class CiItemInput(_Record):
    """A completed CI run on the base branch: which of ``source.ci_checks`` failed on
    ``sha``, asked of the API (not taken from the delivery), as a regression item."""

    source: GitHubSource
    sha: str = Field(pattern=r"^[0-9a-f]{40}$")
    base: str


class ReviewCommentsInput(_Record):
    repo: str
    token_env: str
    number: int
    review_id: int


class ReviewComment(_Record):
    """An inline comment of a review, as the next attempt reads it."""

    path: str
    line: int | None = None
    """The line in the pull request's head (None: GitHub no longer places it)."""
    diff_hunk: str = ""
    body: str = ""


class ReviewCommentsResult(_Record):
    comments: list[ReviewComment] = Field(default_factory=list)
