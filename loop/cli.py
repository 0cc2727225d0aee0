"""``loop``: start tasks, answer them, and look at them.

Exit codes (DESIGN): 0 ok · 1 a waited-for task ended other than
DONE_WITH_EVIDENCE · 2 bad input (nothing started, nothing sent).
Commands that answer a task check its state first (the ``status`` query), so a
signal is never sent into the void. Typer/click give the help texts and usage
errors (which also exit 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from loop import logs, taskfile
from loop.client import connect
from loop.contracts import (
    LEDGER_WORKFLOW,
    QUERY_LEDGER,
    QUERY_STATUS,
    QUERY_TRACE,
    SA_ATTEMPTS,
    SA_COST,
    SA_REPO,
    SA_STATE,
    SIGNAL_APPROVE,
    SIGNAL_EXTEND_BUDGET,
    SIGNAL_FEEDBACK,
    SIGNAL_REJECT,
    TASK_WORKFLOW,
    UPDATE_SET_LIMITS,
    WAITING_APPROVAL,
    WAITING_DECISION,
    ApproveSignal,
    DaySpend,
    ExtendBudgetSignal,
    FeedbackSignal,
    LedgerState,
    PeriodLimits,
    RejectSignal,
    TaskResult,
    TaskSpec,
    TaskState,
    TaskStatus,
    is_valid_task_id,
    ledger_id_for,
    workflow_id_for,
)
from loop.doctor import doctor
from loop.errors import BadInput, LoopError, UnknownTask
from loop.render import event_line, print_result, status_line
from loop.rules.answers import answer_with
from loop.settings import Settings
from loop.tasks import follow, has_worker, start_task
from loop.triage_cli import schedule_app, triage

app = typer.Typer(
    help="Loopwork: AI coding agents in durable, verified loops on Temporal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

T = TypeVar("T")
_address: str | None = None
_namespace: str | None = None


@app.callback()
def _options(
    address: Annotated[
        str | None, typer.Option(help="Temporal address; default TEMPORAL_ADDRESS or profile")
    ] = None,
    namespace: Annotated[str | None, typer.Option(help="Temporal namespace")] = None,
) -> None:
    global _address, _namespace
    _address, _namespace = address, namespace


def _run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    """Run one command; Loopwork's own errors become a one-line message and exit 2."""
    try:
        return asyncio.run(coro_fn())  # type: ignore[arg-type]
    except LoopError as e:
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(2) from None


async def _client() -> Client:
    return await connect(_address, _namespace)


def _ui_url(client: Client, workflow_id: str | None = None) -> str:
    base = os.environ.get("LOOP_UI_URL")
    if not base:
        host, _, port = client.service_client.config.target_host.rpartition(":")
        host = "localhost" if host in ("127.0.0.1", "0.0.0.0", "") else host
        base = f"http://{host}:{int(port or 7233) + 1000}"
    url = f"{base.rstrip('/')}/namespaces/{client.namespace}/workflows"
    return f"{url}/{workflow_id}" if workflow_id else url


def _check_id(task_id: str) -> str:
    if not is_valid_task_id(task_id):
        raise BadInput(f"{task_id!r} is not a task id ([a-z0-9][a-z0-9._-]{{0,62}})")
    return task_id


async def _handle(client: Client, task_id: str) -> tuple[WorkflowHandle, Any]:
    handle = client.get_workflow_handle(workflow_id_for(_check_id(task_id)), result_type=TaskResult)
    try:
        desc = await handle.describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise UnknownTask(
                f"no task {task_id!r} (workflow {handle.id}) on this server"
            ) from None
        raise
    return handle, desc


async def _status(handle: WorkflowHandle, desc: Any) -> TaskStatus | TaskResult:
    """Live status of an open task; the result of a closed one (no worker needed)."""
    if desc.status == WorkflowExecutionStatus.RUNNING:
        try:
            return await asyncio.wait_for(
                handle.query(QUERY_STATUS, result_type=TaskStatus), timeout=10
            )
        except TimeoutError:
            raise LoopError(
                f"task {handle.id} did not answer its status query: is a worker running "
                "(`loop worker`)?"
            ) from None
    if desc.status == WorkflowExecutionStatus.COMPLETED:
        return await handle.result()
    raise BadInput(f"task {handle.id} ended as {desc.status.name} (see the Temporal UI)")


# ---------------------------------------------------------------------- server and worker


