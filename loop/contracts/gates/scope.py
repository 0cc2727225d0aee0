"""``diff_scope``: which files the attempt may change, and which it must never touch."""

from typing import Any, ClassVar

from pydantic import Field, field_validator

from loop.contracts.base import _TaskFileModel, relative_globs
from loop.contracts.gates.base import GateSpec


class DiffScope(_TaskFileModel):
    """The files an attempt's commit may change, and the ones it must leave alone."""

    allow: list[str] = Field(default_factory=lambda: ["**"])
    """Globs (gitignore style) the agent may change; others are a recoverable failure."""
    protect: list[str] = Field(default_factory=list)
    """Globs the agent must not change; touching one is a policy violation (BLOCKED)."""

    @field_validator("allow", "protect")
    @classmethod
    def _relative(cls, globs: list[str]) -> list[str]:
        return relative_globs(globs)


class DiffScopeGate(GateSpec):
    KIND: ClassVar[str] = "diff_scope"
    EXAMPLE: ClassVar[dict[str, Any]] = {
        "name": "scope",
        "diff_scope": {"allow": ["src/**", "tests/**"], "protect": ["tests/test_api.py"]},
    }

    diff_scope: DiffScope
    """Which files the attempt may change (its commit against base), and which it must
    not touch."""
