"""The task loop's side of the period budget: reserve before an attempt, settle after it.

Each attempt holds a reservation in its repository's ``PeriodBudgetWorkflow``
(``workflows.ledger``) under a key of the task run and the attempt, so a retried
step reserves or settles once.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import workflows.patches as patches
    from loop.contracts import (
        REPORT_USAGE,
        RESERVE_BUDGET,
        ReportUsageInput,
        ReserveBudgetInput,
        ReserveReply,
        ReserveRequest,
        TaskSpec,
        Usage,
        UsageReport,
        reservation_key,
    )
    from workflows.steps import act, bookkeeping

LOCAL = "period-local"
"""Reservations run as local activities from here on; histories from before keep theirs."""


def key(spec: TaskSpec, attempt: int) -> str:
    return reservation_key(spec.id, workflow.info().run_id, attempt)


async def reserve(
    spec: TaskSpec, attempt: int, *, cost_usd: float | None, tokens: int | None
) -> ReserveReply:
    """Ask the day's ledger for at most what the task may still spend (None: no own limit)."""
    step = bookkeeping if patches.patched(LOCAL) else act
    return await step(
        RESERVE_BUDGET,
        ReserveBudgetInput(
            repo=spec.repo,
            request=ReserveRequest(
                key=key(spec, attempt),
                day=workflow.now().date().isoformat(),
                cost_usd=cost_usd,
                tokens=tokens,
            ),
        ),
        summary="reserve from the period budget",
    )


async def settle(spec: TaskSpec, attempt: int, used: Usage) -> None:
    """Give back the reservation, counting what the attempt spent."""
    step = bookkeeping if patches.patched(LOCAL) else act
    await step(
        REPORT_USAGE,
        ReportUsageInput(
            repo=spec.repo,
            report=UsageReport(key=key(spec, attempt), cost_usd=used.cost_usd, tokens=used.tokens),
        ),
        summary="report usage to the period budget",
    )
