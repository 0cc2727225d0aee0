"""The ``contains`` gate: strings the agent's final answer must hold (case-sensitive)."""

from __future__ import annotations

from loop.contracts import Evidence, Gate, GateResult

CLAIM_EVIDENCE_CHARS = 1_000
"""How much of the agent's final answer a ``contains`` gate shows as evidence."""


def evaluate(gate: Gate, claim: str) -> GateResult:
    wanted = gate.contains or []
    missing = [s for s in wanted if s not in claim]
    if not missing:
        detail = "all present"
    elif not claim.strip():
        detail = f"missing: {', '.join(missing)} (the agent gave no final answer)"
    else:
        detail = f"missing: {', '.join(missing)}"
    return GateResult(
        name=gate.name,
        kind="contains",
        passed=not missing,
        requirement=f"the final answer contains: {', '.join(s for s in wanted if s)}",
        evidence=Evidence(output_tail=claim[:CLAIM_EVIDENCE_CHARS], detail=detail),
    )
