"""Every activity as a typed stub: its pinned name, its one input, its one result.

Workflows call activities through these; the worker registers an implementation for
each (a test checks that none is missing).
"""

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from loop.contracts.environment import BuiltEnvironment
from loop.contracts.eval import EvalReport, WriteEvalResult
from loop.contracts.evidence import GateResult, Verdict
from loop.contracts.hooks import (
    CancelTaskInput,
    CancelTaskResult,
    CiItemInput,
    CommentInput,
    CommentResult,
    CommitStatusInput,
    CommitStatusResult,
    HookAnswerInput,
    HookAnswerResult,
    HookItemInput,
    HookItemResult,
    PermissionInput,
    PermissionResult,
    PullHeadInput,
    PullHeadResult,
    ReviewCommentsInput,
    ReviewCommentsResult,
    StatusCommentInput,
    StatusCommentResult,
)
from loop.contracts.ledger import (
    HoldersInput,
    HoldersResult,
    ReportUsageInput,
    ReportUsageResult,
    ReserveBudgetInput,
    ReserveReply,
)
from loop.contracts.messages import CheckAnswerInput, CheckAnswerResult
from loop.contracts.model import (
    AttemptStart,
    EndAttemptInput,
    ModelStepInput,
    ModelStepResult,
    ReviewInput,
    ToolStepInput,
    ToolStepResult,
)
from loop.contracts.results import SummarizeInput, SummarizeResult
from loop.contracts.slack import SlackCloseInput, SlackCloseResult, SlackMessage, SlackPostInput
from loop.contracts.steps import (
    BuildEnvironmentInput,
    CommitInput,
    CommitResult,
    EscalateInput,
    EscalateResult,
    ExploreInput,
    ExploreResult,
    MakeInput,
    MakeResult,
    MergeInput,
    MergeResult,
    PingInput,
    PingResult,
    Prepared,
    PrepareExploreInput,
    PrepareInput,
    PullRequestInput,
    PullRequestResult,
    RemoveInput,
    RemoveResult,
    VerifyInput,
    Workspace,
)
from loop.contracts.tasks_hook import HookIssueInput
from loop.contracts.triage import DiscoverInput, DiscoverResult, LookupInput, LookupResult

In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out", bound=BaseModel)


@dataclass(frozen=True)
class ActivityDef(Generic[In, Out]):
    """A typed activity stub: the pinned wire name with its one input and one result."""

    name: str
    input: type[In]
    output: type[Out]


PREPARE_WORKSPACE = ActivityDef("prepare_workspace", PrepareInput, Workspace)


EXPLORE = ActivityDef("explore", ExploreInput, ExploreResult)


PREPARE_AND_EXPLORE = ActivityDef("prepare_and_explore", PrepareExploreInput, Prepared)
"""``prepare_workspace`` and then ``explore``, on the host that takes it."""


BUILD_ENVIRONMENT = ActivityDef("build_environment", BuildEnvironmentInput, BuiltEnvironment)
"""The repository's environment, found on the task's host or built there."""


MAKE = ActivityDef("make", MakeInput, MakeResult)


BEGIN_ATTEMPT = ActivityDef("begin_attempt", MakeInput, AttemptStart)


END_ATTEMPT = ActivityDef("end_attempt", EndAttemptInput, MakeResult)


MODEL_STEP = ActivityDef("model_step", ModelStepInput, ModelStepResult)


TOOL_STEP = ActivityDef("tool_step", ToolStepInput, ToolStepResult)


VERIFY = ActivityDef("verify", VerifyInput, Verdict)


REVIEW = ActivityDef("review", ReviewInput, GateResult)


COMMIT = ActivityDef("commit_branch", CommitInput, CommitResult)


MERGE = ActivityDef("merge", MergeInput, MergeResult)


REMOVE_WORKSPACE = ActivityDef("remove_workspace", RemoveInput, RemoveResult)


