"""Two tries of one make on one host: the server retries a step whose heartbeat it missed
(a restart longer than the heartbeat timeout) while the old try still runs in the same
worker. One try at a time owns the attempt's worktree, and a try that closed the attempt
leaves its result to the next (tests/e2e/test_faults.py has the whole outage)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from activities.make import keep_made, made_before, owning
from loop.contracts import MakeResult


def env(attempt: int, *, activity_id: str = "7", run_id: str = "run-1") -> ActivityEnvironment:
    """An activity context of the make ``activity_id`` in workflow run ``run_id``."""
    e = ActivityEnvironment()
    e.info = dataclasses.replace(
        e.info, attempt=attempt, activity_id=activity_id, workflow_run_id=run_id
    )
    return e


async def test_a_later_try_of_the_step_gets_the_result_an_earlier_one_kept(tmp_path: Path):
    made = MakeResult(attempt=1, commit="c1" * 20, tries=1)
    kept = env(1).run(keep_made, tmp_path, made)
    # The result names where it is kept, for the attempt's later steps on this host.
    assert kept == made.model_copy(update={"kept": str(tmp_path / "made.json")})
    assert env(2).run(made_before, tmp_path) == kept


async def test_another_step_or_run_never_gets_it(tmp_path: Path):
    assert env(1).run(made_before, tmp_path) is None  # nothing kept yet
    env(1).run(keep_made, tmp_path, MakeResult(attempt=1, commit="c1"))
    assert env(1, activity_id="9").run(made_before, tmp_path) is None
    assert env(1, run_id="run-2").run(made_before, tmp_path) is None
    (tmp_path / "made.json").write_text("{torn")
    assert env(2).run(made_before, tmp_path) is None


async def test_a_retry_waits_for_the_old_try(tmp_path: Path):
    """The race of the server-restart fault test: the old try's agent ended as the retry
    started, and the old try committed after the retry had reset the worktree (two
    commits for one attempt). The retry now opens the attempt only once the old try
    is done with it."""
    folder = tmp_path / "attempt-1"
    order: list[str] = []
    running = asyncio.Event()

    async def old_try() -> None:
        async with owning(folder):
            running.set()
            await asyncio.sleep(0.2)  # the agent's last moments, the commit
            order.append("old committed")

    async def retry() -> None:
        await running.wait()
        async with owning(folder):
            order.append("retry opened")

    await asyncio.gather(old_try(), retry())
    assert order == ["old committed", "retry opened"]
    assert folder.stat().st_mode & 0o777 == 0o700  # the worker's attempt folder
