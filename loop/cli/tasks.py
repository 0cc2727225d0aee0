"""Starting tasks, answering them, looking at them: ``start``, ``status``, ``inbox``,
``approve``, ``reject``, ``feedback``, ``extend``, ``cancel``, ``trace``.

Commands that answer a task send a Temporal update (``loop.tasks.answer``): the task
takes the answer and says what it did, or refuses it with the reason, which is one
``error:`` line and exit 2.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel
from rich.table import Table
from rich.text import Text
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCError

from loop.cli import console
from loop.cli.environment import describe
from loop.cli.render import (
    ProgressLine,
    budget_table,
    candidates_table,
    event_line,
    print_gates,
    print_result,
    status_line,
)
from loop.client import ui_url
from loop.contracts import (
    QUERY_STATUS,
    QUERY_TRACE,
    SA_ATTEMPTS,
    SA_COST,
    SA_REPO,
    TASK_WORKFLOW,
    ApproveSignal,
    ExtendBudgetSignal,
    FeedbackSignal,
    RejectSignal,
    TaskResult,
    TaskSpec,
    TaskState,
    TaskStatus,
    TraceEvent,
)
from loop.errors import BadInput, LoopError, Sealed, ServerUnavailable, UnknownTask
from loop.hardened.text import for_terminal
from loop.loaders import load_task
from loop.rules import progress
from loop.rules.answers import answer_with, waiting_words
from loop.settings import Settings
from loop.tasks import (
    answer,
    approvable,
    checked_id,
    find,
    follow,
    has_worker,
    live_status,
    local_user,
    new_answer_id,
    signed,
    start_task,
    task_state,
    with_live_candidates,
)


def start(
    file: Annotated[Path, typer.Argument(help="task file (YAML or JSON)")],
    wait: Annotated[
        bool,
        typer.Option(
            help="follow the task until it ends (exit 0 DONE_WITH_EVIDENCE, 1 other end) or "
            "waits for a person (exit 3, with the command that answers it)"
        ),
    ] = False,
    keep_waiting: Annotated[
        bool,
        typer.Option(
            "--keep-waiting",
            help="with --wait: go on following while the task waits for a person",
        ),
    ] = False,
    rerun: Annotated[bool, typer.Option(help="run a task id that has already ended again")] = False,
    repo: Annotated[
        str | None,
        typer.Option(
            metavar="PATH|URL",
            help="the repository to work on instead of the file's `repo` (a path is taken "
            "from the current folder)",
        ),
    ] = None,
    print_input: Annotated[
        bool,
        typer.Option(
            "--print",
            help="print the workflow input (the resolved task file as JSON, what `temporal "
            "workflow start --input-file` and the SDK take) and start nothing; what the "
            "task's environment will run goes to stderr",
        ),
    ] = False,
) -> None:
    """Validate a task file and start its workflow (idempotent for a running task)."""
    spec = _load(file, repo)
    if print_input:
        console.print_json(spec.model_dump(mode="json"))
        for line in describe(spec):  # what its environment will run, beside the input
            console.err.print(line, markup=False)
        return
    settings = Settings.from_env()
    following: list[str] = []

    async def main() -> int:
        client = await console.client()
        handle, started = await start_task(client, spec, settings.task_queue, rerun=rerun)
        if not started:
            console.out.print(f"task {spec.id} is already running ({handle.id}); not started again")
        else:
            console.out.print(f"started {handle.id} (task queue {settings.task_queue})")
        console.out.print(f"UI: {ui_url(client, handle.id)}", markup=False)
        if not await has_worker(client, settings.task_queue):
            console.err.print(_no_worker(settings.task_queue))
        if not wait:
            return 0
        following.append(spec.id)
        line = ProgressLine(console.out)

        def on_event(ev: TraceEvent) -> None:
            line.clear()
            console.out.print(event_line(spec.id, ev), markup=False)

        async def on_quiet() -> None:
            # Said again while nothing happens: a task waiting for a worker looks stuck.
            if not await has_worker(client, settings.task_queue):
                line.clear()
                console.err.print(_no_worker(settings.task_queue))

        result, waiting = await follow(
            handle,
            on_event,
            until_waiting=not keep_waiting,
            client=client,
            on_progress=lambda p: line.show(progress.line(p)),
            on_quiet=on_quiet,
        )
        line.clear()
        if waiting:
            so_far = await handle.query(QUERY_TRACE, result_type=TaskResult)
            if so_far.attempts:
                print_gates(console.out, so_far)
            _print_status(await handle.query(QUERY_STATUS, result_type=TaskStatus))
            return console.WAITING
        print_result(console.out, result)
        return 0 if result.state == TaskState.DONE_WITH_EVIDENCE else 1

    try:
        code = console.run(main)
    except KeyboardInterrupt:
        if not following:
            raise
        # Only the following stops: the task is the server's, and goes on.
        console.err.print(
            f"\nstopped following {spec.id}; the task goes on. Follow it again: "
            f"loop start {file} --wait · see it: loop status {spec.id} · "
            f"cancel it: loop cancel {spec.id}",
            markup=False,
        )
        raise typer.Exit(130) from None
    raise typer.Exit(code)


def _no_worker(queue: str) -> str:
    return f"note: no worker polls task queue {queue!r} yet; start one with `loop worker`"


def _load(file: Path, repo: str | None = None) -> TaskSpec:
    try:
        return load_task(file, repo)
    except LoopError as e:
        console.fail(str(e))


def status(
    task_id: Annotated[
        str | None, typer.Argument(metavar="ID", help="task id; all if omitted")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """One task's state, phase, attempt, budget and last verdict; or a table of all tasks."""

    async def main() -> None:
        client = await console.client()
        if task_id is None:
            await _list(client, "", as_json)
            return
        handle, desc = await find(client, task_id)
        st = await console.status_of(handle, desc, client)
        if isinstance(st, TaskStatus) and st.candidates:
            st = await with_live_candidates(client, st)
        if as_json:
            console.print_json(st.model_dump(mode="json"))
        elif isinstance(st, TaskResult):
            print_result(console.out, st)
        else:
            _print_status(st)

    console.run(main)


