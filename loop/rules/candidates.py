"""A task's candidates, as rules: who they are, the task each one runs, how they rank,
and what the choice says (docs/concepts/candidates.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from loop.contracts import (
    CANDIDATE_MARK,
    AgentSpec,
    CandidateRecord,
    CandidateView,
    TaskSpec,
    TaskState,
)
from loop.rules.clis import usage_source


def members(spec: TaskSpec) -> list[tuple[str, AgentSpec]]:
    """Each candidate's name and agent, in the task file's order."""
    given = spec.candidates
    if given is None:
        return []
    if isinstance(given, int):
        return [(f"c{i}", spec.agent) for i in range(1, given + 1)]
    return [(c.name or f"c{i}", c.agent) for i, c in enumerate(given, 1)]


def candidate_id(task_id: str, name: str) -> str:
    """The candidate's own id: its workflow ``task-<id>+<name>``, its worktree, its uid."""
    return f"{task_id}{CANDIDATE_MARK}{name}"


def task_of(candidate: str) -> str:
    """The task a candidate's id belongs to (a task's own id is its own)."""
    return candidate.partition(CANDIDATE_MARK)[0]


def name_of(candidate: str) -> str:
    """A candidate's name, from its id (``fix+c2``: ``c2``; "" for a task's own id)."""
    return candidate.partition(CANDIDATE_MARK)[2]


def member_spec(
    spec: TaskSpec,
    name: str,
    agent: AgentSpec,
    *,
    max_attempts: int,
    max_tokens: int | None,
    max_cost_usd: float | None,
) -> TaskSpec:
    """The task a candidate runs: the task's goal, gates and sandbox with its own agent and
    id. Its attempts stop at a verdict; the task keeps the wall clock, finalizes, posts and
    comments, so none of that is the candidate's."""
    budget = spec.budget.model_copy(
        update={
            "max_attempts": max_attempts,
            "max_seconds": None,
            "max_tokens": max_tokens,
            "max_cost_usd": max_cost_usd,
        }
    )
    return spec.model_copy(
        update={
            "id": candidate_id(spec.id, name),
            "agent": agent,
            "budget": budget,
            "candidates": None,
            "max_parallel": None,
            "choose": "first",
            "keep_candidates": False,
            "github_issue": None,
        }
    )


def agent_words(agent: AgentSpec) -> str:
    """A candidate's agent in a few words: a known CLI by its name, else the command's
    program (and the script it runs), or the model it drives."""
    if agent.backend == "openai":
        return f"openai {agent.model}"
    argv = agent.command or []
    known = usage_source(argv, agent.usage)
    said = known if known not in ("none", "file", "auto") else ""
    said = said or " ".join(os.path.basename(a) for a in argv[:2])
    return f"{said} ({agent.model})" if agent.model else said


def ranked(records: list[CandidateRecord]) -> list[CandidateRecord]:
    """``choose: best``: passed first, then fewer changed lines, then lower cost; ties by
    name. Those that did not pass follow, by cost and name."""

    def key(r: CandidateRecord) -> tuple[bool, int, float, str]:
        return (not r.passed, r.changed_lines if r.passed else 0, round(r.cost_usd, 6), r.name)

    return sorted(records, key=key)


def _said(r: CandidateRecord) -> str:
    if r.passed:
        return f"passed, {r.changed_lines} changed lines, ${r.cost_usd:.4f}"
    if r.state == TaskState.RUNNING:
        return f"stopped at attempt {len(r.attempts) or 1}"
    if r.state == TaskState.CANCELLED:
        return "stopped" + (f" ({r.reason})" if r.reason else "")
    return f"{r.state}: {r.reason}" if r.reason else str(r.state)


def why_first(winner: CandidateRecord, others: list[CandidateRecord]) -> str:
    """``choose: first``: the winner, and what became of the others."""
    passed = winner.attempts[-1].attempt if winner.attempts else 0
    head = f"{winner.name}: the first whose verdict passed (attempt {passed})"
    rest = "; ".join(f"{r.name}: {_said(r)}" for r in others)
    return f"{head}; {rest}" if rest else head


def why_best(order: list[CandidateRecord]) -> str:
    """``choose: best``: the order and what each came to."""
    head, *rest = order
    said = f"{head.name}: ranked first ({_said(head)})"
    if rest:
        said += "; then " + "; ".join(f"{r.name}: {_said(r)}" for r in rest)
    return said


def why_person(name: str, by: str, waiting: list[str]) -> str:
    others = [n for n in waiting if n != name]
    of = f" over {', '.join(others)}" if others else ""
    return f"{name}: approved by a person{by}{of}"


@dataclass(frozen=True)
class Outcome:
    """Why no candidate's verdict passed: the task's own stop."""

    state: TaskState
    reason: str
    budget: bool


def none_passed(records: list[CandidateRecord]) -> Outcome:
    """Every candidate blocked: the task is BLOCKED; else it waits for a person, for a
    spent budget (each that did not block stopped on one) or for a decision."""
    said = "; ".join(f"{r.name}: {_said(r)}" for r in records)
    reason = f"no candidate passed: {said}"
    live = [r for r in records if r.state != TaskState.BLOCKED]
    if not live:
        return Outcome(TaskState.BLOCKED, reason, False)
    return Outcome(TaskState.NEEDS_HUMAN, reason, all(r.budget for r in live))


def continuing(records: list[CandidateRecord]) -> list[CandidateRecord]:
    """Who gets another round after a person's answer: every candidate not blocked."""
    return [r for r in records if r.state != TaskState.BLOCKED]


def view(r: CandidateRecord, waiting: str = "") -> CandidateView:
    """A candidate as the task's status shows it; ``waiting``: its commit, while it waits
    for an approval (``choose: person``)."""
    verdict = r.attempts[-1].verdict if r.attempts else None
    return CandidateView(
        name=r.name,
        agent=r.agent,
        state=r.state,
        reason=r.reason,
        attempt=len(r.attempts),
        tokens=r.tokens,
        cost_usd=round(r.cost_usd, 6),
        last_verdict=verdict.summary() if verdict is not None else "",
        branch=r.workspace.branch if r.workspace is not None else "",
        commit=waiting or (r.commit if r.passed else ""),
        changed_lines=r.changed_lines,
        chosen=r.chosen,
        rank=r.rank,
        workflow_id=r.workflow_id,
    )
