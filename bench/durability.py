"""The cost of durability per step: the same N-step loop four ways.

(a) a plain Python loop; (b) the loop persisting its JSON state with an fsync
after every step (write, fsync, rename: what a 50-line loop agent does);
(c) one Temporal activity per step on a default dev server
(``temporal server start-dev --db-filename <tmp>``, nothing else that matters);
(d) one activity per step on Loopwork's embedded server (``DevServer.start``:
its DYNAMIC_CONFIG poll rates and SQLITE_PRAGMAS).

Each step is the same trivial computation. For (c) and (d) a tiny workflow runs
the steps as activities on an in-process worker (pydantic data converter,
sticky schedule-to-start timeout 2 s, as Loopwork's worker). Both servers run
at once; each is warmed up, then (c) and (d) alternate for ``--runs`` runs; the
median is reported.

    .venv/bin/python bench/durability.py [--steps 200] [--runs 3] [--ablation] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path

from common import (
    connect,
    cpu_seconds,
    default_server,
    loopwork_server,
    median,
    print_machine,
    print_table,
    temp_home,
)
from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from loop.devserver import DYNAMIC_CONFIG, SQLITE_PRAGMAS, DevServer

TARGET_SPEEDUP = 4.0
FAST_POLL = [a for k, v in DYNAMIC_CONFIG.items() for a in ("--dynamic-config-value", f"{k}={v}")]
PRAGMAS = [a for p in SQLITE_PRAGMAS for a in ("--sqlite-pragma", p)]

# (c) and (d) always; the others with --ablation: which of Loopwork's two settings does what,
# and the floor without a database file.
VARIANTS: dict[str, tuple[str, Callable[[Path], AbstractAsyncContextManager[DevServer]]]] = {
    "c": ("activity per step, default dev server", default_server),
    "d": ("activity per step, Loopwork's server", loopwork_server),
    "e": ("  ablation: default + poll rates only", lambda h: default_server(h, FAST_POLL)),
    "f": ("  ablation: default + SQLite pragmas only", lambda h: default_server(h, PRAGMAS)),
    "g": (
        "  ablation: poll rates, in-memory store",
        lambda h: default_server(h, FAST_POLL, db=False),
    ),
}


class StepState(BaseModel):
    i: int = 0
    acc: int = 1


class LoopInput(BaseModel):
    steps: int


def compute(s: StepState) -> StepState:
    """The trivial step: one multiply-add modulo a prime."""
    return StepState(i=s.i + 1, acc=(s.acc * 31 + s.i) % 1_000_003)


@activity.defn(name="bench_step")
async def step_activity(s: StepState) -> StepState:
    return compute(s)


# Not sandboxed: the workflow lives in this script (__main__), which the sandbox
# cannot re-import; the sandbox's cost is the same on both servers anyway.
@workflow.defn(name="BenchLoop", sandboxed=False)
class BenchLoop:
    @workflow.run
    async def run(self, inp: LoopInput) -> StepState:
        s = StepState()
        for _ in range(inp.steps):
            s = await workflow.execute_activity(
                step_activity, s, start_to_close_timeout=timedelta(seconds=30)
            )
        return s


# --------------------------------------------------------------------------- variants


def plain(steps: int) -> float:
    s = StepState()
    t0 = time.perf_counter()
    for _ in range(steps):
        s = compute(s)
    return time.perf_counter() - t0


def fsynced(steps: int, folder: Path) -> float:
    state_file = folder / "state.json"
    tmp = folder / "state.json.tmp"
    s = StepState()
    t0 = time.perf_counter()
    for _ in range(steps):
        s = compute(s)
        with tmp.open("w") as f:
            json.dump(s.model_dump(), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, state_file)
    elapsed = time.perf_counter() - t0
    assert json.loads(state_file.read_text())["i"] == steps
    return elapsed


async def run_loop(client: Client, queue: str, steps: int) -> float:
    """One BenchLoop workflow of ``steps`` activities; seconds from start to result."""
    t0 = time.perf_counter()
    result = await client.execute_workflow(
        BenchLoop.run,
        LoopInput(steps=steps),
        id=f"bench-loop-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        result_type=StepState,
    )
    elapsed = time.perf_counter() - t0
    assert result.i == steps
    return elapsed


def bench_worker(client: Client, queue: str) -> Worker:
    return Worker(
        client,
        task_queue=queue,
        workflows=[BenchLoop],
        activities=[step_activity],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per loop (default 200)")
    parser.add_argument("--runs", type=int, default=3, help="measured runs; median (default 3)")
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="also: only the poll rates, only the pragmas, and an in-memory store",
    )
    parser.add_argument("--quick", action="store_true", help="a tiny version (< 30 s)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.runs = 60, 1  # a smoke test: short runs ride the rate limiter's burst
    warmup = min(args.steps, 20)
    print_machine("durability: cost per step")
    print(f"steps={args.steps}, runs={args.runs} (median), warm-up {warmup} steps\n", flush=True)

    rows: dict[str, tuple[str, list[float]]] = {}
    plain(args.steps)  # warm-up
    rows["a"] = ("plain Python loop", [plain(args.steps) for _ in range(args.runs)])
    with tempfile.TemporaryDirectory(prefix="bench-fsync-") as d:
        fsynced(warmup, Path(d))
        runs = [fsynced(args.steps, Path(d)) for _ in range(args.runs)]
        rows["b"] = ("JSON state + fsync per step", runs)
    # All servers up at once, runs interleaved (c, d, c, d, ...), so a change in
    # the machine's load during the benchmark hits all alike.
    variants = dict(VARIANTS)
    if not args.ablation:
        variants = {k: v for k, v in variants.items() if k in "cd"}
    with temp_home() as home:
        async with contextlib.AsyncExitStack() as stack:
            clients, pids = {}, {}
            for key, (_, start) in variants.items():
                server = await stack.enter_async_context(start(home / key))
                clients[key], pids[key] = await connect(server.address), server.pid
                await stack.enter_async_context(bench_worker(clients[key], f"bench-{key}"))
                await run_loop(clients[key], f"bench-{key}", warmup)
            measured: dict[str, list[float]] = {key: [] for key in variants}
            server_cpu: dict[str, float] = dict.fromkeys(variants, 0.0)
            for _ in range(args.runs):
                for key in variants:
                    before = cpu_seconds(pids[key])[0]
                    measured[key].append(await run_loop(clients[key], f"bench-{key}", args.steps))
                    server_cpu[key] += cpu_seconds(pids[key])[0] - before
    for key, (label, _) in variants.items():
        rows[key] = (label, measured[key])
    cpu_ms = {k: v / args.runs / args.steps * 1000 for k, v in server_cpu.items()}

    per_step = {k: median(v) / args.steps * 1000 for k, (_, v) in rows.items()}
    table = []
    for key, (label, times) in rows.items():
        table.append(
            [
                f"({key}) {label}",
                per_step[key],
                median(times) * 1000,
                " / ".join(f"{t * 1000 / args.steps:.3g}" for t in times),
                per_step[key] / per_step["a"] if per_step["a"] else float("inf"),
                per_step["c"] / per_step[key] if key not in "ab" else "",
                cpu_ms.get(key, ""),
            ]
        )
    print_table(
        [
            "variant",
            "ms/step (median)",
            "ms total",
            "ms/step per run",
            "x plain",
            "speed-up vs (c)",
            "server CPU ms/step",
        ],
        table,
        title=f"{args.steps} steps",
    )
    speedup = per_step["c"] / per_step["d"]
    met = "MET" if speedup >= TARGET_SPEEDUP else "NOT met"
    print(
        f"(d) vs (c): Loopwork's server is {speedup:.1f}x faster per step than the default "
        f"dev server (target >= {TARGET_SPEEDUP:g}x): {met}"
    )
    print(
        f"Durability on Loopwork's server costs {per_step['d'] - per_step['b']:.2f} ms/step "
        f"more than an fsynced JSON file ({per_step['d'] / per_step['b']:.1f}x)."
    )
    print(
        f"The server process alone burns {cpu_ms['d']:.1f} ms of CPU per step on (d), on a "
        f"machine with {os.cpu_count()} cores."
    )


if __name__ == "__main__":
    asyncio.run(main())
