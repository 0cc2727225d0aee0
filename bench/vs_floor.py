"""One trivial Loopwork task against the same isolation done by hand (``bench/floor.sh``).

Issue 24's measure: a scripted agent that writes the fix, gates ``true`` and the
demo's unit tests, autonomy ``report``, a warm worker (``python worker.py``, a
subprocess) and Loopwork's server; against it the floor script (a branch worktree,
the agent and both gates under bubblewrap as a task uid, a commit, a detached
checkout, removal). Both run one at a time, interleaved ABBA (round r runs
Loopwork first when r is even, the floor first when odd) so a change of load hits
them alike; each sandbox mode (basic, strict) is its own series with its own floor.

CPU is counted per process tree, not from the whole machine (other sessions share
it): for Loopwork the worker (itself, its waited-for children: launchers, agents,
gates, git; the egress proxy while it lives), the server, and this process's client;
for the floor the script and everything it ran (``RUSAGE_CHILDREN``). The machine's
busy CPU over the same window (``/proc/stat``) is shown too: it also holds what the
kernel does for the runs outside any process (a network namespace is torn down by a
kernel worker) and, on a shared machine, others' work, which ABBA spreads evenly.

    .venv/bin/python bench/vs_floor.py [--rounds 10] [--modes basic,strict] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common import (
    COMPLETE_FIX,
    UNITTEST,
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


def _stat_cpu(pid: int) -> float:
    """A process's own CPU plus its waited-for children's, in seconds (0 when gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / TICK


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return found


def tree_cpu(pid: int) -> float:
    """CPU of a live process tree: each live member's own and its reaped children's. Read
    between tasks, when only long-lived members (the egress proxy) are alive, so nothing
    is counted twice."""
    return sum(_stat_cpu(p) for p in _descendants(pid))


def machine_busy_s() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / TICK


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def measure(run: Callable[[], object], cpu: Callable[[], float]) -> Sample:
    c0, m0, t0 = cpu(), machine_busy_s(), time.perf_counter()
    result = run()
    if asyncio.iscoroutine(result):
        await result
    wall = time.perf_counter() - t0
    return Sample(cpu() - c0, wall, machine_busy_s() - m0)


async def loopwork_task(
    client: Client, queue: str, repo: Path, agent: list[str], mode: str
) -> None:
    spec = TaskSpec.model_validate(task_spec(repo, agent, verify=VERIFY, sandbox={"mode": mode}))
    handle, _ = await start_task(client, spec, queue)
    result = await handle.result()
    if result.state != TaskState.DONE_WITH_EVIDENCE:
        raise RuntimeError(f"task {spec.id} ended {result.state}: {result.reason}")


def floor_task(repo: Path, work: Path, agent: list[str]) -> None:
    argv = ["bash", str(FLOOR), str(repo), str(work), str(FLOOR_UID), agent[1], agent[0]]
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)


def _ms(values: list[float]) -> tuple[float, str]:
    return median(values) * 1000, f"{min(values) * 1000:.0f}–{max(values) * 1000:.0f}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="ABBA rounds per mode (≥ 10)")
    parser.add_argument("--modes", default="basic,strict", help="sandbox modes, in order")
    parser.add_argument("--quick", action="store_true", help="a tiny version (2 rounds, basic)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.modes = 2, "basic"
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    print_machine("one Loopwork task against the same isolation by hand (bench/floor.sh)")
    print(
        f"{args.rounds} ABBA rounds per mode; a warm-up task of each first (not counted). "
        f"Floor uid {FLOOR_UID}; agent and gates as in bench/throughput.py.\n",
        flush=True,
    )
    rows, ratios, firsts = [], [], []
    with temp_home() as home:
        base = home.parent
        base.chmod(0o755)  # the floor's uid reads its agent script from here
        agent = script_agent(base, AGENT)
        Path(agent[1]).chmod(0o644)
        repo = make_demo_repo(base / "loopwork")
        floor_repo = make_demo_repo(base / "floor")
        work = base / "floor-work"
        work.mkdir()
        async with loopwork_server(home / "server") as server:
            client = await connect(server.address)
            queue = f"vf-{os.getpid()}"
            log = home / "worker.log"
            t_spawn = time.perf_counter()
            worker = spawn_worker(server.address, home, queue, log)
            try:
                await wait_for_log(log, "worker ready", worker)
                ready_s = time.perf_counter() - t_spawn

                def loopwork_cpu() -> float:
                    return tree_cpu(worker.pid) + tree_cpu(server.process.pid) + time.process_time()

                for mode in modes:
                    load0 = load_average()

                    async def one_loopwork(mode: str = mode) -> None:
                        await loopwork_task(client, queue, repo, agent, mode)

                    first = await measure(one_loopwork, loopwork_cpu)
                    firsts.append((mode, first))
                    await measure(lambda: floor_task(floor_repo, work, agent), children_cpu)
                    samples: dict[str, list[Sample]] = {"loopwork": [], "floor": []}
                    for r in range(args.rounds):
                        order = ("loopwork", "floor") if r % 2 == 0 else ("floor", "loopwork")
                        for what in order:
                            if what == "loopwork":
                                s = await measure(one_loopwork, loopwork_cpu)
                            else:
                                s = await measure(
                                    lambda: floor_task(floor_repo, work, agent), children_cpu
                                )
                            samples[what].append(s)
                    load1 = load_average()
                    for what, got in samples.items():
                        cpu, cpu_range = _ms([s.cpu_s for s in got])
                        wall, wall_range = _ms([s.wall_s for s in got])
                        machine, machine_range = _ms([s.machine_s for s in got])
                        rows.append(
                            [mode, what, cpu, cpu_range, machine, machine_range, wall, wall_range]
                        )
                    lw = median([s.cpu_s for s in samples["loopwork"]])
                    fl = median([s.cpu_s for s in samples["floor"]])
                    lw_wall = median([s.wall_s for s in samples["loopwork"]])
                    fl_wall = median([s.wall_s for s in samples["floor"]])
                    lw_m = median([s.machine_s for s in samples["loopwork"]])
                    fl_m = median([s.machine_s for s in samples["floor"]])
                    ratios.append([mode, lw / fl, lw_m / fl_m, lw_wall / fl_wall, load0, load1])
            finally:
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
        ["mode", "CPU ratio", "machine CPU ratio", "wall ratio", "load at start", "load at end"],
        ratios,
        title="Loopwork / floor, medians (issue 24's goal: machine CPU ≤ 1.5)",
    )
    print_table(
        ["mode", "CPU ms", "wall ms"],
        [[m, s.cpu_s * 1000, s.wall_s * 1000] for m, s in firsts],
        title=f"the first task of each mode (not counted; the worker was ready in {ready_s:.2f} s)",
    )
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
