"""History size of a long model attempt: bytes and events per step, first steps vs last.

One task with the openai backend and a scripted model (tests/support/model_server.py):
``--steps - 1`` ``list_files`` tool calls, then ``finish``. The attempt's model
loop is the child workflow ``task-<id>-attempt-1``; its history (every run, if
it continued as new) is read and split into steps: a step is everything from
one ``model_step`` being scheduled to the next (the model call, its tool calls
and the workflow tasks between them). The target is O(1) bytes per step: the
conversation lives in files, history carries references, so step 199 costs what
step 2 costs.

    .venv/bin/python bench/history.py [--steps 200] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid

from common import (
    connect,
    loopwork_server,
    make_demo_repo,
    print_machine,
    print_table,
    task_spec,
    temp_home,
)
from temporalio.client import Client

from loop.contracts import TaskSpec
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.model_server import ScriptedModel, reply
from worker import build_worker

os.environ.setdefault("OPENAI_API_KEY", "sk-bench-not-a-key")  # read by the model activity
SHOWN = 10


async def history_by_step(
    client: Client, workflow_id: str
) -> tuple[list[list[int]], list[int], int]:
    """([bytes of each event] per step, [bytes of each event] before step 1, number of runs)."""
    runs = [w async for w in client.list_workflows(f'WorkflowId="{workflow_id}"')]
    runs.sort(key=lambda w: w.start_time)
    steps: list[list[int]] = []
    preamble: list[int] = []
    for run in runs:
        handle = client.get_workflow_handle(workflow_id, run_id=run.run_id)
        async for ev in handle.fetch_history_events():
            size = ev.ByteSize()
            if ev.HasField("activity_task_scheduled_event_attributes"):
                name = ev.activity_task_scheduled_event_attributes.activity_type.name
                if name == "model_step":
                    steps.append([])
            if steps:
                steps[-1].append(size)
            else:
                preamble.append(size)
    return steps, preamble, len(runs)


async def history_total(client: Client, workflow_id: str) -> tuple[int, int]:
    total = events = 0
    async for ev in client.get_workflow_handle(workflow_id).fetch_history_events():
        total += ev.ByteSize()
        events += 1
    return total, events


def slope(xs: list[int], ys: list[int]) -> float:
    """Least-squares bytes per step of growth."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="model steps (default 200)")
    parser.add_argument("--quick", action="store_true", help="a tiny version (< 30 s)")
    args = parser.parse_args()
    if args.quick:
        args.steps = 25
    n = args.steps
    print_machine("history: bytes per step of a long model attempt")
    print(f"{n} model steps: {n - 1} list_files tool calls, then finish\n", flush=True)

    script = [reply(tool_calls=[("list_files", {"path": "."})], usage=(100, 20))] * (n - 1)
    script.append(reply(tool_calls=[("finish", {"answer": "done"})], usage=(100, 20)))
    with temp_home() as home, ScriptedModel() as model:
        model.script(script)
        repo = make_demo_repo(home.parent / "demo")
        data = task_spec(
            repo,
            ["true"],
            verify=[{"name": "trivial", "run": "true"}],
            budget={"max_attempts": 1},
            approval_timeout=1,
        )
        data["agent"] = {
            "backend": "openai",
            "model": "gpt-4o-mini",
            "base_url": model.url,
            "timeout": 1800,
            "max_steps": n + 5,
        }
        spec = TaskSpec.model_validate(data)
        async with loopwork_server(home / "server") as server:
            client = await connect(server.address)
            settings = Settings(home=home, task_queue=f"history-{uuid.uuid4().hex[:6]}")
            async with build_worker(client, settings):
                handle, _ = await start_task(client, spec, settings.task_queue)
                result = await handle.result()
            child_id = f"{handle.id}-attempt-1"
            steps, preamble, runs = await history_by_step(client, child_id)
            parent_bytes, parent_events = await history_total(client, handle.id)
        requests = len(model.requests)

    if len(steps) != n:
        raise RuntimeError(f"expected {n} steps in history, found {len(steps)} ({result.reason})")
    sizes = [sum(s) for s in steps]
    rows = [[i + 1, len(steps[i]), sizes[i]] for i in range(min(SHOWN, n))]
    if n > 2 * SHOWN:
        rows.append(["…", "", ""])
    rows += [[i + 1, len(steps[i]), sizes[i]] for i in range(max(SHOWN, n - SHOWN), n)]
    print_table(["step", "events", "bytes"], rows, title=f"child {child_id}: per step")

    total_events = len(preamble) + sum(len(s) for s in steps)
    total = sum(preamble) + sum(sizes)
    middle = list(range(2, n))  # steps 2 … n-1: neither the first nor the final step
    growth = slope(middle, [sizes[i - 1] for i in middle]) if len(middle) > 1 else 0.0
    early = max(sizes[1:SHOWN])
    late = max(sizes[-SHOWN:-1])
    print_table(
        ["what", "value"],
        [
            ["model calls made", requests],
            ["child workflow runs (continue-as-new)", runs],
            ["child history: events", total_events],
            ["child history: bytes", total],
            ["  of which before step 1", sum(preamble)],
            ["bytes per step, steps 2-10 (max)", early],
            [f"bytes per step, steps {n - SHOWN + 1}-{n - 1} (max)", late],
            [f"final step {n} (finish + result)", sizes[-1]],
            [f"growth per step, least squares over steps 2-{n - 1}", round(growth, 3)],
            ["task workflow history: events", parent_events],
            ["task workflow history: bytes", parent_bytes],
        ],
        title="totals",
    )
    ok = late <= early + 64
    print(
        f"O(1) bytes per step beyond the first: late steps {late} B vs early {early} B "
        f"(growth {growth:.3f} B/step): {'MET' if ok else 'NOT met'}"
    )


if __name__ == "__main__":
    asyncio.run(main())
