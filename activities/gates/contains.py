"""The ``contains`` gate: strings the agent's final answer must hold (case-sensitive)."""

from __future__ import annotations

from activities.gates.judging import Judging
from loop.contracts import ContainsGate, Evidence, GateResult

KIND = ContainsGate.KIND

"""How much of the agent's final answer a ``contains`` gate shows as evidence."""


async def evaluate(gate: ContainsGate, judging: Judging) -> GateResult:
    return judge(gate, judging.make.claim)


def judge(gate: ContainsGate, claim: str) -> GateResult:
    missing = [s for s in gate.contains if s not in claim]
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
        requirement=f"the final answer contains: {', '.join(s for s in gate.contains if s)}",
        # The claim it judged is the attempt's own (its result holds it, once): no copy.
        evidence=Evidence(detail=detail),
    )
