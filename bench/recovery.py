"""Crash recovery: kill -9 the worker mid-step, start a new one, time the resumed step.

Command backend: the agent's first run is a long ``make`` (it sleeps); the
worker (``python worker.py``, a subprocess) is killed with SIGKILL a few
seconds into it and a new worker is started at once. The retried ``make``
runs the agent again, which this time takes ``--step`` seconds (the step's own
duration) and writes the fix. Measured from the new worker's start:

- worker ready: the new worker's "worker ready" log line;
- retried make starts: the retried ``make`` activity starts (its history event): the
  target, at most 1 s after the new worker starts (median; 1.5 s at worst), because the
  new worker fails what its dead predecessor ran (its lease file) instead of waiting
  for the heartbeat timeout (the retry is a timer: the server fires it within 100 ms,
  loop/devserver.py's timer shift);
- agent starts: the agent's second run starts (its own timestamp);
- step done - own: the retried ``make`` completes (history event time) minus
  the agent's own run time on the retry: the recovery overhead;
- next step - own: the following ``verify`` is scheduled, minus the same (this
  also pays the dead worker's sticky queue: its 2 s schedule-to-start timeout).

The kill lands at different offsets into the step (``--kill-after``). Without the
lease a heartbeat is only sent every 4 s (80 % of the 5 s heartbeat timeout), so
the server would notice the death 1-5 s after it; the late-restart run shows
that path (its new worker starts after the heartbeat timeout).

openai backend: a scripted model (tests/support/model_server.py) over real HTTP; the
worker is killed during a ``run`` tool call between two model calls; every
model request is recorded, and a request whose conversation was already
answered before is a re-sent model call (target: 0). The interrupted ``run`` is not
started again (it may have run in part): the model is told so, so the next model
call comes as soon as the retried tool step has said it, measured from the new
worker's start.

    .venv/bin/python bench/recovery.py [--kill-after 1,2.5,4] [--step 2] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from common import (
    COMPLETE_FIX,
    UNITTEST,
    byte_compile,
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
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle

from loop.contracts import TaskSpec, TaskState
from loop.tasks import start_task
from tests.support.model_server import ScriptedModel, reply

TARGET_S = 1.0
WORST_S = 1.5
"""The retried step starts within TARGET_S of the new worker's start (median), WORST_S at worst."""

# First run: record the start, then sleep "forever" (the worker is killed under it).
# Retry: record the start, work for STEP seconds, write the fix, record the end.
# It notes its runs in its own folder (LOOP_OUTPUT_FILE's), the one place outside the
# worktree its uid may write, kept across the retries of an attempt.
AGENT = """
calls = pathlib.Path(os.environ["LOOP_OUTPUT_FILE"]).parent / "calls.jsonl"
first = not calls.exists()
with calls.open("a") as f:
    f.write(json.dumps({"start": time.time(), "pid": os.getpid()}) + "\\n")
if first:
    time.sleep(600)
time.sleep(STEP)
pathlib.Path("slugify.py").write_text(FIX)
with calls.open("a") as f:
    f.write(json.dumps({"end": time.time()}) + "\\n")
"""


def us(ev: HistoryEvent) -> float:
    """The event's server time, as time.time()."""
    return ev.event_time.ToMicroseconds() / 1e6


async def step_times(handle: WorkflowHandle) -> dict[str, float | str | int]:
    """From history: make's completion, its last try, why it was retried, verify scheduled."""
    scheduled: dict[int, str] = {}
    out: dict[str, float | str | int] = {}
    async for ev in handle.fetch_history_events():
        if ev.HasField("activity_task_scheduled_event_attributes"):
            name = ev.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[ev.event_id] = name
            if name == "verify" and "verify_scheduled" not in out:
                out["verify_scheduled"] = us(ev)
        elif ev.HasField("activity_task_started_event_attributes"):
            a = ev.activity_task_started_event_attributes
            if scheduled.get(a.scheduled_event_id) == "make":
                out["make_tries"] = a.attempt
                out["retry_cause"] = a.last_failure.message or "-"
                out["make_started"] = us(ev)
        elif ev.HasField("activity_task_completed_event_attributes"):
            a = ev.activity_task_completed_event_attributes
            if scheduled.get(a.scheduled_event_id) == "make":
                out["make_done"] = us(ev)
    return out


async def wait_file_lines(path: Path, lines: int, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not (path.exists() and len(path.read_text().splitlines()) >= lines):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path}: fewer than {lines} lines after {within} s")
        await asyncio.sleep(0.02)


def kill_orphan(calls: Path) -> None:
    """Should the run fail, do not leave the first agent run sleeping."""
    with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
        pid = json.loads(calls.read_text().splitlines()[0])["pid"]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


