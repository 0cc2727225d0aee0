"""Three candidates against one: the wall time of a task whose agents mostly wait on
their model.

The agent calls its model through the gateway ``--calls`` times, each answer taking
``--wait`` seconds (the scripted model server), then writes the fix: what a real coding
agent's attempt is, mostly waiting on its model. Each round runs the same task three
ways, interleaved (so a slow moment of the machine falls on all of them), after a round
that is not counted (the worker's first sandbox, egress proxy and run at base): without
candidates (one agent), with ``candidates: 3`` and ``choose: best`` (all three run to
their verdict, on one host, in parallel), and with ``choose: first`` (the others are
stopped once one passes). The table is each one's median wall time from start to
result, and its ratio to the one agent's. The target: three candidates at most 1.3x one.

    .venv/bin/python bench/candidates.py [--rounds 5] [--calls 5] [--wait 1.0] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from common import (
    COMPLETE_FIX,
    connect,
    loopwork_server,
    make_demo_repo,
    median,
    print_machine,
    print_table,
    script_agent,
    task_spec,
    temp_home,
)

from loop.contracts import TaskResult, TaskSpec, TaskState
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.model_server import ScriptedModel, reply
from worker import build_worker

KEY = "sk-bench-0000"
AGENT = """
import urllib.request
base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
for i in range(CALLS):
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"step {i}"}]}
    request = urllib.request.Request(
        base + "/chat/completions", data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=120).read()
pathlib.Path("slugify.py").write_text(FIX)
"""
WAYS = {
    "one agent": {},
    "3 candidates, best": {"candidates": 3, "choose": "best"},
    "3 candidates, first": {"candidates": 3, "choose": "first"},
}


async def main(args: argparse.Namespace) -> None:
    print_machine("Three candidates against one agent, each mostly waiting on its model")
    os.environ["OPENAI_API_KEY"] = KEY  # the worker's key; the sandbox gets a token
    with temp_home() as home, ScriptedModel() as model:
        model.script([reply("ok", usage=(200, 20), delay=args.wait)] * 10_000)
        repo = make_demo_repo(home.parent)
        command = script_agent(
            home.parent, f"CALLS = {args.calls}\nFIX = {COMPLETE_FIX!r}\n" + AGENT
        )
        agent: dict[str, Any] = {
            "command": command, "model": "gpt-4o-mini", "timeout": 600,
            "provider": {"api": "openai", "base_url": model.url},
        }  # fmt: skip
        settings = Settings(home=home, task_queue="bench-candidates")
        times: dict[str, list[float]] = {way: [] for way in WAYS}
        async with loopwork_server(home / "server") as server:
            client = await connect(server.address)
            async with build_worker(client, settings):
                for round_ in range(-1, args.rounds):  # round 0: the worker's warm-up
                    for way, more in WAYS.items():
                        spec = TaskSpec.model_validate(
                            {**task_spec(repo, command, **more), "agent": agent}
                        )
                        started = time.monotonic()
                        handle, _ = await start_task(client, spec, settings.task_queue)
                        result: TaskResult = await handle.result()
                        took = time.monotonic() - started
                        assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
                        print(f"round {round_ + 1} {way}: {took:.2f} s", flush=True)
                        if round_ >= 0:
                            times[way].append(took)
    one = median(times["one agent"])
    waited = args.calls * args.wait
    print()
    rows = [
        [way, len(ts), round(median(ts), 2), round(min(ts), 2), round(max(ts), 2),
         f"{median(ts) / one:.2f}x"]
        for way, ts in times.items()
    ]  # fmt: skip
    print_table(
        ["task", "rounds", "median s", "min s", "max s", "vs one agent"],
        rows,
        title=f"wall time, start to result ({args.calls} model calls of {args.wait:g} s "
        f"each per agent: {waited:g} s of waiting)",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--wait", type=float, default=1.0, help="seconds per model answer")
    parser.add_argument("--quick", action="store_true", help="one round of 2 short calls")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.calls, args.wait = 1, 2, 0.5
    asyncio.run(main(args))
