"""Loopwork's own cost: a trivial task against Temporal doing the same steps, and the
shell-script floor beside them.

Three ways to do ``bench/vs_floor.py``'s trivial task (a scripted agent that writes the
fix, gates ``true`` and the demo's unit tests), one at a time, interleaved (each round
runs all three in an order that cycles through every permutation), on one Loopwork
server:

- **loopwork**: a warm ``python worker.py``, the task started as ``loop start`` does;
- **temporal**: the Temporal floor, a warm ``bench/floor_worker.py``: the same workflow
  shape (``bench/floor_workflow.py``: five workflow tasks, four activities, one local
  activity, no timer; the last table compares the two histories) whose activities do only
  what ``bench/floor.sh`` does, through Loopwork's own sandbox code at the same level;
- **shell**: ``bench/floor.sh`` itself, no orchestrator (the physical limit).

CPU per task is counted three ways. **Process CPU**: the process trees (each worker with
everything it ran, the server, this process's client; the script and its children), split
by kind in a table of its own. **Machine CPU**: the machine's busy CPU over the same
window (``/proc/stat``), which also holds the kernel's work outside any process (a
sandbox's network namespace is torn down by a kernel worker) and, on a shared machine,
everyone else's work: interleaving spreads that evenly but it inflates every figure and
shrinks every ratio towards 1. **Processes + kernel threads**: the process CPU plus
what the kernel's own threads (kworkers, softirq) spent meanwhile, the machine figure
without other sessions' processes. The target is Loopwork / temporal <= 1.25 in machine
CPU, basic and strict. Server requests per task come from the server's counters, over a
few more tasks of each at the end.

    .venv/bin/python bench/temporal_floor.py [--rounds 8] [--modes basic,strict] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from common import (
    ROOT,
    UNITTEST,
    byte_compile,
    connect,
    cpu_seconds,
    free_port,
    live_children,
    load_average,
    loopwork_server,
    make_demo_repo,
    median,
    print_machine,
    print_table,
    requests,
    script_agent,
    spawn_worker,
    stop_process,
    temp_home,
    wait_for_log,
)
from floor_workflow import FLOOR_WORKFLOW, FloorInput
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from vs_floor import (
    AGENT,
    VERIFY,
    children_cpu,
    floor_task,
    loopwork_task,
    machine_busy_s,
    tree_cpu,
)

from loop.contracts import starting_attributes

FLOOR_WORKER = Path(__file__).with_name("floor_worker.py")
GATES = [g["run"] for g in VERIFY]
"""The gates' commands: ``true`` and the demo's unit tests, as ``floor.sh`` runs them."""
assert GATES == ["true", UNITTEST]
REQUEST_TASKS = 3
ABLATIONS = ["attributes", "host-queue", "ledger"]
TICK = os.sysconf("SC_CLK_TCK")


def kernel_threads() -> dict[int, int]:
    """CPU ticks so far of each of the kernel's own threads (the children of kthreadd)."""
    ticks: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == "2":  # ppid
            ticks[int(stat.parent.name)] = int(fields[11]) + int(fields[12])
    return ticks


def kernel_threads_s(before: dict[int, int], after: dict[int, int]) -> float:
    """What the kernel's threads spent between two readings (one that ended meanwhile took
    its time with it: the threads of both readings only)."""
    return sum(max(0, after[t] - before[t]) for t in after.keys() & before.keys()) / TICK


@dataclass
class Sample:
    parts: dict[str, float]
    machine_s: float
    kernel_s: float
    wall_s: float

    @property
    def cpu_s(self) -> float:
        return sum(self.parts.values())


@dataclass
class Contender:
    """A way to do the trivial task: ``run`` does one in a sandbox mode and returns the
    workflow's id (or ""), ``parts`` reads its processes' CPU so far, by kind."""

    name: str
    run: Callable[[str], Awaitable[str]]
    parts: Callable[[], dict[str, float]]
    ids: list[str] = field(default_factory=list)


async def measure(c: Contender, mode: str) -> Sample:
    p0, m0, k0, t0 = c.parts(), machine_busy_s(), kernel_threads(), time.perf_counter()
    c.ids.append(await c.run(mode))
    wall = time.perf_counter() - t0
    p1, m1, k1 = c.parts(), machine_busy_s(), kernel_threads()
    return Sample({k: p1[k] - p0[k] for k in p0}, m1 - m0, kernel_threads_s(k0, k1), wall)


def temporal_parts(worker: int, server: int) -> Callable[[], dict[str, float]]:
    """A Temporal contender's CPU by kind: the worker's own threads; what it ran (its
    reaped children, and its live ones with theirs: the egress proxy and the sandbox's
    zygote, which reaps every run); the server; this process (the client). Read between
    tasks, when only long-lived processes are alive."""

    def read() -> dict[str, float]:
        own, reaped = cpu_seconds(worker)
        return {
            "worker": own,
            "its children": reaped + sum(tree_cpu(p) for p in live_children(worker)),
            "server": sum(cpu_seconds(server)),
            "client": time.process_time(),
        }

    return read


