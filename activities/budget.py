"""reserve_budget / report_usage: a task's side of the per-repository period budget.

The ledger is a workflow (``workflows/ledger.py``); these activities talk to it
with Temporal updates through the worker's own client. A repository without a
ledger has no period budget: reserving then grants everything, so tasks pay
one cheap round trip per attempt and nothing else.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from loop.contracts import (
    REPORT_USAGE,
    RESERVE_BUDGET,
    UPDATE_REPORT,
    UPDATE_RESERVE,
    ReportUsageInput,
    ReportUsageResult,
    ReserveBudgetInput,
    ReserveReply,
    ledger_id_for,
)


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
                return ReserveReply(granted=True, reason="no period budget for this repository")
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
