"""Harness evaluation: suites, harnesses, and the comparison they produce."""

from typing import Self

from pydantic import Field, field_validator, model_validator

from loop.contracts.base import MAX_GOAL_CHARS, TASK_ID_PATTERN, _Record, _TaskFileModel
from loop.contracts.gates import Gate
from loop.contracts.states import TaskState
from loop.contracts.task import AgentSpec, Budget, EnvironmentSpec, auto_environment

HARNESS_FORBIDDEN = ("verify", "gates", "rubric", "llm_review", "cases", "goal", "repo")


class Harness(_TaskFileModel):
    """What an eval compares: model, prompt additions, agent and budgets; never the checks."""

    name: str = Field(pattern=TASK_ID_PATTERN)
    """Names the harness in the comparison and in its cases' task ids."""
    agent: AgentSpec
    """The agent its cases run, as in a task file."""
    budget: Budget = Field(default_factory=Budget)
    """The budget of each case's task."""
    instructions: str = ""
    """Prompt additions, shown to the agent after the goal."""

    @model_validator(mode="before")
    @classmethod
    def _no_checks(cls, data: object) -> object:
        if isinstance(data, dict):
            touched = sorted(k for k in data if k in HARNESS_FORBIDDEN)
            if touched:
                raise ValueError(
                    f"a harness may not change the gates, rubric or cases (found: "
                    f"{', '.join(touched)})"
                )
        return data


class EvalCase(_TaskFileModel):
    """A repository at a commit, a goal and fixed gates."""

    id: str = Field(pattern=TASK_ID_PATTERN)
    """Names the case in the comparison and in its task ids."""
    goal: str = Field(min_length=1, max_length=MAX_GOAL_CHARS)
    """What must be true when done, as in a task file."""
    repo: str | None = None
    """A git repository (relative to the suite file); with ``commit``."""
    commit: str | None = None
    """The commit the case starts from (with ``repo``)."""
    source: str | None = None
    """A plain folder snapshotted into a repository with a deterministic commit."""
    verify: list[Gate] = Field(min_length=1)
    """The case's gates, fixed: no harness can change them."""
    environment: EnvironmentSpec | None = None
    """The repository's own environment, as in a task file (``auto`` too): every harness's
    task on the case takes the same one, built once per host."""

    @field_validator("environment", mode="before")
    @classmethod
    def _auto(cls, value: object) -> object:
        return auto_environment(value)

    @model_validator(mode="after")
    def _one_origin(self) -> Self:
        if (self.repo is None) == (self.source is None):
            raise ValueError("a case needs exactly one of repo (with commit) or source")
        if self.repo is not None and not self.commit:
            raise ValueError("a case with repo needs the commit it starts from")
        return self


class Suite(_TaskFileModel):
    name: str = Field(pattern=TASK_ID_PATTERN)
    """Names the suite in the results and under ``LOOP_HOME/eval/``."""
    cases: list[EvalCase] = Field(min_length=1)
    """The regression set."""
    max_parallel: int = Field(default=4, ge=1, le=64)
    """Cases that run at once."""
    approval_timeout: int = Field(default=1, ge=1)
    """How long an escalated case waits before it counts as not accepted."""


class EvalInput(_Record):
    suite: Suite
    """Resolved: every case has an absolute repo and a commit."""
    harnesses: list[Harness] = Field(min_length=1)
    suite_hash: str
    run: str
    """Distinguishes this eval's task ids from earlier runs'."""


class CaseOutcome(_Record):
    harness: str
    case: str
    task_id: str
    state: TaskState
    accepted: bool
    attempts: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    escalations: int = 0
    seconds: float = 0.0


class HarnessSummary(_Record):
    harness: str
    cases: int
    accepted: int
    pass_rate: float
    mean_attempts: float
    tokens: int
    cost_usd: float
    cost_per_accepted: float | None
    """Total cost divided by accepted tasks; None when none was accepted."""
    escalations: int
    seconds: float


class Flip(_Record):
    case: str
    before: TaskState
    after: TaskState


class EvalReport(_Record):
    suite: str
    suite_hash: str
    run: str
    harnesses: list[HarnessSummary]
    outcomes: list[CaseOutcome]
    flipped: list[Flip] = Field(default_factory=list)
    """Cases accepted under one harness and not the other (first vs second)."""
    results_path: str = ""


class WriteEvalResult(_Record):
    path: str
