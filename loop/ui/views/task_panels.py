"""The rest of a task's page: its candidates side by side, the answers that apply now,
the running attempt's progress line, its escalations and events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from loop.contracts import TaskResult, TaskStatus
from loop.rules import progress
from loop.rules.answers import answer_with, applies, waiting_words
from loop.rules.record import spent
from loop.tasks import ANSWERS
from loop.ui.views.timeline import GateRow, gate_row


@dataclass
class CandidateRow:
    """One candidate of a task with candidates, side by side with the others."""

    name: str
    agent: str
    state: str
    attempts: int
    spent: str
    verdict: str
    gates: list[GateRow]
    changed_lines: int
    branch: str
    commit: str
    chosen: bool
    rank: int
    reason: str
    approvable: bool
    """It waits for an approval that names it (``choose: person``)."""
    logs: str
    """Its own log folder's id (``<id>+<name>``): its attempts' logs are there."""


def candidate_rows(result: TaskResult, st: TaskStatus | None) -> list[CandidateRow]:
    """Each candidate with its evidence and cost; those an approval may name now marked."""
    waiting = {c.name: c.commit for c in st.candidates if c.commit} if st is not None else {}
    choosing = st is not None and applies("approve", st.state, st.waiting_for) and not st.commit
    live = {c.name: c for c in st.candidates if c.phase} if st is not None else {}
    rows = []
    for c in result.candidates:
        verdict = c.attempts[-1].verdict if c.attempts else None
        now = live.get(c.name)  # a running one's own figures so far
        said = verdict.summary() if verdict is not None else ""
        used = (now.tokens, now.cost_usd, 0) if now else (c.tokens, c.cost_usd, c.tool_calls)
        rows.append(
            CandidateRow(
                name=c.name,
                agent=c.agent,
                state=f"{c.state} ({now.phase})" if now else str(c.state),
                attempts=now.attempt if now else len(c.attempts),
                spent=spent(*used) or "nothing metered",
                verdict=now.last_verdict if now else said,
                gates=[gate_row(g) for g in verdict.gates] if verdict is not None else [],
                changed_lines=c.changed_lines,
                branch=c.workspace.branch if c.workspace is not None else "",
                commit=waiting.get(c.name, c.commit if c.passed else ""),
                chosen=c.chosen,
                rank=c.rank,
                reason=c.reason,
                approvable=choosing and c.name in waiting,
                logs=c.workflow_id.removeprefix("task-"),
            )
        )
    return rows


@dataclass
class EscalationRow:
    at: str
    reason: str
    waiting_for: str
    resolved_by: str


@dataclass
class EventRow:
    at: str
    kind: str
    detail: str
    decision: bool
    """A person's answer (``signal``) or one that did not apply (``signal-ignored``)."""


@dataclass
class Decisions:
    """The answers that apply now (the same rule as ``loop approve``/``reject``/...)."""

    approve: bool = False
    reject: bool = False
    feedback: bool = False
    extend: bool = False
    hint: str = ""
    """The equivalent CLI commands."""
    commit: str = ""
    """The commit the approve form approves (the one the task waits with)."""

    @property
    def any(self) -> bool:
        return self.approve or self.reject or self.feedback or self.extend

    @property
    def key(self) -> str:
        """Which forms are shown: the page replaces them only when this changes."""
        names = ("approve", "reject", "feedback", "extend")
        shown = ",".join(n for n in names if getattr(self, n)) or "none"
        return f"{shown}@{self.commit}" if self.commit else shown


def decisions(st: TaskStatus | None) -> Decisions:
    if st is None:
        return Decisions()
    return Decisions(
        **{what: applies(name, st.state, st.waiting_for) for what, name in ANSWERS.items()},
        hint=answer_with(st.task_id, st.waiting_for),
        commit=st.commit,
    )


@dataclass
class Running:
    """The running attempt's agent, as far as its last heartbeat says (its time by the
    page's clock): the page's progress line, refreshed with the other live parts."""

    attempt: int
    seconds: float
    tokens: int
    cost_usd: float
    calls: int
    metered: bool
    last_line: str
    """The agent's words: the template escapes them."""


def running(st: TaskStatus, now: datetime) -> Running | None:
    p = st.progress
    if p is None:
        return None
    seconds = progress.attempt_seconds(st, now) or 0.0
    return Running(
        attempt=p.attempt,
        seconds=round(seconds, 1),
        tokens=p.tokens,
        cost_usd=p.cost_usd,
        calls=p.calls,
        metered=p.metered,
        last_line=p.last_line,
    )


def escalations(result: TaskResult) -> list[EscalationRow]:
    return [
        EscalationRow(e.at, e.reason, waiting_words(e.waiting_for), e.resolved_by or "waiting")
        for e in result.human_escalation
    ]


def events(result: TaskResult) -> list[EventRow]:
    return [
        EventRow(e.at, e.kind, e.detail, e.kind in ("signal", "signal-ignored"))
        for e in result.events
    ]
