"""History size of a task's attempts: bytes per attempt, and what the bytes are.

The demo's task (its scripted agent fails attempt 1 and fixes the bug in attempt 2;
gates: the tests, the diff's scope, keep-tests) runs on a real dev server; its
workflow history is split at each attempt's ``make`` and each attempt's events are
summed, with the payloads that weigh most. History holds what a verdict is made
of (claims, evidence, paths to logs), never transcripts or whole logs: an attempt
should stay under the target whatever the agent prints.

    .venv/bin/python bench/attempt_history.py [--target 8192] [--noise 0] [--claim 0]
                                              [--attempts 0] [--quick]

``--noise N`` makes the agent print N KiB before its work (a chatty CLI); ``--claim N``
adds N KiB to its claim (a real CLI's final message is often that long). ``--attempts
N`` makes it never fix the bug, for N attempts (then the task waits for a person, 1 s),
and prints the whole history against Temporal's warnings: the task's workflow does not
continue as new (its model loop, ``AgentWorkflow``, does), so a long task must stay
under them in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections import Counter
from pathlib import Path

from common import connect, loopwork_server, make_demo_repo, print_machine, print_table, temp_home
from temporalio.client import Client

from loop.cli.demo import EXAMPLES, demo_task
from loop.contracts import TaskSpec
from loop.settings import Settings
from loop.tasks import start_task
from worker import build_worker

KIB = 1024
ATTEMPT = {"make", "begin_attempt", "model_step", "tool_step", "end_attempt", "verify", "review",
           "reserve_budget", "report_usage"}  # fmt: skip
"""The activities of an attempt; the first other one after an attempt ends it."""


WARNINGS = [
    ("history bytes", 10 * KIB * KIB, "limit.historySize.warn (error at 50 MiB)"),
    ("history events", 10 * KIB, "limit.historyCount.warn (error at 50 Ki)"),
    ("largest payload bytes", 512 * KIB, "limit.blobSize.warn (error at 2 MiB)"),
]
"""Temporal's default history warnings: the server logs them; past its errors the
workflow is terminated."""


def demo_agent(folder: Path, noise: int, claim: int, never_fixes: bool) -> Path:
    """The demo's agent, printing ``noise`` KiB of chatter first, its claim ``claim`` KiB
    longer, and, ``never_fixes``, making only the incomplete fix, every attempt anew."""
    body = (EXAMPLES / "agent.py").read_text()
    if never_fixes:
        write = 'pathlib.Path("slugify.py").write_text(fix)'
        again = "fix = INCOMPLETE.replace('def slugify', f'# attempt {attempt}\\ndef slugify')"
        body = body.replace(write, f"{again}\n{write}")
    if claim:
        said = 'write_text(claim + "\\n")'
        body = body.replace(said, f'write_text(claim + "\\n" + "said " * {claim * KIB // 5})')
    script = folder / "agent.py"
    script.write_text(f"print('chatter ' * {noise * KIB // 8})\n{body}" if noise else body)
    return script


def _kind(ev: object) -> str:
    """An event's type, with the activity it belongs to where it has one."""
    name = ev.WhichOneof("attributes") or "?"  # type: ignore[attr-defined]
    return name.removesuffix("_event_attributes")


async def per_attempt(client: Client, workflow_id: str) -> tuple[list[int], list[Counter[str]]]:
    """Bytes of each attempt (from its ``make`` to the first step that is not an
    attempt's) and, per attempt, the bytes by event kind (activities by name)."""
    sizes: list[int] = []
    kinds: list[Counter[str]] = []
    scheduled: dict[int, str] = {}
    inside = False
    async for ev in client.get_workflow_handle(workflow_id).fetch_history_events():
        kind = _kind(ev)
        if ev.HasField("activity_task_scheduled_event_attributes"):
            name = ev.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[ev.event_id] = name
            if name in ("make", "begin_attempt"):
                sizes.append(0)
                kinds.append(Counter())
                inside = True
            elif name not in ATTEMPT:
                inside = False
            kind = f"scheduled {name}"
            if inside and name in ("make", "verify"):
                fields = json.loads(
                    ev.activity_task_scheduled_event_attributes.input.payloads[0].data
                )
                for key, value in fields.items():
                    parts = value.items() if key == "prompt" else [(key, value)]
                    for part, v in parts:
                        kinds[-1][f"  {name} input: {part}"] += len(json.dumps(v))
        elif ev.HasField("activity_task_completed_event_attributes"):
            done = ev.activity_task_completed_event_attributes
            kind = f"result of {scheduled.get(done.scheduled_event_id, '?')}"
        if inside:
            sizes[-1] += ev.ByteSize()
            kinds[-1][kind] += ev.ByteSize()
    return sizes, kinds


