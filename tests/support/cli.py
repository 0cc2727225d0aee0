"""Command-line tools run as subprocesses against a test's Temporal server."""

from __future__ import annotations

import asyncio
import os

from temporalio.client import Client

from loop.devserver import temporal_binary


async def temporal(client: Client, *args: str) -> str:
    """``temporal ARGS... --address <the client's server>``; its stdout, or the test fails."""
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
    assert proc.returncode == 0, f"temporal {' '.join(args)}: {err.decode()}"
    return out.decode()
