"""Live progress during a long attempt: ``loop status`` and ``loop start --wait`` show the
running attempt's time, tokens, cost and last line moving as it happens, from the
workflow's description (its ``make`` step's heartbeat), not from its last step.

Two slow agents, 50 s each: a scripted one that reports its usage in ``LOOP_USAGE_FILE``
every 2 s, and one that calls a slow model through the gateway (``agent.provider``),
which meters each call as it ends. The review page's side is in test_ui_browser.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import pty
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from loop.contracts import Phase, TaskState
from loop.settings import Settings
from tests.support.agents import write_agent
from tests.support.model_server import ScriptedModel, reply
from tests.support.tasks import result_of, start, task, wait_for
from tests.support.ui import LOOP, run_loop, ui_env
from worker import build_worker

pytestmark = pytest.mark.timeout(180)

EVERY_S = 5.0
"""The promise: what a person sees moves at least this often."""
WATCH_S = 16.0

SLOW_AGENT = """
usage = pathlib.Path(os.environ["LOOP_USAGE_FILE"])
for i in range(1, 26):
    print(f"step {i}: reading the code", flush=True)
    tmp = usage.with_suffix(".tmp")
    tmp.write_text(json.dumps({"tokens_in": 100 * i, "tokens_out": 10 * i, "cost_usd": 0.001 * i}))
    os.replace(tmp, usage)
    time.sleep(2)
