"""``loop triage`` and ``loop schedule``: the event loop from the command line.

``loop triage SOURCES.yaml [--dry-run]`` runs one ``TriageWorkflow`` on the task
queue and prints its table: what it started (or, with ``--dry-run``, would start)
and why it skips the rest. The dry run is the same workflow with a flag, so what
it prints is what a schedule would do.

``loop schedule add|list|delete|trigger`` manage Temporal Schedules whose action
starts ``TriageWorkflow`` with the sources file already read and resolved (the
parsed file is the action's input: a later edit of the file takes a new
``schedule add``). Overlapping runs are skipped, not queued. The schedules show
on the Temporal UI's Schedules page under their NAME.

The sources file is checked here before anything is started or created: unknown
keys, each source's template as a task file (repository, base, agent), the paths
of issue folders and JSON files. Bad input is one ``error:`` line and exit 2. What only
the worker can tell (a ``github`` source's token, set and accepted where the worker runs;
its repository, visible to that token) comes back in the result: such a source's line,
and exit 2 too.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleHandle,
    ScheduleListActionStartWorkflow,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    WorkflowExecutionStatus,
)
from temporalio.service import RPCError, RPCStatusCode

from loop.cli import console
from loop.contracts import (
    SCHEDULE_NAME_PATTERN,
    TRIAGE_WORKFLOW,
    CiSource,
    TriageInput,
    TriageResult,
    TriageSources,
)
from loop.errors import BadInput, LoopError
from loop.loaders import load_sources
from loop.settings import Settings
from loop.tasks import has_worker

TRIAGE_SLACK = timedelta(hours=1)


def _load(file: Path) -> TriageSources:
    try:
        return load_sources(file)
    except LoopError as e:
        console.fail(str(e))


# ---------------------------------------------------------------------- loop triage


def triage(
    file: Annotated[Path, typer.Argument(metavar="SOURCES.yaml", help="the sources file")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print what it would start and why; start nothing")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="the result as JSON")] = False,
) -> None:
    """Discover work in the sources, decide what is worth doing, start one task per item."""
    sources = _load(file)
    settings = Settings.from_env()

    async def main() -> int:
        client = await console.client()
        if not await has_worker(client, settings.task_queue):
            raise LoopError(
                f"no worker polls task queue {settings.task_queue!r}, and triage runs on one; "
                "start it with `loop worker`"
            )
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        kind = "dry-run-" if dry_run else ""
        result = await client.execute_workflow(
            TRIAGE_WORKFLOW,
            TriageInput(sources=sources, dry_run=dry_run, sources_file=str(file.resolve())),
            id=f"triage-{kind}{_slug(file.stem)}-{stamp}-{uuid.uuid4().hex[:4]}",
            task_queue=settings.task_queue,
            execution_timeout=_time_limit(sources),
            result_type=TriageResult,
            static_summary=f"{'dry run: ' if dry_run else ''}triage of {file.resolve()}",
        )
        if as_json:
            console.print_json(result.model_dump(mode="json"))
        else:
            print_triage(console.out, result)
        for line in result.errors:
            console.err.print(f"source failed: {line}", markup=False)
        if result.misconfigured:
            return 2  # bad input, as a sources file that does not load
        return 1 if result.errors else 0

    raise typer.Exit(console.run(main))


def print_triage(out: Console, result: TriageResult) -> None:
    table = Table("task", "source", "decision", "autonomy", "why", "item")
    for d in result.decisions:
        action = "would start" if d.action == "start" else d.action
        cells = (d.task_id, d.source, action, str(d.autonomy or ""), d.reason, d.title or d.item)
        table.add_row(*(console.inert(c) for c in cells))  # titles are text, never markup
    out.print(table)
    for note in result.notes:
        out.print(f"  {note}", markup=False)
    if result.dry_run:
        summary = (
            f"dry run: would start {result.count('start')}, skip {result.count('skip')}; "
            "nothing started"
        )
    else:
        summary = f"started {result.count('started')}, skipped {result.count('skip')}"
    out.print(f"{summary} ({result.open_tasks} tasks were open)", markup=False)


def _time_limit(sources: TriageSources) -> timedelta:
    """A run that cannot finish (a worker that cannot decode it) must not hold the schedule,
    whose next runs are skipped while one is open: CI commands' time, plus an hour."""
    ci = sum(s.timeout for s in sources.sources if isinstance(s, CiSource))
    return timedelta(seconds=ci) + TRIAGE_SLACK


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:32] or "sources"


# ---------------------------------------------------------------------- loop schedule

schedule_app = typer.Typer(
    help="Temporal Schedules that run triage on a cron; an overlapping run is skipped.",
    no_args_is_help=True,
)


