"""The model gateway as its tests reach it: a run's grant attached on a loopback listener
and called as a CLI would, and a command agent that calls through it and notes what it
could see of its environment, /proc and HOME (where a leaked key would be)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from activities.host.gateway import GATEWAY, Grant, host_listener
from loop.contracts import ProviderApi, TaskSpec
from tests.support.agents import write_agent

KEY = "sk-real-key-planted-0000"
"""The real key the worker holds in the tests: it must never reach a sandbox."""


def grant(upstream: str, api: ProviderApi = "openai", task: str = "task-a", **limits: Any) -> Grant:
    return Grant(task_id=task, attempt=1, api=api, upstream=upstream, key=KEY, **limits)


@asynccontextmanager
async def attached(g: Grant) -> AsyncIterator[httpx.AsyncClient]:
    """``g``'s run attached to the gateway; a client at its address (as the CLI's base)."""
    listener = host_listener()
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    async with GATEWAY.serving(listener, g):
        async with httpx.AsyncClient(base_url=base, timeout=20, trust_env=False) as client:
            yield client


def bearer(g: Grant) -> dict[str, str]:
    return {"authorization": f"Bearer {g.token}"}


async def raw(client: httpx.AsyncClient, request: str) -> bytes:
    """Bytes sent as they are to the gateway ``client`` talks to; its answer's first line."""
    url = httpx.URL(str(client.base_url))
    reader, writer = await asyncio.open_connection(url.host, url.port)
    writer.write(request.encode())
    await writer.drain()
    line = await reader.readline()
    writer.close()
    return line


CALLING_AGENT = """
import itertools, urllib.error, urllib.request
base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
seen = {"env": dict(os.environ),
        "proc": pathlib.Path("/proc/self/environ").read_bytes().decode(errors="replace"),
        "home": {str(p): p.read_text(errors="replace") for p in  # a sandbox's own HOME
                 itertools.islice(pathlib.Path(os.environ["HOME"]).rglob("*"), 500)
                 if p.is_file() and p.stat().st_size < 1 << 20}}
answers = []
for i in range(CALLS):
    body = {"model": "gpt-4o-mini", "stream": i % 2 == 1,
            "messages": [{"role": "user", "content": "fix it"}]}
    request = urllib.request.Request(
        base + "/chat/completions", data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        answers.append(urllib.request.urlopen(request, timeout=30).status)
    except urllib.error.HTTPError as e:
        answers.append(e.code)
        print("refused:", e.read().decode())
        break
pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text(json.dumps({"seen": seen, "answers": answers}))
"""


def calling_spec(
    folder: Path, repo: Path, level: str, url: str, calls: int, network: str = "proxy", **more: Any
) -> TaskSpec:
    command = write_agent(folder, f"CALLS = {calls}\n" + CALLING_AGENT)
    return TaskSpec.model_validate(
        {"id": f"gw-{level}-{uuid.uuid4().hex[:6]}", "goal": "fix slugify", "repo": str(repo),
         "agent": {"command": command, "model": "gpt-4o-mini",
                   "provider": {"api": "openai", "base_url": url}},
         "verify": [{"name": "tests", "run": "python3 -m unittest discover -s tests -t ."}],
         "sandbox": {"mode": level, "network": network}, **more}
    )  # fmt: skip
