"""What a task with candidates knows of them across its rounds (``workflows.candidates``
runs them; the task's record shows them: docs/concepts/candidates.md)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.workflow import ChildWorkflowHandle

with workflow.unsafe.imports_passed_through():
    from loop.contracts import (
        AgentSpec,
        CandidateRecord,
        CandidateView,
        ExploreResult,
        Workspace,
    )
    from loop.rules import candidates as rules


@dataclass
class Choice:
    """A task's candidates as the task knows them, across its rounds."""

    agents: dict[str, AgentSpec]
    """Each candidate's agent, by name, in the task file's order."""
    key: str
    """The task's pool on its candidates' host (``SharedBudget.key``)."""
    records: dict[str, CandidateRecord] = field(default_factory=dict)
    host: Workspace | None = None
    """The first candidate's worktree: every other one is made on its host."""
    explored: ExploreResult | None = None
    running: dict[str, ChildWorkflowHandle[object, CandidateRecord]] = field(default_factory=dict)
    granted: int = 0
    """The task's ``max_attempts`` when the last round started: what a later one adds."""
    chosen: str = ""
    why: str = ""
    waiting: dict[str, str] = field(default_factory=dict)
    """``choose: person``: each passing candidate's commit, while the task waits."""
    approved: str = ""
    """The candidate a person approved: the task's finalize merges it without asking again."""
    kept: bool = False
    """Every passing candidate's branch stays (no one was chosen in time)."""
    collecting: asyncio.Task[None] | None = None
    """The stopped candidates' records, taken as their workflows end."""

    def views(self) -> list[CandidateView]:
        return [rules.view(r, self.waiting.get(r.name, "")) for r in self.records.values()]