async def command_run(
    client: Client,
    address: str,
    home: Path,
    repo: Path,
    kill_after: float,
    step: float,
    i: int,
    restart_delay: float = 0.0,
) -> dict[str, float | str | int]:
    queue = f"recovery-{i}"
    body = f"STEP = {step!r}\nFIX = {COMPLETE_FIX!r}\n" + AGENT
    agent = script_agent(home.parent, body)
    spec = TaskSpec.model_validate(
        task_spec(repo, agent, verify=[{"name": "tests", "run": UNITTEST, "timeout": 60}])
    )
    calls = home / "runs" / spec.id / "attempt-1" / "agent" / "calls.jsonl"
    log, log2 = home / f"worker-recovery-{i}.log", home / f"worker-recovery-{i}-new.log"
    first = spawn_worker(address, home, queue, log)
    second: subprocess.Popen[bytes] | None = None
    try:
        await wait_for_log(log, "worker ready", first)
        handle, _ = await start_task(client, spec, queue)
        await wait_file_lines(calls, 1)
        await asyncio.sleep(kill_after)
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed = time.time()
        await asyncio.sleep(restart_delay)
        second = spawn_worker(address, home, queue, log2)
        spawned = time.time()
        ready = await wait_for_log(log2, "worker ready", second, within=30)
        result = await asyncio.wait_for(handle.result(), 120)
        if result.state != TaskState.DONE_WITH_EVIDENCE:
            raise RuntimeError(f"task ended {result.state}: {result.reason}")
    finally:
        kill_orphan(calls)
        stop_process(first)
        if second is not None:
            stop_process(second)
    records = [json.loads(line) for line in calls.read_text().splitlines()]
    retry_start, retry_end = records[1]["start"], records[2]["end"]
    own = retry_end - retry_start
    times = await step_times(handle)
    return {
        "kill_after": kill_after,
        "restart_delay": spawned - killed,
        "kill_to_retry": retry_start - killed,
        "ready": ready - spawned,
        "step_started": float(times["make_started"]) - spawned,
        "retry_start": retry_start - spawned,
        "own": own,
        "done_minus_own": float(times["make_done"]) - spawned - own,
        "next_minus_own": float(times["verify_scheduled"]) - spawned - own,
        "tries": times.get("make_tries", 0),
        "cause": times.get("retry_cause", "-"),
    }


# --------------------------------------------------------------------------- openai backend


