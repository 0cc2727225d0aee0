"""PeriodBudgetWorkflow: one long-lived ledger per repository, spend per UTC day.

Tasks reserve from it before each attempt and report what they spent after.
Reservations are Temporal updates, which the workflow handles one at a time, so
many tasks reserving at once can never be granted more than the day has left.
A grant is at most what is left; the attempt then runs within it, so the day's
spend can exceed the limit by no more than one model call (the ledger rule).
The ledger continues-as-new when the server suggests it, carrying its state.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from loop.contracts import (
        LEDGER_WORKFLOW,
        QUERY_LEDGER,
        UPDATE_REPORT,
        UPDATE_RESERVE,
        UPDATE_SET_LIMITS,
        DaySpend,
        LedgerState,
        PeriodLimits,
        Reservation,
        ReserveReply,
        ReserveRequest,
        UsageReport,
    )
    from loop.rules import budget

KEEP_DAYS = 31
KEEP_SETTLED = 500
EPSILON = 1e-9  # sums of dollar amounts in floating point


@workflow.defn(name=LEDGER_WORKFLOW)
class PeriodBudgetWorkflow:
    @workflow.init
    def __init__(self, state: LedgerState) -> None:
        self.state = state

    @workflow.run
    async def run(self, state: LedgerState) -> LedgerState:
        await workflow.wait_condition(
            lambda: (
                workflow.info().is_continue_as_new_suggested() and workflow.all_handlers_finished()
            )
        )
        workflow.continue_as_new(self.state)

    @workflow.update(name=UPDATE_RESERVE)
    def reserve(self, req: ReserveRequest) -> ReserveReply:
        if req.key in self.state.open:
            held = self.state.open[req.key]
            return ReserveReply(granted=True, cost_usd=held.cost_usd, tokens=held.tokens)
        limits = self.state.limits
        day = self._day(req.day)
        cost_left = budget.left(limits.cost_per_day, day.cost_usd + day.reserved_cost_usd)
        tokens_left = budget.left(limits.tokens_per_day, day.tokens + day.reserved_tokens)
        if _spent(cost_left) or _spent(tokens_left):
            return ReserveReply(granted=False, reason="period budget spent")
        grant = Reservation(
            day=req.day,
            cost_usd=budget.smaller(req.cost_usd, cost_left),
            tokens=budget.smaller(req.tokens, tokens_left),
        )
        self.state.open[req.key] = grant
        day.reserved_cost_usd += grant.cost_usd or 0.0
        day.reserved_tokens += grant.tokens or 0
        return ReserveReply(granted=True, cost_usd=grant.cost_usd, tokens=grant.tokens)

    @workflow.update(name=UPDATE_REPORT)
    def report(self, rep: UsageReport) -> bool:
        """Settle a reservation with what was spent; a repeated report counts once."""
        held = self.state.open.pop(rep.key, None)
        if held is None:
            return False
        day = self._day(held.day)
        day.reserved_cost_usd = max(0.0, day.reserved_cost_usd - (held.cost_usd or 0.0))
        day.reserved_tokens = max(0, day.reserved_tokens - (held.tokens or 0))
        day.cost_usd += rep.cost_usd
        day.tokens += rep.tokens
        self.state.settled = [*self.state.settled[-KEEP_SETTLED:], rep.key]
        return True

    @workflow.update(name=UPDATE_SET_LIMITS)
    def set_limits(self, limits: PeriodLimits) -> LedgerState:
        self.state.limits = limits
        return self.state

    @workflow.query(name=QUERY_LEDGER)
    def ledger(self) -> LedgerState:
        return self.state

    def _day(self, day: str) -> DaySpend:
        if day not in self.state.days:
            self.state.days[day] = DaySpend()
            for old in sorted(self.state.days)[:-KEEP_DAYS]:
                del self.state.days[old]
        return self.state.days[day]


def _spent(left: float | None) -> bool:
    return left is not None and left <= EPSILON