def _print_status(st: TaskStatus) -> None:
    console.out.print(status_line(st), markup=False)
    running = progress.line(st.progress, progress.attempt_seconds(st, datetime.now(UTC)))
    if running:
        console.out.print(running, markup=False)  # the agent's words: inert
    console.out.print(budget_table(st.budget))
    if st.candidates:
        console.out.print(candidates_table(st.candidates))
    if st.waiting_for:
        console.out.print(f"waiting for {waiting_words(st.waiting_for)}: {st.reason}", markup=False)
        if st.commit:
            console.out.print(f"commit to approve: {st.commit}", markup=False)
        console.out.print(f"answer with: {answer_with(st.task_id, st.waiting_for)}", markup=False)


REASON_SHOWN = 120
"""Characters of a reason in the table (``loop status ID`` and ``--json`` give it whole)."""


async def _list(client: Client, extra: str, as_json: bool, *, inbox: bool = False) -> None:
    query = f'WorkflowType="{TASK_WORKFLOW}"' + extra
    rows = []
    async for wf in client.list_workflows(query, limit=200):
        sa = wf.typed_search_attributes
        state = task_state(wf)
        try:
            reason = str((await wf.memo()).get("reason", ""))
        except Sealed:
            reason = "(encrypted: set LOOP_CODEC_KEY_FILE to read it)"
        except Exception:  # a memo that is not the task's: no reason to show
            reason = ""
        rows.append(
            {
                "task_id": wf.id.removeprefix("task-"),
                "state": state,
                "attempts": sa.get(SA_ATTEMPTS) or 0,
                "cost_usd": sa.get(SA_COST) or 0.0,
                "started": wf.start_time.isoformat(timespec="seconds") if wf.start_time else "",
                "repo": sa.get(SA_REPO) or "",
                "reason": reason,
            }
        )
    if inbox:
        for row in rows:
            with contextlib.suppress(LoopError, RPCError):
                handle, desc = await find(client, row["task_id"])
                st = await console.status_of(handle, desc, client)
                if isinstance(st, TaskStatus):
                    row["waiting_for"], row["reason"] = st.waiting_for, st.reason
                    row["answer"] = answer_with(st.task_id, st.waiting_for)
                    row["commit"] = st.commit
                    row["candidates"] = {c.name: c.commit for c in st.candidates if c.commit}
    if as_json:
        console.print_json(rows)
        return
    if not rows:
        console.out.print("no tasks waiting for a person" if inbox else "no tasks")
        return
    if inbox:
        # One block per task: the answer commands must stay copy-pasteable on any width.
        for r in rows:
            console.out.print(
                f"{r['task_id']}  {r['state']}  attempt {r['attempts']}  "
                f"{for_terminal(r.get('reason', ''))}",
                markup=False,
            )
            if r.get("commit"):
                console.out.print(f"    commit to approve: {r['commit']}", markup=False)
            for name, commit in (r.get("candidates") or {}).items():
                console.out.print(
                    f"    candidate {name}: {commit}  (loop approve {r['task_id']} "
                    f"--candidate {name})",
                    markup=False,
                )
            console.out.print(f"    answer with: {r.get('answer', '')}", markup=False)
        return
    table = Table("task", "state", "attempts", "cost", "started", "repo", "reason")
    for r in rows:
        reason = "" if r["state"] == "RUNNING" else for_terminal(r["reason"])
        table.add_row(
            r["task_id"],
            r["state"],
            str(r["attempts"]),
            f"${r['cost_usd']:.4f}",
            r["started"],
            r["repo"],
            Text(reason[:REASON_SHOWN] + ("…" if len(reason) > REASON_SHOWN else "")),
        )
    console.out.print(table)


