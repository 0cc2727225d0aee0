"""``llm_review``: a checker in a fresh context, judged by the review step."""

from typing import Any, ClassVar

from pydantic import Field

from loop.contracts.base import _TaskFileModel
from loop.contracts.gates.base import GateSpec


class LlmReview(_TaskFileModel):
    """A checker in a fresh context: goal, rubric, diff and the other gates' evidence."""

    rubric: str = Field(min_length=1)
    """The fixed checklist the reviewer judges the attempt by; it must cite evidence."""
    model: str | None = None
    """Default: the agent's model."""
    base_url: str | None = None
    """Default: the agent's endpoint, else OPENAI_BASE_URL."""


class LlmReviewGate(GateSpec):
    KIND: ClassVar[str] = "llm_review"
    EXAMPLE: ClassVar[dict[str, Any]] = {
        "name": "review",
        "llm_review": {"rubric": "the change fixes the cause, not the symptom"},
    }
    CHECKED_IN_VERIFY: ClassVar[bool] = False

    llm_review: LlmReview
    """A reviewer model in a fresh context; an answer that does not validate makes the
    gate uncertain, and the task asks a person."""
