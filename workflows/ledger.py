"""PeriodBudgetWorkflow: one long-lived ledger per repository, spend per UTC day.

Tasks reserve from it before each attempt and report what they spent after.
Reservations are Temporal updates, which the workflow handles one at a time, so
many tasks reserving at once can never be granted more than the day has left.
A grant is at most what is left; the attempt then runs within it, so the day's
spend can exceed the limit by no more than one model call (the ledger rule).

A task settles its reservation however it ends, but a terminated task (or one
whose worker history was reset) cannot: while reservations are open the ledger
asks every few minutes which holders have closed and releases theirs, counting
nothing spent. The ledger continues-as-new when the server suggests it,
carrying its state.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import workflows.patches as patches
    from loop.contracts import (
        CLOSED_HOLDERS,
        LEDGER_WORKFLOW,
        QUERY_LEDGER,
        UPDATE_REPORT,
        UPDATE_RESERVE,
        UPDATE_SET_LIMITS,
        DaySpend,
        Holder,
        HoldersInput,
        LedgerState,
        PeriodLimits,
        Reservation,
        ReserveReply,
        ReserveRequest,
        UsageReport,
    )
    from loop.rules import budget
    from workflows.steps import StepFailed, act

KEEP_DAYS = 31
KEEP_SETTLED = 500
KEEP_RELEASED = 100
EPSILON = 1e-9  # sums of dollar amounts in floating point


@workflow.defn(name=LEDGER_WORKFLOW)
class PeriodBudgetWorkflow:
    @workflow.init
    def __init__(self, state: LedgerState) -> None:
        self.state = state

    @workflow.run
    async def run(self, state: LedgerState) -> LedgerState:
        if patches.patched("sweep-closed-holders"):
            while not self._time_to_continue():
                if not self.state.open:
                    await workflow.wait_condition(
                        lambda: self._time_to_continue() or bool(self.state.open)
                    )
                    continue
                try:
                    await workflow.wait_condition(
                        self._time_to_continue, timeout=timedelta(seconds=self.state.sweep_every_s)
                    )
                except TimeoutError:
                    await self._sweep()
        else:
            await workflow.wait_condition(self._time_to_continue)
        workflow.continue_as_new(self.state)

    def _time_to_continue(self) -> bool:
        return workflow.info().is_continue_as_new_suggested() and workflow.all_handlers_finished()

    async def _sweep(self) -> None:
        """Release the reservations whose holder has closed without settling."""
        holders = [h for k in self.state.open if (h := Holder.of(k)) is not None]
        if not holders:
            return
        try:
            found = await act(
                CLOSED_HOLDERS,
                HoldersInput(holders=holders),
                summary=f"check {len(holders)} holders of open reservations",
            )
        except StepFailed:
            return  # the server was unreachable for a while: the next sweep asks again
        for key in found.closed:
            if self._take(key) is not None:
                self.state.released = [*self.state.released[-KEEP_RELEASED:], key]

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
        day = self._take(rep.key)
        if day is None:
            return False
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

    def _take(self, key: str) -> DaySpend | None:
        """Close reservation ``key``: its day no longer holds it. None if it was not open."""
        held = self.state.open.pop(key, None)
        if held is None:
            return None
        day = self._day(held.day)
        day.reserved_cost_usd = max(0.0, day.reserved_cost_usd - (held.cost_usd or 0.0))
        day.reserved_tokens = max(0, day.reserved_tokens - (held.tokens or 0))
        return day

    def _day(self, day: str) -> DaySpend:
        if day not in self.state.days:
            self.state.days[day] = DaySpend()
            for old in sorted(self.state.days)[:-KEEP_DAYS]:
                del self.state.days[old]
        return self.state.days[day]


def _spent(left: float | None) -> bool:
    return left is not None and left <= EPSILON
