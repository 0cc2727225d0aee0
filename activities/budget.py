"""reserve_budget / report_usage / closed_holders: the period budget's activities.

The ledger is a workflow (``workflows/ledger.py``); the first two are a task's
side of it and talk to it with Temporal updates through the worker's own client.
A repository without a ledger has no period budget: reserving then grants
everything and holds nothing, so tasks pay one cheap round trip per attempt and
settle nothing after it.
``closed_holders`` is the ledger's own: it asks the server which holders of open
reservations have ended, so a terminated task's reservation does not stay held.
"""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from loop.contracts import (
    CLOSED_HOLDERS,
    REPORT_USAGE,
    RESERVE_BUDGET,
    UPDATE_REPORT,
    UPDATE_RESERVE,
    Holder,
    HoldersInput,
    HoldersResult,
    ReportUsageInput,
    ReportUsageResult,
    ReserveBudgetInput,
    ReserveReply,
    ledger_id_for,
)

DESCRIBES_AT_ONCE = 8


def _no_ledger(e: RPCError) -> bool:
    return e.status == RPCStatusCode.NOT_FOUND


class BudgetActivities:
    @activity.defn(name=RESERVE_BUDGET.name)
    async def reserve_budget(self, inp: ReserveBudgetInput) -> ReserveReply:
        handle = activity.client().get_workflow_handle(ledger_id_for(inp.repo))
        try:
            return await handle.execute_update(
                UPDATE_RESERVE, inp.request, result_type=ReserveReply
            )
        except RPCError as e:
            if _no_ledger(e):
                return ReserveReply(
                    granted=True, reason="no period budget for this repository", held=False
                )
            raise
        except WorkflowUpdateFailedError as e:
            raise RuntimeError(f"the period budget ledger refused the reservation: {e}") from e

    @activity.defn(name=REPORT_USAGE.name)
    async def report_usage(self, inp: ReportUsageInput) -> ReportUsageResult:
        handle = activity.client().get_workflow_handle(ledger_id_for(inp.repo))
        try:
            counted = await handle.execute_update(UPDATE_REPORT, inp.report, result_type=bool)
        except RPCError as e:
            if _no_ledger(e):
                return ReportUsageResult(counted=False)
            raise
        return ReportUsageResult(counted=counted)

    @activity.defn(name=CLOSED_HOLDERS.name)
    async def closed_holders(self, inp: HoldersInput) -> HoldersResult:
        client = activity.client()
        slots = asyncio.Semaphore(DESCRIBES_AT_ONCE)

        async def closed(holder: Holder) -> bool:
            handle = client.get_workflow_handle(holder.workflow_id, run_id=holder.run_id)
            async with slots:
                try:
                    desc = await handle.describe()
                except RPCError as e:
                    if e.status == RPCStatusCode.NOT_FOUND:
                        return True  # gone past retention: it will never settle
                    raise
            return desc.status != WorkflowExecutionStatus.RUNNING

        ended = await asyncio.gather(*(closed(h) for h in inp.holders))
        pairs = zip(inp.holders, ended, strict=True)
        return HoldersResult(closed=[h.key for h, gone in pairs if gone])