async def whole(client: Client, workflow_id: str) -> tuple[int, int, int, str]:
    """The history's bytes and events, its largest payload's bytes and where it is."""
    size = events = largest = 0
    where = ""
    async for ev in client.get_workflow_handle(workflow_id).fetch_history_events():
        size, events = size + ev.ByteSize(), events + 1
        attrs = getattr(ev, ev.WhichOneof("attributes") or "")
        for field in ("input", "result"):
            if field in attrs.DESCRIPTOR.fields_by_name and attrs.HasField(field):
                for payload in getattr(attrs, field).payloads:
                    if len(payload.data) > largest:
                        largest, where = len(payload.data), f"{field} of event {ev.event_id}"
    return size, events, largest, where


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=int, default=8 * KIB, help="bytes per attempt")
    parser.add_argument("--noise", type=int, default=0, help="KiB the agent prints first")
    parser.add_argument("--claim", type=int, default=0, help="KiB added to the agent's claim")
    parser.add_argument(
        "--attempts", type=int, default=0, help="attempts of an agent that never fixes the bug"
    )
    parser.add_argument(
        "--quick", action="store_true", help="as the others take it: this one is quick already"
    )
    args = parser.parse_args()
    print_machine("attempt history: bytes per attempt of the demo's task")
    with temp_home() as home:
        repo = make_demo_repo(home.parent / "demo")
        custom = args.noise or args.claim or args.attempts
        agent = (
            demo_agent(home.parent, args.noise, args.claim, bool(args.attempts))
            if custom
            else EXAMPLES / "agent.py"
        )
        data = demo_task(repo, agent, {"mode": "off"})
        data["id"] = f"hist-{uuid.uuid4().hex[:8]}"
        data["sandbox"] = {"mode": "off"}
        if args.attempts:
            data["budget"] = {
                "max_attempts": args.attempts,
                "max_stalled_attempts": args.attempts,
                "max_seconds": 60 * args.attempts,
            }
            data["approval_timeout"] = 1
        spec = TaskSpec.model_validate(data)
        async with loopwork_server(home / "server") as server:
            client = await connect(server.address)
            settings = Settings(home=home, task_queue=f"attempts-{uuid.uuid4().hex[:6]}")
            async with build_worker(client, settings):
                handle, _ = await start_task(client, spec, settings.task_queue)
                result = await handle.result()
            sizes, kinds = await per_attempt(client, handle.id)
            size, events, largest, where = await whole(client, handle.id)
    print(f"{result.state}: {result.reason} ({len(result.attempts)} attempts)\n")
    rows = [[n + 1, b, "met" if b <= args.target else "over"] for n, b in enumerate(sizes)]
    if len(rows) > 6:
        rows = [*rows[:3], ["…", "…", "…"], *rows[-2:]]
    print_table(["attempt", "bytes", f"target {args.target}"], rows, title="per attempt")
    worst = max(range(len(sizes)), key=lambda i: sizes[i])
    top = kinds[worst].most_common(14)
    print_table(["event", "bytes"], [list(t) for t in top], title=f"attempt {worst + 1}: heaviest")
    if args.attempts:
        figures = [size, events, largest]
        print_table(
            ["whole history", "this task", "Temporal warns at", "share", "the warning"],
            [
                [name, figure, warn, f"{figure / warn:.1%}", said]
                for (name, warn, said), figure in zip(WARNINGS, figures, strict=True)
            ],
            title=f"{len(result.attempts)} attempts against Temporal's warnings",
        )
        print(f"largest payload: the {where} (the task's result, every attempt's record)")
    return 0 if max(sizes) <= args.target else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
