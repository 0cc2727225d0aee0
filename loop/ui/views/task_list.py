"""The task list: each task's row, those waiting for a person first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from loop.contracts import TaskState, TaskStatus
from loop.rules.answers import waiting_words

WAITING = frozenset({TaskState.AWAITING_APPROVAL, TaskState.NEEDS_HUMAN})
STATES = [s.value for s in TaskState]


@dataclass
class Listing:
    """One task as the visibility list and (for an open task) its status query see it."""

    task_id: str
    state: str
    """``LoopState``, or the workflow's own status when it closed some other way."""
    open: bool
    attempts: int = 0
    cost_usd: float = 0.0
    repo: str = ""
    started: datetime | None = None
    goal: str = ""
    status: TaskStatus | None = None
    """The ``status`` query of an open task (None when closed or it did not answer)."""
    max_attempts: int | None = None
    """The task file's limit, for a closed task (an open one's is in its status)."""
    sealed: str = ""
    """Why its payloads (goal, status, task file) cannot be read here: encrypted, and
    this page has no key or another one (the codec's message names the variable)."""
    reason: str = ""
    """The one line its state has (BLOCKED, NEEDS_HUMAN, BUDGET_EXCEEDED...), from the
    memo: read for an ended task too, without asking it."""


@dataclass
class TaskRow:
    task_id: str
    state: str
    phase: str
    attempt: str
    """``2 of 3`` (``2`` when the limit is unknown)."""
    repo: str
    cost: str
    age: str
    waits_for: str
    """A person (with what answers it), the worker (doing what), or nothing (ended)."""
    waiting: bool
    goal: str
    reason: str = ""
    sealed: str = ""
    """Why its goal and status are not shown (``Listing.sealed``)."""


def age(seconds: float) -> str:
    """``12 s``, ``5 min``, ``3 h``, ``2 d``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h"
    return f"{s // 86400} d"


def money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def _rank(row: TaskRow) -> int:
    if row.waiting:
        return 0
    return 1 if row.state == TaskState.RUNNING else 2


def task_rows(listings: list[Listing], now: datetime) -> list[TaskRow]:
    """Tasks waiting for a person first, then running ones, then ended; newest first."""
    rows = []
    ordered = sorted(listings, key=lambda x: x.started or datetime.min.replace(tzinfo=now.tzinfo))
    for x in reversed(ordered):
        st = x.status
        state = str(st.state) if st else x.state
        attempt = st.attempt if st else x.attempts
        limit = x.max_attempts
        if st and st.budget.left.attempts is not None:
            limit = (st.budget.used.attempts or 0) + st.budget.left.attempts
        waits_for, reason = "", ""
        if st and st.waiting_for:
            waits_for = f"a person: {waiting_words(st.waiting_for)}"
            reason = st.reason
        elif x.sealed and x.open:  # the search attributes are clear: its state is known
            waits_for = "a person" if state in WAITING else "the worker"
        elif x.open and st is None:
            waits_for = "a worker (no answer to the status query)"
        elif x.open and state == TaskState.RUNNING:
            waits_for = f"the worker ({st.phase})" if st.phase else "the worker"
        if not reason and state != TaskState.RUNNING:
            reason = x.reason
        rows.append(
            TaskRow(
                task_id=x.task_id,
                state=state,
                phase=str(st.phase) if st and st.phase else "",
                attempt=f"{attempt} of {limit}" if limit else str(attempt),
                repo=x.repo,
                cost=money(x.cost_usd),
                age=age((now - x.started).total_seconds()) if x.started else "",
                waits_for=waits_for,
                waiting=x.open and state in WAITING,
                goal=first_line(x.goal),
                reason=reason,
                sealed=x.sealed,
            )
        )
    return sorted(rows, key=_rank)


def sealed_note(rows: list[TaskRow]) -> str:
    """One line over the list when some tasks cannot be read here: how many, and the
    codec's reason (which names LOOP_CODEC_KEY_FILE)."""
    reasons = sorted({r.sealed for r in rows if r.sealed})
    if not reasons:
        return ""
    n = sum(1 for r in rows if r.sealed)
    tasks = "1 task is" if n == 1 else f"{n} tasks are"
    return f"{tasks} encrypted; their goal and status are not shown: " + "; ".join(
        reason.removeprefix("the payloads are encrypted: ") for reason in reasons
    )


def first_line(text: str, limit: int = 120) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"
