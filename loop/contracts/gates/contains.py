"""``contains``: strings the agent's final answer must hold."""

from typing import Any, ClassVar

from pydantic import field_validator

from loop.contracts.gates.base import GateSpec


class ContainsGate(GateSpec):
    KIND: ClassVar[str] = "contains"
    EXAMPLE: ClassVar[dict[str, Any]] = {"name": "answer", "contains": ["Fixed"]}

    contains: list[str]
    """Strings the agent's final answer must contain."""

    @field_validator("contains")
    @classmethod
    def _some_text(cls, wanted: list[str]) -> list[str]:
        if not [s for s in wanted if s]:
            raise ValueError("'contains' needs at least one non-empty string")
        return wanted
