"""The ``loop`` console script, run as a real subprocess against the session's dev server.

Bad input exits 2 with one ``error: ...`` line on stderr and starts nothing; good
paths are checked with a worker running in this test's event loop, so the CLI is
always run with ``asyncio.create_subprocess_exec`` (never a blocking call that would
starve the worker).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
import yaml
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from loop.contracts import (
    QUERY_STATUS,
    ApproveSignal,
    RejectSignal,
    TaskResult,
    TaskSpec,
    TaskState,
    TaskStatus,
    workflow_id_for,
)
from loop.errors import BadInput
from loop.loaders import load_task
from loop.settings import Settings
from loop.tasks import answer, start_task
from tests.support.agents import FIX_AT_ONCE, write_agent
from tests.support.tasks import answers_in_history, result_of, task, wait_for
from worker import build_worker

pytestmark = pytest.mark.timeout(120)

LOOP = str(Path(sys.executable).parent / "loop")
CLI_TIMEOUT_S = 60


class WrongExitCode(AssertionError):
    """Everything else about the run was right; only its exit code breaks the contract."""


@dataclass
class Ran:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


Cli = Callable[..., Awaitable[Ran]]


def expect_code(ran: Ran, code: int) -> None:
    if ran.code != code:
        raise WrongExitCode(f"`loop {' '.join(ran.args)}` exited {ran.code}, want {code}")


def assert_one_error_line(ran: Ran, *words: str) -> str:
    """Stderr is exactly one ``error: ...`` line containing ``words``, with no traceback."""
    assert "Traceback" not in ran.err, ran.err
    assert len(ran.err_lines) == 1, ran.err
    line = ran.err_lines[0]
    assert line.startswith("error: "), line
    for w in words:
        assert w in line, (w, line)
    return line


@pytest.fixture
def cli(env: WorkflowEnvironment, settings: Settings, tmp_path: Path) -> Cli:
    """Run ``loop ARGS...`` against the session server, on the test's own task queue."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LOOP_"))}
    base.update(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        TEMPORAL_NAMESPACE=env.client.namespace,
        LOOP_HOME=str(settings.home),
        LOOP_TASK_QUEUE=settings.task_queue,
        COLUMNS="200",
        NO_COLOR="1",
    )
    workdir = tmp_path / "cwd"
    workdir.mkdir(exist_ok=True)

    async def run(*args: str, **extra_env: str) -> Ran:
        proc = await asyncio.create_subprocess_exec(
            LOOP,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**base, **extra_env},
            cwd=workdir,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), CLI_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        return Ran(args, proc.returncode, out.decode(), err.decode())

    return run


def write_task(folder: Path, spec: dict, name: str | None = None) -> Path:
    file = folder / (name or f"{spec['id']}.yaml")
    file.write_text(yaml.safe_dump(spec, sort_keys=False))
    return file


def new_id() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


async def assert_nothing_started(client: Client, queue: str, *task_ids: str) -> None:
    for task_id in task_ids:
        with pytest.raises(RPCError) as info:
            await client.get_workflow_handle(workflow_id_for(task_id)).describe()
        assert info.value.status == RPCStatusCode.NOT_FOUND
    assert [wf.id async for wf in client.list_workflows(f'TaskQueue="{queue}"')] == []


SLOW = """
time.sleep(60)
"""

TOUCH_PROTECTED = """
pathlib.Path("tests/test_slugify_more.py").write_text("# under the protect glob\\n")
pathlib.Path("slugify.py").write_text(COMPLETE)
"""
"""A new file matching ``protect: [tests/test_slugify*.py]``: a policy violation."""


# --------------------------------------------------------------------------- bad input


@dataclass
class Case:
    tmp: Path
    repo: Path
    task_id: str
    agent: list[str]

    def file(self, **overrides: object) -> str:
        spec = task(self.repo, self.agent, id=self.task_id)
        spec.update(overrides)
        return str(write_task(self.tmp, spec))