def inbox(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Tasks waiting for a person, what each waits for, and the command that answers it."""

    async def main() -> None:
        client = await console.client()
        await _list(
            client,
            ' AND ExecutionStatus="Running" AND '
            '(LoopState="NEEDS_HUMAN" OR LoopState="AWAITING_APPROVAL")',
            as_json,
            inbox=True,
        )

    console.run(main)


def _answer(task_id: str, what: str, payload: BaseModel) -> None:
    """Send an answer as the local user, signed with the answer key where there is one,
    and print what it did; the task's refusal is one ``error:`` line and exit 2. An
    approval that names no commit names the one the task waits with, and says so."""

    key = Settings.from_env().answer_key

    async def main() -> None:
        client = await console.client()
        sent = payload.model_copy(update={"answer_id": new_answer_id("cli")})
        if isinstance(sent, ApproveSignal) and not sent.commit:
            st = await approvable(client, task_id)
            waiting = st.commit if st is not None else ""
            if st is not None and sent.candidate:
                named = [c.commit for c in st.candidates if c.name == sent.candidate]
                waiting = named[0] if named else ""
            if waiting:
                sent = sent.model_copy(update={"commit": waiting})
        reply = await answer(client, task_id, what, sent, local_user(), key)
        named = sent.commit if isinstance(sent, ApproveSignal) else ""
        said = f"{task_id}: {reply.did}" + (f" (commit {named})" if named else "")
        console.out.print(said, markup=False)
        if what == "approve" and not reply.did.startswith("already taken"):
            await _approval_outcome(client, task_id)

    console.run(main)


OUTCOME_WAIT_S = 120.0
"""How long ``loop approve`` waits to say what the approval came to."""


async def _approval_outcome(client: Client, task_id: str) -> None:
    """What an approval came to, once the task says: merged (or its pull request opened),
    or why not (a dirty checkout of base, a conflict) and what to answer."""
    handle, _ = await find(client, task_id)
    try:
        result, waiting = await asyncio.wait_for(
            follow(handle, lambda _: None, until_waiting=True), OUTCOME_WAIT_S
        )
    except TimeoutError:
        console.out.print(
            f"{task_id}: still finishing after {OUTCOME_WAIT_S:.0f} s; see `loop status {task_id}`",
            markup=False,
        )
        return
    if not waiting:
        console.out.print(f"{task_id}: {result.state}: {result.reason}", markup=False)
        return
    st = await live_status(handle)
    console.out.print(f"{task_id}: {st.state}: {st.reason}", markup=False)
    console.out.print(f"answer with: {answer_with(task_id, st.waiting_for)}", markup=False)


COMMIT_HELP = (
    "the commit approved (7+ hex digits); refused unless it is the one waiting "
    "(default: the one the task waits with)"
)


CANDIDATE_HELP = (
    "the candidate approved, where several wait (choose: person); its commit is the one approved"
)


def approve(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    note: Annotated[str, typer.Option(help="why it may be merged")] = "",
    commit: Annotated[str, typer.Option(help=COMMIT_HELP)] = "",
    candidate: Annotated[str, typer.Option(help=CANDIDATE_HELP)] = "",
) -> None:
    """Approve a verified task waiting in AWAITING_APPROVAL: its branch is merged into base
    (of a task whose candidates wait side by side, the one named)."""
    _answer(task_id, "approve", ApproveSignal(note=note, commit=commit, candidate=candidate))


def reject(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    reason: Annotated[str, typer.Option(help="why (recorded in the trace)")] = ...,  # type: ignore[assignment]  # typer: required
) -> None:
    """Reject a task waiting for a person: it ends REJECTED, nothing is merged."""
    _answer(task_id, "reject", RejectSignal(reason=reason))


def feedback(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    text: Annotated[str, typer.Argument(help="added to the next attempt's prompt")],
) -> None:
    """Give a task feedback; a task in NEEDS_HUMAN gets one more attempt carrying it."""
    if not text.strip():
        console.err.print("error: feedback text is empty; say what the agent should do differently")
        raise typer.Exit(2)
    _answer(task_id, "feedback", FeedbackSignal(text=text))


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
        console.err.print(
            "error: nothing to add; give --attempts, --seconds, --tokens or --cost-usd"
        )
        raise typer.Exit(2)
    _answer(task_id, "extend", payload)


def sign(
    answer: Annotated[str, typer.Argument(help="approve, reject, feedback or extend")],
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    note: Annotated[str, typer.Option(help="approve: why it may be merged")] = "",
    commit: Annotated[str, typer.Option(help="approve: the commit approved (7+ hex digits)")] = "",
    candidate: Annotated[str, typer.Option(help="approve: the candidate approved")] = "",
    reason: Annotated[str, typer.Option(help="reject: why")] = "",
    text: Annotated[str, typer.Option(help="feedback: the text")] = "",
    attempts: Annotated[int, typer.Option(min=0, help="extend: more attempts")] = 0,
    seconds: Annotated[int, typer.Option(min=0, help="extend: more wall-clock seconds")] = 0,
    tokens: Annotated[int, typer.Option(min=0, help="extend: more tokens")] = 0,
    cost_usd: Annotated[float, typer.Option(min=0, help="extend: more dollars")] = 0.0,
) -> None:
    """Print an answer's signed payload, for `temporal workflow update execute --input`
    (or `workflow signal`; the key: LOOP_ANSWER_KEY_FILE, else LOOP_HOME/answer.key;
    good for 10 minutes, once)."""
    payloads: dict[str, Callable[[], BaseModel]] = {
        "approve": lambda: ApproveSignal(note=note, commit=commit, candidate=candidate),
        "reject": lambda: RejectSignal(reason=reason),
        "feedback": lambda: FeedbackSignal(text=text or " "),
        "extend": lambda: ExtendBudgetSignal(
            attempts=attempts, seconds=seconds, tokens=tokens, cost_usd=cost_usd
        ),
    }
    if answer not in payloads:
        console.fail(f"{answer!r} is not an answer; give approve, reject, feedback or extend")
    if answer == "feedback" and not text.strip():
        console.fail("feedback needs --text; say what the agent should do differently")
    key = Settings.from_env().answer_key
    if key is None:
        console.fail(
            "no answer key: set LOOP_ANSWER_KEY_FILE to the worker's key (`loop dev` makes "
            "one in LOOP_HOME/answer.key)"
        )
    try:
        made = payloads[answer]().model_copy(update={"answer_id": new_answer_id("cli")})
        payload = signed(made, checked_id(task_id), answer, local_user(), key)
    except LoopError as e:
        console.fail(str(e))
    console.print_json(payload.model_dump(mode="json"))


async def _print_diff(runs: Path, result: TaskResult) -> None:
    """The last attempt's change against base, file by file, and the command that shows it
    whole: read from the task's clone, or from the repository's ``refs/loopwork/<id>``
    once the clone is gone (a merged task's, too)."""
    from loop.ui.source import Diff, git_diff, where_diff  # here: the page's git reader

    found = where_diff(runs, result.task_id, result, "")
    diff = found if isinstance(found, Diff) else await git_diff(*found)
    if diff.unavailable:
        console.out.print(f"diff: {diff.unavailable}", markup=False)
        return
    assert not isinstance(found, Diff)
    repo, base, commit = found
    added = sum(f.additions for f in diff.files)
    removed = sum(f.deletions for f in diff.files)
    console.out.print(
        f"diff {base[:12]}..{commit[:12]}: {len(diff.files)} file(s), +{added} −{removed} "
        f"(whole: git -C {repo} diff {base[:12]} {commit[:12]})",
        markup=False,
    )
    for f in diff.files:
        moved = f" (from {f.old_path})" if f.old_path else ""
        console.out.print(
            f"  {f.status:<9} {f.path}{moved}  +{f.additions} −{f.deletions}", markup=False
        )


CANCEL_WAIT_S = 30.0
"""How long ``loop cancel`` waits for the task to stop (its running step stops first)."""


def cancel(task_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Cancel a task: its running activity stops, its worktree is kept, it ends CANCELLED.
    Waits for that (at most 30 s), or says how to follow it."""

    async def main() -> None:
        client = await console.client()
        handle, desc = await find(client, task_id)
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise BadInput(f"task {task_id} has already ended ({desc.status.name})")
        await handle.cancel()
        queue = Settings.from_env().task_queue
        if not await has_worker(client, queue):
            console.out.print(
                f"cancel requested for {task_id}; no worker polls task queue {queue!r}, so "
                f"it ends CANCELLED once one runs (`loop worker`); follow it with "
                f"`loop status {task_id}`",
                markup=False,
            )
            return
        console.out.print(f"cancel requested for {task_id}; waiting for it to stop", markup=False)
        try:
            result = await asyncio.wait_for(handle.result(), CANCEL_WAIT_S)
        except TimeoutError:
            console.out.print(
                f"{task_id} is still stopping after {CANCEL_WAIT_S:.0f} s (its running step "
                f"is being stopped); follow it with `loop status {task_id}`",
                markup=False,
            )
            return
        except WorkflowFailureError:  # closed other than by returning (terminated)
            console.out.print(f"{task_id}: {task_state(await handle.describe())}", markup=False)
            return
        console.out.print(f"{task_id}: {result.state}: {result.reason}", markup=False)

    console.run(main)


def trace(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: Annotated[bool, typer.Option("--json", help="the full trace as JSON")] = False,
) -> None:
    """The execution trace: attempts, gates with evidence, events, escalations.

    Read from the trace file in LOOP_HOME/runs when the server is not reachable or has
    forgotten the task."""

    async def main() -> None:
        file = Settings.from_env().runs / f"{checked_id(task_id)}.json"
        try:
            client = await console.client()
            handle, desc = await find(client, task_id)
        except (ServerUnavailable, UnknownTask) as e:
            if not file.is_file():
                raise
            console.err.print(f"{e}; showing the trace file {file}", markup=False)
            result = TaskResult.model_validate_json(file.read_bytes())
            desc = handle = None
        else:
            if desc.status == WorkflowExecutionStatus.RUNNING:
                result = await handle.query(QUERY_TRACE, result_type=TaskResult)
            else:
                result = await console.status_of(handle, desc, client)  # type: ignore[assignment]  # checked below
        assert isinstance(result, TaskResult)
        if as_json:
            console.print_json(result.model_dump(mode="json"))
            return
        print_result(console.out, result)
        await _print_diff(Settings.from_env().runs, result)
        console.out.print()
        for ev in result.events:
            console.out.print(f"{ev.at}  {ev.kind:<14} {ev.detail}", markup=False)
        if (
            handle is not None
            and desc.status == WorkflowExecutionStatus.RUNNING
            and result.state.waiting
        ):
            st = await handle.query(QUERY_STATUS, result_type=TaskStatus)
            console.out.print(
                f"\nwaiting for {waiting_words(st.waiting_for)}; answer with: "
                f"{answer_with(st.task_id, st.waiting_for)}",
                markup=False,
            )

    console.run(main)
