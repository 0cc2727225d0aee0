"""``github_checks``: the remote CI's checks on the attempt's pushed commit."""

from typing import Any, ClassVar

from pydantic import Field

from loop.contracts.base import _TaskFileModel
from loop.contracts.gates.base import GateSpec


class GitHubChecks(_TaskFileModel):
    required: list[str] = Field(min_length=1)
    """The check runs' names that must all succeed (``build``, ``test``)."""
    timeout: int = Field(default=3600, ge=1, le=86_400)
    """Seconds to wait for them to complete on the commit; then a person decides."""


class GitHubChecksGate(GateSpec):
    KIND: ClassVar[str] = "github_checks"
    EXAMPLE: ClassVar[dict[str, Any]] = {
        "name": "ci",
        "github_checks": {"required": ["build", "test"], "timeout": 3600},
    }

    github_checks: GitHubChecks
    """Which checks on GitHub must pass, and how long they may take."""

    def seconds(self) -> int:
        return self.github_checks.timeout + 60
