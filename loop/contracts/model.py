"""The model loop's contracts: AgentWorkflow's input and result, its steps."""

from typing import Literal

from pydantic import Field

from loop.contracts.base import _Record
from loop.contracts.evidence import GateResult
from loop.contracts.gates import LlmReviewGate
from loop.contracts.results import Usage
from loop.contracts.steps import AgentLimits, SharedBudget, Workspace
from loop.contracts.task import SandboxPolicy, TaskSpec, ToolPolicy


class AgentInput(_Record):
    """AgentWorkflow's input; ``step`` and ``usage`` carry over a continue-as-new."""

    task: TaskSpec
    workspace: Workspace
    attempt: int
    limits: AgentLimits = Field(default_factory=AgentLimits)
    step: int = 0
    usage: Usage = Field(default_factory=lambda: Usage())


class AgentResult(_Record):
    ended: Literal["finish", "no_tool_calls", "max_steps", "budget", "policy_violation", "timeout"]
    reason: str = ""
    answer: str = ""
    steps: int = 0
    usage: Usage = Field(default_factory=lambda: Usage())
    policy_violation: str = ""
    attempt_dir: str = ""
    stopped: str = ""
    """Set when the task's pool refused a call (a candidate's: the task's budget spent by
    its candidates, or another chosen): the attempt has nothing to judge."""


class ToolCallRef(_Record):
    """One tool call of a model step; its arguments stay in the step's artifact file."""

    index: int
    id: str
    name: str


class ModelStepInput(_Record):
    task_id: str
    attempt: int
    step: int
    attempt_dir: str
    """Holds prompt.md and the step artifacts the conversation is rebuilt from."""
    model: str
    base_url: str | None = None
    max_tokens: int
    """This call's output cap: the agent's per-call limit, lowered to the budget left."""
    shared: SharedBudget | None = None
    """The task's budget across its candidates, where the attempt is a candidate's."""


class ModelStepResult(_Record):
    step: int
    tool_calls: list[ToolCallRef] = Field(default_factory=list)
    content: str = ""
    """The assistant's text, cut to a preview (the whole is in the artifact)."""
    finish_reason: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    artifact: str = ""
    artifact_sha256: str = ""
    refused: str = ""
    """The task's pool refused the call (``shared``): nothing was sent."""


class ToolStepInput(_Record):
    task_id: str
    attempt: int
    step: int
    call: ToolCallRef
    attempt_dir: str
    workspace: Workspace
    policy: ToolPolicy
    protected: list[str] = Field(default_factory=list)
    sandbox: SandboxPolicy = Field(default_factory=SandboxPolicy)
    """The task's sandbox, for the ``run`` tool."""
    base_url: str | None = None
    """The agent's model endpoint: the egress proxy lets the ``run`` tool reach it."""


class ToolStepResult(_Record):
    name: str
    ok: bool
    error: str = ""
    policy_violation: str = ""
    """Set when the call tried to leave the worktree, touch .git or a protected path."""
    finished: bool = False
    answer: str = ""
    output_chars: int = 0
    artifact: str = ""


class AttemptStart(_Record):
    attempt_dir: str
    start_commit: str


class EndAttemptInput(_Record):
    task: TaskSpec
    workspace: Workspace
    attempt: int
    agent: AgentResult


class ReviewInput(_Record):
    task: TaskSpec
    workspace: Workspace
    attempt: int
    gate: LlmReviewGate
    artifact: str
    """The commit under review."""
    evidence: list[GateResult] = Field(default_factory=list)
    """The other gates' results, which the reviewer may cite."""
    claim: str = ""
