"""The commands that answer a waiting task, in the words of the CLI: one place for the
inbox, the status line and escalation messages."""

from __future__ import annotations

from loop.contracts import WAITING_APPROVAL, WAITING_DECISION


def answer_with(task_id: str, waiting_for: str) -> str:
    """The commands that answer a waiting task (CLI inbox and escalation messages)."""
    if waiting_for == WAITING_APPROVAL:
        return f"loop approve {task_id}  |  loop reject {task_id} --reason …"
    if waiting_for == WAITING_DECISION:
        return (
            f"loop feedback {task_id} '…'  |  loop extend {task_id} --attempts 1  |  "
            f"loop reject {task_id} --reason …"
        )
    return ""
