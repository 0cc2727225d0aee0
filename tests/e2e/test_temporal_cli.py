"""The `temporal workflow ...` commands of docs/guides/answering.md, run with the real
binary against a real server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from temporalio.client import Client

from loop.contracts import TaskResult, TaskState
from loop.devserver import temporal_binary
from loop.settings import Settings
from tests.support.agents import write_agent
from tests.support.tasks import answers_in_history, result_of, start, task, wait_for
from worker import build_worker

pytestmark = pytest.mark.timeout(120)

FIX_AT_ONCE = 'pathlib.Path("slugify.py").write_text(COMPLETE)\n'


async def run_temporal(client: Client, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(temporal_binary()),
        *args,
        "--address",
        client.service_client.config.target_host,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "TEMPORAL_CLI_SHOW_STACKS": "0"},
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def temporal(client: Client, *args: str) -> str:
    code, out, err = await run_temporal(client, *args)
    assert code == 0, f"temporal {' '.join(args)}: {err}"
    return out


async def test_readme_commands(client: Client, settings: Settings, demo_repo: Path, tmp_path):
    agent = write_agent(tmp_path, FIX_AT_ONCE)
    spec = task(demo_repo, agent, autonomy="assisted")
    task_yaml = tmp_path / "task.yaml"
    task_yaml.write_text(yaml.safe_dump(spec))
    # As the guide says: `loop start task.yaml --print > task.json`.
    loop = str(Path(sys.executable).parent / "loop")
    printed = await asyncio.create_subprocess_exec(
        loop, "start", str(task_yaml), "--print", stdout=asyncio.subprocess.PIPE, cwd=tmp_path
    )
    out, _ = await printed.communicate()
    assert printed.returncode == 0
    task_json = tmp_path / "task.json"
    task_json.write_bytes(out)
    wid = f"task-{spec['id']}"
    async with build_worker(client, settings):
        await temporal(
            client,
            "workflow",
            "start",
            "--type",
            "TaskWorkflow",
            "--task-queue",
            settings.task_queue,
            "--workflow-id",
            wid,
            "--input-file",
            str(task_json),
        )
        for _ in range(200):
            status = json.loads(
                await temporal(
                    client,
                    "workflow",
                    "query",
                    "--workflow-id",
                    wid,
                    "--name",
                    "status",
                    "--output",
                    "json",
                )
            )
            state = status["queryResult"][0]["state"]
            if state == "AWAITING_APPROVAL":
                break
            await asyncio.sleep(0.1)
        assert state == "AWAITING_APPROVAL"
        listed = await temporal(
            client,
            "workflow",
            "list",
            "--query",
            'LoopState="AWAITING_APPROVAL"',
            "--output",
            "json",
        )
        assert wid in listed
        await temporal(
            client,
            "workflow",
            "signal",
            "--workflow-id",
            wid,
            "--name",
            "approve",
            "--input",
            '{"note":"ok"}',
        )
        result = await result_of(client.get_workflow_handle(wid, result_type=TaskResult))
    assert result.state == TaskState.DONE_WITH_EVIDENCE
    assert result.final_action == "merged"
    assert any(e.kind == "signal" and "approve: ok" in e.detail for e in result.events)


SLOW = "time.sleep(60)\n"


async def test_an_answer_as_an_update_is_refused_with_the_reason_or_taken(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """`temporal workflow update execute` hears what `loop approve` hears: the reason an
    answer does not apply (and nothing is written to history), or what it did."""
    running = task(demo_repo, write_agent(tmp_path, SLOW))
    waiting = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    async with build_worker(client, settings):
        slow = await start(client, settings, running)
        done = await start(client, settings, waiting)
        try:
            await wait_for(slow, lambda st: st.phase == "make")
            refused = await run_temporal(
                client, "workflow", "update", "execute", "--workflow-id", slow.id,
                "--name", "approve", "--input", '{"note":"ok"}',
            )  # fmt: skip
            assert await answers_in_history(slow) == []
        finally:
            await slow.cancel()
        await wait_for(done, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        taken = await temporal(
            client, "workflow", "update", "execute", "--workflow-id", done.id,
            "--name", "approve", "--input", '{"note":"ok"}', "--output", "json",
        )  # fmt: skip
        result = await result_of(done)
    code, _, err = refused
    assert code != 0
    assert f"task {running['id']} is RUNNING; approve does not apply now" in err, err
    reply = json.loads(taken)["result"]
    assert reply["did"] == f"approved; merge of loop/{waiting['id']} into main requested", reply
    assert result.state == TaskState.DONE_WITH_EVIDENCE
    assert result.final_action == "merged"
    assert any(e.detail == "approve: ok (unsigned)" for e in result.events if e.kind == "signal")
