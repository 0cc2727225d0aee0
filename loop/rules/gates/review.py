"""``llm_review``: a reviewer model's judgement, made in the review step."""

from __future__ import annotations

from loop.contracts import GateResult, LlmReviewGate

KIND = LlmReviewGate.KIND


def describe(g: LlmReviewGate) -> str:
    return (
        f"{g.name}: a reviewer in a fresh context reads the goal, your diff and the other "
        f"gates' evidence, and judges it by this rubric: {g.llm_review.rubric}"
    )


def correction(g: GateResult) -> str:
    """The reviewer writes its own corrections (one per failure, in the review step);
    the result's detail carries them."""
    return g.evidence.detail or "satisfy the reviewer's rubric"
