"""A repository's period budget, from the client's side: set its daily limits.

The ledger is a workflow (``workflows/ledger.py``), one per repository, started by the
first update that sets its limits; ``loop budget set`` and anything else that sets
them go through ``set_limits``.
"""

from __future__ import annotations

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from loop.contracts import (
    LEDGER_WORKFLOW,
    UPDATE_SET_LIMITS,
    LedgerState,
    PeriodLimits,
    ledger_id_for,
)


async def set_limits(
    client: Client, repo: str, limits: PeriodLimits, task_queue: str,
    *, start: LedgerState | None = None,
) -> LedgerState:  # fmt: skip
    """Give ``repo``'s ledger ``limits``, starting it (from ``start``, else empty) when it
    does not run yet; what it holds after."""
    return await client.execute_update_with_start_workflow(
        UPDATE_SET_LIMITS,
        limits,
        start_workflow_operation=WithStartWorkflowOperation(
            LEDGER_WORKFLOW,
            start or LedgerState(repo=repo),
            id=ledger_id_for(repo),
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"period budget of {repo}",
        ),
        result_type=LedgerState,
    )