def loopwork_run(
    client: Client, queue: str, repo: Path, agent: list[str]
) -> Callable[[str], Awaitable[str]]:
    """One Loopwork task on ``queue``, started as ``loop start`` starts it, to its end."""

    async def run(mode: str) -> str:
        return await loopwork_task(client, queue, repo, agent, mode)

    return run


def floor_run(
    client: Client, queue: str, repo: Path, work: Path, agent: list[str], extras: list[str]
) -> Callable[[str], Awaitable[str]]:
    """One Temporal floor task on ``queue`` (the SDK's default converter), to its end;
    ``extras``: Loopwork's costs it adds (``bench/floor_workflow.py``). With
    ``attributes`` it is started as ``loop start`` starts a task: with a memo and the
    first search attributes."""

    async def run(mode: str) -> str:
        task_id = f"floor-{uuid.uuid4().hex[:10]}"
        inp = FloorInput(task_id, str(repo), str(work), agent, GATES, mode, extras)
        started = (
            {"memo": {"goal": "floor"}, "search_attributes": starting_attributes(str(repo))}
            if "attributes" in extras
            else {}
        )
        handle = await client.start_workflow(
            FLOOR_WORKFLOW, inp, id=task_id, task_queue=queue, **started
        )
        if not await handle.result():
            raise RuntimeError(f"floor task {task_id}: a gate failed")
        return task_id

    return run


async def shape(handle: WorkflowHandle) -> Counter[str]:
    """What a run's history is made of: its events by kind (markers by name), its size."""
    found: Counter[str] = Counter()
    history = await handle.fetch_history()
    for event in history.events:
        kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()
        if event.HasField("marker_recorded_event_attributes"):
            kind += f" ({event.marker_recorded_event_attributes.marker_name})"
        found[kind] += 1
    found["(events)"] = len(history.events)
    found["(bytes, as JSON)"] = len(history.to_json().encode())
    return found


def ranged(values: list[float]) -> tuple[float, str]:
    """The median in ms, and the range."""
    return median(values) * 1000, f"{min(values) * 1000:.0f}–{max(values) * 1000:.0f}"


def of(samples: list[Sample], what: str) -> float:
    return median([getattr(s, what) for s in samples])


