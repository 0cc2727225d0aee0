"""The review page as a user runs it: ``loop ui`` in a subprocess against the test server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from loop.settings import Settings

LOOP = str(Path(sys.executable).parent / "loop")


def ui_env(env: WorkflowEnvironment, settings: Settings, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LOOP_"))}
    base.update(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        TEMPORAL_NAMESPACE=env.client.namespace,
        LOOP_HOME=str(settings.home),
        LOOP_TASK_QUEUE=settings.task_queue,
        NO_COLOR="1",
        **extra,
    )
    return base


@contextlib.asynccontextmanager
async def loop_ui(
    env: WorkflowEnvironment, settings: Settings, *args: str, **extra: str
) -> AsyncIterator[str]:
    """``loop ui --bind 127.0.0.1:0 [ARGS]`` running; yields its address (from its first
    line)."""
    proc = await asyncio.create_subprocess_exec(
        LOOP,
        "ui",
        "--bind",
        "127.0.0.1:0",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ui_env(env, settings, **extra),
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            first = await asyncio.wait_for(proc.stdout.readline(), 30)
        except TimeoutError:
            pytest.fail("loop ui printed no address within 30 s")
        line = first.decode()
        m = re.search(r"Loopwork review page: (http://127\.0\.0\.1:\d+)/", line)
        if not m:
            err = (await proc.stderr.read()).decode()
            pytest.fail(f"loop ui did not start: {line!r} {err!r}")
        yield m.group(1)
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                pytest.fail("loop ui did not stop within 10 s of SIGTERM")
    assert proc.returncode == 0, "SIGTERM stops loop ui gracefully (exit 0)"


async def run_loop(
    env: WorkflowEnvironment,
    settings: Settings,
    *args: str,
    cwd: Path | None = None,
    within: float = 90,
    **extra: str,
) -> tuple[int, str]:
    """``loop ARGS`` as a person runs it, against the test's server, LOOP_HOME and queue:
    (exit code, stdout and stderr); never a traceback."""
    proc = await asyncio.create_subprocess_exec(
        LOOP, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=ui_env(env, settings, COLUMNS="300", **extra), cwd=cwd,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), within)
    assert proc.returncode is not None and b"Traceback" not in err, err.decode()
    return proc.returncode, out.decode() + err.decode()
