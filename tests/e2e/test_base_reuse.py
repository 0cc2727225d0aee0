"""A repository's run at base is made once and reused by later tasks on that base, on a
real server and worker: the same commit, gate and sandbox copy it; an old run, another
commit or another gate runs again (activities/gates/judging.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import TaskSpec, TaskState
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import FIX_AT_ONCE, write_agent
from tests.support.repos import git
from tests.support.tasks import UNITTEST, result_of, task
from worker import build_worker

pytestmark = pytest.mark.timeout(180)

MARKED = f"python3 -c 'import uuid; print(\"base-run\", uuid.uuid4().hex)' && {UNITTEST}"
"""The demo's tests, saying which run of them this was."""


def base_runs(settings: Settings, task_id: str) -> list[str]:
    """The runs at base the task's verdicts were judged against, by their mark."""
    marks = []
    for kept in sorted((settings.runs / task_id / "base").glob("tests-*.json")):
        tail = json.loads(kept.read_text())["proc"]["output_tail"]
        marks += [line.split()[1] for line in tail.splitlines() if line.startswith("base-run")]
    return marks


async def test_later_tasks_on_a_base_reuse_its_run_and_an_old_one_runs_again(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
):
    agent = write_agent(tmp_path, FIX_AT_ONCE)

    async def one(**overrides: object) -> str:
        spec = task(demo_repo, agent, **overrides)
        spec["verify"][0]["run"] = MARKED
        handle, _ = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
        result = await result_of(handle)
        assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
        [mark] = base_runs(settings, result.task_id)
        return mark

    async with build_worker(client, settings):
        first = await one()
        assert await one() == first  # the same base, gate and sandbox: copied
        # Another gate (here its timeout) is another measurement.
        other_gate = await one(verify=[{"name": "tests", "run": MARKED, "timeout": 61}])
        assert other_gate != first
        # An old run stands for nothing: base is measured again, and that run kept.
        for kept in (settings.home / "base").rglob("ran.json"):
            old = time.time() - 7 * 3600
            os.utime(kept, (old, old))
        again = await one()
        assert again != first and await one() == again
        # Another base commit: another run.
        (demo_repo / "NOTES.md").write_text("a note\n")
        git(demo_repo, "add", "NOTES.md")
        git(demo_repo, "commit", "-qm", "a note")
        assert await one() not in (first, again)
