"""kill -9 the worker while `make` runs; a new worker finishes the task without redoing work."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import TaskResult, TaskSpec, TaskState
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import agent_calls, agent_file, write_agent
from tests.support.tasks import result_of, task
from tests.support.workers import Host

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


async def killed_under_make(
    client: Client, settings: Settings, spec: TaskSpec, hanging: Path
) -> tuple[TaskResult, Host, asyncio.subprocess.Process | None]:
    """Start ``spec`` on a worker process, ``kill -9`` it once the agent says it hangs
    (``hanging`` exists), start a new one; the result, the host and the new process."""
    host = Host(client, settings.home, settings.task_queue)
    await host.start()
    handle, _ = await start_task(client, spec, settings.task_queue)
    deadline = time.monotonic() + 60
    while not hanging.exists():
        assert time.monotonic() < deadline, host.tail()
        await asyncio.sleep(0.1)
    assert host.process is not None
    host.process.send_signal(signal.SIGKILL)  # the worker alone: its agent lives on
    await host.process.wait()
    await host.start()
    second = host.process
    try:
        return await result_of(handle, within=60), host, second
    finally:
        await host.stop()


async def test_kill_9_during_make(client: Client, settings: Settings, demo_repo: Path, tmp_path):
    agent = write_agent(tmp_path, AGENT)
    spec = TaskSpec.model_validate(task(demo_repo, agent, budget={"max_attempts": 3}))
    orphan_file = agent_file(settings, spec.id, 2, "calls.jsonl.orphan")
    result, host, second = await killed_under_make(client, settings, spec, orphan_file)
    orphan = int(orphan_file.read_text())

    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    calls = agent_calls(settings, spec.id)
    assert [c["attempt"] for c in calls] == [1, 2, 2]  # attempt 1 ran once, never again
    # The new worker failed what the dead one ran (its lease file) instead of waiting for
    # the heartbeat timeout: the retry starts at once (bench/recovery.py measures it).
    retry_started = calls[-1]["t"] - host.started_at
    print(f"retry started {retry_started:.2f} s after the new worker")
    assert retry_started <= 4, f"the retried make started {retry_started:.1f} s after restart"
    # The agent orphaned by the crash was killed before the retry ran.
    assert not Path(f"/proc/{orphan}").exists() or " Z " in Path(f"/proc/{orphan}/stat").read_text()
    assert [a.attempt for a in result.attempts] == [1, 2]
    assert isinstance(result, TaskResult) and result.attempts[1].verdict.passed
    assert second is not None and second.returncode == 0  # SIGTERM drains, exits cleanly


# One model call through the gateway on each run; the first run then hangs (the worker
# gets killed under it), the retried one fixes the bug.
PAID = """
import urllib.request
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}
                    ).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
urllib.request.urlopen(request, timeout=30).read()
runs = list(map(json.loads, log.read_text().splitlines()))
if len(runs) == 1:
    pathlib.Path(str(log) + ".orphan").write_text(str(os.getpid()))
    time.sleep(60)
pathlib.Path("slugify.py").write_text(COMPLETE)
"""


async def test_kill_9_during_make_keeps_what_its_model_calls_cost(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, monkeypatch
) -> None:
    """The killed try's call was billed: the retried try starts from it, so the attempt's
    usage (and its budget) counts both calls, not only the retry's."""
    from tests.support.gateway import KEY
    from tests.support.model_server import ScriptedModel, reply

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedModel() as model:
        model.script([reply("ok", usage=(1000, 50))] * 3)
        agent = write_agent(tmp_path, PAID)
        spec = TaskSpec.model_validate(
            task(demo_repo, agent, budget={"max_attempts": 1, "max_tokens": 5000})
            | {"agent": {"command": agent, "model": "gpt-4o-mini",
                         "provider": {"api": "openai", "base_url": model.url}}}
        )  # fmt: skip
        orphan_file = agent_file(settings, spec.id, 1, "calls.jsonl.orphan")
        result, _, _ = await killed_under_make(client, settings, spec, orphan_file)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    made = result.attempts[0].make
    assert made is not None and made.tries == 2
    journal = settings.runs / spec.id / "attempt-1" / "calls.jsonl"
    kept = journal.read_text() if journal.exists() else "no journal"
    assert len(model.requests) == 2 and made.model_calls == 2, kept
    assert result.tokens == 2 * 1050
