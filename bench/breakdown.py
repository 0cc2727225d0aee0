"""Where one trivial task's CPU goes: by process kind, server request and git command.

The task is ``bench/vs_floor.py``'s (a scripted agent that writes the fix, gates
``true`` and the demo's unit tests, autonomy ``report``), run one at a time on a
warm ``python worker.py`` and Loopwork's server, in each sandbox mode. Per task it
prints:

- **CPU by process kind.** The worker's own threads, the server, the egress proxy and
  the sandbox's zygote from ``/proc/<pid>/stat`` (their own time, exact); every process
  that exits under the worker or its zygote from the kernel's per-exit accounting
  (taskstats over generic netlink, each task's ``sum_exec_runtime``, so a 1 ms ``git``
  is not rounded to a tick): ``git`` the worker ran, and each sandboxed run (the
  launcher and the command it became, named for that command) with everything it forked;
- **server requests** from the server's own Prometheus counters
  (``service_requests`` of the frontend in the ``default`` namespace: what the worker
  and the client asked for);
- with ``--git-commands``: the worker's ``git`` calls by subcommand, counted by a
  ``git`` earlier on the worker's PATH that logs and execs the real one (its own
  few hundred microseconds a call are then in the git row).

So the next regression shows up as a row that grew. Needs root (taskstats listens to
every exit) and Linux; without them only the /proc and server rows are printed.

    .venv/bin/python bench/breakdown.py [--tasks 10] [--modes basic,strict] [--git-commands]
    .venv/bin/python bench/breakdown.py --modes basic --after 500   # what grows with history
    .venv/bin/python bench/breakdown.py --floor   # the Temporal floor's task, split the same way
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import shutil
import socket
import struct
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from common import (
    byte_compile,
    connect,
    cpu_seconds,
    free_port,
    live_children,
    load_average,
    loopwork_server,
    make_demo_repo,
    print_machine,
    print_table,
    requests,
    script_agent,
    spawn_worker,
    stop_process,
    temp_home,
    wait_for_log,
)
from temporal_floor import FLOOR_WORKER, floor_run
from temporalio.client import Client
from vs_floor import AGENT, loopwork_task

NETLINK_GENERIC, GENL_ID_CTRL, CTRL_CMD_GETFAMILY = 16, 0x10, 3
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 1, 2
TASKSTATS_CMD_GET, CMD_ATTR_REGISTER_CPUMASK, CMD_ATTR_DEREGISTER_CPUMASK = 1, 3, 4
TYPE_STATS, TYPE_AGGR_PID = 3, 4
NLMSG_ERROR, NLM_F_REQUEST, NLM_F_ACK = 2, 1, 4
# struct taskstats (linux/taskstats.h, stable since version 1 at these offsets)
OFF_VIRTUAL_NS, OFF_COMM, OFF_PID = 72, 80, 128
AT_ONCE = 20


@dataclass
class Exit:
    pid: int
    ppid: int
    comm: str
    cpu_ns: int


def _attr(kind: int, data: bytes) -> bytes:
    length = 4 + len(data)
    return struct.pack("HH", length, kind) + data + b"\0" * (-length % 4)


def _attrs(data: bytes) -> dict[int, bytes]:
    found, at = {}, 0
    while at + 4 <= len(data):
        length, kind = struct.unpack_from("HH", data, at)
        found[kind & 0x3FFF] = data[at + 4 : at + length]
        at += (length + 3) & ~3
    return found


class ExitListener:
    """Every task (process or thread) that exits on this machine while listening, as
    the kernel accounts it. Runs in a thread: the kernel drops what is not read."""

    def __init__(self) -> None:
        self.exits: list[Exit] = []
        self.dropped = 0
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        with contextlib.suppress(OSError):  # SO_RCVBUFFORCE: root may exceed rmem_max
            self._sock.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)
        self._sock.bind((0, 0))
        self._family = self._resolve()
        self._cpus = f"0-{(os.cpu_count() or 1) - 1}\0".encode()
        self._request(self._family, TASKSTATS_CMD_GET, _attr(CMD_ATTR_REGISTER_CPUMASK, self._cpus))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _send(self, family: int, cmd: int, attrs: bytes) -> None:
        payload = struct.pack("BBH", cmd, 1, 0) + attrs
        header = struct.pack("IHHII", 16 + len(payload), family, NLM_F_REQUEST | NLM_F_ACK, 1, 0)
        self._sock.send(header + payload)

    def _request(self, family: int, cmd: int, attrs: bytes) -> bytes:
        self._send(family, cmd, attrs)
        while True:
            data = self._sock.recv(1 << 16)
            kind = struct.unpack_from("H", data, 4)[0]
            if kind == NLMSG_ERROR:
                code = struct.unpack_from("i", data, 16)[0]
                if code:
                    raise OSError(-code, os.strerror(-code))
                return b""
            if kind == family or family == GENL_ID_CTRL:
                return data

    def _resolve(self) -> int:
        reply = self._request(
            GENL_ID_CTRL, CTRL_CMD_GETFAMILY, _attr(CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0")
        )
        length = struct.unpack_from("I", reply, 0)[0]
        family = _attrs(reply[20:length]).get(CTRL_ATTR_FAMILY_ID)
        if family is None:
            raise OSError("the kernel has no TASKSTATS family")
        return int(struct.unpack_from("H", family)[0])

    def _read(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                data = self._sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    self.dropped += 1
                    continue
                raise
            at = 0
            while at + 16 <= len(data):
                length, kind = struct.unpack_from("IH", data, at)
                if kind == self._family:
                    self._parse(data[at + 20 : at + length])
                at += (length + 3) & ~3

    def _parse(self, body: bytes) -> None:
        aggregate = _attrs(body).get(TYPE_AGGR_PID)
        stats = _attrs(aggregate).get(TYPE_STATS) if aggregate else None
        if not stats:
            return
        pid, ppid = struct.unpack_from("II", stats, OFF_PID)
        comm = stats[OFF_COMM : OFF_COMM + 32].split(b"\0", 1)[0].decode(errors="replace")
        cpu = struct.unpack_from("Q", stats, OFF_VIRTUAL_NS)[0]
        self.exits.append(Exit(pid, ppid, comm, cpu))

    def take(self) -> list[Exit]:
        time.sleep(0.3)  # the last exits' messages are on their way
        got, self.exits = self.exits, []
        return got

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(OSError):
            self._send(
                self._family, TASKSTATS_CMD_GET, _attr(CMD_ATTR_DEREGISTER_CPUMASK, self._cpus)
            )
        self._sock.close()


def classify(exits: list[Exit], roots: set[int]) -> dict[str, tuple[int, int]]:
    """(tasks, CPU ns) per kind, for the exits under ``roots`` (the worker, and its
    long-lived children: the sandbox's zygote forks every run): ``git`` the worker ran,
    and the sandboxed runs, each with what it forked, named for the command the launcher
    became (``run: true``; ``in runs: sh`` for what they forked)."""
    parent = {e.pid: e.ppid for e in exits}
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in exits:
        chain, pid = [e.pid], e.ppid
        while pid not in roots and pid in parent and len(chain) < 64:
            chain.append(pid)
            pid = parent[pid]
        if pid not in roots:
            continue
        top = next(x for x in exits if x.pid == chain[-1])
        if top.comm.startswith("git"):
            kind = "git" if e is top else f"git's: {e.comm}"
        else:
            kind = f"run: {e.comm}" if e is top else f"in runs: {e.comm}"
        by_kind[kind][0] += 1
        by_kind[kind][1] += e.cpu_ns
    return {k: (v[0], v[1]) for k, v in by_kind.items()}


def git_shim(folder: Path, log: Path) -> Path:
    """A ``git`` that logs its subcommand (and ``worktree``'s verb) and execs the real one."""
    real = shutil.which("git")
    if real is None:
        raise SystemExit("git is not on PATH")
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "git"
    shim.write_text(
        "#!/bin/sh\nskip=; sub=; verb=\nfor a do\n"
        '  if [ -n "$skip" ]; then skip=; continue; fi\n'
        '  if [ -n "$sub" ]; then verb=$a; break; fi\n'
        "  case $a in -c|-C) skip=1;; -*) ;;\n"
        "    *) sub=$a; case $a in worktree|stash|remote) ;; *) break;; esac;;\n"
        "  esac\ndone\n"
        f'printf "%s\\n" "$sub${{verb:+ $verb}}" >> {log}\n'
        f'exec {real} "$@"\n'
    )
    shim.chmod(0o755)
    return folder


@dataclass
class Series:
    mode: str
    tasks: int
    worker_s: float
    children_s: float
    proxy_s: float
    server_s: float
    client_s: float
    wall_s: float
    kinds: dict[str, tuple[int, int]]
    requests: Counter[str]
    git_commands: Counter[str]
    load: tuple[str, str]


async def series(
    args: argparse.Namespace,
    mode: str,
    task: Callable[[str], Awaitable[object]],
    worker: int,
    server: int,
    metrics_port: int,
    listener: ExitListener | None,
    git_log: Path | None,
) -> Series:
    for done in range(0, args.after, AT_ONCE):  # history first, when asked for
        batch = min(AT_ONCE, args.after - done)
        await asyncio.gather(*[task(mode) for _ in range(batch)])
    for _ in range(2):  # warm: the first tasks of a mode probe and fill the base store
        await task(mode)
    if listener:
        listener.take()
    if git_log:
        git_log.write_text("")
    proxies = live_children(worker)  # the egress proxy and the sandbox's zygote
    load0 = load_average()
    w0, c0 = cpu_seconds(worker)
    p0 = sum(cpu_seconds(p)[0] for p in proxies)
    c0 += sum(cpu_seconds(p)[1] for p in proxies)  # the runs the zygote reaped
    s0, r0, t0, k0 = (
        cpu_seconds(server)[0],
        requests(metrics_port),
        time.perf_counter(),
        time.process_time(),
    )
    for _ in range(args.tasks):
        await task(mode)
    wall = time.perf_counter() - t0
    k1 = time.process_time()
    w1, c1 = cpu_seconds(worker)
    p1 = sum(cpu_seconds(p)[0] for p in proxies)
    c1 += sum(cpu_seconds(p)[1] for p in proxies)
    s1, r1 = cpu_seconds(server)[0], requests(metrics_port)
    exits = listener.take() if listener else []
    commands: Counter[str] = Counter()
    if git_log:
        commands = Counter(line for line in git_log.read_text().splitlines() if line)
    return Series(
        mode,
        args.tasks,
        w1 - w0,
        c1 - c0,
        p1 - p0,
        s1 - s0,
        k1 - k0,
        wall,
        classify(exits, {worker, *proxies}),
        r1 - r0,
        commands,
        (load0, load_average()),
    )


def report(all_series: list[Series], listening: bool, dropped: int) -> None:
    for s in all_series:
        n = s.tasks
        rows: list[list[object]] = [["worker (its own threads)", "", s.worker_s * 1000 / n]]
        children = s.children_s * 1000 / n
        if listening:
            # What exits under the worker, however it was reaped: a process the kernel
            # kills when a run's pid namespace ends is in no parent's reaped time.
            children = sum(ns for _, ns in s.kinds.values()) / 1e6 / n
            rows.append(["worker's children (every exit under it)", "", children])
            for kind, (tasks, ns) in sorted(s.kinds.items(), key=lambda kv: -kv[1][1]):
                rows.append([f"  {kind}", tasks / n, ns / 1e6 / n])
            rows.append(
                ["  (cross-check: reaped by the worker or its zygote)", "", s.children_s * 1000 / n]
            )
        else:
            rows.append(["worker's children (reaped)", "", children])
        rows += [
            ["egress proxy and sandbox zygote (their own)", "", s.proxy_s * 1000 / n],
            ["server", "", s.server_s * 1000 / n],
            ["client (this process)", "", s.client_s * 1000 / n],
            ["total", "", children + (s.worker_s + s.proxy_s + s.server_s + s.client_s) * 1000 / n],
        ]
        print_table(
            ["process kind", "per task", "CPU ms per task"],
            rows,
            title=(
                f"{s.mode}: CPU per task over {n} tasks ({s.wall_s / n * 1000:.0f} ms wall each; "
                f"load {s.load[0]} at start, {s.load[1]} at end)"
            ),
        )
        ops = sorted(s.requests.items(), key=lambda kv: -kv[1])
        print_table(
            ["server request (frontend)", "per task"],
            [[op, count / n] for op, count in ops if count]
            + [["total", sum(s.requests.values()) / n]],
            title=f"{s.mode}: server requests per task (the server's service_requests)",
        )
        if s.git_commands:
            print_table(
                ["git subcommand", "per task"],
                [[c, k / n] for c, k in s.git_commands.most_common()]
                + [["total", sum(s.git_commands.values()) / n]],
                title=f"{s.mode}: the worker's git calls per task (through the logging git)",
            )
    if not listening:
        print("per-exit accounting unavailable (needs root and taskstats): kinds not split")
    elif dropped:
        print(f"the kernel dropped {dropped} batches of exit messages: kinds undercount")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10, help="measured tasks per mode")
    parser.add_argument("--modes", default="basic,strict", help="sandbox modes, in order")
    parser.add_argument(
        "--git-commands", action="store_true", help="count the worker's git calls by subcommand"
    )
    parser.add_argument(
        "--after", type=int, default=0,
        help="tasks run on the repository first (20 at a time), to see what grows with history",
    )  # fmt: skip
    parser.add_argument(
        "--floor",
        action="store_true",
        help="the Temporal floor's worker and tasks (bench/temporal_floor.py) instead of "
        "Loopwork's, split the same way",
    )
    parser.add_argument("--quick", action="store_true", help="a tiny version (3 tasks, basic)")
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.modes = 3, "basic"
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    print_machine("where one trivial task's CPU goes (bench/breakdown.py)")
    byte_compile()
    on = "the Temporal floor (bench/floor_worker.py)" if args.floor else "Loopwork"
    print(
        f"{args.tasks} tasks per mode after {args.after} earlier tasks and 2 warm-up tasks; "
        f"task as in bench/vs_floor.py, on {on}\n"
    )
    listener = None
    try:
        listener = ExitListener()
    except OSError as e:
        print(f"taskstats: {e}; process kinds are not split", file=sys.stderr)
    results = []
    with temp_home() as home:
        base = home.parent
        base.chmod(0o755)  # the floor's uid reads the agent script from here
        agent = script_agent(base, AGENT)
        Path(agent[1]).chmod(0o644)
        repo = make_demo_repo(base / "repo")
        metrics_port = free_port()
        extra: dict[str, str] = {}
        git_log = None
        if args.git_commands:
            git_log = base / "git-calls.log"
            shim = git_shim(base / "git-shim", git_log)
            extra["PATH"] = f"{shim}{os.pathsep}{os.environ.get('PATH', '')}"
        async with loopwork_server(home / "server", metrics_port=metrics_port) as server:
            client = await connect(server.address)
            queue = f"breakdown-{os.getpid()}"
            log = home / "worker.log"
            if args.floor:
                (base / "work").mkdir()
                plain = await Client.connect(server.address)
                task = floor_run(plain, queue, repo, base / "work", agent, [])
                argv = [sys.executable, str(FLOOR_WORKER)]
                worker = spawn_worker(server.address, home, queue, log, argv=argv, **extra)
            else:

                def task(mode: str) -> Awaitable[str]:
                    return loopwork_task(client, queue, repo, agent, mode)

                worker = spawn_worker(server.address, home, queue, log, **extra)
            try:
                await wait_for_log(log, "worker ready", worker)
                for mode in modes:
                    results.append(
                        await series(
                            args,
                            mode,
                            task,
                            worker.pid,
                            server.process.pid,
                            metrics_port,
                            listener,
                            git_log,
                        )
                    )
            finally:
                stop_process(worker)
    dropped = listener.dropped if listener else 0
    if listener:
        listener.close()
    report(results, listener is not None, dropped)
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
