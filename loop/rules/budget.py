"""Budget arithmetic of the task loop, the model loop and the period ledger, in one place."""

from __future__ import annotations

from typing import Any

from loop.contracts import BudgetFigures, BudgetStatus, Usage


def spent(used: Usage, tokens: int | None, cost_usd: float | None, tool_calls: int | None) -> str:
    """Which budget is spent, in the words the status and trace use; "" when none is."""
    if tokens is not None and used.tokens >= tokens:
        return "token budget spent"
    if cost_usd is not None and used.cost_usd >= cost_usd:
        return "cost budget spent"
    if tool_calls is not None and used.tool_calls >= tool_calls:
        return "tool-call budget spent"
    return ""


def left(limit: Any, used: Any) -> Any:
    """What a limit has left (never below 0); None for no limit."""
    return None if limit is None else max(limit - used, 0)


def smaller(a: Any, b: Any) -> Any:
    """The tighter of two limits, where None means none."""
    return b if a is None else a if b is None else min(a, b)


def status(used: BudgetFigures, limits: BudgetFigures) -> BudgetStatus:
    """What is used and what is left of each limit (None: no limit)."""
    return BudgetStatus(
        used=used,
        left=BudgetFigures(
            attempts=left(limits.attempts, used.attempts or 0),
            seconds=left(limits.seconds, used.seconds or 0.0),
            tokens=left(limits.tokens, used.tokens or 0),
            cost_usd=left(limits.cost_usd, used.cost_usd or 0.0),
            tool_calls=left(limits.tool_calls, used.tool_calls or 0),
        ),
    )


def extended(limit: Any, more: Any) -> Any:
    """A limit after an extension: ``more`` added to it; no limit stays no limit."""
    return None if limit is None else limit + more
