"""Start to agent: from ``loop start`` returning to the agent's process running, on a warm
worker.

Each sample runs the real CLI (``loop start task.json``, a subprocess, as a person types
it) against a warm ``python worker.py`` and Loopwork's server, and notes the wall clock
the moment the CLI has exited. The task's agent is a Python script whose first statement
writes ``time.time()`` into a file of its worktree (so its own interpreter's start, some
15-25 ms, is counted against Loopwork). The difference is the sample; the target is a
median of at most 300 ms over 20. The task is ``bench/vs_floor.py``'s trivial one (gates
``true`` and the demo's unit tests), run to its end before the next one starts.

Where the time goes comes from each task's history (the server's event times): the
workflow's first workflow task, the first step (``prepare_and_explore``: the worktree,
the probes, the gates at base), the next workflow task with the reservation until make
starts, and make's own work before the agent runs.

    .venv/bin/python bench/start_to_agent.py [--tasks 20] [--mode basic] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import (
    COMPLETE_FIX,
    ROOT,
    byte_compile,
    connect,
    load_average,
    loopwork_server,
    make_demo_repo,
    median,
    print_machine,
    print_table,
    script_agent,
    spawn_worker,
    stop_process,
    task_spec,
    temp_home,
    wait_for_log,
)
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from vs_floor import VERIFY

from loop.contracts import TaskResult, TaskState, workflow_id_for

LOOP = Path(sys.executable).with_name("loop")
STARTED = ".agent-started"
AGENT = (
    f"pathlib.Path({STARTED!r}).write_text(repr(time.time()))\n"
    f"pathlib.Path('slugify.py').write_text({COMPLETE_FIX!r})\n"
)
WARM = 2


def at(event: object) -> float:
    return event.event_time.ToMicroseconds() / 1e6  # type: ignore[attr-defined]


async def phases(client: Client, workflow_id: str) -> dict[str, float]:
    """The server's times of one task's first events, as offsets from its start (s)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    started = at(history.events[0])
    marks: dict[str, float] = {}
    names: dict[int, str] = {}
    for e in history.events:
        kind = e.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
            marks.setdefault(f"{names[e.event_id]} scheduled", at(e) - started)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            name = names[e.activity_task_started_event_attributes.scheduled_event_id]
            marks.setdefault(f"{name} started", at(e) - started)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            name = names[e.activity_task_completed_event_attributes.scheduled_event_id]
            marks.setdefault(f"{name} completed", at(e) - started)
    return marks


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20, help="samples (median)")
    parser.add_argument("--mode", default="basic", help="the tasks' sandbox level")
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the checkout whose worker.py and loop run"
    )
    parser.add_argument("--quick", action="store_true", help="a tiny version (3 samples)")
    args = parser.parse_args()
    if args.quick:
        args.tasks = 3
    print_machine("start to agent: `loop start` returning to the agent's process running")
    byte_compile(args.root)
    print(f"{args.tasks} tasks, {args.mode}, one at a time, after {WARM} warm-up tasks\n")
    samples: list[list[float]] = []
    load0 = load_average()
    with temp_home() as home:
        base = home.parent
        base.chmod(0o755)  # the task uid reads the agent script from here
        agent = script_agent(base, AGENT)
        Path(agent[1]).chmod(0o644)
        repo = make_demo_repo(base / "repo")
        async with loopwork_server(home / "server") as server:
            client = await connect(server.address)
            queue = f"s2a-{os.getpid()}"
            log = home / "worker.log"
            argv = [sys.executable, str(args.root.resolve() / "worker.py")]
            worker = spawn_worker(server.address, home, queue, log, argv=argv)
            env = {
                **os.environ,
                "TEMPORAL_ADDRESS": server.address,
                "LOOP_HOME": str(home),
                "LOOP_TASK_QUEUE": queue,
            }
            try:
                await wait_for_log(log, "worker ready", worker)
                for n in range(WARM + args.tasks):
                    spec = task_spec(repo, agent, verify=VERIFY, sandbox={"mode": args.mode})
                    path = base / f"{spec['id']}.json"
                    path.write_text(json.dumps(spec))
                    invoked = time.time()
                    cli = await asyncio.create_subprocess_exec(
                        str(LOOP), "start", str(path), env=env, cwd=base,
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    )  # fmt: skip
                    if await cli.wait() != 0:
                        raise RuntimeError(f"loop start {path} exited {cli.returncode}")
                    returned = time.time()
                    handle = client.get_workflow_handle(
                        workflow_id_for(spec["id"]), result_type=TaskResult
                    )
                    result = await handle.result()
                    if result.state != TaskState.DONE_WITH_EVIDENCE:
                        raise RuntimeError(f"task {spec['id']} ended {result.state}")
                    ran = float((home / "worktrees" / spec["id"] / STARTED).read_text())
                    if n < WARM:
                        continue
                    marks = await phases(client, handle.id)
                    started = (await handle.describe()).start_time.timestamp()
                    samples.append(
                        [ran - returned, returned - invoked, started - invoked,
                         marks["prepare_and_explore started"],
                         marks["prepare_and_explore completed"], marks["make started"],
                         ran - started]
                    )  # fmt: skip
            finally:
                stop_process(worker)
    columns = ["start to agent", "`loop start` (wall)", "invoked to workflow start",
               "workflow start to prepare_and_explore started", "... completed",
               "... make started", "... agent running"]  # fmt: skip
    rows = [
        [name, median([s[i] for s in samples]) * 1000, min(s[i] for s in samples) * 1000,
         max(s[i] for s in samples) * 1000]
        for i, name in enumerate(columns)
    ]  # fmt: skip
    print_table(
        ["ms", "median", "min", "max"],
        rows,
        title=f"start to agent, {len(samples)} tasks (target: median <= 300 ms); "
        f"load {load0} at start, {load_average()} at end",
    )
    print(f"checkout: {args.root.resolve()}")


if __name__ == "__main__":
    asyncio.run(main())