@schedule_app.command("add")
def schedule_add(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the schedule's id")],
    file: Annotated[Path, typer.Argument(metavar="SOURCES.yaml", help="the sources file")],
    cron: Annotated[str, typer.Option("--cron", help='when, e.g. "0 3 * * *" (UTC)')],
) -> None:
    """Create a schedule that runs triage of SOURCES.yaml on the cron."""
    if not re.fullmatch(SCHEDULE_NAME_PATTERN, name):
        console.fail(f"{name!r} is not a schedule name ([A-Za-z0-9][A-Za-z0-9._-]{{0,62}})")
    sources = _load(file)
    settings = Settings.from_env()
    path = str(file.resolve())

    async def main() -> None:
        client = await console.client()
        schedule = Schedule(
            action=ScheduleActionStartWorkflow(
                TRIAGE_WORKFLOW,
                TriageInput(sources=sources, sources_file=path),
                id=f"triage-{name}",
                task_queue=settings.task_queue,
                execution_timeout=_time_limit(sources),
                static_summary=f"triage of {path} (schedule {name})",
            ),
            spec=ScheduleSpec(cron_expressions=[cron]),
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
            state=ScheduleState(note=f"loop triage {path}"),
        )
        try:
            await client.create_schedule(
                name,
                schedule,
                memo={"cron": cron, "sources": path, "task_queue": settings.task_queue},
            )
        except ScheduleAlreadyRunningError:
            raise BadInput(f"schedule {name} already exists; delete it first") from None
        except RPCError as e:
            if e.status == RPCStatusCode.INVALID_ARGUMENT:
                raise BadInput(f"--cron {cron!r}: {e.message}") from None
            raise
        console.out.print(
            f"schedule {name}: triage of {path} at {cron!r} on {settings.task_queue!r}"
        )
        if not await has_worker(client, settings.task_queue):
            console.err.print(
                f"note: no worker polls task queue {settings.task_queue!r} yet; start one "
                "with `loop worker`"
            )

    console.run(main)


@schedule_app.command("list")
def schedule_list(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Triage schedules on this task queue: cron, next run, last run and its result."""
    settings = Settings.from_env()

    async def main() -> None:
        client = await console.client()
        rows = []
        async for entry in await client.list_schedules():
            listed = entry.schedule
            if listed is None or not isinstance(listed.action, ScheduleListActionStartWorkflow):
                continue
            if listed.action.workflow != TRIAGE_WORKFLOW:
                continue
            if await entry.memo_value("task_queue", "") != settings.task_queue:
                continue
            info = entry.info
            upcoming = info.next_action_times if info else []
            recent = info.recent_actions if info else []
            last_run, last_result = "", ""
            if recent:
                action = recent[-1].action
                last_run = recent[-1].started_at.isoformat(timespec="seconds")
                last_result = await _run_result(client, action)
            rows.append(
                {
                    "name": entry.id,
                    "cron": await entry.memo_value("cron", ""),
                    "sources": await entry.memo_value("sources", ""),
                    "next_run": upcoming[0].isoformat(timespec="seconds") if upcoming else "",
                    "paused": listed.state.paused,
                    "last_run": last_run,
                    "last_result": last_result,
                }
            )
        if as_json:
            console.print_json(rows)
            return
        if not rows:
            console.out.print(
                "no triage schedules; add one with `loop schedule add NAME --cron EXPR FILE`"
            )
            return
        table = Table("name", "cron", "next run", "last run", "last result", "sources")
        for r in rows:
            paused = " (paused)" if r["paused"] else ""
            cells = (r["name"], r["cron"] + paused, r["next_run"], r["last_run"])
            table.add_row(*(console.inert(c) for c in (*cells, r["last_result"], r["sources"])))
        console.out.print(table)

    console.run(main)


async def _run_result(client: Client, action: Any) -> str:
    """The last run's outcome in a few words: its status, and what it started."""
    workflow_id = getattr(action, "workflow_id", "")
    if not workflow_id:
        return ""
    handle = client.get_workflow_handle(
        workflow_id, run_id=action.first_execution_run_id or None, result_type=TriageResult
    )
    try:
        desc = await handle.describe()
    except RPCError:
        return "unknown"
    if desc.status != WorkflowExecutionStatus.COMPLETED:
        return desc.status.name if desc.status else "unknown"
    result = await handle.result()
    text = f"started {result.count('started')}, skipped {result.count('skip')}"
    return text + (f", {len(result.errors)} sources failed" if result.errors else "")


async def _triage_schedule(client: Client, name: str) -> ScheduleHandle:
    """The schedule NAME, checked to exist and to run triage (others are not ours to touch)."""
    handle = client.get_schedule_handle(name)
    try:
        desc = await handle.describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise BadInput(f"no schedule {name!r} on this server") from None
        raise
    action = desc.schedule.action
    if not isinstance(action, ScheduleActionStartWorkflow) or action.workflow != TRIAGE_WORKFLOW:
        raise BadInput(f"schedule {name!r} does not run triage; not touched")
    return handle


@schedule_app.command("delete")
def schedule_delete(name: Annotated[str, typer.Argument(metavar="NAME")]) -> None:
    """Delete a triage schedule (tasks it started keep running)."""

    async def main() -> None:
        handle = await _triage_schedule(await console.client(), name)
        await handle.delete()
        console.out.print(f"deleted schedule {name}")

    console.run(main)


@schedule_app.command("trigger")
def schedule_trigger(name: Annotated[str, typer.Argument(metavar="NAME")]) -> None:
    """Run a triage schedule now (skipped if its previous run is still going)."""

    async def main() -> None:
        handle = await _triage_schedule(await console.client(), name)
        await handle.trigger()
        console.out.print(f"triggered schedule {name}: a run triage-{name}-<time> starts now")

    console.run(main)
