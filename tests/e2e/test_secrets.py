"""Secrets stay secret on a real server: encrypted payloads in the history, read back
through the codec endpoint, and a planted secret that appears nowhere. The codec
endpoint's own rules and redaction are in tests/unit/test_secrets.py."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import threading
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.codec import KEY_ENV, EncryptionCodec, data_converter, load_key, make_server
from loop.contracts import TaskSpec, TaskState
from loop.devserver import temporal_binary
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import write_agent
from tests.support.tasks import result_of, task
from worker import build_worker

pytestmark = pytest.mark.timeout(120)
MARKER = "PLANTED-GOAL-MARKER-7d1f"
TOKEN = "codec-token-for-tests"


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "codec.key"
    path.write_text(os.urandom(32).hex())
    return path


async def temporal(client: Client, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(temporal_binary()),
        *args,
        "--address",
        client.service_client.config.target_host,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_history_is_ciphertext_and_the_codec_server_reads_it(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, key_file: Path
):
    sealed_client = await Client.connect(
        client.service_client.config.target_host,
        data_converter=data_converter({KEY_ENV: str(key_file)}),
    )
    agent = write_agent(tmp_path, 'pathlib.Path("slugify.py").write_text(COMPLETE)\n')
    good = TaskSpec.model_validate(task(demo_repo, agent, goal=f"fix slugify {MARKER}"))
    bad = TaskSpec.model_validate(task(tmp_path / "missing-repo", agent))
    async with build_worker(sealed_client, settings):
        handle, _ = await start_task(sealed_client, good, settings.task_queue)
        assert (await result_of(handle)).state == TaskState.DONE_WITH_EVIDENCE
        failing, _ = await start_task(sealed_client, bad, settings.task_queue)
        assert (await result_of(failing)).state == TaskState.BLOCKED

    shown = await temporal(
        client, "workflow", "show", "--workflow-id", handle.id, "--output", "json"
    )
    assert MARKER not in shown and "slugify" not in shown
    assert base64.b64encode(b"binary/encrypted").decode() in shown
    failed = await temporal(
        client, "workflow", "show", "--workflow-id", failing.id, "--output", "json"
    )
    assert "Encoded failure" in failed and "missing-repo" not in failed

    server = make_server(
        EncryptionCodec(load_key(key_file)),
        host="127.0.0.1",
        port=0,
        token=TOKEN,
        ui_origin="http://localhost:8233",
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        decoded = await temporal(
            client,
            "workflow",
            "show",
            "--workflow-id",
            handle.id,
            "--output",
            "json",
            "--codec-endpoint",
            endpoint,
            "--codec-auth",
            f"Bearer {TOKEN}",
        )
    finally:
        server.shutdown()
    assert MARKER in payload_text(decoded)
    assert MARKER not in payload_text(shown)


async def test_without_the_key_the_cli_says_so_in_one_line(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, key_file: Path
):
    """The worker has the key, the CLI does not: one line naming the variable, exit 2."""
    sealed = await Client.connect(
        client.service_client.config.target_host,
        data_converter=data_converter({KEY_ENV: str(key_file)}),
    )
    agent = write_agent(tmp_path, 'pathlib.Path("slugify.py").write_text(COMPLETE)\n')
    spec = TaskSpec.model_validate(task(demo_repo, agent))
    async with build_worker(sealed, settings):
        handle, _ = await start_task(sealed, spec, settings.task_queue)
        await result_of(handle)
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    env["TEMPORAL_ADDRESS"] = client.service_client.config.target_host
    loop = str(Path(sys.executable).parent / "loop")
    for command in (["status", spec.id], ["trace", spec.id]):
        proc = await asyncio.create_subprocess_exec(
            loop, *command, env=env, cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        assert proc.returncode == 2, (command, out, err)
        assert err.decode() == (
            "error: the payloads are encrypted: set LOOP_CODEC_KEY_FILE to the key file "
            "the worker uses\n"
        ), command


def payload_text(shown: str) -> str:
    """Every payload's data in a `temporal workflow show --output json`, decoded from base64."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "data" and isinstance(v, str):
                    found.append(base64.b64decode(v).decode(errors="replace"))
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.loads(shown))
    return "\n".join(found)


LEAKY = """
print(dict(os.environ))
pathlib.Path(os.environ["LOOP_OUTPUT_FILE"]).write_text(
    "done " + os.environ.get("GITHUB_TOKEN", "") + " sk-abcdefghijklmnopqrstuv")
"""


async def test_a_planted_secret_appears_nowhere_even_when_the_agent_prints_it(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, monkeypatch, capfd
):
    planted = "ghp_PLANTEDplantedPLANTED0123456789ab"
    monkeypatch.setenv("GITHUB_TOKEN", planted)
    agent = write_agent(tmp_path, LEAKY)
    spec = task(demo_repo, agent, budget={"max_attempts": 1}, approval_timeout=1)
    spec["sandbox"] = {"mode": "basic", "env": ["GITHUB_TOKEN"]}  # passed through on purpose
    async with build_worker(client, settings):
        handle, _ = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
        result = await result_of(handle)
    assert result.state == TaskState.BUDGET_EXCEEDED
    assert "[redacted]" in result.attempts[0].make.claim  # the agent did print it
    assert planted not in result.model_dump_json()
    assert planted not in (await handle.fetch_history()).to_json()
    # Everything the worker wrote is redacted; the agent's own folders (its output folder
    # and HOME, where it put what it was given on purpose) are its own, never copied as-is.
    own = {"agent", "home"}
    for path in settings.home.rglob("*"):
        if path.is_file() and not own & set(path.relative_to(settings.home).parts[1:4]):
            assert planted not in path.read_text(errors="replace"), path
    claim = settings.runs / spec["id"] / "attempt-1" / "claim.md"
    assert "[redacted]" in claim.read_text() and planted not in claim.read_text()
    out, err = capfd.readouterr()
    assert planted not in out + err
