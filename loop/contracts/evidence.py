"""What a gate saw, its verdict, and the feedback built from a failed verdict."""

from __future__ import annotations

from pydantic import Field

from loop.contracts.base import _Record


class Evidence(_Record):
    """What a gate (or the agent run) saw."""

    exit_code: int | None = None
    output_tail: str = ""
    files: list[str] = Field(default_factory=list)
    detail: str = ""
    duration_s: float = 0.0


class GateResult(_Record):
    name: str
    kind: str
    passed: bool
    policy_violation: bool = False
    """True when failing this gate is a policy violation (BLOCKED), not a recoverable failure."""
    evidence: Evidence = Field(default_factory=Evidence)
    requirement: str = ""
    """What the gate demands, in words the agent can act on."""
    uncertain: bool = False
    """The checker could not decide (an LLM review that did not validate): escalate."""


class Verdict(_Record):
    passed: bool
    gates: list[GateResult] = Field(default_factory=list)
    artifact: str = ""
    """The commit the gates ran on (the latest state of the worktree)."""
    gates_changed_worktree: list[str] = Field(default_factory=list)
    """Files the gates themselves changed; reset before the next attempt. (Gates now run on
    a checkout of their own, so this stays empty; kept so old histories decode.)"""
    ignored_files: list[str] = Field(default_factory=list)
    """Files the agent made that git ignores: never part of the artifact the gates judged."""

    @property
    def failed(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed]

    @property
    def policy_violations(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed and g.policy_violation]

    def summary(self) -> str:
        if not self.gates:
            return "no gates ran"
        return ", ".join(f"{g.name} {'pass' if g.passed else 'FAIL'}" for g in self.gates)


class FailedRequirement(_Record):
    gate: str
    requirement: str
    evidence: Evidence
    required_correction: str


class Feedback(_Record):
    """A failed verdict turned into structured input for the next attempt."""

    after_attempt: int
    previous_output: str = ""
    failed: list[FailedRequirement] = Field(default_factory=list)
    passing: list[str] = Field(default_factory=list)
    human_feedback: list[str] = Field(default_factory=list)
