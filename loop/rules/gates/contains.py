"""``contains``: what the agent's final answer must hold."""

from __future__ import annotations

from loop.contracts import ContainsGate, GateResult

KIND = ContainsGate.KIND


def describe(g: ContainsGate) -> str:
    return f"{g.name}: your final answer must contain: {', '.join(g.contains)}"


def correction(g: GateResult) -> str:
    missing = g.evidence.detail.removeprefix("missing: ")
    return f"write a final answer to LOOP_OUTPUT_FILE that includes: {missing}"