@app.command()
def dev(
    port: Annotated[int, typer.Option(help="gRPC port")] = 7233,
    ui_port: Annotated[int | None, typer.Option(help="UI port (default port+1000)")] = None,
    headless: Annotated[bool, typer.Option(help="no Web UI")] = False,
) -> None:
    """Run the embedded Temporal dev server (SQLite in LOOP_HOME/temporal.db) until Ctrl-C."""
    from loop.devserver import DevServer

    settings = Settings.from_env()

    async def main() -> None:
        server = DevServer.start(home=settings.home, port=port, ui_port=ui_port, headless=headless)
        try:
            await server.wait_ready()
            out.print(f"Temporal dev server at {server.address}, data in {settings.db}")
            if not headless:
                out.print(f"Temporal UI: {server.ui_url}")
            out.print("Ctrl-C stops it.")
            stop = asyncio.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                asyncio.get_running_loop().add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            server.stop()  # the server runs in its own session: it must be stopped explicitly

    _run(main)


@app.command()
def worker(
    dev: Annotated[bool, typer.Option(help="start the embedded server if none answers")] = False,
) -> None:
    """Serve the task queue (LOOP_TASK_QUEUE, default `loop`) until Ctrl-C or SIGTERM."""
    import worker as worker_module

    logs.configure()
    _run(lambda: worker_module.serve(Settings.from_env(), address=_address, dev=dev))


# ---------------------------------------------------------------------- tasks


@app.command()
def start(
    file: Annotated[Path, typer.Argument(help="task file (YAML or JSON)")],
    wait: Annotated[bool, typer.Option(help="follow the task until it ends")] = False,
    rerun: Annotated[bool, typer.Option(help="run a task id that has already ended again")] = False,
) -> None:
    """Validate a task file and start its workflow (idempotent for a running task)."""
    spec = _load(file)
    settings = Settings.from_env()

    async def main() -> int:
        client = await _client()
        handle, started = await start_task(client, spec, settings.task_queue, rerun=rerun)
        if not started:
            out.print(f"task {spec.id} is already running ({handle.id}); not started again")
        else:
            out.print(f"started {handle.id} (task queue {settings.task_queue})")
        out.print(f"UI: {_ui_url(client, handle.id)}", markup=False)
        if not await has_worker(client, settings.task_queue):
            err.print(
                f"note: no worker polls task queue {settings.task_queue!r} yet; start one "
                "with `loop worker`"
            )
        if not wait:
            return 0
        result = await follow(handle, lambda ev: out.print(event_line(spec.id, ev), markup=False))
        print_result(out, result)
        return 0 if result.state == TaskState.DONE_WITH_EVIDENCE else 1

    raise typer.Exit(_run(main))


def _load(file: Path) -> TaskSpec:
    try:
        return taskfile.load(file)
    except LoopError as e:
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(2) from None


