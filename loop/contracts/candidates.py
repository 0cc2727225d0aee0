"""A task's candidates: what each one's workflow is given, and the steps that stop and
close them (docs/concepts/candidates.md)."""

from pydantic import Field

from loop.contracts.base import _Record
from loop.contracts.results import CandidateRecord, Usage
from loop.contracts.steps import ExploreResult, SharedBudget, Workspace
from loop.contracts.task import TaskSpec


class CandidateInput(_Record):
    """One candidate's workflow (``task-<id>+<name>``): the attempt loop of its own agent
    in its own worktree, up to a verdict that passes or a reason to stop."""

    spec: TaskSpec
    """The candidate's task: its id ``<id>+<name>``, its agent, the task's gates."""
    name: str
    workspace: Workspace | None = None
    """Its worktree, where it has one already (the first candidate's, explored there; or
    its own from an earlier round)."""
    host: Workspace | None = None
    """Where its worktree is made when it has none: the first candidate's host, whose
    pool holds the task's budget."""
    explored: ExploreResult | None = None
    """The task's exploration, made once in the first candidate's worktree."""
    before: CandidateRecord | None = None
    """What it did in the task's earlier rounds (a person answered in between)."""
    human_feedback: list[str] = Field(default_factory=list)
    shared: SharedBudget | None = None


class StopCandidatesInput(_Record):
    """One candidate was chosen: every other one's model calls are refused from now on."""

    key: str
    """The task's pool (``SharedBudget.key``)."""
    chosen: str


class StopCandidatesResult(_Record):
    stopped: bool = True


class CloseCandidateInput(_Record):
    """A candidate at its task's end: its uid given back, its worktree removed, its
    branch kept or deleted."""

    workspace: Workspace
    keep_branch: bool = False
    """Leave ``loop/<id>/<name>`` in the repository, with its last commit."""
    keep_worktree: bool = False
    """Leave the worktree (the chosen candidate's: the task's finalize decided on it)."""
    key: str = ""
    """The task's pool, to read what this candidate spent there."""
    last: bool = False
    """The task's last candidate closed on this host: the pool goes too."""


class CloseCandidateResult(_Record):
    removed: bool = False
    branch: str = ""
    """What became of its branch, in a few words."""
    spent: Usage = Field(default_factory=Usage)
    """What the pool counted for it (every model call the gateway forwarded, and each
    attempt's report): a cancelled attempt's calls included."""
