"""The per-repository period budget: one ledger workflow, many tasks reserving at once."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from loop.contracts import (
    LEDGER_WORKFLOW,
    QUERY_LEDGER,
    SIGNAL_FEEDBACK,
    UPDATE_REPORT,
    UPDATE_RESERVE,
    UPDATE_SET_LIMITS,
    FeedbackSignal,
    LedgerState,
    PeriodLimits,
    ReserveReply,
    ReserveRequest,
    TaskSpec,
    TaskState,
    UsageReport,
    ledger_id_for,
)
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import write_agent
from tests.support.tasks import result_of, task, wait_for
from worker import build_worker

pytestmark = pytest.mark.timeout(120)
TODAY = datetime.now(UTC).date().isoformat()


async def set_limits(client: Client, settings: Settings, repo: str, limits: PeriodLimits):
    return await client.execute_update_with_start_workflow(
        UPDATE_SET_LIMITS,
        limits,
        start_workflow_operation=WithStartWorkflowOperation(
            LEDGER_WORKFLOW,
            LedgerState(repo=repo),
            id=ledger_id_for(repo),
            task_queue=settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        ),
        result_type=LedgerState,
    )


async def test_twenty_reservations_at_once_never_overspend(client: Client, settings: Settings):
    repo = f"/repos/{settings.task_queue}"
    async with build_worker(client, settings):
        await set_limits(client, settings, repo, PeriodLimits(cost_per_day=1.0))
        ledger = client.get_workflow_handle(ledger_id_for(repo))

        async def attempt(i: int) -> ReserveReply:
            req = ReserveRequest(key=f"task-{i}:1", day=TODAY, cost_usd=0.15)
            reply = await ledger.execute_update(UPDATE_RESERVE, req, result_type=ReserveReply)
            if reply.granted:  # the attempt spends everything it was granted
                report = UsageReport(key=f"task-{i}:1", cost_usd=reply.cost_usd, tokens=10)
                assert await ledger.execute_update(UPDATE_REPORT, report, result_type=bool)
            return reply

        replies = await asyncio.gather(*(attempt(i) for i in range(20)))
        granted = [r for r in replies if r.granted]
        state = await ledger.query(QUERY_LEDGER, result_type=LedgerState)
        # A report repeated by a retried activity is not counted twice.
        again = UsageReport(key="task-0:1", cost_usd=0.15, tokens=10)
        assert not await ledger.execute_update(UPDATE_REPORT, again, result_type=bool)
    spent = state.days[TODAY].cost_usd
    assert spent <= 1.0 + 1e-9
    assert sum(r.cost_usd for r in granted) <= 1.0 + 1e-9
    assert len(granted) == 7  # six grants of 0.15 and one of the 0.10 left
    assert all(r.reason == "period budget spent" for r in replies if not r.granted)
    assert state.days[TODAY].reserved_cost_usd == pytest.approx(0.0)


FIX = 'pathlib.Path("slugify.py").write_text(COMPLETE)\n'


async def test_spent_period_budget_parks_the_task_until_raised(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
):
    repo = str(demo_repo.resolve())
    agent = write_agent(tmp_path, FIX)
    spec = TaskSpec.model_validate(task(demo_repo, agent) | {"repo": repo})
    async with build_worker(client, settings):
        await set_limits(client, settings, repo, PeriodLimits(cost_per_day=0))
        handle, _ = await start_task(client, spec, settings.task_queue)
        st = await wait_for(handle, lambda s: s.state == TaskState.NEEDS_HUMAN)
        assert st.reason == "period budget spent" and st.attempt == 0

        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": client.service_client.config.target_host,
            "LOOP_TASK_QUEUE": settings.task_queue,
        }
        loop_cli = str(Path(sys.executable).parent / "loop")
        proc = await asyncio.create_subprocess_exec(
            loop_cli,
            "budget",
            "set",
            repo,
            "--cost-per-day",
            "5",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        # limit, spent today, held by running attempts, left
        assert re.search(r"cost\s*│\s*\$5\.0000\s*│", out.decode()), out.decode()
        await handle.signal(SIGNAL_FEEDBACK, FeedbackSignal(text="budget raised, go on"))
        result = await result_of(handle)
        proc = await asyncio.create_subprocess_exec(
            loop_cli,
            "budget",
            "show",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        shown, _ = await proc.communicate()
    assert result.state == TaskState.DONE_WITH_EVIDENCE
    assert len(result.attempts) == 1
    assert repo in shown.decode()
    # Settled: nothing held any more, and (the agent reports no usage) nothing spent.
    row = r"cost\s*│\s*\$5\.0000\s*│\s*\$0\.0000\s*│\s*\$0\.0000\s*│\s*\$5\.0000"
    assert re.search(row, shown.decode()), shown.decode()
