"""An agent that floods the worker's model gateway, in a real task on a real worker:
round after round of 32 connections, each a 16 MiB body of ``{},{},…`` (five million
dicts, were it parsed). Every call is refused with 413 and none reaches the provider;
meanwhile another task on the same worker runs and ends DONE_WITH_EVIDENCE. How much
memory the worker holds under the attack is ``bench/gateway_flood.py``'s to measure.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import TaskSpec, TaskState
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import COMPLETE_FIX, FIX_AT_ONCE, agent_file, write_agent
from tests.support.gateway import KEY, flooding_agent
from tests.support.host import LEVELS
from tests.support.model_server import ScriptedModel
from tests.support.tasks import result_of, task, wait_for
from worker import build_worker

pytestmark = pytest.mark.timeout(240)


async def rounds_done(path: Path, at_least: int, within: float = 120) -> list[list[object]]:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            rounds = json.loads(path.read_text())
        except (OSError, ValueError):  # not there yet, or being written
            rounds = []
        if len(rounds) >= at_least:
            return rounds
        assert asyncio.get_running_loop().time() < deadline, f"{len(rounds)} rounds so far"
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("level", LEVELS)
async def test_a_flood_of_16_mib_bodies_is_refused_and_another_task_finishes_meanwhile(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, level: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedModel() as model:
        flooding_body = flooding_agent("declared", 100, COMPLETE_FIX)
        spec = task(demo_repo, write_agent(tmp_path, flooding_body), sandbox={"mode": level})
        spec["agent"] |= {"model": "gpt-4o-mini", "timeout": 200,
                          "provider": {"api": "openai", "base_url": model.url}}  # fmt: skip
        flooding = TaskSpec.model_validate(spec)
        other = TaskSpec.model_validate(
            task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), sandbox={"mode": level})
        )
        flood_file = agent_file(settings, flooding.id, 1, "flood.json")
        async with build_worker(client, settings):
            attack, _ = await start_task(client, flooding, settings.task_queue)
            await rounds_done(flood_file, 1)  # the attack is on
            meanwhile, _ = await start_task(client, other, settings.task_queue)
            done = await result_of(meanwhile, within=150)
            going = await wait_for(attack, lambda st: st.phase == "make")  # still at it
            (flood_file.parent / "stop").write_text("")
            attacked = await result_of(attack, within=150)
        rounds = json.loads(flood_file.read_text())
    assert done.state == TaskState.DONE_WITH_EVIDENCE, done.reason
    assert going.state == TaskState.RUNNING
    assert len(rounds) >= 2, "the flood went on while the other task ran"
    for statuses in rounds:
        assert statuses == [413] * 32, statuses
    assert model.requests == [], "nothing of it reached the provider"
    made = attacked.attempts[0].make
    assert made is not None and made.model_calls == 0
    assert "a request body over 8 MiB" in made.gateway_refused, made.gateway_refused
