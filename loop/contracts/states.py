"""The named states a task moves through and ends in."""

from enum import StrEnum


class TaskState(StrEnum):
    RUNNING = "RUNNING"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    NEEDS_HUMAN = "NEEDS_HUMAN"
    DONE_WITH_EVIDENCE = "DONE_WITH_EVIDENCE"
    BLOCKED = "BLOCKED"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    REJECTED = "REJECTED"
    CANCELLED = "CANCELLED"

    @property
    def waiting(self) -> bool:
        return self in (TaskState.AWAITING_APPROVAL, TaskState.NEEDS_HUMAN)


class Phase(StrEnum):
    EXPLORE = "explore"
    MAKE = "make"
    VERIFY = "verify"
    FINALIZE = "finalize"
    SUMMARIZE = "summarize"


class FinalAction(StrEnum):
    NONE = "none"
    LEFT_IN_WORKTREE = "left_in_worktree"
    BRANCH_READY = "branch_ready"
    MERGED = "merged"
    PULL_REQUEST = "pull_request"
    MERGED_BY_PERSON = "merged_by_person"
    """The task's pull request was merged on GitHub by a person."""
