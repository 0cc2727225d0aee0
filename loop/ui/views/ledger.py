"""The budgets page: each repository's period ledger for a day, as spent, reserved and
left bars."""

from __future__ import annotations

from dataclasses import dataclass, field

from loop.contracts import DaySpend, LedgerState


@dataclass
class Segment:
    kind: str
    """``spent``, ``reserved`` or ``left``."""
    value: float
    text: str
    percent: float


@dataclass
class LedgerBar:
    what: str
    limit: str
    segments: list[Segment]
    over: bool = False


@dataclass
class LedgerView:
    repo: str
    day: str
    bars: list[LedgerBar] = field(default_factory=list)
    open_reservations: int = 0


def ledger_bar(
    what: str, spent: float, reserved: float, limit: float | None, fmt: str
) -> LedgerBar:
    """Spent, reserved (held by running attempts) and left of a day's limit, as one bar."""
    if limit is None:
        top = spent + reserved
        segs = [
            Segment(kind, v, fmt.format(v), round(0.0 if top <= 0 else 100 * v / top, 1))
            for kind, v in (("spent", spent), ("reserved", reserved))
        ]
        return LedgerBar(what, "no limit", [s for s in segs if s.value > 0])
    left = max(0.0, limit - spent - reserved)
    top = max(limit, spent + reserved)
    segs = []
    for kind, value in (("spent", spent), ("reserved", reserved), ("left", left)):
        pct = 0.0 if top <= 0 else 100.0 * value / top
        segs.append(Segment(kind, value, fmt.format(value), round(pct, 1)))
    return LedgerBar(what, fmt.format(limit), segs, over=spent + reserved >= limit)


def ledger_view(st: LedgerState, day: str) -> LedgerView:
    d = st.days.get(day, DaySpend())
    return LedgerView(
        repo=st.repo,
        day=day,
        bars=[
            ledger_bar("cost", d.cost_usd, d.reserved_cost_usd, st.limits.cost_per_day, "${:.4f}"),
            ledger_bar(
                "tokens",
                float(d.tokens),
                float(d.reserved_tokens),
                None if st.limits.tokens_per_day is None else float(st.limits.tokens_per_day),
                "{:,.0f}",
            ),
        ],
        open_reservations=sum(1 for r in st.open.values() if r.day == day),
    )
