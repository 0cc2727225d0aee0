"""Wire names pinned once: workflows, signals, queries, updates, search attributes."""

import hashlib
import re

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from loop.contracts.base import SPEC_ID_PATTERN, TASK_ID_PATTERN
from loop.contracts.states import TaskState

TASK_WORKFLOW = "TaskWorkflow"
CANDIDATE_WORKFLOW = "CandidateWorkflow"
"""One candidate of a task with candidates: a child of its ``TaskWorkflow``."""
AGENT_WORKFLOW = "AgentWorkflow"
LEDGER_WORKFLOW = "PeriodBudgetWorkflow"
UPDATE_RESERVE = "reserve"
UPDATE_REPORT = "report"
UPDATE_SET_LIMITS = "set_limits"
QUERY_LEDGER = "ledger"

# A person's answers. Each name is both an update of TaskWorkflow (what Loopwork's own
# tools send: refused before history with the reason when it does not apply) and a
# signal (what histories recorded before updates hold, and `temporal workflow signal`).
SIGNAL_APPROVE = "approve"
SIGNAL_REJECT = "reject"
SIGNAL_FEEDBACK = "feedback"
SIGNAL_EXTEND_BUDGET = "extend_budget"
SIGNAL_PULL_REQUEST_CLOSED = "pull_request_closed"
"""The task's pull request was merged or closed on GitHub (sent by a webhook delivery)."""
ANSWER_REFUSED = "LoopAnswerRefused"
"""Error type of an answer update that was refused (it does not apply now, or its
signature does not hold): the message is the reason, for the person who sent it."""
QUERY_STATUS = "status"
QUERY_TRACE = "trace"

PERMANENT = "LoopPermanent"
POLICY_VIOLATION = "LoopPolicyViolation"
"""Error types of activity failures that no retry can fix (``loop.errors.permanent``)."""
INPUT_GONE = "LoopInputGone"
"""Error type of a step whose input names a file its host kept that the host no longer
holds as it was (its run folder removed, or another machine serving the host's queue):
the task sends the step again whole (docs/architecture.md, "What history holds")."""
SOURCE_MISCONFIGURED = "LoopSourceMisconfigured"
"""Error type of a triage source that no poll can read until a person fixes the sources
file or the worker's environment (a token not set or refused, a repository not found)."""

WAITING_APPROVAL = "approve/reject"
WAITING_DECISION = "feedback/extend_budget/reject"
WAITING_PULL_REQUEST = "pull_request_closed/feedback/reject"
"""A task whose pull request is open on GitHub: merged or closed there, a review
(feedback) for another attempt, or a rejection."""


# Search attributes: registered by the embedded server at start and by the worker.
SA_STATE = SearchAttributeKey.for_keyword("LoopState")
SA_ATTEMPTS = SearchAttributeKey.for_int("LoopAttempts")
SA_COST = SearchAttributeKey.for_float("LoopCostUSD")
SA_REPO = SearchAttributeKey.for_keyword("LoopRepo")
SA_HOST = SearchAttributeKey.for_keyword("LoopHost")
SEARCH_ATTRIBUTES = (SA_STATE, SA_ATTEMPTS, SA_COST, SA_REPO, SA_HOST)


def starting_attributes(repo: str) -> TypedSearchAttributes:
    """A task's search attributes as its workflow publishes them first: given at the
    start, they are listed at once and its first upsert has nothing to change."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(SA_STATE, str(TaskState.RUNNING)),
            SearchAttributePair(SA_REPO, repo),
            SearchAttributePair(SA_ATTEMPTS, 0),
            SearchAttributePair(SA_COST, 0.0),
        ]
    )


HOST_LOST = "LoopHostLost"
"""Error type of a step whose host stopped polling its queue: the task may move."""


def ping_queue(host_queue: str) -> str:
    """Each worker answers pings on its own queue with slots of their own: a host whose
    worktree slots are all busy still says it is alive."""
    return f"{host_queue}.ping"


REMOTE_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|[\w.-]+@[\w.-]+:)", re.IGNORECASE)


def is_remote(repo: str) -> bool:
    """A git URL (``file://``, ``ssh://``, ``https://``, ``git@host:path``), not a path."""
    return REMOTE_URL.match(repo) is not None


def ledger_id_for(repo: str) -> str:
    """One period-budget ledger per repository, found again from the repository's path."""
    return "budget-" + hashlib.sha1(repo.encode()).hexdigest()[:16]


def is_valid_task_id(task_id: str) -> bool:
    return re.fullmatch(TASK_ID_PATTERN, task_id) is not None


def is_valid_spec_id(spec_id: str) -> bool:
    """A task's id, or one of its candidates' (``<id>+<name>``)."""
    return re.fullmatch(SPEC_ID_PATTERN, spec_id) is not None


EVAL_WORKFLOW = "EvalWorkflow"
MINE_WORKFLOW = "MineWorkflow"
"""``loop eval mine``: a repository's history into an eval suite."""


TRIAGE_WORKFLOW = "TriageWorkflow"
