"""What a task returns and keeps in its trace."""

from pydantic import Field

from loop.contracts.base import _Record
from loop.contracts.evidence import Feedback, GateResult, Verdict
from loop.contracts.states import FinalAction, TaskState
from loop.contracts.steps import MakeResult


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


class SummarizeInput(_Record):
    result: TaskResult
    goal: str
    repo: str


class SummarizeResult(_Record):
    trace_path: str
    notes_path: str
