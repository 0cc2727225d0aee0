"""Signals, queries and the status a person reads."""

from __future__ import annotations

from pydantic import Field

from loop.contracts.base import _Payload, _Record
from loop.contracts.states import Phase, TaskState


class ApproveSignal(_Payload):
    note: str = ""
    by: str = ""
    """Who decided (the CLI's local user, the review page's token name); for the trace."""


class RejectSignal(_Payload):
    reason: str = ""
    by: str = ""


class FeedbackSignal(_Payload):
    text: str = Field(min_length=1)
    by: str = ""


class ExtendBudgetSignal(_Payload):
    attempts: int = Field(default=0, ge=0)
    seconds: int = Field(default=0, ge=0)
    tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0)
    by: str = ""


class BudgetFigures(_Record):
    attempts: int | None = None
    seconds: float | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    tool_calls: int | None = None


class BudgetStatus(_Record):
    used: BudgetFigures
    left: BudgetFigures


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
