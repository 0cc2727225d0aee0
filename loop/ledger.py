"""Budget arithmetic shared by the task loop and the model loop (pure; workflows import it)."""

from __future__ import annotations

from loop.contracts import Usage


def spent(used: Usage, tokens: int | None, cost_usd: float | None, tool_calls: int | None) -> str:
    """Which budget is spent, in the words the status and trace use; "" when none is."""
    if tokens is not None and used.tokens >= tokens:
        return "token budget spent"
    if cost_usd is not None and used.cost_usd >= cost_usd:
        return "cost budget spent"
    if tool_calls is not None and used.tool_calls >= tool_calls:
        return "tool-call budget spent"
    return ""
