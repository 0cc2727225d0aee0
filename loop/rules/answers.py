"""When a person's answer applies to a task, and the commands that answer a waiting task.

``applies`` is the one statement of the rule: the workflow's update validators refuse
by it (before anything is written to history) and its signal handlers follow it, and
the review page shows the forms it allows; no client checks it before it answers.
A waiting task records what it waits for by the answers it takes (``approve/reject``):
``waiting_words`` and ``answer_with`` say that to a person, as what they give and the
commands that give it.
"""

from __future__ import annotations

import re

from loop.contracts import (
    SIGNAL_APPROVE,
    SIGNAL_EXTEND_BUDGET,
    SIGNAL_FEEDBACK,
    SIGNAL_PULL_REQUEST_CLOSED,
    SIGNAL_REJECT,
    WAITING_APPROVAL,
    WAITING_DECISION,
    WAITING_PULL_REQUEST,
    ExtendBudgetSignal,
    TaskState,
)


def applies(answer: str, state: TaskState, waiting_for: str) -> bool:
    """``approve`` while the task waits for approval (or for a merge a person fixed);
    ``reject`` while it waits for a person at all (not once it has ended, even
    ``NEEDS_HUMAN``); ``feedback`` and ``extend_budget`` while it runs or waits for a
    decision; ``feedback`` (a review) and ``pull_request_closed`` while its pull request
    is open on GitHub."""
    if answer == SIGNAL_APPROVE:
        return waiting_for == WAITING_APPROVAL
    if answer == SIGNAL_REJECT:
        return bool(waiting_for)
    if answer == SIGNAL_PULL_REQUEST_CLOSED:
        return waiting_for == WAITING_PULL_REQUEST
    if answer == SIGNAL_FEEDBACK and waiting_for == WAITING_PULL_REQUEST:
        return True
    if answer in (SIGNAL_FEEDBACK, SIGNAL_EXTEND_BUDGET):
        return state == TaskState.RUNNING or waiting_for == WAITING_DECISION
    raise ValueError(f"unknown answer {answer!r}")


def refusal(task_id: str, answer: str, state: TaskState, waiting_for: str) -> str:
    """Why ``answer`` does not apply to the task now, in one line; "" when it does."""
    if applies(answer, state, waiting_for):
        return ""
    if state != TaskState.RUNNING and not waiting_for:
        return f"task {task_id} has ended {state}; {answer} does not apply"
    waiting = f", waiting for {waiting_words(waiting_for)}" if waiting_for else ""
    return f"task {task_id} is {state}{waiting}; {answer} does not apply now"


MIN_COMMIT = 7
"""Characters of a commit an approval may name it by (git's own short form)."""


def unapproved(task_id: str, named: str, waiting: str) -> str:
    """Why an approval naming commit ``named`` does not approve ``waiting``, the commit
    the task waits with, in one line; "" when it does. Naming none (a hand-typed signal)
    approves the one waiting."""
    if not named:
        return ""
    wanted = named.strip().lower()
    if not re.fullmatch(rf"[0-9a-f]{{{MIN_COMMIT},64}}", wanted):
        return f"{named[:40]!r} is not a commit (name at least {MIN_COMMIT} hex digits of one)"
    if waiting and waiting.startswith(wanted):
        return ""
    return (
        f"task {task_id} waits for approval of commit {waiting[:12] or '(none)'}, not "
        f"{wanted[:12]}; look at it again (loop status {task_id}) and approve what it shows"
    )


def chosen(task_id: str, candidate: str, commit: str, waiting: dict[str, str]) -> tuple[str, str]:
    """Which of the candidates ``waiting`` (name -> its commit) an approval approves, and
    "", or "" and why it approves none: the one it names (whose commit must be the one it
    names, if it names one), else the one whose commit it names, else the only one."""
    names = ", ".join(waiting)
    if candidate:
        if candidate not in waiting:
            return "", f"task {task_id} has no candidate {candidate[:40]!r} waiting ({names})"
        return candidate, unapproved(task_id, commit, waiting[candidate])
    if commit:
        wanted = commit.strip().lower()
        found = [
            n for n, c in waiting.items() if len(wanted) >= MIN_COMMIT and c.startswith(wanted)
        ]
        if not found:
            return "", unapproved(task_id, commit, "")
        if len(found) > 1:
            return "", f"commit {wanted[:12]} is more than one candidate's; name one"
        return found[0], ""
    if len(waiting) == 1:
        return next(iter(waiting)), ""
    return "", (
        f"task {task_id} has {len(waiting)} candidates waiting ({names}); approve one: "
        f"loop approve {task_id} --candidate NAME"
    )


def extension(payload: ExtendBudgetSignal) -> str:
    """What an ``extend_budget`` asks for, as a person reads it: ``+1 attempt, +600 s``."""
    parts = [
        f"+{payload.attempts} attempt" + ("s" if payload.attempts != 1 else "")
        if payload.attempts
        else "",
        f"+{payload.seconds} s" if payload.seconds else "",
        f"+{payload.tokens} tokens" if payload.tokens else "",
        f"+${payload.cost_usd:g}" if payload.cost_usd else "",
    ]
    return ", ".join(p for p in parts if p) or "nothing added"


def waiting_words(waiting_for: str) -> str:
    """What a waiting task needs from a person, named by the commands that give it."""
    if waiting_for == WAITING_APPROVAL:
        return "approval (loop approve, or loop reject)"
    if waiting_for == WAITING_DECISION:
        return "a decision (loop feedback, loop extend, or loop reject)"
    if waiting_for == WAITING_PULL_REQUEST:
        return (
            "its pull request merged or closed on GitHub, or a review "
            "(loop feedback, or loop reject)"
        )
    return waiting_for


def answer_with(task_id: str, waiting_for: str) -> str:
    """The commands that answer a waiting task (CLI inbox and escalation messages)."""
    if waiting_for == WAITING_APPROVAL:
        return f"loop approve {task_id}  |  loop reject {task_id} --reason …"
    if waiting_for == WAITING_DECISION:
        return (
            f"loop feedback {task_id} '…'  |  loop extend {task_id} --attempts 1  |  "
            f"loop reject {task_id} --reason …"
        )
    if waiting_for == WAITING_PULL_REQUEST:
        return f"loop feedback {task_id} '…'  |  loop reject {task_id} --reason …"
    return ""
