"""Throughput: K concurrent tasks with an instant agent and trivial gates, on 1 and 2
workers of one host, then on 3 hosts.

Every task is the demo's bug with a scripted command agent that writes the fix
at once, and two gates: ``true`` and the demo's unit tests. All tasks share one
repository (worktree creation is serialised per repository, as in real use).
With 1 or 2 workers the first runs in this process (``worker.build_worker``), the
second is ``python worker.py`` as a subprocess with the same LOOP_HOME,
TEMPORAL_ADDRESS and LOOP_TASK_QUEUE (two replicas of one host). With 3 hosts, three
``worker.py`` processes each have their own LOOP_HOME and host id, and the
repository is a bare one at a ``file://`` URL, so each host works from its own
mirror and pushes its merges. The server is Loopwork's embedded one.

Reported: tasks/s and activities/s (activities counted from the workflow
histories), the task latency, the share of activities the busiest worker ran,
how busy the machine's CPUs were (/proc/stat), and the scaling from 1 to 2
workers. Each configuration is warmed up with a few tasks first, then run
``--runs`` times (median).

Then the cost of history: one worker on a repository that first ran ``--leftovers``
tasks (500 by default; autonomy ``report`` keeps each task's branch, its clone and
its run folder), against the same worker on a fresh one: tasks/s and the machine's
busy CPU per task, which the goal wants within 10 % of the fresh repository's.

    .venv/bin/python bench/throughput.py [--tasks 20] [--runs 3] [--leftovers 500] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import time
import uuid
from pathlib import Path

from common import (
    COMPLETE_FIX,
    UNITTEST,
    connect,
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
from temporalio.client import Client, WorkflowHandle

from loop.contracts import TaskResult, TaskSpec, TaskState
from loop.settings import Settings
from loop.tasks import start_task
from worker import build_worker

AGENT = f"pathlib.Path('slugify.py').write_text({COMPLETE_FIX!r})\n"


async def count_activities(handle: WorkflowHandle) -> dict[str, int]:
    """Completed activities by the worker (its identity, ``pid@host``) that ran each."""
    started: dict[int, str] = {}
    counts: dict[str, int] = {}
    async for ev in handle.fetch_history_events():
        if ev.HasField("activity_task_started_event_attributes"):
            started[ev.event_id] = ev.activity_task_started_event_attributes.identity
        elif ev.HasField("activity_task_completed_event_attributes"):
            who = started.get(ev.activity_task_completed_event_attributes.started_event_id, "")
            counts[who] = counts.get(who, 0) + 1
    return counts


TICK = os.sysconf("SC_CLK_TCK")


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


async def run_batch(
    client: Client, queue: str, repo: str, agent: list[str], k: int
) -> dict[str, float]:
    """Start k tasks at once, wait for all; wall time, latencies, activities."""
    verify = [
        {"name": "trivial", "run": "true", "timeout": 30},
        {"name": "tests", "run": UNITTEST, "timeout": 60},
    ]
    specs = [TaskSpec.model_validate(task_spec(repo, agent, verify=verify)) for _ in range(k)]

    async def one(spec: TaskSpec) -> tuple[WorkflowHandle, TaskResult, float]:
        t0 = time.perf_counter()
        handle, _ = await start_task(client, spec, queue)
        result = await handle.result()
        return handle, result, time.perf_counter() - t0

    busy0, total0 = cpu_jiffies()
    t0 = time.perf_counter()
    done = await asyncio.gather(*(one(s) for s in specs))
    wall = time.perf_counter() - t0
    busy1, total1 = cpu_jiffies()
    bad = [r for _, r, _ in done if r.state != TaskState.DONE_WITH_EVIDENCE]
    if bad:
        raise RuntimeError(f"{len(bad)} tasks did not finish DONE: {bad[0].state} {bad[0].reason}")
    by_worker: dict[str, int] = {}
    for counts in await asyncio.gather(*(count_activities(h) for h, _, _ in done)):
        for who, n in counts.items():
            by_worker[who] = by_worker.get(who, 0) + n
    activities = sum(by_worker.values())
    latencies = sorted(lat for _, _, lat in done)
    return {
        "wall": wall,
        "activities": activities,
        "busiest_share": max(by_worker.values()) / activities,
        "cpu_busy": (busy1 - busy0) / max(total1 - total0, 1),
        "cpu_per_task": (busy1 - busy0) / TICK / k,
        "lat_median": median(latencies),
        "lat_max": latencies[-1],
    }


async def configuration(
    client: Client,
    home: Path,
    repo: Path,
    agent: list[str],
    workers: int,
    k: int,
    runs: int,
    warmup: int,
) -> list[dict[str, float]]:
    """``workers`` replicas of one host: this process and subprocesses sharing its home."""
    queue = f"tp-{workers}w-{uuid.uuid4().hex[:6]}"
    settings = Settings(home=home, task_queue=queue)
    extra = []
    try:
        for i in range(workers - 1):
            log = home / f"worker-{queue}-{i}.log"
            proc = spawn_worker(client.service_client.config.target_host, home, queue, log)
            extra.append(proc)
            await wait_for_log(log, "worker ready", proc)
        async with build_worker(client, settings):
            await run_batch(client, queue, str(repo), agent, warmup * workers)
            return [await run_batch(client, queue, str(repo), agent, k) for _ in range(runs)]
    finally:
        for proc in extra:
            stop_process(proc)


async def hosts(
    client: Client, home: Path, repo: Path, agent: list[str], k: int, runs: int, warmup: int
) -> list[dict[str, float]]:
    """Three hosts: worker processes with a home and host id each, the repository at a URL."""
    queue = f"tp-3h-{uuid.uuid4().hex[:6]}"
    remote = home / f"{queue}.git"
    clone = ["git", "clone", "-q", "--bare", str(repo), str(remote)]
    await asyncio.to_thread(subprocess.run, clone, check=True)
    procs = []
    try:
        for i in range(3):
            log = home / f"worker-{queue}-h{i}.log"
            procs.append(
                spawn_worker(
                    client.service_client.config.target_host, home / f"host-{queue}-{i}", queue,
                    log, LOOP_HOST_ID=f"h{i}",
                )
            )  # fmt: skip
            await wait_for_log(log, "worker ready", procs[-1])
        await run_batch(client, queue, remote.as_uri(), agent, warmup * 3)
        return [await run_batch(client, queue, remote.as_uri(), agent, k) for _ in range(runs)]
    finally:
        for proc in procs:
            stop_process(proc)


async def leftovers(
    client: Client, home: Path, agent: list[str], k: int, runs: int, warmup: int, n: int
) -> tuple[list[dict[str, float]], list[dict[str, float]], str]:
    """One worker of its own home on a fresh repository, then on the same repository and
    home once ``n`` more tasks have run there: (fresh runs, later runs, what was left)."""
    repo = make_demo_repo(home.parent / "demo-history")
    own = home / "history"
    queue = f"tp-history-{uuid.uuid4().hex[:6]}"
    async with build_worker(client, Settings(home=own, task_queue=queue)):
        await run_batch(client, queue, str(repo), agent, warmup)
        fresh = [await run_batch(client, queue, str(repo), agent, k) for _ in range(runs)]
        done = warmup + k * runs
        while done < n:
            batch = min(k, n - done)
            await run_batch(client, queue, str(repo), agent, batch)
            done += batch
            if done % 100 < batch:
                print(f"  {done} tasks have run on the history repository", flush=True)
        later = [await run_batch(client, queue, str(repo), agent, k) for _ in range(runs)]
    listed = await asyncio.to_thread(
        subprocess.run,
        ["git", "-C", str(repo), "for-each-ref", "--format=x", "refs/heads/loop/"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    refs = listed.stdout.count("x")
    clones = sum(1 for _ in (own / "worktrees").iterdir()) if (own / "worktrees").is_dir() else 0
    runs_kept = sum(1 for _ in (own / "runs").iterdir()) if (own / "runs").is_dir() else 0
    left = f"{refs} loop/ branches, {clones} task clones, {runs_kept} run folders"
    return fresh, later, left


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20, help="concurrent tasks K (default 20)")
    parser.add_argument("--runs", type=int, default=3, help="measured runs; median (default 3)")
    parser.add_argument(
        "--leftovers", type=int, default=500,
        help="tasks run on a repository before its row with history (default 500; 0: no row)",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a tiny version (< 30 s)")
    args = parser.parse_args()
    warmup = 2
    if args.quick:
        args.tasks, args.runs, warmup, args.leftovers = 4, 1, 1, min(args.leftovers, 12)
    print_machine("throughput: concurrent tasks on 1 and 2 workers, and on 3 hosts")
    print(
        f"K={args.tasks} concurrent tasks per run, runs={args.runs} (median), "
        f"warm-up {warmup} task(s) per worker. NOTE: this machine has {os.cpu_count()} cores, "
        "shared by the server, the workers, and every agent and gate subprocess.\n",
        flush=True,
    )
    results: dict[int, list[dict[str, float]]] = {}
    with temp_home() as home:
        repo = make_demo_repo(home.parent / "demo")
        agent = script_agent(home.parent, AGENT)
        async with loopwork_server(home / "server") as server:
            client = await connect(server.address)
            for workers in (1, 2):
                results[workers] = await configuration(
                    client, home, repo, agent, workers, args.tasks, args.runs, warmup
                )
            results[3] = await hosts(client, home, repo, agent, args.tasks, args.runs, warmup)
            history = None
            if args.leftovers:
                history = await leftovers(
                    client, home, agent, args.tasks, args.runs, warmup, args.leftovers
                )

    rows = []
    summary: dict[int, float] = {}
    labels = {1: "1 worker", 2: "2 workers, 1 host", 3: "3 hosts (URL repo)"}
    for workers, runs in results.items():
        wall = median([r["wall"] for r in runs])
        acts = median([r["activities"] for r in runs])
        summary[workers] = args.tasks / wall
        rows.append(
            [
                labels[workers],
                args.tasks,
                wall,
                args.tasks / wall,
                int(acts),
                acts / wall,
                median([r["lat_median"] for r in runs]),
                median([r["lat_max"] for r in runs]),
                f"{median([r['busiest_share'] for r in runs]):.0%}",
                f"{median([r['cpu_busy'] for r in runs]):.0%}",
            ]
        )
    print_table(
        [
            "workers",
            "tasks",
            "wall s",
            "tasks/s",
            "activities",
            "activities/s",
            "latency median s",
            "latency max s",
            "by the busiest worker",
            "CPU busy",
        ],
        rows,
        title=f"{args.tasks} concurrent tasks (instant agent, gates: true + demo tests)",
    )
    with contextlib.suppress(ZeroDivisionError):
        print(
            f"scaling 1 -> 2 workers: {summary[2] / summary[1]:.2f}x tasks/s "
            f"(on {os.cpu_count()} cores: the agents, gates and server already compete for them)"
        )
    if history is not None:
        fresh, later, left = history
        cpu = [median([r["cpu_per_task"] for r in rs]) * 1000 for rs in (fresh, later)]
        print()
        print_table(
            ["repository", "tasks/s", "machine CPU ms per task", "of the fresh one's"],
            [
                ["fresh", args.tasks / median([r["wall"] for r in fresh]), cpu[0], "1.00"],
                [
                    f"after {args.leftovers} tasks ({left})",
                    args.tasks / median([r["wall"] for r in later]),
                    cpu[1],
                    f"{cpu[1] / cpu[0]:.2f}",
                ],
            ],
            title=f"1 worker, {args.tasks} concurrent tasks: a fresh repository, one with history",
        )


if __name__ == "__main__":
    asyncio.run(main())
