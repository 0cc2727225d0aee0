"""kill -9 the worker while `make` runs; a new worker finishes the task without redoing work."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import TaskResult, TaskSpec, TaskState
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import agent_calls, agent_file, write_agent
from tests.support.repos import ROOT
from tests.support.tasks import result_of, task

pytestmark = pytest.mark.timeout(120)

# Attempt 1 fails; attempt 2 hangs on its first run (the worker gets killed under it)
# and, on the retry after the crash, fixes the bug at once.
AGENT = """
if attempt == 1:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return 'wrong'\\n")
else:
    runs = [c for c in map(json.loads, log.read_text().splitlines()) if c["attempt"] == 2]
    if len(runs) == 1:
        pathlib.Path(str(log) + ".orphan").write_text(str(os.getpid()))
        time.sleep(60)
    pathlib.Path("slugify.py").write_text(COMPLETE)
"""


async def spawn_worker(client: Client, settings: Settings, log: Path) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "LOOP_HOME": str(settings.home),
        "LOOP_TASK_QUEUE": settings.task_queue,
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "worker.py"),
        env=env,
        cwd=ROOT,
        stdout=log.open("ab"),
        stderr=asyncio.subprocess.STDOUT,
    )


async def test_kill_9_during_make(client: Client, settings: Settings, demo_repo: Path, tmp_path):
    agent = write_agent(tmp_path, AGENT)
    spec = TaskSpec.model_validate(task(demo_repo, agent, budget={"max_attempts": 3}))
    orphan_file = agent_file(settings, spec.id, 2, "calls.jsonl.orphan")
    log = tmp_path / "worker.log"
    first = await spawn_worker(client, settings, log)
    handle, _ = await start_task(client, spec, settings.task_queue)
    deadline = time.monotonic() + 60
    while not orphan_file.exists():
        assert time.monotonic() < deadline, log.read_text()
        await asyncio.sleep(0.1)
    orphan = int(orphan_file.read_text())

    first.send_signal(signal.SIGKILL)
    await first.wait()
    restarted_at = time.time()
    second = await spawn_worker(client, settings, log)
    try:
        result = await result_of(handle, within=60)
    finally:
        second.send_signal(signal.SIGTERM)
        await second.wait()

    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    calls = agent_calls(settings, spec.id)
    assert [c["attempt"] for c in calls] == [1, 2, 2]  # attempt 1 ran once, never again
    retry_started = calls[-1]["t"] - restarted_at
    print(f"retry started {retry_started:.2f} s after the new worker")
    assert retry_started < 10, f"the retried make started {retry_started:.1f} s after restart"
    # The agent orphaned by the crash was killed before the retry ran.
    assert not Path(f"/proc/{orphan}").exists() or " Z " in Path(f"/proc/{orphan}/stat").read_text()
    assert [a.attempt for a in result.attempts] == [1, 2]
    assert isinstance(result, TaskResult) and result.attempts[1].verdict.passed
    assert second.returncode == 0  # SIGTERM drains and exits cleanly
