"""A task's budget bars: what is spent against each limit in force."""

from __future__ import annotations

from dataclasses import dataclass

from loop.contracts import BudgetFigures, TaskResult, TaskStatus


@dataclass
class Bar:
    label: str
    used: float
    limit: float | None
    text: str
    percent: float
    """Width of the filled part, 0-100 (a bar without a limit is drawn empty)."""
    level: str
    """``ok``, ``high`` (80 % or more), ``over`` (the limit is reached), ``none`` (no limit)."""


def bar(label: str, used: float, limit: float | None, fmt: str = "{:g}") -> Bar:
    shown = fmt.format(used)
    if limit is None:
        return Bar(label, used, None, f"{shown} (no limit)", 0.0, "none")
    pct = 100.0 if limit <= 0 else min(100.0, 100.0 * used / limit)
    level = "over" if used >= limit else "high" if pct >= 80 else "ok"
    return Bar(label, used, limit, f"{shown} of {fmt.format(limit)}", round(pct, 1), level)


def budget_bars(used: BudgetFigures, limits: BudgetFigures) -> list[Bar]:
    """Attempts, seconds, tokens and cost against their limits (``None``: no limit)."""
    return [
        bar("attempts", used.attempts or 0, limits.attempts, "{:.0f}"),
        bar("seconds", used.seconds or 0.0, limits.seconds, "{:.1f} s"),
        bar("tokens", used.tokens or 0, limits.tokens, "{:,.0f}"),
        bar("cost", used.cost_usd or 0.0, limits.cost_usd, "${:.4f}"),
    ]


def limits_of(st: TaskStatus) -> BudgetFigures:
    """The limits in force: what is used plus what is left (``None`` stays no limit)."""
    used, left = st.budget.used, st.budget.left

    def plus(u: float | None, remaining: float | None) -> float | None:
        return None if remaining is None else (u or 0) + remaining

    return BudgetFigures(
        attempts=plus(used.attempts, left.attempts),
        seconds=plus(used.seconds, left.seconds),
        tokens=plus(used.tokens, left.tokens),
        cost_usd=plus(used.cost_usd, left.cost_usd),
        tool_calls=plus(used.tool_calls, left.tool_calls),
    )


def used_of(result: TaskResult) -> BudgetFigures:
    """What a trace says was spent (for a task whose status cannot be asked any more)."""
    return BudgetFigures(
        attempts=len(result.attempts),
        seconds=result.execution_seconds,
        tokens=result.tokens,
        cost_usd=result.cost_usd,
        tool_calls=result.tool_calls,
    )
