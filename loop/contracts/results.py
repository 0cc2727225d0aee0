"""What a task returns and keeps in its trace."""

from pydantic import Field

from loop.contracts.base import _Record
from loop.contracts.evidence import Feedback, GateResult, Verdict
from loop.contracts.states import FinalAction, TaskState
from loop.contracts.steps import MakeResult, Workspace


class Usage(_Record):
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0


class AttemptRecord(_Record):
    attempt: int
    make: MakeResult | None = None
    verdict: Verdict | None = None
    fingerprint: str = ""
    feedback: Feedback | None = None
    """The feedback this attempt was given (None on attempt 1)."""
    usage: Usage = Field(default_factory=Usage)


class TraceEvent(_Record):
    at: str
    kind: str
    detail: str = ""


class Escalation(_Record):
    at: str
    reason: str
    waiting_for: str
    resolved_by: str = ""


class CandidateRecord(_Record):
    """One candidate of a task with candidates: what a candidate's workflow returns, and
    what the task's trace keeps of it (docs/concepts/candidates.md)."""

    name: str
    agent: str = ""
    """Its agent in a few words (the command's program, or the model)."""
    state: TaskState = TaskState.RUNNING
    """DONE_WITH_EVIDENCE once its verdict passed; how it stopped otherwise (BLOCKED,
    NEEDS_HUMAN, BUDGET_EXCEEDED, CANCELLED); RUNNING while it runs."""
    reason: str = ""
    budget: bool = False
    """It stopped on a spent budget or a stall."""
    attempts: list[AttemptRecord] = Field(default_factory=list)
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    workspace: Workspace | None = None
    commit: str = ""
    """Its last attempt's commit: the verified one where it passed."""
    changed_lines: int = 0
    """Lines its verified commit changes against base."""
    rank: int = 0
    """Its place in the choice (1: chosen); 0 before the choice, or when it is not ranked
    (stopped by another's pass)."""
    chosen: bool = False
    workflow_id: str = ""
    execution_seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.state == TaskState.DONE_WITH_EVIDENCE


class TaskResult(_Record):
    """The workflow's result, the ``trace`` query, and ``LOOP_HOME/runs/<id>.json``."""

    task_id: str
    state: TaskState
    reason: str = ""
    attempts: list[AttemptRecord] = Field(default_factory=list)
    evidence: list[GateResult] = Field(default_factory=list)
    branch: str = ""
    commit: str = ""
    worktree: str = ""
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    execution_seconds: float = 0.0
    human_escalation: list[Escalation] = Field(default_factory=list)
    final_action: FinalAction = FinalAction.NONE
    spec_hash: str = ""
    events: list[TraceEvent] = Field(default_factory=list)
    explore_brief: str = ""
    trace_path: str = ""
    notes_path: str = ""
    host: str = ""
    """The host that holds (or last held) the worktree."""
    candidates: list[CandidateRecord] = Field(default_factory=list)
    """A task with candidates: each one, with its attempts (the chosen one's are also
    ``attempts``); tokens, cost and tool calls above are all of theirs together."""
    chosen: str = ""
    """The candidate kept."""
    choice: str = ""
    """Why that one: the rule that chose it and how the others compared."""


class SummarizeInput(_Record):
    result: TaskResult
    goal: str
    repo: str


class SummarizeResult(_Record):
    trace_path: str
    notes_path: str
