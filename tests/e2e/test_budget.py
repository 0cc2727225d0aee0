"""The per-repository period budget: one ledger workflow, many tasks reserving at once."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.budgets import set_limits
from loop.contracts import (
    QUERY_LEDGER,
    SIGNAL_FEEDBACK,
    UPDATE_REPORT,
    UPDATE_RESERVE,
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


async def test_twenty_reservations_at_once_never_overspend(client: Client, settings: Settings):
    repo = f"/repos/{settings.task_queue}"
    async with build_worker(client, settings):
        await set_limits(client, repo, PeriodLimits(cost_per_day=1.0), settings.task_queue)
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
        await set_limits(client, repo, PeriodLimits(cost_per_day=0), settings.task_queue)
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


# Attempt 1 hangs: the task is cancelled, or terminated, while it holds its reservation.
HANG = "time.sleep(120)\n"


async def holding(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, sweep_every_s: float
):
    """A ledger with limits, and a task whose attempt holds a reservation of it."""
    repo = str(demo_repo.resolve())
    limits = PeriodLimits(cost_per_day=20.0, tokens_per_day=5_000_000)
    start = LedgerState(repo=repo, sweep_every_s=sweep_every_s)
    await set_limits(client, repo, limits, settings.task_queue, start=start)
    data = task(
        demo_repo,
        write_agent(tmp_path, HANG),
        budget={"max_attempts": 2, "max_cost_usd": 5.0, "max_tokens": 100_000},
    )
    data["agent"]["usage"] = "file"  # LOOP_USAGE_FILE: the budgets have usage to count
    spec = TaskSpec.model_validate(data)
    handle, _ = await start_task(client, spec, settings.task_queue)
    ledger = client.get_workflow_handle(ledger_id_for(repo))

    async def state() -> LedgerState:
        return await ledger.query(QUERY_LEDGER, result_type=LedgerState)

    await wait_for(handle, lambda s: s.phase == "make", within=60)
    held = await state()
    assert len(held.open) == 1 and held.days[TODAY].reserved_cost_usd == 5.0
    assert held.days[TODAY].reserved_tokens == 100_000
    return handle, state


async def test_a_cancelled_task_gives_back_what_it_held(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
):
    async with build_worker(client, settings):
        handle, state = await holding(client, settings, demo_repo, tmp_path, 300)
        await handle.cancel()
        r = await result_of(handle, within=60)
        after = await state()
    assert r.state == TaskState.CANCELLED
    assert after.open == {} and after.released == []  # settled by the task itself
    day = after.days[TODAY]
    assert (day.reserved_cost_usd, day.reserved_tokens) == (0.0, 0)


async def test_the_ledger_releases_what_a_terminated_task_held(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
):
    async with build_worker(client, settings):
        handle, state = await holding(client, settings, demo_repo, tmp_path, 1)
        key = next(iter((await state()).open))
        await handle.terminate("gone without a word")
        deadline = asyncio.get_running_loop().time() + 30
        while (await state()).open:
            assert asyncio.get_running_loop().time() < deadline, "the ledger kept the hold"
            await asyncio.sleep(0.5)
        after = await state()
    assert after.released == [key]
    day = after.days[TODAY]
    assert (day.reserved_cost_usd, day.reserved_tokens, day.cost_usd) == (0.0, 0, 0.0)


async def test_tokens_per_day_caps_as_cost_per_day_does(client: Client, settings: Settings):
    repo = f"/repos/{settings.task_queue}"
    async with build_worker(client, settings):
        await set_limits(client, repo, PeriodLimits(tokens_per_day=1000), settings.task_queue)
        ledger = client.get_workflow_handle(ledger_id_for(repo))
        first = await ledger.execute_update(
            UPDATE_RESERVE,
            ReserveRequest(key="a:1", day=TODAY, tokens=600),
            result_type=ReserveReply,
        )
        second = await ledger.execute_update(
            UPDATE_RESERVE,
            ReserveRequest(key="b:1", day=TODAY, tokens=600),
            result_type=ReserveReply,
        )
        await ledger.execute_update(
            UPDATE_REPORT, UsageReport(key="a:1", tokens=600), result_type=bool
        )
        await ledger.execute_update(
            UPDATE_REPORT, UsageReport(key="b:1", tokens=400), result_type=bool
        )
        third = await ledger.execute_update(
            UPDATE_RESERVE, ReserveRequest(key="c:1", day=TODAY, tokens=1), result_type=ReserveReply
        )
    assert (first.granted, first.tokens) == (True, 600)
    assert (second.granted, second.tokens) == (True, 400)  # what was left, no more
    assert not third.granted and third.reason == "period budget spent"  # exactly spent


async def steps_run(handle) -> list[str]:
    """The period-budget steps in a task's history, in order (local activities' markers)."""
    found = []
    async for event in handle.fetch_history_events():
        if event.HasField("marker_recorded_event_attributes"):
            details = event.marker_recorded_event_attributes.details
            if "data" in details:
                text = details["data"].payloads[0].data.decode()
                found += [name for name in ("reserve_budget", "report_usage") if name in text]
    return found


async def test_an_attempt_settles_only_what_a_ledger_holds(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
):
    """Without a period budget, reserving holds nothing and the attempt settles nothing
    (one round trip to the server fewer); with one, the attempt's usage is reported."""
    repo = str(demo_repo.resolve())
    agent = write_agent(tmp_path, FIX)
    async with build_worker(client, settings):
        bare = TaskSpec.model_validate(task(demo_repo, agent) | {"repo": repo})
        handle, _ = await start_task(client, bare, settings.task_queue)
        first = await result_of(handle)
        without = await steps_run(handle)
        await set_limits(client, repo, PeriodLimits(cost_per_day=5), settings.task_queue)
        budgeted = TaskSpec.model_validate(task(demo_repo, agent) | {"repo": repo})
        handle, _ = await start_task(client, budgeted, settings.task_queue)
        second = await result_of(handle)
        with_ledger = await steps_run(handle)
        state = await client.get_workflow_handle(ledger_id_for(repo)).query(
            QUERY_LEDGER, result_type=LedgerState
        )
    assert first.state == second.state == TaskState.DONE_WITH_EVIDENCE
    assert without == ["reserve_budget"], without
    assert with_ledger == ["reserve_budget", "report_usage"], with_ledger
    assert not state.open and len(state.settled) == 1, "the attempt settled what it held"
