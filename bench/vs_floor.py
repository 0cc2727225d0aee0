"""One trivial Loopwork task against the same isolation done by hand (``bench/floor.sh``).

The measure: a scripted agent that writes the fix, gates ``true`` and the
demo's unit tests, autonomy ``report``, a warm worker (``python worker.py``, a
subprocess) and Loopwork's server; against it the floor script (a branch worktree,
the agent and both gates under bubblewrap as a task uid, a commit, a detached
checkout, removal). Both run one at a time, interleaved ABBA (round r runs
Loopwork first when r is even, the floor first when odd) so a change of load hits
them alike; each sandbox mode (basic, strict) is its own series with its own floor.

CPU is counted per process tree, not from the whole machine (other sessions share
it): for Loopwork the worker (itself, its waited-for children: git and anything
unsandboxed; the egress proxy and the sandbox's zygote, with every run it reaped, while
they live), the server, and this process's client;
for the floor the script and everything it ran (``RUSAGE_CHILDREN``). The machine's
busy CPU over the same window (``/proc/stat``) is shown too: it also holds what the
kernel does for the runs outside any process (a network namespace is torn down by a
kernel worker) and, on a shared machine, others' work, which ABBA spreads evenly.

    .venv/bin/python bench/vs_floor.py [--rounds 10] [--modes basic,strict] [--quick]
    .venv/bin/python bench/vs_floor.py --compare ../clone-at-main   # before/after a change
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import resource
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from common import (
    COMPLETE_FIX,
    ROOT,
    UNITTEST,
    connect,
    cpu_seconds,
    live_children,
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
from temporalio.client import Client

from loop.contracts import TaskSpec, TaskState
from loop.tasks import start_task

FLOOR = Path(__file__).with_name("floor.sh")
FLOOR_UID = 150_001
"""Outside Loopwork's leased range (and its probe uid): the floor never runs as a task's."""
AGENT = f"pathlib.Path('slugify.py').write_text({COMPLETE_FIX!r})\n"
VERIFY = [
    {"name": "trivial", "run": "true", "timeout": 30},
    {"name": "tests", "run": UNITTEST, "timeout": 60},
]
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    cpu_s: float
    wall_s: float
    machine_s: float
    """Busy CPU-seconds of the whole machine over the same window (others included)."""


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += live_children(p)
    return found


def tree_cpu(pid: int) -> float:
    """CPU of a live process tree: each live member's own and its reaped children's. Read
    between tasks, when only long-lived members (the egress proxy) are alive, so nothing
    is counted twice."""
    return sum(sum(cpu_seconds(p)) for p in _descendants(pid))


def machine_busy_s() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / TICK


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def loopwork_task(client: Client, queue: str, repo: Path, agent: list[str], mode: str) -> str:
    """One trivial task on ``queue``, to its end; its workflow id."""
    spec = TaskSpec.model_validate(task_spec(repo, agent, verify=VERIFY, sandbox={"mode": mode}))
    handle, _ = await start_task(client, spec, queue)
    result = await handle.result()
    if result.state != TaskState.DONE_WITH_EVIDENCE:
        raise RuntimeError(f"task {spec.id} ended {result.state}: {result.reason}")
    return handle.id


def floor_task(repo: Path, work: Path, agent: list[str]) -> None:
    argv = ["bash", str(FLOOR), str(repo), str(work), str(FLOOR_UID), agent[1], agent[0]]
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)


def ratio(samples: dict[str, list[Sample]], a: str, b: str) -> list[float]:
    """``a``'s medians over ``b``'s: CPU, machine CPU, wall."""
    return [
        median([getattr(s, what) for s in samples[a]])
        / median([getattr(s, what) for s in samples[b]])
        for what in ("cpu_s", "machine_s", "wall_s")
    ]


def _ms(values: list[float]) -> tuple[float, str]:
    return median(values) * 1000, f"{min(values) * 1000:.0f}–{max(values) * 1000:.0f}"


@dataclass
class Contender:
    """A way to do the trivial task, and how its CPU is counted."""

    name: str
    run: Callable[[str], Awaitable[None] | None]
    """Do one task in the given sandbox mode."""
    cpu: Callable[[], float]


async def measure(contender: Contender, mode: str) -> Sample:
    c0, m0, t0 = contender.cpu(), machine_busy_s(), time.perf_counter()
    result = contender.run(mode)
    if result is not None:
        await result
    wall = time.perf_counter() - t0
    return Sample(contender.cpu() - c0, wall, machine_busy_s() - m0)


def loopwork(
    name: str, client: Client, queue: str, repo: Path, agent: list[str], pids: list[int]
) -> Contender:
    """Tasks on ``queue``; CPU of the processes ``pids`` (worker, server) and the client."""

    def run(mode: str) -> Awaitable[None]:
        return loopwork_task(client, queue, repo, agent, mode)

    def cpu() -> float:
        return sum(tree_cpu(p) for p in pids) + time.process_time()

    return Contender(name, run, cpu)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds per mode (>= 10)")
    parser.add_argument("--modes", default="basic,strict", help="sandbox modes, in order")
    parser.add_argument(
        "--compare",
        type=Path,
        help="another checkout (e.g. a clone at main): its worker.py runs as 'before', "
        "interleaved with this one's and the floor, so a change is measured under one load",
    )
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the checkout whose worker.py is 'loopwork'"
    )
    parser.add_argument("--quick", action="store_true", help="a tiny version (2 rounds, basic)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.modes = 2, "basic"
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    print_machine("one Loopwork task against the same isolation by hand (bench/floor.sh)")
    print(
        f"{args.rounds} rounds per mode, each running every contender once, the order cycling "
        "through every permutation (ABBA for two); a warm-up task of each first (not counted). "
        f"Floor uid {FLOOR_UID}; agent and gates as in bench/throughput.py.\n",
        flush=True,
    )
    rows: list[list[object]] = []
    ratios: list[list[object]] = []
    firsts: list[list[object]] = []
    with temp_home() as home:
        base = home.parent
        base.chmod(0o755)  # the floor's uid reads its agent script from here
        agent = script_agent(base, AGENT)
        Path(agent[1]).chmod(0o644)
        floor_repo = make_demo_repo(base / "floor")
        work = base / "floor-work"
        work.mkdir()
        floor = Contender("floor", lambda _mode: floor_task(floor_repo, work, agent), children_cpu)
        roots = {"loopwork": args.root.resolve()}
        if args.compare is not None:
            roots["before"] = args.compare.resolve()
        async with loopwork_server(home / "server") as server:
            client = await connect(server.address)
            workers: list[subprocess.Popen[bytes]] = []
            contenders = []
            try:
                for name, root in roots.items():
                    queue = f"vf-{name}-{os.getpid()}"
                    log = home / f"worker-{name}.log"
                    argv = [sys.executable, str(root / "worker.py")]
                    t_spawn = time.perf_counter()
                    worker = spawn_worker(server.address, home, queue, log, argv=argv)
                    workers.append(worker)
                    await wait_for_log(log, "worker ready", worker)
                    ready = time.perf_counter() - t_spawn
                    repo = make_demo_repo(base / name)
                    pids = [worker.pid, server.process.pid]
                    contenders.append(loopwork(name, client, queue, repo, agent, pids))
                    firsts.append([name, "worker ready", "", ready * 1000])
                contenders.append(floor)
                orders = list(itertools.permutations(contenders))
                for mode in modes:
                    load0 = load_average()
                    for c in contenders:
                        first = await measure(c, mode)
                        if c is not floor:
                            firsts.append([c.name, f"first {mode} task", first.cpu_s * 1000,
                                           first.wall_s * 1000])  # fmt: skip
                    samples: dict[str, list[Sample]] = {c.name: [] for c in contenders}
                    for r in range(args.rounds):
                        for c in orders[r % len(orders)]:
                            samples[c.name].append(await measure(c, mode))
                    load1 = load_average()
                    for name, got in samples.items():
                        cpu, cpu_range = _ms([s.cpu_s for s in got])
                        wall, wall_range = _ms([s.wall_s for s in got])
                        machine, machine_range = _ms([s.machine_s for s in got])
                        rows.append(
                            [mode, name, cpu, cpu_range, machine, machine_range, wall, wall_range]
                        )

                    pairs = [(c.name, "floor") for c in contenders[:-1]]
                    if "before" in samples:
                        pairs.append(("loopwork", "before"))
                    ratios += [
                        [mode, f"{a} / {b}", *ratio(samples, a, b), load0, load1] for a, b in pairs
                    ]
            finally:
                for worker in workers:
                    stop_process(worker)
    print_table(
        [
            "mode",
            "run",
            "CPU ms (median)",
            "CPU min–max",
            "machine CPU ms",
            "machine min–max",
            "wall ms (median)",
            "wall min–max",
        ],
        rows,
        title="per task: Loopwork (worker + server + client) and the floor script",
    )
    print_table(
        ["mode", "of", "CPU", "machine CPU", "wall", "load at start", "load at end"],
        ratios,
        title="ratios of the medians (the goal: Loopwork / floor <= 1.5 in CPU)",
    )
    print("checkouts: " + ", ".join(f"{name} {root}" for name, root in roots.items()) + "\n")
    print_table(
        ["worker", "what", "CPU ms", "wall ms"],
        firsts,
        title="start-up: worker ready (wall), each worker's first task (not counted above)",
    )
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