@app.command()
def status(
    task_id: Annotated[
        str | None, typer.Argument(metavar="ID", help="task id; all if omitted")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """One task's state, phase, attempt, budget and last verdict; or a table of all tasks."""

    async def main() -> None:
        client = await _client()
        if task_id is None:
            await _list(client, "", as_json)
            return
        handle, desc = await _handle(client, task_id)
        st = await _status(handle, desc)
        if as_json:
            out.print_json(st.model_dump_json())
        elif isinstance(st, TaskResult):
            print_result(out, st)
        else:
            _print_status(st)

    _run(main)


def _print_status(st: TaskStatus) -> None:
    out.print(status_line(st), markup=False)
    used, left = st.budget.used, st.budget.left
    out.print(
        f"budget used: {used.attempts} attempts, {used.seconds or 0:.1f} s, {used.tokens} tokens, "
        f"${used.cost_usd or 0:.4f}, {used.tool_calls} tool calls",
        markup=False,
    )
    shown = {k: v for k, v in left.model_dump().items() if v is not None}
    out.print(f"budget left: {shown or 'unlimited'}", markup=False)
    if st.waiting_for:
        out.print(f"waiting for: {st.waiting_for} — {st.reason}", markup=False)


async def _list(client: Client, extra: str, as_json: bool, *, inbox: bool = False) -> None:
    query = f'WorkflowType="{TASK_WORKFLOW}"' + extra
    rows = []
    async for wf in client.list_workflows(query, limit=200):
        sa = wf.typed_search_attributes
        state = sa.get(SA_STATE) or wf.status.name if wf.status else "?"
        if wf.status != WorkflowExecutionStatus.RUNNING and state in ("RUNNING",):
            state = wf.status.name if wf.status else state
        rows.append(
            {
                "task_id": wf.id.removeprefix("task-"),
                "state": state,
                "attempts": sa.get(SA_ATTEMPTS) or 0,
                "cost_usd": sa.get(SA_COST) or 0.0,
                "started": wf.start_time.isoformat(timespec="seconds") if wf.start_time else "",
                "repo": sa.get(SA_REPO) or "",
            }
        )
    if inbox:
        for row in rows:
            with contextlib.suppress(LoopError, RPCError):
                handle, desc = await _handle(client, row["task_id"])
                st = await _status(handle, desc)
                if isinstance(st, TaskStatus):
                    row["waiting_for"], row["reason"] = st.waiting_for, st.reason
                    row["answer"] = answer_with(st.task_id, st.waiting_for)
    if as_json:
        out.print_json(json.dumps(rows))
        return
    if not rows:
        out.print("no tasks waiting for a person" if inbox else "no tasks")
        return
    if inbox:
        # One block per task: the answer commands must stay copy-pasteable on any width.
        for r in rows:
            out.print(
                f"{r['task_id']}  {r['state']}  attempt {r['attempts']}  {r.get('reason', '')}",
                markup=False,
            )
            out.print(f"    answer with: {r.get('answer', '')}", markup=False)
        return
    table = Table("task", "state", "attempts", "cost", "started", "repo")
    for r in rows:
        table.add_row(
            r["task_id"],
            r["state"],
            str(r["attempts"]),
            f"${r['cost_usd']:.4f}",
            r["started"],
            r["repo"],
        )
    out.print(table)


@app.command()
def inbox(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Tasks waiting for a person, what each waits for, and the command that answers it."""

    async def main() -> None:
        client = await _client()
        await _list(
            client,
            ' AND ExecutionStatus="Running" AND '
            '(LoopState="NEEDS_HUMAN" OR LoopState="AWAITING_APPROVAL")',
            as_json,
            inbox=True,
        )

    _run(main)


async def _answerable(task_id: str, accepts: Callable[[TaskStatus], bool], what: str) -> Any:
    client = await _client()
    handle, desc = await _handle(client, task_id)
    if desc.status != WorkflowExecutionStatus.RUNNING:
        raise BadInput(f"task {task_id} has ended ({desc.status.name}); {what} does not apply")
    st = await _status(handle, desc)
    assert isinstance(st, TaskStatus)
    if not accepts(st):
        waiting = f", waiting for {st.waiting_for}" if st.waiting_for else ""
        raise BadInput(f"task {task_id} is {st.state}{waiting}; {what} does not apply now")
    return handle


@app.command()
def approve(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    note: Annotated[str, typer.Option(help="why it may be merged")] = "",
) -> None:
    """Approve a verified task waiting in AWAITING_APPROVAL: its branch is merged into base."""

    async def main() -> None:
        handle = await _answerable(task_id, lambda s: s.waiting_for == WAITING_APPROVAL, "approve")
        await handle.signal(SIGNAL_APPROVE, ApproveSignal(note=note))
        out.print(f"approved {task_id}")

    _run(main)


@app.command()
def reject(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    reason: Annotated[str, typer.Option(help="why (recorded in the trace)")] = ...,  # type: ignore[assignment]
) -> None:
    """Reject a task waiting for a person: it ends REJECTED, nothing is merged."""

    async def main() -> None:
        handle = await _answerable(task_id, lambda s: s.state.waiting, "reject")
        await handle.signal(SIGNAL_REJECT, RejectSignal(reason=reason))
        out.print(f"rejected {task_id}")

    _run(main)


def _takes_decision(st: TaskStatus) -> bool:
    return st.state == TaskState.RUNNING or st.waiting_for == WAITING_DECISION


@app.command()
def feedback(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    text: Annotated[str, typer.Argument(help="added to the next attempt's prompt")],
) -> None:
    """Give a task feedback; a task in NEEDS_HUMAN gets one more attempt carrying it."""
    if not text.strip():
        err.print("error: feedback text is empty; say what the agent should do differently")
        raise typer.Exit(2)

    async def main() -> None:
        handle = await _answerable(task_id, _takes_decision, "feedback")
        await handle.signal(SIGNAL_FEEDBACK, FeedbackSignal(text=text))
        out.print(f"feedback sent to {task_id}")

    _run(main)


@app.command()
def extend(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    attempts: Annotated[int, typer.Option(min=0, help="more attempts")] = 0,
    seconds: Annotated[int, typer.Option(min=0, help="more wall-clock seconds")] = 0,
    tokens: Annotated[int, typer.Option(min=0, help="more tokens")] = 0,
    cost_usd: Annotated[float, typer.Option(min=0, help="more dollars")] = 0.0,
) -> None:
    """Add budget to a running task or one waiting in NEEDS_HUMAN; the loop goes on."""
    payload = ExtendBudgetSignal(
        attempts=attempts, seconds=seconds, tokens=tokens, cost_usd=cost_usd
    )
    if payload == ExtendBudgetSignal():
        err.print("error: nothing to add; give --attempts, --seconds, --tokens or --cost-usd")
        raise typer.Exit(2)

    async def main() -> None:
        handle = await _answerable(task_id, _takes_decision, "extend")
        await handle.signal(SIGNAL_EXTEND_BUDGET, payload)
        out.print(f"budget extended for {task_id}")

    _run(main)


@app.command()
def cancel(task_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Cancel a task: its running activity stops, its worktree is kept, it ends CANCELLED."""

    async def main() -> None:
        client = await _client()
        handle, desc = await _handle(client, task_id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise BadInput(f"task {task_id} has already ended ({desc.status.name})")
        await handle.cancel()
        out.print(f"cancel requested for {task_id}")

    _run(main)


@app.command()
def trace(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: Annotated[bool, typer.Option("--json", help="the full trace as JSON")] = False,
) -> None:
    """The execution trace: attempts, gates with evidence, events, escalations."""

    async def main() -> None:
        client = await _client()
        handle, desc = await _handle(client, task_id)
        if desc.status == WorkflowExecutionStatus.RUNNING:
            result = await handle.query(QUERY_TRACE, result_type=TaskResult)
        else:
            result = await _status(handle, desc)  # type: ignore[assignment]
        assert isinstance(result, TaskResult)
        if as_json:
            out.print_json(result.model_dump_json())
            return
        print_result(out, result)
        out.print()
        for ev in result.events:
            out.print(f"{ev.at}  {ev.kind:<14} {ev.detail}", markup=False)

    _run(main)


# ---------------------------------------------------------------------- period budgets

budget_app = typer.Typer(
    help="Per-repository period budgets: cost and tokens per UTC day, across all tasks.",
    no_args_is_help=True,
)
app.add_typer(budget_app, name="budget")
app.command()(triage)
app.command()(doctor)
app.add_typer(schedule_app, name="schedule")


@budget_app.command("set")
def budget_set(
    repo: Annotated[Path, typer.Argument(help="the repository (any folder inside it)")],
    cost_per_day: Annotated[float | None, typer.Option(min=0, help="dollars per UTC day")] = None,
    tokens_per_day: Annotated[int | None, typer.Option(min=0, help="tokens per UTC day")] = None,
) -> None:
    """Set a repository's daily limits; new attempts wait in NEEDS_HUMAN once one is spent."""
    top = _repo_top(repo)
    settings = Settings.from_env()

    async def main() -> None:
        client = await _client()
        state = await client.execute_update_with_start_workflow(
            UPDATE_SET_LIMITS,
            PeriodLimits(cost_per_day=cost_per_day, tokens_per_day=tokens_per_day),
            start_workflow_operation=WithStartWorkflowOperation(
                LEDGER_WORKFLOW,
                LedgerState(repo=top),
                id=ledger_id_for(top),
                task_queue=settings.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                static_summary=f"period budget of {top}",
            ),
            result_type=LedgerState,
        )
        _print_ledger(state)

    _run(main)


@budget_app.command("show")
def budget_show(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Every repository's limits, today's spend, and what running attempts hold."""

    async def main() -> None:
        client = await _client()
        states = []
        queue = Settings.from_env().task_queue
        query = (
            f'WorkflowType="{LEDGER_WORKFLOW}" AND ExecutionStatus="Running" '
            f'AND TaskQueue="{queue}"'
        )
        async for wf in client.list_workflows(query):
            handle = client.get_workflow_handle(wf.id)
            try:
                ledger = handle.query(QUERY_LEDGER, result_type=LedgerState)
                states.append(await asyncio.wait_for(ledger, timeout=10))
            except TimeoutError:
                raise LoopError(
                    f"ledger {wf.id} did not answer: is a worker serving {queue!r} running?"
                ) from None
        if as_json:
            out.print_json(json.dumps([st.model_dump(mode="json") for st in states]))
            return
        if not states:
            out.print("no period budgets; set one with `loop budget set REPO --cost-per-day X`")
        for st in states:
            _print_ledger(st)

    _run(main)


def _repo_top(repo: Path) -> str:
    if not repo.is_dir():
        err.print(f"error: {repo} is not a folder inside a git repository")
        raise typer.Exit(2)
    found = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        err.print(f"error: {repo} is not a folder inside a git repository")
        raise typer.Exit(2)
    return str(Path(found.stdout.strip()).resolve())


def _print_ledger(st: LedgerState) -> None:
    today = datetime.now(UTC).date().isoformat()
    day = st.days.get(today, DaySpend())
    lim = st.limits
    out.print(st.repo, markup=False)
    out.print(
        f"  limits per day: cost {_fmt(lim.cost_per_day, '$')}, tokens {_fmt(lim.tokens_per_day)}",
        markup=False,
    )
    out.print(
        f"  today ({today}): spent ${day.cost_usd:.4f} and {day.tokens} tokens; held by running "
        f"attempts ${day.reserved_cost_usd:.4f} and {day.reserved_tokens} tokens",
        markup=False,
    )


def _fmt(value: float | None, unit: str = "") -> str:
    return "unlimited" if value is None else f"{unit}{value:g}"


@app.command("eval")
def eval_(
    suite_file: Annotated[Path, typer.Argument(metavar="SUITE", help="suite file (YAML/JSON)")],
    harness: Annotated[Path, typer.Option(help="harness file (model, prompt, agent, budgets)")],
    vs: Annotated[Path | None, typer.Option(help="a second harness to compare with")] = None,
) -> None:
    """Run every case of a suite under one or two harnesses and compare them."""
    from loop.evalrun import load_harness, load_suite, print_report, run_eval

    settings = Settings.from_env()
    try:
        harnesses = [load_harness(harness)] + ([load_harness(vs)] if vs else [])
        suite = load_suite(suite_file, settings.home)
    except LoopError as e:
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(2) from None

    async def main() -> None:
        client = await _client()
        if not await has_worker(client, settings.task_queue):
            err.print(f"note: no worker polls {settings.task_queue!r}; start `loop worker`")
        out.print(
            f"running {len(suite.cases)} cases x {len(harnesses)} harness(es), "
            f"{suite.max_parallel} at a time …"
        )
        print_report(out, await run_eval(client, suite, harnesses, settings.task_queue))

    _run(main)


@app.command("codec-server")
def codec_server(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 8081,
    ui_origin: Annotated[
        str, typer.Option(help="the Temporal UI's origin, allowed by CORS")
    ] = "http://localhost:8233",
) -> None:
    """Serve Temporal's codec endpoint (decrypt for the UI and `temporal workflow show`).

    Needs LOOP_CODEC_KEY_FILE (the key) and LOOP_CODEC_TOKEN (the bearer token that
    callers must send). Point the UI at it with `temporal server start-dev
    --ui-codec-endpoint http://127.0.0.1:PORT`, the CLI with `--codec-endpoint
    http://127.0.0.1:PORT --codec-auth "Bearer $LOOP_CODEC_TOKEN"`.
    """
    from loop.codec import KEY_ENV, EncryptionCodec, load_key, make_server

    key_file, token = os.environ.get(KEY_ENV), os.environ.get("LOOP_CODEC_TOKEN")
    if not key_file or not token:
        err.print(f"error: set {KEY_ENV} and LOOP_CODEC_TOKEN to serve the codec endpoint")
        raise typer.Exit(2)
    try:
        codec = EncryptionCodec(load_key(key_file))
        server = make_server(codec, host="127.0.0.1", port=port, token=token, ui_origin=ui_origin)
    except (LoopError, OSError) as e:
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(2) from None
    out.print(f"codec endpoint at http://127.0.0.1:{port} (CORS: {ui_origin}); Ctrl-C stops it")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stop.wait()
    server.shutdown()
    server.server_close()


@app.command()
def demo() -> None:
    """Run the offline demo: a real bug, a scripted agent that needs one round of feedback."""
    from loop.demo import run_demo

    logs.configure("WARNING")
    raise typer.Exit(_run(lambda: run_demo(Settings.from_env(), _address, out)))


def main() -> None:
    """Entry point; exits explicitly after flushing (sdk-python #300: teardown crashes)."""
    code = 0
    try:
        returned = app(standalone_mode=False)
        if isinstance(returned, int):
            code = returned  # typer returns, not raises, the code of a command's Exit
    except typer.Exit as e:
        code = e.exit_code
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except typer.Abort:
        code = 130
    except Exception as e:
        # click's usage errors (typer vendors click and does not export their base class)
        if not hasattr(e, "show") or not isinstance(getattr(e, "exit_code", None), int):
            raise
        e.show()
        code = e.exit_code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
