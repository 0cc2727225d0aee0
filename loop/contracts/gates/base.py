"""What every gate kind shares: a name, its kind, and how long it may take.

Each kind is a model of its own (one module per kind in this package), so a gate
carries only its own fields and a new kind is one module here, one in
``loop.rules.gates`` and one in ``activities.gates``.
"""

from typing import Any, ClassVar

from pydantic import Field, model_validator

from loop.contracts.base import GATE_NAME_PATTERN, _TaskFileModel

LEGACY_FIELDS: dict[str, tuple[Any, ...]] = {
    "run": (None,), "timeout": (300,), "diff_scope": (None,), "no_removed_tests": (None, False),
    "regression_test": (None, False), "contains": (None,), "llm_review": (None,),
    "report": ("auto",), "fail_to_pass": ("auto",), "allow_constructs": ([],),
}  # fmt: skip
"""Every field a gate had while all kinds were one model, with the values that meant "not
given". A spec recorded then (a workflow's input in history) holds them all; a kind
drops the others' at these values, and refuses them at any other."""


def unset(key: str, value: Any) -> bool:
    """Whether ``value`` of another kind's field ``key`` means it was not given."""
    return key in LEGACY_FIELDS and value in LEGACY_FIELDS[key]


DEFAULT_SECONDS = 300
"""What a gate that runs no command of its own is allowed in the step's timeout."""


class GateSpec(_TaskFileModel):
    """One check in the task's ``verify`` list."""

    KIND: ClassVar[str]
    EXAMPLE: ClassVar[dict[str, Any]]
    """One gate of this kind as a task file writes it (the reference shows it; tests
    check that every kind's example is valid, described and evaluated)."""
    CHECKED_IN_VERIFY: ClassVar[bool] = True
    """False for a kind that another step judges (``llm_review``: the review step)."""

    name: str = Field(pattern=GATE_NAME_PATTERN)
    """Names the gate in verdicts, feedback and the trace; unique within a task."""

    @property
    def kind(self) -> str:
        return self.KIND

    def seconds(self) -> int:
        """Its share of the verify step's timeout."""
        return DEFAULT_SECONDS

    @model_validator(mode="before")
    @classmethod
    def _others_fields_unset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        kept = {}
        for key, value in data.items():
            if key in cls.model_fields or key not in LEGACY_FIELDS:
                kept[key] = value  # its own, or unknown (refused as such)
            elif not unset(key, value):
                raise ValueError(f"{key} does not apply to a {cls.KIND} gate")
        return kept