BAD_INPUT: dict[str, tuple[Callable[[Case], list[str]], tuple[str, ...]]] = {
    "start-missing-file": (
        lambda c: ["start", str(c.tmp / "missing.yaml")],
        ("missing.yaml", "not found"),
    ),
    "start-unknown-key": (lambda c: ["start", c.file(zzz=1)], ("zzz", "unknown key")),
    "start-bad-repo": (
        lambda c: ["start", c.file(repo=str(c.tmp / "nowhere"))],
        ("repo:", "does not exist"),
    ),
    "start-repo-option-missing": (
        lambda c: ["start", c.file(), "--repo", str(c.tmp / "nowhere")],
        ("repo:", "nowhere", "does not exist"),
    ),
    "print-repo-option-missing": (
        lambda c: ["start", c.file(), "--print", "--repo", str(c.tmp / "nowhere")],
        ("repo:", "nowhere", "does not exist"),
    ),
    "status-unknown-id": (lambda c: ["status", c.task_id], ("no task",)),
    "approve-unknown-id": (lambda c: ["approve", c.task_id], ("no task",)),
    "reject-unknown-id": (lambda c: ["reject", c.task_id, "--reason", "no"], ("no task",)),
    "feedback-unknown-id": (lambda c: ["feedback", c.task_id, "do better"], ("no task",)),
    "extend-unknown-id": (lambda c: ["extend", c.task_id, "--attempts", "1"], ("no task",)),
    "cancel-unknown-id": (lambda c: ["cancel", c.task_id], ("no task",)),
    "trace-unknown-id": (lambda c: ["trace", c.task_id], ("no task",)),
    "status-invalid-id": (lambda c: ["status", "Bad ID"], ("'Bad ID'", "not a task id")),
    "approve-invalid-id": (lambda c: ["approve", "../x"], ("not a task id",)),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
async def test_bad_input_exits_2_and_starts_nothing(
    case: str, cli: Cli, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    build_args, words = BAD_INPUT[case]
    c = Case(tmp_path, demo_repo, new_id(), write_agent(tmp_path, FIX_AT_ONCE))
    args = build_args(c)
    ran = await cli(*args)
    line = assert_one_error_line(ran, *words)
    if args[0] != "start" and "invalid" not in case:
        assert c.task_id in line
    assert ran.out == ""
    await assert_nothing_started(client, settings.task_queue, c.task_id)
    expect_code(ran, 2)


async def test_start_print_gives_the_workflow_input_for_any_repository_and_starts_nothing(
    cli: Cli, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """One example file serves every repository: ``--repo`` stands in for the file's own
    (a path from the current folder), and ``--print`` is the input the ``temporal`` CLI
    and the SDK take, resolved (absolute repo, concrete base)."""
    c = Case(tmp_path, tmp_path / "elsewhere", new_id(), write_agent(tmp_path, FIX_AT_ONCE))
    ran = await cli("start", c.file(), "--repo", str(demo_repo), "--print")
    expect_code(ran, 0)
    spec = TaskSpec.model_validate_json(ran.out)
    assert spec.id == c.task_id and spec.repo == str(demo_repo.resolve()) and spec.base == "main"
    await assert_nothing_started(client, settings.task_queue, c.task_id)


async def test_no_server_says_loop_dev(
    cli: Cli, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    c = Case(tmp_path, demo_repo, new_id(), write_agent(tmp_path, FIX_AT_ONCE))
    started = time.monotonic()
    ran = await cli("start", c.file(), TEMPORAL_ADDRESS="127.0.0.1:1")
    assert time.monotonic() - started < 15  # fails fast, no endless retries
    assert_one_error_line(ran, "127.0.0.1:1", "`loop dev`")
    await assert_nothing_started(client, settings.task_queue, c.task_id)
    expect_code(ran, 2)


async def test_reject_without_reason_is_a_usage_error(
    cli: Cli, client: Client, settings: Settings
) -> None:
    """Click refuses the missing option before any Loopwork code runs: exit 2, the
    option named, nothing sent to the server."""
    task_id = new_id()
    ran = await cli("reject", task_id)
    assert "Traceback" not in ran.err, ran.err
    assert "Missing option '--reason'" in ran.err, ran.err
    assert ran.out == ""
    await assert_nothing_started(client, settings.task_queue, task_id)
    expect_code(ran, 2)


# --------------------------------------------------------------------------- a running task


async def test_start_of_a_running_task_is_idempotent(
    cli: Cli, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    # No worker: the workflow stays RUNNING, which is all that idempotency needs.
    spec = task(demo_repo, write_agent(tmp_path, SLOW))
    file = str(write_task(tmp_path, spec))
    first = await cli("start", file)
    handle = client.get_workflow_handle(workflow_id_for(spec["id"]))
    try:
        assert first.code == 0, first
        assert f"started task-{spec['id']} (task queue {settings.task_queue})" in first.out
        assert "no worker polls" in first.err and "Traceback" not in first.err
        run_id = (await handle.describe()).run_id
        again = await cli("start", file)
        assert again.code == 0, again
        assert "already running" in again.out and "not started again" in again.out
        desc = await handle.describe()
        assert desc.run_id == run_id and desc.status == WorkflowExecutionStatus.RUNNING
    finally:
        await handle.terminate("test over")


async def test_an_answer_to_an_ended_task_names_how_it_ended_in_loopworks_words(
    cli: Cli, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE))
    async with build_worker(client, settings):
        handle, _ = await start_task(
            client, load_task(write_task(tmp_path, spec)), settings.task_queue
        )
        await result_of(handle)
    approve = await cli("approve", spec["id"])
    line = assert_one_error_line(approve, spec["id"], "has ended DONE_WITH_EVIDENCE")
    assert "COMPLETED" not in line
    expect_code(approve, 2)


async def test_answers_that_do_not_apply_to_a_running_task_are_refused(
    cli: Cli, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    spec = task(demo_repo, write_agent(tmp_path, SLOW))
    task_id = spec["id"]
    async with build_worker(client, settings):
        handle, started = await start_task(
            client, load_task(write_task(tmp_path, spec)), settings.task_queue
        )
        assert started
        try:
            await wait_for(handle, lambda s: s.phase == "make", within=30)
            status = await cli("status", task_id)
            approve = await cli("approve", task_id)
            reject = await cli("reject", task_id, "--reason", "no")
            extend = await cli("extend", task_id)
            feedback = await cli("feedback", task_id, "")
            blank = await cli("feedback", task_id, "   ")

            assert status.code == 0, status
            assert "RUNNING" in status.out and "make" in status.out and "attempt 1" in status.out
            assert_one_error_line(approve, task_id, "is RUNNING", "approve")
            assert_one_error_line(reject, task_id, "is RUNNING", "reject")
            assert_one_error_line(extend, "nothing to add")
            assert_one_error_line(feedback, "feedback text is empty")
            assert_one_error_line(blank, "feedback text is empty")
            # Refused before history: no answer in it, no check run, the task still works on
            # attempt 1, and nothing in its trace.
            assert await answers_in_history(handle) == []
            st = await handle.query(QUERY_STATUS, result_type=TaskStatus)
            assert st.state == TaskState.RUNNING and st.attempt == 1
        finally:
            await handle.cancel()
            result = await result_of(handle)
        assert result.state == TaskState.CANCELLED
        assert not [e for e in result.events if e.kind in ("signal-ignored", "answer-refused")]
        late = await cli("approve", task_id)  # after the end: the reason, not the server's
        assert_one_error_line(late, task_id, "has ended", "approve")
        expect_code(late, 2)
        for ran in (approve, reject, extend, feedback, blank):
            expect_code(ran, 2)


async def test_two_answers_at_once_one_is_taken_the_other_hears_why(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """An approve and a reject sent together: the task takes one, and the other's sender
    is told the task has just taken an answer, not left with a trace event."""
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    task_id = spec["id"]
    async with build_worker(client, settings):
        file = write_task(tmp_path, spec)
        handle, _ = await start_task(client, load_task(file), settings.task_queue)
        await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL, within=30)
        sent = await asyncio.gather(
            answer(client, task_id, "approve", ApproveSignal(note="a"), "ann", None),
            answer(client, task_id, "reject", RejectSignal(reason="b"), "bob", None),
            return_exceptions=True,
        )
        result = await result_of(handle)
    taken = [r for r in sent if not isinstance(r, BaseException)]
    refused = [str(r) for r in sent if isinstance(r, BadInput)]
    assert len(taken) == 1 and len(refused) == 1, sent
    assert refused[0].startswith(f"task {task_id} "), refused
    assert result.state in (TaskState.DONE_WITH_EVIDENCE, TaskState.REJECTED)
    assert len([e for e in result.events if e.kind == "signal"]) == 1, result.events
    assert not [e for e in result.events if e.kind == "signal-ignored"]


# --------------------------------------------------------------------------- finished tasks


async def test_start_wait_ends_done_with_gate_table(
    cli: Cli, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE))
    file = write_task(tmp_path, spec)
    async with build_worker(client, settings):
        ran = await cli("start", str(file), "--wait")
    assert ran.code == 0, ran
    assert "Traceback" not in ran.err
    assert f"started task-{spec['id']}" in ran.out
    assert f"{spec['id']}: DONE_WITH_EVIDENCE" in ran.out
    # The gate table: a header and one passing row per gate, no failing row.
    assert all(h in ran.out for h in ("attempt", "gate", "result", "evidence"))
    rows = [line for line in ran.out.splitlines() if "│" in line]
    for gate in ("tests", "scope", "keep-tests"):
        assert any(f" {gate} " in row and " pass " in row for row in rows), (gate, ran.out)
    assert not [row for row in rows if "FAIL" in row], ran.out
    result = await result_of(
        client.get_workflow_handle(workflow_id_for(spec["id"]), result_type=TaskResult)
    )
    assert result.state == TaskState.DONE_WITH_EVIDENCE and len(result.attempts) == 1


async def test_start_wait_exits_1_when_the_task_is_not_done(
    cli: Cli, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    spec = task(demo_repo, write_agent(tmp_path, TOUCH_PROTECTED))
    spec["verify"][1]["diff_scope"]["protect"] = ["tests/test_slugify*.py"]
    async with build_worker(client, settings):
        ran = await cli("start", str(write_task(tmp_path, spec)), "--wait")
    assert f"{spec['id']}: BLOCKED" in ran.out, ran.out
    rows = [line for line in ran.out.splitlines() if "│" in line]
    assert any(" scope " in row and "FAIL" in row for row in rows), ran.out
    assert "Traceback" not in ran.err
    expect_code(ran, 1)
    # The ended task says why wherever it is listed: the Temporal UI (its memo, read
    # through the SDK's describe, as the UI reads it) and `loop status`'s table.
    handle = client.get_workflow_handle(workflow_id_for(spec["id"]), result_type=TaskResult)
    result = await handle.result()
    memo = await (await handle.describe()).memo()
    assert memo["state"] == "BLOCKED" and memo["reason"] == result.reason[:300]
    assert "tests/test_slugify_more.py" in result.reason
    listed = await cli("status", "--json")
    (row,) = [r for r in json.loads(listed.out) if r["task_id"] == spec["id"]]
    assert row["state"] == "BLOCKED" and row["reason"] == result.reason[:300]
    table = await cli("status")
    assert "protected path touched" in table.out, table.out  # wrapped where the table is narrow


async def test_start_wait_returns_when_the_task_waits_for_a_person(
    cli: Cli, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """An assisted task does not hold the terminal for approval_timeout: exit 3, and the
    command that answers it."""
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    task_id = spec["id"]
    async with build_worker(client, settings):
        ran = await cli("start", str(write_task(tmp_path, spec)), "--wait")
        handle = client.get_workflow_handle(workflow_id_for(task_id), result_type=TaskResult)
        st = await handle.query(QUERY_STATUS, result_type=TaskStatus)
        # The Temporal UI's current details: the state and why it waits.
        meta = await handle.query("__temporal_workflow_metadata")
        inbox = await cli("inbox")
        # The answer it prints, then the same answer again: the task has moved on, and
        # the second sender hears so instead of a trace event nobody reads.
        approved = await cli("approve", task_id, "--note", "ok")
        again = await cli("approve", task_id, "--note", "twice")
        result = await result_of(handle)
    expect_code(ran, 3)
    assert st.state == TaskState.AWAITING_APPROVAL  # still waiting: nothing was decided
    assert meta.current_details == f"AWAITING_APPROVAL: {st.reason}"
    assert st.reason and st.reason in inbox.out and "extend_budget" not in inbox.out
    assert len(st.commit) == 40 and f"commit to approve: {st.commit}" in inbox.out
    assert f"[{task_id}] AWAITING_APPROVAL" in ran.out
    assert f"answer with: loop approve {task_id}  |  loop reject {task_id}" in ran.out
    # The gate table, as for a task that ended: what the person is asked to approve.
    table = ran.out[: ran.out.index("answer with:")]
    assert "attempt" in table and "gate" in table and "evidence" in table, ran.out
    assert "tests" in table and "pass" in table, ran.out
    assert "Traceback" not in ran.err
    assert approved.code == 0, approved
    # The CLI names the commit the task waited with, and says which.
    # Requested first; then, once the task says, what it came to.
    requested, outcome = approved.out.strip().splitlines()
    assert re.fullmatch(
        rf"{task_id}: approved; merge of loop/{task_id} into main requested "
        rf"\(commit [0-9a-f]{{40}}\)",
        requested,
    ), approved.out
    assert outcome == f"{task_id}: DONE_WITH_EVIDENCE: verified and merged into main"
    expect_code(again, 2)
    assert_one_error_line(again, task_id, "approve")
    assert result.state == TaskState.DONE_WITH_EVIDENCE
    assert [e.detail for e in result.events if e.kind == "signal"] == ["approve: ok (unsigned)"]
    assert await answers_in_history(handle) == ["update approve", "signature check"]


@dataclass
class Finished:
    task_id: str
    file: Path
    handle: WorkflowHandle
    result: TaskResult


@pytest_asyncio.fixture
async def finished(client: Client, settings: Settings, demo_repo: Path, tmp_path: Path) -> Finished:
    """A task that ended DONE_WITH_EVIDENCE (started through the SDK)."""
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE))
    file = write_task(tmp_path, spec)
    async with build_worker(client, settings):
        handle, started = await start_task(client, load_task(file), settings.task_queue)
        assert started
        result = await result_of(handle)
    assert result.state == TaskState.DONE_WITH_EVIDENCE
    return Finished(spec["id"], file, handle, result)


async def test_status_of_a_finished_task(cli: Cli, finished: Finished) -> None:
    ran = await cli("status", finished.task_id)
    assert ran.code == 0, ran
    assert f"{finished.task_id}: DONE_WITH_EVIDENCE" in ran.out
    assert "tests" in ran.out and "pass" in ran.out
    as_json = await cli("status", finished.task_id, "--json")
    assert as_json.code == 0, as_json
    data = json.loads(as_json.out)
    assert data["task_id"] == finished.task_id and data["state"] == "DONE_WITH_EVIDENCE"


async def test_status_without_id_lists_the_task(cli: Cli, finished: Finished) -> None:
    deadline = time.monotonic() + 10
    while True:  # visibility is eventually consistent
        ran = await cli("status", "--json")
        assert ran.code == 0, ran
        rows = {r["task_id"]: r for r in json.loads(ran.out)}
        if rows.get(finished.task_id, {}).get("state") == "DONE_WITH_EVIDENCE":
            break
        assert time.monotonic() < deadline, ran.out
        await asyncio.sleep(0.3)
    assert rows[finished.task_id]["attempts"] == 1
    table = await cli("status")
    assert table.code == 0, table
    assert finished.task_id in table.out and "DONE_WITH_EVIDENCE" in table.out


async def test_trace_json_is_valid_json(cli: Cli, finished: Finished) -> None:
    ran = await cli("trace", finished.task_id, "--json")
    assert ran.code == 0, ran
    data = json.loads(ran.out)
    assert data["task_id"] == finished.task_id
    assert data["state"] == "DONE_WITH_EVIDENCE"
    assert TaskResult.model_validate(data) == finished.result
    text = await cli("trace", finished.task_id)
    assert text.code == 0, text
    assert "started" in text.out and "ended" in text.out


async def test_start_of_a_finished_task_needs_rerun(
    cli: Cli, client: Client, settings: Settings, finished: Finished
) -> None:
    run_id = (await finished.handle.describe()).run_id
    ran = await cli("start", str(finished.file))
    assert_one_error_line(ran, finished.task_id, "already ended", "--rerun")
    desc = await client.get_workflow_handle(workflow_id_for(finished.task_id)).describe()
    assert desc.run_id == run_id  # no new run
    expect_code(ran, 2)


async def test_rerun_of_a_finished_task(
    cli: Cli, client: Client, settings: Settings, finished: Finished
) -> None:
    run_id = (await finished.handle.describe()).run_id
    async with build_worker(client, settings):
        ran = await cli("start", str(finished.file), "--rerun", "--wait")
    assert ran.code == 0, ran
    assert f"started task-{finished.task_id}" in ran.out
    assert f"{finished.task_id}: DONE_WITH_EVIDENCE" in ran.out
    desc = await client.get_workflow_handle(workflow_id_for(finished.task_id)).describe()
    assert desc.run_id != run_id
    assert desc.status == WorkflowExecutionStatus.COMPLETED


# --------------------------------------------------------------------------- help


async def test_help(cli: Cli) -> None:
    top = await cli("--help")
    assert top.code == 0, top
    for command in (
        "start",
        "status",
        "approve",
        "reject",
        "feedback",
        "extend",
        "cancel",
        "trace",
        "worker",
        "dev",
    ):
        assert command in top.out
    start = await cli("start", "--help")
    assert start.code == 0, start
    assert "--wait" in start.out and "--rerun" in start.out and "task file" in start.out