PING = ActivityDef("ping_host", PingInput, PingResult)


PULL_REQUEST = ActivityDef("open_pull_request", PullRequestInput, PullRequestResult)


ESCALATE = ActivityDef("escalate", EscalateInput, EscalateResult)


RESERVE_BUDGET = ActivityDef("reserve_budget", ReserveBudgetInput, ReserveReply)


REPORT_USAGE = ActivityDef("report_usage", ReportUsageInput, ReportUsageResult)


CLOSED_HOLDERS = ActivityDef("closed_holders", HoldersInput, HoldersResult)


SUMMARIZE = ActivityDef("summarize", SummarizeInput, SummarizeResult)


WRITE_EVAL = ActivityDef("write_eval_results", EvalReport, WriteEvalResult)
CHECK_ANSWER = ActivityDef("check_answer", CheckAnswerInput, CheckAnswerResult)
"""A local activity: the answer key stays on the worker, the verdict goes into history."""
DISCOVER = ActivityDef("discover", DiscoverInput, DiscoverResult)
LOOKUP_TASKS = ActivityDef("lookup_tasks", LookupInput, LookupResult)
HOOK_ITEM = ActivityDef("github_hook_item", HookItemInput, HookItemResult)
CANCEL_TASK = ActivityDef("cancel_task", CancelTaskInput, CancelTaskResult)
GITHUB_PERMISSION = ActivityDef("github_permission", PermissionInput, PermissionResult)
GITHUB_COMMENT = ActivityDef("github_comment", CommentInput, CommentResult)
HOOK_ANSWER = ActivityDef("hook_answer", HookAnswerInput, HookAnswerResult)
REVIEW_COMMENTS = ActivityDef("github_review_comments", ReviewCommentsInput, ReviewCommentsResult)
CI_ITEM = ActivityDef("github_ci_item", CiItemInput, HookItemResult)
"""The failed required checks of a base-branch commit as one CI-regression item."""
PULL_HEAD = ActivityDef("github_pull_head", PullHeadInput, PullHeadResult)
HOOK_ISSUE = ActivityDef("hook_issue_item", HookIssueInput, HookItemResult)
"""A ``POST /hooks/tasks`` body as triage's item (discovery's issue-file rules)."""
SLACK_POST = ActivityDef("slack_post", SlackPostInput, SlackMessage)
SLACK_CLOSE = ActivityDef("slack_close", SlackCloseInput, SlackCloseResult)
COMMIT_STATUS = ActivityDef("github_commit_status", CommitStatusInput, CommitStatusResult)
STATUS_COMMENT = ActivityDef("github_status_comment", StatusCommentInput, StatusCommentResult)

ALL_ACTIVITIES: tuple[ActivityDef[Any, Any], ...] = (
    PREPARE_WORKSPACE,
    EXPLORE,
    PREPARE_AND_EXPLORE,
    BUILD_ENVIRONMENT,
    MAKE,
    BEGIN_ATTEMPT,
    END_ATTEMPT,
    MODEL_STEP,
    TOOL_STEP,
    VERIFY,
    REVIEW,
    COMMIT,
    MERGE,
    REMOVE_WORKSPACE,
    PING,
    PULL_REQUEST,
    ESCALATE,
    RESERVE_BUDGET,
    REPORT_USAGE,
    CLOSED_HOLDERS,
    SUMMARIZE,
    WRITE_EVAL,
    CHECK_ANSWER,
    DISCOVER,
    LOOKUP_TASKS,
    HOOK_ITEM,
    CANCEL_TASK,
    GITHUB_PERMISSION,
    GITHUB_COMMENT,
    HOOK_ANSWER,
    REVIEW_COMMENTS,
    PULL_HEAD,
    CI_ITEM,
    SLACK_POST,
    SLACK_CLOSE,
    HOOK_ISSUE,
    STATUS_COMMENT,
    COMMIT_STATUS,
)
"""The one registry: every activity a workflow may call."""
