"""The cost of one sandboxed run: ``true`` through ``run_sandboxed``, in each level.

Measured at first: 51 ms of CPU for one sandboxed ``true`` in basic and 50 in strict,
against ~4 ms for a bare ``bwrap``; its target is 10 ms. This runs the same ``true`` as
an agent (the worktree lent and taken back) and as a gate, ``--runs`` times each,
interleaved with a bare ``bwrap ... true``, and prints the CPU of this process and its
children per run and the wall time: ``getrusage`` of this process and its reaped
children, plus ``/proc/<pid>/stat`` (utime, stime, cutime, cstime) of its live children,
which is the sandbox's zygote with every run it reaped. Those count in clock ticks (10 ms),
so a run's CPU is the mean of its runs, not the median. Run it from two checkouts, one
after the other, to compare them (``--root``).

    .venv/bin/python bench/sandboxed_true.py [--runs 30] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time
from pathlib import Path

from common import (
    cpu_seconds,
    git,
    live_children,
    median,
    print_machine,
    print_table,
    temp_home,
)

from activities.host.sandbox import SandboxRun, inspect_host, release, run_sandboxed
from loop.contracts import SandboxPolicy

BWRAP = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs",
         "/tmp", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--die-with-parent",
         "true"]  # fmt: skip


def live_children_cpu() -> float:
    """The CPU of this process's live children, each its own and its reaped children's:
    the sandbox's zygote (every run's launcher and command are its children, not ours)."""
    return sum(sum(cpu_seconds(pid)) for pid in live_children(os.getpid()))


def cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + live_children_cpu()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs of each (median)")
    parser.add_argument("--quick", action="store_true", help="5 runs")
    args = parser.parse_args()
    if args.quick:
        args.runs = 5
    print_machine("one sandboxed `true`: CPU per run, by level and kind")
    levels = [lv for lv in ("basic", "strict") if not inspect_host().unavailable(lv)]
    with temp_home() as home:
        home.chmod(0o700)
        tree = home.parent / "tree"
        tree.mkdir()
        (tree / "a.txt").write_text("a\n")
        git(tree, "init", "-q", "-b", "main")
        git(tree, "add", "-A")
        git(tree, "commit", "-q", "-m", "base")
        task = f"bench-{os.getpid()}"

        def request(level: str, kind: str, n: int) -> SandboxRun:
            return SandboxRun(
                argv=["true"], kind=kind, policy=SandboxPolicy(mode=level, network="none"),  # type: ignore[arg-type]
                task_id=task, home=home, tree=tree, state_dir=home / "runs" / task,
                name=f"{kind}-{n}", limit_s=30,
            )  # fmt: skip

        async def sandboxed(level: str, kind: str, n: int) -> None:
            ran = await run_sandboxed(request(level, kind, n))
            assert ran.exit_code == 0, ran.output_tail

        async def bare(_level: str, _kind: str, _n: int) -> None:
            proc = await asyncio.create_subprocess_exec(*BWRAP)
            assert await proc.wait() == 0

        cases = [(lv, k, sandboxed) for lv in levels for k in ("agent", "gate")]
        cases.append(("-", "bare bwrap", bare))
        for level, kind, fn in cases:  # a warm-up of each
            await fn(level, kind, 0)
        got: dict[tuple[str, str], list[tuple[float, float]]] = {(c[0], c[1]): [] for c in cases}
        for n in range(1, args.runs + 1):
            for level, kind, fn in cases if n % 2 else reversed(cases):
                c0, t0 = cpu(), time.perf_counter()
                await fn(level, kind, n)
                got[(level, kind)].append((cpu() - c0, time.perf_counter() - t0))
        release(home, task)
    rows = [
        [level, kind, sum(c for c, _ in v) / len(v) * 1000,
         f"{min(c for c, _ in v) * 1000:.1f}–{max(c for c, _ in v) * 1000:.1f}",
         median([w for _, w in v]) * 1000]
        for (level, kind), v in got.items()
    ]  # fmt: skip
    print_table(
        ["level", "kind", "CPU ms (mean)", "CPU min–max", "wall ms (median)"],
        rows,
        title=f"one `true`, {args.runs} runs each, interleaved (this process and its children)",
    )
    print(f"checkout: {Path(__file__).resolve().parents[1]}")


if __name__ == "__main__":
    asyncio.run(main())
