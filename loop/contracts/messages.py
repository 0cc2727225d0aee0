"""Answers (signals and updates), queries and the status a person reads."""

from pydantic import Field

from loop.contracts.base import _Payload, _Record
from loop.contracts.states import Phase, TaskState


class _Answer(_Payload):
    """What every answer carries besides its own fields: who signed it, when, the
    signature (``loop.hardened.answers``) and which answer it is (``answer_id``, covered
    by the signature). ``by`` is credited in the trace only when the signature holds."""


class ApproveSignal(_Answer):
    note: str = ""
    by: str = ""
    """Who decided (the CLI's local user, the review page's token name); for the trace."""
    at: str = ""
    """When it was signed (ISO 8601, UTC)."""
    signature: str = ""
    """HMAC-SHA256 under the answer key over the workflow id, the answer and the fields."""
    commit: str = ""
    """The commit approved: the one the person was shown (full, or at least 7 characters
    of it). One other than the commit waiting is refused; "" (a hand-typed signal)
    approves the commit waiting when it arrives."""
    answer_id: str = ""
    """Which answer this is (``cli:…``, ``page:…``, ``slack:…``, ``github:…``): the task
    takes one answer once, however often it arrives ("": not said, each is new)."""
    candidate: str = ""
    """The candidate approved, where several wait (``choose: person``); "" where one
    does, or ``commit`` names it."""


class RejectSignal(_Answer):
    reason: str = ""
    by: str = ""
    at: str = ""
    signature: str = ""
    answer_id: str = ""


class FeedbackSignal(_Answer):
    text: str = Field(min_length=1)
    by: str = ""
    at: str = ""
    signature: str = ""
    answer_id: str = ""


class ExtendBudgetSignal(_Answer):
    attempts: int = Field(default=0, ge=0)
    seconds: int = Field(default=0, ge=0)
    tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0)
    by: str = ""
    at: str = ""
    signature: str = ""
    answer_id: str = ""


class PullRequestClosedSignal(_Answer):
    """The task's pull request was closed on GitHub: merged, or not."""

    merged: bool = False
    who: str = ""
    """The GitHub login of who merged or closed it (the delivery's sender)."""
    url: str = ""
    by: str = ""
    at: str = ""
    signature: str = ""
    answer_id: str = ""


class CheckAnswerInput(_Record):
    """An answer as the workflow received it, for the worker to check its signature."""

    workflow_id: str
    answer: str
    """The signal's name."""
    fields: dict[str, object]
    received: str
    """When the workflow received it (``workflow.now()``, ISO 8601)."""


class CheckAnswerResult(_Record):
    accepted: bool
    signed: bool = False
    """True when a valid signature proved ``by``."""
    why: str = ""
    """Why it was not accepted, or that the worker has no answer key."""


class AnswerReply(_Record):
    """What an answer sent as an update did, for the person who sent it."""

    did: str
    """In a few words: "approved; merge of loop/x into main requested", "one more attempt with your
    feedback"."""
    signed: bool = False
    """True when the worker checked its signature with the answer key (False: the worker
    has no key and took it unsigned)."""


class BudgetFigures(_Record):
    attempts: int | None = None
    seconds: float | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    tool_calls: int | None = None


class BudgetStatus(_Record):
    used: BudgetFigures
    left: BudgetFigures


class CandidateView(_Record):
    """One candidate of a task, as its ``status`` shows it."""

    name: str
    agent: str = ""
    """Its agent in a few words (the command's program, or the model)."""
    state: TaskState = TaskState.RUNNING
    """RUNNING; DONE_WITH_EVIDENCE once its verdict passed; how it stopped otherwise
    (BLOCKED, NEEDS_HUMAN, BUDGET_EXCEEDED, CANCELLED)."""
    reason: str = ""
    attempt: int = 0
    """Its attempts so far (as of its last round's end, while it runs)."""
    tokens: int = 0
    cost_usd: float = 0.0
    last_verdict: str = ""
    branch: str = ""
    commit: str = ""
    """Its verified commit (where it passed)."""
    changed_lines: int = 0
    chosen: bool = False
    rank: int = 0
    """Its place in the choice (1: chosen), once made; 0 before."""
    workflow_id: str = ""
    """Its own workflow (``task-<id>+<name>``), whose ``status`` is live while it runs."""
    phase: Phase | None = None
    """While it runs: its phase, from its own workflow (``loop.tasks.with_live_candidates``)."""


class Progress(_Record):
    """What the running attempt's agent has done so far, as its ``make`` step heartbeats
    it (a few seconds old at most): read from the server's description of the workflow,
    never from its history (docs/concepts/states.md, "Progress")."""

    attempt: int = 0
    seconds: float = 0.0
    """Since the agent started."""
    tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    """Model calls so far, where the gateway forwards them (``agent.provider``)."""
    metered: bool = False
    """True when the figures are the gateway's; else what the agent reported so far."""
    last_line: str = ""
    """The agent's last line of output (redacted; the agent's words, shown inert)."""


class TaskStatus(_Record):
    """The ``status`` query."""

    task_id: str
    state: TaskState
    phase: Phase | None = None
    attempt: int = 0
    waiting_for: str = ""
    reason: str = ""
    budget: BudgetStatus
    last_verdict: str = ""
    agent: str = ""
    """What went wrong with the last attempt's agent run ("" when nothing did)."""
    retried: int = 0
    """Attempts whose make step had to run again (a worker died, or a try failed)."""
    host: str = ""
    """The host that holds the task's worktree ("" before it has one)."""
    commit: str = ""
    """While the task waits for approval: the commit an approval approves."""
    waiting_since: str = ""
    """While the task waits for a person: since when (ISO 8601)."""
    candidates: list[CandidateView] = Field(default_factory=list)
    """A task with candidates: each one, in the task file's order."""
    as_of: str = ""
    """The workflow's time the figures are as of (its last step, not the query's
    moment): a reader adds what passed since while ``ticking``."""
    ticking: bool = False
    """Whether the wall-clock budget runs now (an active segment, not a wait)."""
    attempt_started: str = ""
    """When the current attempt began (ISO 8601), while it runs."""
    progress: Progress | None = None
    """The running attempt's progress: filled by the reader from the running step's
    heartbeat (``loop.tasks.with_progress``); the query itself leaves it empty."""