def mean(samples: list[Sample], what: str) -> float:
    """The mean of a figure (a process kind's, or the whole's): a difference of a few ms
    shows in a mean of tick-counted samples, not in their medians."""
    values = [s.parts[what] if what in s.parts else getattr(s, what) for s in samples]
    return sum(values) / len(values)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="rounds per mode (>= 6)")
    parser.add_argument("--modes", default="basic,strict", help="sandbox modes, in order")
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the checkout whose worker.py is 'loopwork'"
    )
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="also the Temporal floor with one of Loopwork's own costs added at a time "
        "(search attributes, the host queue, the ledger's update): what each costs",
    )
    parser.add_argument("--quick", action="store_true", help="a tiny version (2 rounds, basic)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.modes = 2, "basic"
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    print_machine("a trivial task: Loopwork, the Temporal floor, the shell-script floor")
    byte_compile(args.root)
    byte_compile()  # this checkout's bench/ (the floor's worker)
    print(
        f"{args.rounds} rounds per mode, each running every contender once, the order cycling "
        "through every permutation (of three; rotations, every other one reversed, of more); "
        "a warm-up task of each first (not counted).\n",
        flush=True,
    )
    rows: list[list[object]] = []
    split: list[list[object]] = []
    ratios: list[list[object]] = []
    asked: dict[str, Counter[str]] = {}
    added: list[list[object]] = []
    with temp_home() as home:
        base = home.parent
        base.chmod(0o755)  # the floors' uids read the agent script from here
        agent = script_agent(base, AGENT)
        Path(agent[1]).chmod(0o644)
        work = base / "work"
        work.mkdir()
        shell_repo = make_demo_repo(base / "shell")

        async def shell_run(_mode: str) -> str:
            floor_task(shell_repo, work, agent)
            return ""

        shell = Contender("shell", shell_run, lambda: {"script and its children": children_cpu()})
        metrics_port = free_port()
        async with loopwork_server(home / "server", metrics_port=metrics_port) as server:
            client = await connect(server.address)
            plain = await Client.connect(server.address)  # the SDK's default converter
            workers: list[subprocess.Popen[bytes]] = []
            contenders: list[Contender] = []
            try:
                for name, argv, worker_home in (
                    ("loopwork", [sys.executable, str(args.root.resolve() / "worker.py")], home),
                    ("temporal", [sys.executable, str(FLOOR_WORKER)], base / "floor-home"),
                ):
                    queue = f"tf-{name}-{os.getpid()}"
                    log = home / f"worker-{name}.log"
                    worker_home.mkdir(exist_ok=True)
                    worker = spawn_worker(server.address, worker_home, queue, log, argv=argv)
                    workers.append(worker)
                    await wait_for_log(log, "worker ready", worker)
                    repo = make_demo_repo(base / name)
                    run = (
                        loopwork_run(client, queue, repo, agent)
                        if name == "loopwork"
                        else floor_run(plain, queue, repo, work, agent, [])
                    )
                    parts = temporal_parts(worker.pid, server.process.pid)
                    contenders.append(Contender(name, run, parts))
                contenders.append(shell)
                for extra in ABLATIONS if args.ablation else []:
                    run = floor_run(plain, queue, repo, work, agent, [extra])
                    contenders.append(Contender(f"temporal+{extra}", run, parts))
                # Every order of three; rotations of more, every other one reversed.
                n = len(contenders)
                orders = (
                    [list(o) for o in itertools.permutations(contenders)]
                    if n <= 3
                    else [(contenders[r:] + contenders[:r])[:: 1 - 2 * (r % 2)] for r in range(n)]
                )
                for mode in modes:
                    load0 = load_average()
                    for c in contenders:
                        await measure(c, mode)
                    samples: dict[str, list[Sample]] = {c.name: [] for c in contenders}
                    for r in range(args.rounds):
                        for c in orders[r % len(orders)]:
                            samples[c.name].append(await measure(c, mode))
                    load1 = load_average()
                    for name, got in samples.items():
                        rows.append(
                            [mode, name,
                             *ranged([s.machine_s for s in got]),
                             *ranged([s.cpu_s for s in got]),
                             *ranged([s.cpu_s + s.kernel_s for s in got]),
                             *ranged([s.wall_s for s in got])]
                        )  # fmt: skip
                        for kind in got[0].parts:
                            split.append(
                                [mode, name, kind, ranged([s.parts[kind] for s in got])[0]]
                            )
                    for a, b in (("loopwork", "temporal"), ("loopwork", "shell"),
                                 ("temporal", "shell")):  # fmt: skip
                        ratios.append(
                            [mode, f"{a} / {b}",
                             of(samples[a], "machine_s") / of(samples[b], "machine_s"),
                             of(samples[a], "cpu_s") / of(samples[b], "cpu_s"),
                             median([s.cpu_s + s.kernel_s for s in samples[a]])
                             / median([s.cpu_s + s.kernel_s for s in samples[b]]),
                             of(samples[a], "wall_s") / of(samples[b], "wall_s"),
                             load0, load1]
                        )  # fmt: skip
                    floor = samples["temporal"]
                    for c in contenders[3:]:
                        got = samples[c.name]
                        added.append(
                            [mode, c.name.removeprefix("temporal+"),
                             *[(mean(got, part) - mean(floor, part)) * 1000
                               for part in ("cpu_s", "server", "worker", "machine_s")]]
                        )  # fmt: skip
                # The server's requests per task, and the last task's history, of each.
                for c in contenders[:2]:
                    before = requests(metrics_port)
                    for _ in range(REQUEST_TASKS):
                        await c.run(modes[-1])
                    asked[c.name] = requests(metrics_port) - before
                shapes = [
                    await shape(client.get_workflow_handle(contenders[0].ids[-1])),
                    await shape(plain.get_workflow_handle(contenders[1].ids[-1])),
                ]
            finally:
                for worker in workers:
                    stop_process(worker)
    print_table(
        ["mode", "run", "machine CPU ms", "min–max", "process CPU ms", "min–max",
         "+ kernel threads ms", "min–max", "wall ms", "min–max"],
        rows,
        title="per task (median): Loopwork, the Temporal floor, the shell-script floor",
    )  # fmt: skip
    print_table(
        ["mode", "of", "machine CPU", "process CPU", "+ kernel threads", "wall",
         "load at start", "load at end"],
        ratios,
        title="ratios of the medians (the target: loopwork / temporal <= 1.25 in machine CPU)",
    )  # fmt: skip
    print_table(
        ["mode", "run", "process kind", "CPU ms (median)"],
        split,
        title="process CPU per task by kind",
    )
    if added:
        print_table(
            ["mode", "added to the floor", "process CPU ms", "of it the server", "the worker",
             "machine CPU ms"],
            added,
            title="Loopwork's own costs, each added to the Temporal floor alone (difference "
            "of the means per task)",
        )  # fmt: skip
    ops = sorted(set(asked["loopwork"]) | set(asked["temporal"]))
    print_table(
        ["server request", "loopwork", "temporal"],
        [[op, asked["loopwork"][op] / REQUEST_TASKS, asked["temporal"][op] / REQUEST_TASKS]
         for op in ops if asked["loopwork"][op] or asked["temporal"][op]]
        + [["total", sum(asked["loopwork"].values()) / REQUEST_TASKS,
            sum(asked["temporal"].values()) / REQUEST_TASKS]],
        title=f"server requests per task ({REQUEST_TASKS} more tasks of each, {modes[-1]})",
    )  # fmt: skip
    kinds = sorted(set(shapes[0]) | set(shapes[1]))
    print_table(
        ["history event", "loopwork", "temporal"],
        [[k, shapes[0][k], shapes[1][k]] for k in kinds],
        title="one task's history by event kind (the last task of each)",
    )
    print(f"checkout: {args.root.resolve()}")


if __name__ == "__main__":
    asyncio.run(main())
