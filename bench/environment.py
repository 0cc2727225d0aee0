"""A repository's environment: what laying a built one costs a run, by size, and a task.

Two tables. **Per run**: one sandboxed gate (`test -x .venv/bin/python`) with an
environment of ~0.1 MB and one of 500 MB laid into its tree, against the same gate with
none, in basic and strict, ``--runs`` times each, interleaved:
the median wall time, and the bytes written meanwhile by this process and the sandbox's
(``/proc/<pid>/io``: ``wchar`` counts every ``write(2)``, ``write_bytes`` what reached
storage; a copy of the environment would show its size there). **Per task**: a whole
trivial task (an agent that writes one file, that gate) with the environment found built
(a cache hit) against the same task without one, ``--tasks`` pairs, alternating: the
median wall time of each, and the difference, which is what attaching costs a task.

    .venv/bin/python bench/environment.py [--runs 20] [--tasks 5] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from pathlib import Path

from common import (
    connect,
    git,
    live_children,
    loopwork_server,
    median,
    print_machine,
    print_table,
    script_agent,
    temp_home,
)

from activities.gates import run_command
from activities.host import environments
from activities.host.sandbox import inspect_host, release
from loop.contracts import RunGate, TaskSpec, TaskState, Workspace
from loop.settings import Settings
from loop.tasks import start_task
from worker import build_worker

MB = 1_000_000
SMALL = [
    "python3 -m venv --without-pip .venv",
    "for site in .venv/lib/python3*/site-packages; do echo 'VALUE = 1' > $site/dep.py; done",
]
BIG = [
    *SMALL,
    "mkdir .venv/big && for i in $(seq 500); do head -c 1000000 /dev/urandom > .venv/big/$i; done",
]
GATE = "test -x .venv/bin/python || test ! -e .venv"
"""The same line in every case: only what is laid differs (the environment's Python is
there where one is laid)."""


def io_written() -> tuple[int, int]:
    """``wchar`` and ``write_bytes`` of this process and its live children (the sandbox's
    zygote, with every run it reaped)."""
    total = [0, 0]
    for pid in [os.getpid(), *live_children(os.getpid())]:
        try:
            fields = dict(
                line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines()
            )
        except OSError:
            continue
        total[0] += int(fields["wchar"])
        total[1] += int(fields["write_bytes"])
    return total[0], total[1]


def make_repo(folder: Path) -> Path:
    repo = folder / "repo"
    repo.mkdir()
    (repo / "requirements.txt").write_text("dep==1\n")
    (repo / "a.txt").write_text("a\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def spec_for(repo: Path, level: str, setup: list[str] | None, agent: list[str]) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "id": f"env-{uuid.uuid4().hex[:8]}",
            "goal": "write done.txt",
            "repo": str(repo),
            "base": "main",
            "agent": {"command": agent, "timeout": 60},
            "verify": [{"name": "gate", "run": GATE, "report": "exit"}],
            "sandbox": {"mode": level},
            **({"environment": {"setup": setup, "paths": [".venv"]}} if setup else {}),
        }
    )


async def per_run(home: Path, repo: Path, levels: list[str], runs: int) -> list[list[object]]:
    base = git(repo, "rev-parse", "HEAD")
    cases: list[tuple[str, str, TaskSpec, Workspace]] = []
    for level in levels:
        for name, setup in (("none", None), ("0.1 MB", SMALL), ("500 MB", BIG)):
            spec = spec_for(repo, level, setup, ["true"])
            found = None
            if setup:
                planned = await environments.plan(spec, str(repo), base)
                found = await environments.Builder(
                    home=home, locks=home / "locks", spec=spec, repo=str(repo), commit=base,
                    state_dir=home / "runs" / spec.id / "environment", hidden=[],
                ).find_or_build(planned)  # fmt: skip
            checkout = home.parent / f"checkout-{level}-{len(cases)}"
            git(repo, "worktree", "add", "-q", "--detach", str(checkout), base)
            ws = Workspace(
                task_id=spec.id, repo=str(repo), path=str(checkout), branch="main",
                base_ref="main", base_commit=base, run_dir=str(home / "runs" / spec.id),
                environment=found,
            )  # fmt: skip
            cases.append((level, name, spec, ws))
    got: dict[tuple[str, str], list[tuple[float, int, int]]] = {(c[0], c[1]): [] for c in cases}

    async def once(spec: TaskSpec, ws: Workspace, n: int) -> tuple[float, int, int]:
        gate = RunGate(name=f"g{n}", run=spec.verify[0].run, report="exit")  # type: ignore[union-attr]
        w0, b0 = io_written()
        t0 = time.perf_counter()
        ran = await run_command(gate, ws, Path(ws.path), Path(ws.run_dir), home, spec.sandbox)
        wall = time.perf_counter() - t0
        w1, b1 = io_written()
        assert ran.proc.exit_code == 0, Path(ran.proc.log_path).read_text()
        return wall, w1 - w0, b1 - b0

    for _, _, spec, ws in cases:  # a warm-up of each
        await once(spec, ws, 0)
    for n in range(1, runs + 1):
        for level, name, spec, ws in cases if n % 2 else reversed(cases):
            got[(level, name)].append(await once(spec, ws, n))
    for _, _, spec, _ in cases:
        release(home, spec.id)
    return [
        [level, name, median([w for w, _, _ in v]) * 1000,
         median([c for _, c, _ in v]) / 1024, median([b for _, _, b in v]) / 1024]
        for (level, name), v in got.items()
    ]  # fmt: skip


async def per_task(home: Path, repo: Path, level: str, pairs: int) -> list[list[object]]:
    agent = script_agent(home.parent, "pathlib.Path('done.txt').write_text('done')\n")
    walls: dict[str, list[float]] = {"without": [], "with (cache hit)": []}
    async with loopwork_server(home / "server") as server:
        client = await connect(server.address)
        settings = Settings(home=home, task_queue=f"env-{uuid.uuid4().hex[:6]}")
        async with build_worker(client, settings):

            async def task(setup: list[str] | None) -> float:
                spec = spec_for(repo, level, setup, agent)
                t0 = time.perf_counter()
                handle, _ = await start_task(client, spec, settings.task_queue)
                result = await handle.result()
                assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
                return time.perf_counter() - t0

            await task(SMALL)  # built once, and a warm-up of each
            await task(None)
            for n in range(pairs):
                order = [("with (cache hit)", SMALL), ("without", None)]
                for name, setup in order if n % 2 else reversed(order):
                    walls[name].append(await task(setup))
    rows: list[list[object]] = [[name, median(v), min(v), max(v)] for name, v in walls.items()]
    difference = median(walls["with (cache hit)"]) - median(walls["without"])
    rows.append(["difference (median)", difference, "", ""])
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each gate (median)")
    parser.add_argument("--tasks", type=int, default=5, help="pairs of whole tasks")
    parser.add_argument("--quick", action="store_true", help="5 runs, 2 pairs")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.tasks = 5, 2
    print_machine("a repository's environment: laying it into a run, and into a task")
    levels = [lv for lv in ("basic", "strict") if not inspect_host().unavailable(lv)]
    with temp_home() as home:
        home.chmod(0o700)
        repo = make_repo(home.parent)
        rows = await per_run(home, repo, levels, args.runs)
        print_table(
            ["level", "environment", "wall ms (median)", "KiB written (wchar)", "KiB to storage"],
            rows,
            title=f"one gate, {args.runs} runs each, interleaved",
        )
        rows = await per_task(home, repo, levels[0], args.tasks)
        print_table(
            ["task", "wall s (median)", "min", "max"],
            rows,
            title=f"a whole trivial task in {levels[0]}, {args.tasks} pairs, alternating",
        )
    print(f"checkout: {Path(__file__).resolve().parents[1]}")


if __name__ == "__main__":
    asyncio.run(main())
