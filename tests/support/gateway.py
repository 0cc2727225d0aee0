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


FLOODING_AGENT = """
import threading, urllib.error, urllib.request
base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
own = pathlib.Path(os.environ["LOOP_OUTPUT_FILE"]).parent
head = b'{"model": "gpt-4o-mini", "messages": ['
if WAY == "under":
    body = head + b"{}," * ((MAX_BODY - 64) // 3) + b"{}]}"
elif WAY == "deep":
    body = head + b"[" * ((MAX_BODY - 64) // 2) + b"]" * ((MAX_BODY - 64) // 2) + b"]}"
else:
    body = head + b"{}," * ((16 << 20) // 3 - 20) + b"{}]}"

def parts():
    for i in range(0, len(body), 1 << 20):
        yield body[i : i + (1 << 20)]

def call(results, i):
    # A call whose connection is closed unanswered (the gateway still closing this run's
    # connections of the round before) is sent again, as any client would.
    for _ in range(20):
        data = parts() if WAY == "chunked" else body
        request = urllib.request.Request(base + "/chat/completions", data=data, headers={
            "Authorization": "Bearer " + token, "Content-Type": "application/json"})
        try:
            results[i] = urllib.request.urlopen(request, timeout=120).status
            return
        except urllib.error.HTTPError as e:
            results[i] = e.code
            return
        except OSError as e:
            results[i] = type(e).__name__
            time.sleep(0.2)

rounds = []
while not (own / "stop").exists() and len(rounds) < ROUNDS:
    results = [None] * 32
    threads = [threading.Thread(target=call, args=(results, i)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rounds.append(results)
    (own / "flood.json").write_text(json.dumps(rounds))
pathlib.Path("slugify.py").write_text(FIX)  # the task itself then ends done
"""


def flooding_agent(way: str, rounds: int, fix: str) -> str:
    """An agent body (``json``, ``os``, ``pathlib``, ``time`` imported) that floods its
    gateway: rounds of 32 calls at once, each 16 MiB of ``{},{},…`` with its length
    (``declared``) or without (``chunked``), just under ``MAX_BODY`` of ``{}`` (``under``)
    or of brackets (``deep``); after each round every call's status in its own folder's
    ``flood.json``, until ``rounds`` or a file ``stop`` there; then it writes ``fix``."""
    from activities.host.gateway.server import MAX_BODY

    consts = f"WAY = {way!r}\nROUNDS = {rounds}\nMAX_BODY = {MAX_BODY}\nFIX = {fix!r}\n"
    return consts + FLOODING_AGENT
