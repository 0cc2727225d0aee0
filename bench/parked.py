"""Parked tasks: the memory N tasks waiting in NEEDS_HUMAN cost, and how fast they all end.

Each task's agent fails at once (``false``), its one gate fails (``false``),
``max_attempts`` is 1 and ``approval_timeout`` a week, so every task parks in
NEEDS_HUMAN after one attempt. The worker runs as a subprocess: ``python
worker.py`` with the SDK's default workflow cache (1000 workflows), then
``bench/cached_worker.py`` (the same worker with a smaller cache). For each,
VmRSS of the worker (and of the server) is read before any task starts and
again once all N are parked; the difference over N is the memory per parked
task. Then one ``reject`` signal goes to each task and the time until all have
ended (REJECTED, trace and notes written) is measured.

Tasks are started concurrently in batches. All tasks of a round share one
repository. The server is Loopwork's embedded one.

    .venv/bin/python bench/parked.py [--tasks 1000] [--cache 100] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from common import (
    connect,
    cpu_seconds,
    loopwork_server,
    make_demo_repo,
    print_machine,
    print_table,
    rss_kib,
    spawn_worker,
    stop_process,
    task_spec,
    temp_home,
    tree_rss_kib,
    wait_for_log,
)
from temporalio.client import Client
from temporalio.service import RPCError

from loop.contracts import SIGNAL_REJECT, RejectSignal, TaskSpec, workflow_id_for
from loop.devserver import DevServer
from loop.tasks import start_task

BENCH = Path(__file__).resolve().parent
TARGET_KIB = 100
BATCH = 50
WEEK = 7 * 86400


async def count(client: Client, query: str) -> int:
    return (await client.count_workflows(query)).count


async def wait_count(
    client: Client, query: str, want: int, within: float, poll: float = 0.5
) -> float:
    """Wait until the visibility count of ``query`` is ``want``; returns time.perf_counter()."""
    deadline = time.monotonic() + within
    while True:
        with_retry = 0
        try:
            with_retry = await count(client, query)
        except RPCError:
            pass
        if with_retry == want:
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{query!r}: {with_retry} of {want} after {within:.0f} s")
        await asyncio.sleep(poll)


async def settle_rss(pid: int, seconds: float) -> int:
    """RSS after the process has been idle a moment (the last of a few samples)."""
    last = rss_kib(pid)
    for _ in range(int(seconds / 0.5)):
        await asyncio.sleep(0.5)
        last = rss_kib(pid)
    return last


def parked_specs(repo: Path, prefix: str, n: int) -> list[TaskSpec]:
    return [
        TaskSpec.model_validate(
            task_spec(
                repo,
                ["false"],
                id=f"{prefix}-{i:05d}",
                verify=[{"name": "gate", "run": "false", "timeout": 30}],
                budget={"max_attempts": 1},
                approval_timeout=WEEK,
            )
        )
        for i in range(n)
    ]


async def park(client: Client, queue: str, specs: list[TaskSpec], query: str) -> float:
    """Start the tasks in concurrent batches; wait until all are parked. Returns the seconds."""
    t0 = time.perf_counter()
    for i in range(0, len(specs), BATCH):
        await asyncio.gather(*(start_task(client, s, queue) for s in specs[i : i + BATCH]))
    within = 120 + len(specs) * 1.0
    try:
        parked_at = await wait_count(
            client, f'{query} AND LoopState="NEEDS_HUMAN"', len(specs), within=within
        )
    except TimeoutError:
        states = {
            s: await count(client, f'{query} AND LoopState="{s}"')
            for s in ("RUNNING", "NEEDS_HUMAN", "BLOCKED", "BUDGET_EXCEEDED")
        }
        raise RuntimeError(f"not all parked: {states}") from None
    return parked_at - t0


async def reject_all(client: Client, specs: list[TaskSpec], query: str) -> tuple[float, float]:
    """One reject signal per task (batches); (seconds to send, seconds until all ended)."""
    t0 = time.perf_counter()
    reason = RejectSignal(reason="benchmark")
    for i in range(0, len(specs), BATCH):
        await asyncio.gather(
            *(
                client.get_workflow_handle(workflow_id_for(s.id)).signal(SIGNAL_REJECT, reason)
                for s in specs[i : i + BATCH]
            )
        )
    sent = time.perf_counter() - t0
    running = f'{query} AND ExecutionStatus="Running"'
    done_at = await wait_count(client, running, 0, within=120 + len(specs), poll=0.25)
    return sent, done_at - t0


async def one_round(
    client: Client,
    server: DevServer,
    home: Path,
    name: str,
    argv: list[str] | None,
    n: int,
    warmup: int,
    settle: float,
) -> dict[str, float]:
    queue = f"parked-{name}"
    log = home / f"worker-{name}.log"
    proc = spawn_worker(server.address, home, queue, log, argv=argv)
    try:
        await wait_for_log(log, "worker ready", proc)
        fresh = await settle_rss(proc.pid, settle)
        # Warm-up: a few tasks parked and rejected, so first-use costs (imports, code
        # paths, allocator arenas) are not charged to the measured tasks.
        warm_repo = make_demo_repo(home.parent / f"warm-{name}")
        warm = parked_specs(warm_repo, f"warm-{name}", warmup)
        await park(client, queue, warm, f'LoopRepo="{warm_repo}"')
        await reject_all(client, warm, f'LoopRepo="{warm_repo}"')

        worker_idle = await settle_rss(proc.pid, settle)
        server_idle = tree_rss_kib(server.pid)
        worker_cpu0, server_cpu0 = sum(cpu_seconds(proc.pid)), cpu_seconds(server.pid)[0]
        repo = make_demo_repo(home.parent / f"repo-{name}")
        specs = parked_specs(repo, f"park-{name}", n)
        mine = f'LoopRepo="{repo}"'
        parked = await park(client, queue, specs, mine)
        worker_cpu = sum(cpu_seconds(proc.pid)) - worker_cpu0
        server_cpu = cpu_seconds(server.pid)[0] - server_cpu0
        worker_parked = await settle_rss(proc.pid, settle)  # escalations finish, RSS settles
        server_parked = tree_rss_kib(server.pid)

        signalled, finished = await reject_all(client, specs, mine)
        rejected = await count(client, f'{mine} AND LoopState="REJECTED"')
    finally:
        stop_process(proc)
    return {
        "worker_fresh": fresh,
        "worker_idle": worker_idle,
        "worker_parked": worker_parked,
        "server_idle": server_idle,
        "server_parked": server_parked,
        "parked": parked,
        "worker_cpu": worker_cpu,
        "server_cpu": server_cpu,
        "signalled": signalled,
        "finished": finished,
        "rejected": rejected,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000, help="parked tasks N (default 1000)")
    parser.add_argument(
        "--cache", type=int, default=100, help="the bounded worker's cache (default 100)"
    )
    parser.add_argument(
        "--only", choices=["default", "bounded"], help="run one worker configuration only"
    )
    parser.add_argument("--quick", action="store_true", help="a tiny version (< 30 s)")
    args = parser.parse_args()
    warmup, settle = 10, 3.0
    if args.quick:  # one round only: the bounded one alone takes longer than 30 s
        args.tasks, warmup, settle = 50, 2, 1.0
        args.only = args.only or "default"
    n = args.tasks
    print_machine("parked: memory per task waiting in NEEDS_HUMAN")
    print(
        f"N={n} parked tasks per round, started in batches of {BATCH}, after a warm-up of "
        f"{warmup} tasks (parked and rejected); worker = python worker.py (the SDK's default "
        f"cache, 1000 workflows), then bench/cached_worker.py {args.cache}\n",
        flush=True,
    )
    rounds: list[tuple[str, str, list[str] | None]] = [
        ("default", "worker.py (cache 1000)", None),
        (
            "bounded",
            f"cached_worker.py (cache {args.cache})",
            [sys.executable, str(BENCH / "cached_worker.py"), str(args.cache)],
        ),
    ]
    results: list[tuple[str, dict[str, float]]] = []
    with temp_home() as home:
        async with loopwork_server(home / "server") as server:
            client = await connect(server.address)
            for name, label, argv in rounds:
                if args.only and args.only != name:
                    continue
                print(f"round {name}: {label} ...", flush=True)
                r = await one_round(client, server, home, name, argv, n, warmup, settle)
                results.append((label, r))

    def per_task(r: dict[str, float], what: str) -> float:
        return (r[f"{what}_parked"] - r[f"{what}_idle"]) / n

    print()
    print_table(
        [
            "worker",
            "worker RSS fresh MiB",
            "warm MiB",
            "parked MiB",
            "worker KiB/parked task",
            f"< {TARGET_KIB} KiB",
            "server RSS before MiB",
            "parked MiB",
            "server KiB/task",
        ],
        [
            [
                label,
                r["worker_fresh"] / 1024,
                r["worker_idle"] / 1024,
                r["worker_parked"] / 1024,
                per_task(r, "worker"),
                "yes" if per_task(r, "worker") < TARGET_KIB else "NO",
                r["server_idle"] / 1024,
                r["server_parked"] / 1024,
                per_task(r, "server"),
            ]
            for label, r in results
        ],
        title=f"memory, {n} tasks parked in NEEDS_HUMAN (KiB per task = (parked - warm) / N)",
    )
    print_table(
        [
            "worker",
            "all parked s",
            "parked tasks/s",
            "worker CPU s",
            "server CPU s",
            "reject N signals s",
            "all ended s",
            "ended tasks/s",
            "REJECTED",
        ],
        [
            [
                label,
                r["parked"],
                n / r["parked"],
                r["worker_cpu"],
                r["server_cpu"],
                r["signalled"],
                r["finished"],
                n / r["finished"],
                int(r["rejected"]),
            ]
            for label, r in results
        ],
        title=f"time, {n} tasks (from the first start / from the first reject signal)",
    )
    print(
        "worker CPU includes its agent, gate and git subprocesses. One server serves both "
        "rounds: its RSS before round 2 holds round 1's closed workflows."
    )


if __name__ == "__main__":
    asyncio.run(main())