"""
"""50 s, its usage growing every 2 s in LOOP_USAGE_FILE, a line printed each time."""

SLOW_MODEL_AGENT = """
import urllib.request
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
for i in range(1, 26):
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "go"}]})
    req = urllib.request.Request(base + "/chat/completions", data=body.encode(),
                                 headers={"Authorization": f"Bearer {key}",
                                          "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()
    print(f"call {i} answered", flush=True)
"""
"""Model calls through the gateway, each answered after 2 s: 50 s in all."""


def slow_model() -> ScriptedModel:
    model = ScriptedModel()
    model.script([reply("thinking", usage=(300, 20), delay=2.0) for _ in range(25)])
    return model


@dataclass
class Seen:
    at: float
    seconds: float
    tokens: int
    cost: float
    line: str


def longest_still(seen: list[Seen], figure: str) -> float:
    """The longest time a figure stood still between two readings that moved it."""
    moved = [seen[0].at] + [
        b.at for a, b in itertools.pairwise(seen) if getattr(b, figure) > getattr(a, figure)
    ]
    moved.append(seen[-1].at)
    return max(b - a for a, b in itertools.pairwise(moved))


def assert_moving(seen: list[Seen]) -> None:
    assert seen[-1].at - seen[0].at >= WATCH_S - 2, "watched for too short a time"
    for figure in ("seconds", "tokens", "cost"):
        still = longest_still(seen, figure)
        assert still <= EVERY_S, f"{figure} stood still for {still:.1f} s: {seen}"
        assert getattr(seen[-1], figure) > getattr(seen[0], figure), figure


async def watch_status(
    env: WorkflowEnvironment, settings: Settings, task_id: str
) -> tuple[list[Seen], str]:
    """``loop status ID --json`` polled for ``WATCH_S`` seconds, as a person would; and
    the last ``loop status ID`` as text."""
    seen: list[Seen] = []
    deadline = time.monotonic() + WATCH_S
    while time.monotonic() < deadline:
        code, out = await run_loop(env, settings, "status", task_id, "--json")
        assert code == 0, out
        st = json.loads(out)
        used, p = st["budget"]["used"], st["progress"]
        assert p is not None, st
        seen.append(Seen(time.monotonic(), used["seconds"], used["tokens"], used["cost_usd"],
                         p["last_line"]))  # fmt: skip
        await asyncio.sleep(0.5)
    code, text = await run_loop(env, settings, "status", task_id)
    assert code == 0, text
    return seen, text


@pytest_asyncio.fixture
async def running(client: Client, settings: Settings) -> AsyncIterator[Any]:
    async with build_worker(client, settings):
        yield
    # the tasks were cancelled by their tests


async def in_make(handle: WorkflowHandle) -> None:
    await wait_for(handle, lambda s: s.phase == Phase.MAKE and s.attempt == 1, within=60)
    await asyncio.sleep(2)  # its first heartbeat


async def test_status_moves_during_a_slow_scripted_agent(
    env: WorkflowEnvironment, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path,
    running: Any,
) -> None:  # fmt: skip
    spec = task(demo_repo, write_agent(tmp_path, SLOW_AGENT))
    spec["agent"] |= {"timeout": 120, "usage": "file"}
    handle = await start(client, settings, spec)
    await in_make(handle)
    seen, text = await watch_status(env, settings, spec["id"])
    await handle.cancel()
    assert (await result_of(handle)).state == TaskState.CANCELLED
    assert_moving(seen)
    assert seen[-1].line.startswith("step ") and seen[-1].line != seen[0].line
    # The text form: the progress line, and the wall clock in the budget table moving.
    assert "attempt 1 · " in text and " tokens · $0.0" in text and "last: step " in text


async def test_status_moves_during_calls_to_a_slow_model(
    env: WorkflowEnvironment, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path,
    running: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("OPENAI_API_KEY", "sk-progress-0000")
    with slow_model() as model:
        spec = task(demo_repo, write_agent(tmp_path, SLOW_MODEL_AGENT))
        spec["agent"] |= {"timeout": 120, "provider": {"api": "openai", "base_url": model.url}}
        handle = await start(client, settings, spec)
        await in_make(handle)
        seen, text = await watch_status(env, settings, spec["id"])
        await handle.cancel()
        assert (await result_of(handle)).state == TaskState.CANCELLED
    assert_moving(seen)
    assert " model calls · last: call " in text  # the gateway's count, the agent's line


async def test_wait_shows_progress_in_place_and_ctrl_c_leaves_the_task_running(
    env: WorkflowEnvironment, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path,
    running: Any,
) -> None:  # fmt: skip
    """On a terminal the progress line is rewritten in place (``\\r``, erase line); Ctrl-C
    stops the following only, and says how to follow or cancel the task."""
    spec = task(demo_repo, write_agent(tmp_path, SLOW_AGENT))
    spec["agent"] |= {"timeout": 120, "usage": "file"}
    file = tmp_path / "slow.yaml"
    file.write_text(yaml.safe_dump(spec))
    primary, secondary = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        LOOP, "start", str(file), "--wait", stdout=secondary, stderr=asyncio.subprocess.PIPE,
        env=ui_env(env, settings, COLUMNS="200", TERM="xterm"),
    )  # fmt: skip
    os.close(secondary)
    shown = bytearray()

    def read_all() -> None:
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = asyncio.get_running_loop().run_in_executor(None, read_all)
    deadline = time.monotonic() + 60
    while b"tokens" not in shown or shown.count(b"\r\x1b[K") < 6:
        assert time.monotonic() < deadline, shown.decode(errors="replace")
        await asyncio.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    os.close(primary)
    await reader
    text = shown.decode(errors="replace")
    assert proc.returncode == 130
    assert "\r\x1b[Kattempt 1 · " in text and "last: step " in text
    said = err.decode()
    assert f"stopped following {spec['id']}; the task goes on" in said
    assert f"loop start {file} --wait" in said and f"loop cancel {spec['id']}" in said
    handle = client.get_workflow_handle(f"task-{spec['id']}")
    st = await wait_for(handle, lambda s: True)
    assert st.state == TaskState.RUNNING and st.phase == Phase.MAKE  # it went on
    await handle.cancel()
    await result_of(handle)


async def test_wait_without_a_tty_prints_plain_progress_lines(
    env: WorkflowEnvironment, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path,
    running: Any,
) -> None:  # fmt: skip
    spec = task(demo_repo, write_agent(tmp_path, SLOW_AGENT))
    spec["agent"] |= {"timeout": 120, "usage": "file"}
    file = tmp_path / "slow.yaml"
    file.write_text(yaml.safe_dump(spec))
    proc = await asyncio.create_subprocess_exec(
        LOOP, "start", str(file), "--wait", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=ui_env(env, settings, COLUMNS="200"),
    )  # fmt: skip
    await asyncio.sleep(25)
    proc.send_signal(signal.SIGINT)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("attempt 1 · ")]
    assert len(lines) >= 2 and "\r" not in out.decode() and "\x1b" not in out.decode()
    tokens = [int(ln.split(" · ")[2].split()[0].replace(",", "")) for ln in lines]
    assert tokens == sorted(tokens) and tokens[-1] > tokens[0]
    handle = client.get_workflow_handle(f"task-{spec['id']}")
    await handle.cancel()
    await result_of(handle)


async def test_wait_says_again_that_no_worker_polls(
    env: WorkflowEnvironment, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """No worker: the note at the start, and again while nothing happens, rather than
    a silent minute that looks like a task at work."""
    spec = task(demo_repo, write_agent(tmp_path, SLOW_AGENT))
    file = tmp_path / "idle.yaml"
    file.write_text(yaml.safe_dump(spec))
    proc = await asyncio.create_subprocess_exec(
        LOOP, "start", str(file), "--wait", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=ui_env(env, settings, COLUMNS="200"),
    )  # fmt: skip
    assert proc.stderr is not None
    notes: list[float] = []
    began = time.monotonic()
    while len(notes) < 2:
        said = await asyncio.wait_for(proc.stderr.readline(), 30)
        if b"no worker polls task queue" in said:
            notes.append(time.monotonic() - began)
    proc.send_signal(signal.SIGINT)
    await asyncio.wait_for(proc.communicate(), 30)
    assert notes[0] < 10 and 8 <= notes[1] - notes[0] <= 20, notes
    await env.client.get_workflow_handle(f"task-{spec['id']}").terminate("test over")
