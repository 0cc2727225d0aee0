"""The composition root registers every declared activity stub; examples validate."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from temporalio import activity

from loop import contracts
from loop.contracts import ALL_ACTIVITIES, TaskSpec
from loop.settings import Settings
from worker import WORKFLOWS, activities_for

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def declared() -> set[str]:
    """Every typed activity stub in loop.contracts, wherever it is grouped."""
    return {v.name for v in vars(contracts).values() if isinstance(v, contracts.ActivityDef)}


def test_worker_registers_every_declared_activity(tmp_path: Path):
    registered = {
        activity._Definition.must_from_callable(a).name
        for a in activities_for(Settings(home=tmp_path))
    }
    assert registered == declared()
    assert {d.name for d in ALL_ACTIVITIES} <= declared()


def test_worker_registers_the_task_workflow():
    from temporalio import workflow

    names = {workflow._Definition.must_from_class(w).name for w in WORKFLOWS}
    assert "TaskWorkflow" in names


@pytest.mark.parametrize("name", ["claude-code.yaml", "codex.yaml", "aider.yaml", "openai.yaml"])
def test_example_task_files_are_valid(name: str):
    spec = TaskSpec.model_validate(yaml.safe_load((EXAMPLES / name).read_text()))
    if spec.agent.backend == "command":
        assert spec.agent.command and "LOOP_PROMPT_FILE" in " ".join(spec.agent.command)
    else:
        assert spec.agent.model and any(g.kind == "llm_review" for g in spec.verify)


async def test_worker_serves_prometheus_metrics(env, tmp_path: Path):
    """LOOP_METRICS_BIND exposes the SDK's metrics; SIGTERM still drains and exits 0."""
    import asyncio
    import os
    import signal
    import socket
    import sys
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "LOOP_HOME": str(tmp_path),
        "LOOP_TASK_QUEUE": "metrics-test",
        "LOOP_METRICS_BIND": f"127.0.0.1:{port}",
    }
    root = Path(__file__).resolve().parents[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(root / "worker.py"),
        env=worker_env,
        cwd=root,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return r.read().decode()

    try:
        text = ""
        for _ in range(100):
            try:
                text = await asyncio.to_thread(scrape)
                if "temporal_" in text:
                    break
            except OSError:
                pass
            await asyncio.sleep(0.1)
        assert "temporal_" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0


def test_a_bad_setting_is_one_clear_error():
    from loop.errors import BadInput

    with pytest.raises(BadInput, match="LOOP_MAX_ACTIVITIES='many'"):
        Settings.from_env({"LOOP_MAX_ACTIVITIES": "many"})