async def openai_run(
    client: Client, address: str, home: Path, repo: Path, tool_s: float, i: int
) -> dict[str, float | int]:
    queue = f"recovery-openai-{i}"
    script = [
        reply(tool_calls=[("read_file", {"path": "slugify.py"})]),
        reply(tool_calls=[("run", {"command": f"sleep {tool_s}"})]),
        reply(tool_calls=[("write_file", {"path": "slugify.py", "content": COMPLETE_FIX})]),
        reply(tool_calls=[("run", {"command": UNITTEST})]),
        reply(tool_calls=[("finish", {"answer": "slugify fixed; tests pass"})]),
    ]
    log = home / f"worker-openai-{i}.log"
    env = {"OPENAI_API_KEY": "sk-bench-not-a-key"}
    with ScriptedModel() as model:
        model.script(script)
        data = task_spec(repo, ["true"], verify=[{"name": "tests", "run": UNITTEST}])
        data["agent"] = {
            "backend": "openai",
            "model": "gpt-4o-mini",
            "base_url": model.url,
            "timeout": 120,
        }
        spec = TaskSpec.model_validate(data)
        first = spawn_worker(address, home, queue, log, **env)
        second: subprocess.Popen[bytes] | None = None
        try:
            await wait_for_log(log, "worker ready", first)
            handle, _ = await start_task(client, spec, queue)
            deadline = time.monotonic() + 60
            while len(model.requests) < 2:  # the second answer asked for `sleep`
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the model was not called twice; log {log}")
                await asyncio.sleep(0.01)
            await asyncio.sleep(tool_s / 2)  # inside the `run` tool call, between model calls
            answered_before_kill = len(model.requests)
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = spawn_worker(address, home, queue, log.with_suffix(".new.log"), **env)
            spawned = time.time()
            while len(model.requests) <= answered_before_kill:
                if time.monotonic() > deadline + 60:
                    raise TimeoutError("no model call after the restart")
                await asyncio.sleep(0.01)
            next_call = time.time()
            result = await asyncio.wait_for(handle.result(), 120)
        finally:
            stop_process(first)
            if second is not None:
                stop_process(second)
        bodies = [json.dumps(r["body"]["messages"], sort_keys=True) for r in model.requests]
        exhausted = model.exhausted
    if result.state != TaskState.DONE_WITH_EVIDENCE:
        raise RuntimeError(f"openai task ended {result.state}: {result.reason}")
    return {
        "calls": len(bodies),
        "scripted": len(script),
        "resent": len(bodies) - len(set(bodies)),
        "exhausted": exhausted,
        "answered_before_kill": answered_before_kill,
        "next_call": next_call - spawned,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kill-after",
        default="0.5,1,2,3,4",
        help="seconds into the long step to kill the worker, one run each (default 0.5,1,2,3,4)",
    )
    parser.add_argument(
        "--late-restart",
        type=float,
        default=8.0,
        help="one more run whose new worker starts this long after the kill (0: none; default 8)",
    )
    parser.add_argument(
        "--step", type=float, default=2.0, help="the retried step's own seconds (default 2)"
    )
    parser.add_argument("--openai-runs", type=int, default=3, help="openai backend runs")
    parser.add_argument("--quick", action="store_true", help="a tiny version (< 30 s)")
    args = parser.parse_args()
    offsets = [float(x) for x in args.kill_after.split(",")]
    tool_s = 2.0
    if args.quick:
        offsets, args.late_restart, args.step, args.openai_runs, tool_s = [0.5], 0, 0.5, 1, 1.0
    runs = [(off, 0.0) for off in offsets]
    if args.late_restart > 0:
        runs.append((offsets[0], args.late_restart))
    byte_compile()  # a new worker's start is its imports: compiled, as an install has them
    print_machine("recovery: kill -9 of the worker mid-step")
    print(
        f"command backend: kill at {offsets} s into the long make, the new worker started at "
        f"once (and {args.late_restart:g} s later in one more run), retried step "
        f"{args.step:g} s; openai backend: {args.openai_runs} run(s), kill {tool_s / 2:g} s "
        f"into a {tool_s:g} s tool call. Loopwork's settings: the new worker fails what the "
        "dead one ran (lease files) and resets its workflows' sticky queues; otherwise "
        "heartbeat timeout 5 s (sent every 4 s), first retry after 0.5 s, sticky "
        "schedule-to-start 2 s.\n",
        flush=True,
    )
    rows, oai = [], []
    with temp_home() as home:
        repo = make_demo_repo(home.parent / "demo")
        async with loopwork_server(home / "server") as server:
            client = await connect(server.address)
            for i, (off, delay) in enumerate(runs):
                rows.append(
                    await command_run(
                        client, server.address, home, repo, off, args.step, i, restart_delay=delay
                    )
                )
            for i in range(args.openai_runs):
                oai.append(await openai_run(client, server.address, home, repo, tool_s, i))

    keys = (
        "ready", "step_started", "retry_start", "own", "done_minus_own", "next_minus_own",
        "kill_to_retry",
    )  # fmt: skip

    def row(label: str, r: dict) -> list:
        return [label, *(float(r[k]) for k in keys), r["tries"], str(r["cause"])[:30]]

    immediate = [r for r in rows if float(r["restart_delay"]) < 1]
    late = [r for r in rows if float(r["restart_delay"]) >= 1]
    table = [row(f"kill at {r['kill_after']:g} s", r) for r in immediate]
    table.append(["median", *(median([float(r[k]) for r in immediate]) for k in keys), "", ""])
    table += [row(f"restart {float(r['restart_delay']):.0f} s after kill", r) for r in late]
    print_table(
        [
            "run",
            "worker ready s",
            "retried make starts s",
            "agent starts s",
            "step own s",
            "step done - own s",
            "next step - own s",
            "kill -> retry starts s",
            "make tries",
            "why retried",
        ],
        table,
        title="command backend: seconds from the new worker's start (last column: from the kill)",
    )
    started = [float(r["step_started"]) for r in immediate]
    met = "MET" if median(started) <= TARGET_S and max(started) <= WORST_S else "NOT met"
    print(
        f"target: the retried step starts within {TARGET_S:g} s of the new worker's start "
        f"(median of {len(started)} kills), {WORST_S:g} s at worst: median "
        f"{median(started):.2f} s, worst {max(started):.2f} s: {met}"
    )
    if late:
        print(
            f"with the new worker started after the heartbeat timeout: "
            f"{float(late[0]['done_minus_own']):.2f} s"
        )
    print()
    print_table(
        [
            "run",
            "model calls scripted",
            "model calls made",
            "re-sent answered calls",
            "script exhausted",
            "next model call s",
        ],
        [
            [
                i + 1,
                r["scripted"],
                r["calls"],
                r["resent"],
                r["exhausted"],
                r["next_call"],
            ]
            for i, r in enumerate(oai)
        ],
        title="openai backend: kill -9 during a tool call between model calls",
    )
    resent = sum(int(r["resent"]) for r in oai)
    print(f"re-sent model calls that had answered: {resent} (target 0): ", end="")
    print("MET" if resent == 0 else "NOT met")


if __name__ == "__main__":
    asyncio.run(main())
