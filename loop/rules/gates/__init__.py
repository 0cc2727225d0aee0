"""How each gate kind is shown to the agent and what it asks of the next attempt.

One module per kind, each with ``describe`` (the bar, in the prompt: the agent knows
what is checked and cannot change it) and ``correction`` (what to change, from a
failed result's evidence, in words an agent can act on). ``RULES`` lists them by kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loop.contracts import REFUSALS, Gate, GateResult
from loop.rules.gates import checks, contains, hidden, kept, regression, review, run, scope


@dataclass(frozen=True)
class GateRules:
    kind: str
    describe: Callable[[Any], str]
    """The gate's model of this kind -> one line for the prompt."""
    correction: Callable[[GateResult], str]


RULES: dict[str, GateRules] = {
    m.KIND: GateRules(m.KIND, m.describe, m.correction)
    for m in (run, scope, kept, regression, contains, review, checks, hidden)
}


def describe_gate(g: Gate) -> str:
    """The gates are shown to the agent, so it knows the bar; it cannot change them."""
    return RULES[g.kind].describe(g)


def required_correction(g: GateResult) -> str:
    """What the agent must change, per gate kind, in words it can act on."""
    rules = RULES.get(g.kind)
    if rules is not None:
        return rules.correction(g)
    if g.kind in REFUSALS:
        return f"{g.requirement}: {g.evidence.detail}" if g.evidence.detail else g.requirement
    # A kind this worker does not know (recorded by another version): its own words.
    return g.evidence.detail or g.requirement or f"pass the {g.name} check"
