"""Answers that prove who sent them, on a real server and worker with an answer key.

A task waits for approval. Whoever reaches the frontend can send a signal; only an
answer signed with the worker's key is taken: an unsigned approve, one with a name
its sender chose, one signed for another task, a replayed one and a stale one are
each ignored with an event saying why, and the task keeps waiting. The CLI's own
answer, signed, is taken and credited to the local user; so is the payload `loop
sign` prints, sent through the Temporal CLI as docs/guides/answering.md shows.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from loop.contracts import (
    QUERY_TRACE,
    SIGNAL_APPROVE,
    SIGNAL_FEEDBACK,
    AnswerReply,
    ApproveSignal,
    FeedbackSignal,
    TaskResult,
    TaskSpec,
    TaskState,
)
from loop.devserver import temporal_binary
from loop.hardened import answers
from loop.settings import Settings
from loop.tasks import local_user, signed, start_task
from tests.e2e.test_cli import Cli, cli  # noqa: F401 (the fixture)
from tests.support.agents import FIX_AT_ONCE, write_agent
from tests.support.tasks import answers_in_history, result_of, task, wait_for
from worker import build_worker

pytestmark = pytest.mark.timeout(150)


async def events(handle, kind: str) -> list[str]:
    trace = await handle.query(QUERY_TRACE, result_type=TaskResult)
    return [e.detail for e in trace.events if e.kind == kind]


FORGERIES = ["unsigned", "a name it chose", "another key", "another task", "stale"]


def forged(workflow_id: str, task_id: str, key: Path, other: Path) -> list[ApproveSignal]:
    """The cheapest forgeries of an approval, in ``FORGERIES``' order: none signed, a good
    one with another name put in, one signed with another key, one signed for another
    task, and one signed with the right key an hour ago."""
    good = signed(ApproveSignal(note="ok"), task_id, "approve", "alice", key)
    an_hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    stale = ApproveSignal(by="alice", at=an_hour_ago)
    stale.signature = answers.sign(
        answers.read_key(key), workflow_id, SIGNAL_APPROVE, stale.model_dump(mode="json")
    )
    return [
        ApproveSignal(note="lgtm", by="the reviewer"),
        good.model_copy(update={"by": "the reviewer"}),
        signed(ApproveSignal(), task_id, "approve", "alice", other),
        signed(ApproveSignal(), "not-this-one", "approve", "alice", key),
        stale,
    ]


async def test_only_signed_answers_are_taken(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    cli: Cli,  # noqa: F811
) -> None:
    key = settings.home / answers.KEY_NAME
    answers.create_key(key)  # where `loop dev` makes it; the CLI and the worker find it there
    other = tmp_path / "other.key"
    answers.create_key(other)
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    task_id = spec["id"]
    async with build_worker(client, settings):
        handle, _ = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
        await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)

        tries = dict(zip(FORGERIES, forged(handle.id, task_id, key, other), strict=True))
        for payload in tries.values():
            await handle.signal(SIGNAL_APPROVE, payload)
        feedback = signed(FeedbackSignal(text="once"), task_id, "feedback", "alice", key)
        await handle.signal(SIGNAL_FEEDBACK, feedback)
        await handle.signal(SIGNAL_FEEDBACK, feedback)  # the same signature again
        deadline = asyncio.get_running_loop().time() + 30
        while len(await events(handle, "answer-refused")) < len(tries) + 1:
            assert asyncio.get_running_loop().time() < deadline, await events(
                handle, "answer-refused"
            )
            await asyncio.sleep(0.2)
        refused = await events(handle, "answer-refused")
        st = await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        assert st.state == TaskState.AWAITING_APPROVAL  # none of them approved it

        # `loop sign` and the Temporal CLI, as docs/guides/answering.md shows them.
        printed = await cli("sign", "approve", task_id, "--note", "shipped")
        assert printed.code == 0, printed.err
        proc = await asyncio.create_subprocess_exec(
            str(temporal_binary()), "workflow", "signal",
            "--address", client.service_client.config.target_host,
            "--namespace", client.namespace,
            "--workflow-id", handle.id, "--name", "approve", "--input", printed.out.strip(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        result = await result_of(handle)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert sorted(r if not r.endswith("(stale)") else "approve: stale" for r in refused) == [
        "approve: stale",
        "approve: the signature does not hold",  # a name it chose
        "approve: the signature does not hold",  # another key
        "approve: the signature does not hold",  # another task
        "approve: unsigned",
        "feedback: replayed (that signature was used before)",
    ], refused
    taken = [e.detail for e in result.events if e.kind == "signal"]
    assert f"approve: shipped (by {local_user()})" in taken, taken
    ignored = [e.detail for e in result.events if e.kind == "signal-ignored"]
    assert ignored == ["feedback does not apply while AWAITING_APPROVAL"], ignored  # signed, once
    assert not any("the reviewer" in t for t in taken)
    assert json.loads(printed.out)["signature"]


async def test_a_forged_update_is_refused_in_its_validator(
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    cli: Cli,  # noqa: F811
) -> None:
    """The same tries as updates: each is refused with its reason before anything is
    written to history (no update, no check, no trace event); a replayed signature too.
    The CLI's signed answer, an update, is taken and says what it did."""
    key = settings.home / answers.KEY_NAME
    answers.create_key(key)
    other = tmp_path / "other.key"
    answers.create_key(other)
    waiting = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    running = task(demo_repo, write_agent(tmp_path, "time.sleep(60)\n"))
    task_id = waiting["id"]
    async with build_worker(client, settings):
        handle, _ = await start_task(client, TaskSpec.model_validate(waiting), settings.task_queue)
        slow, _ = await start_task(client, TaskSpec.model_validate(running), settings.task_queue)
        await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)

        labels = [
            "unsigned", "the signature does not hold",
            "the signature does not hold (another key)",
            "the signature does not hold (another task)", "(stale)",
        ]  # fmt: skip
        tries = dict(zip(labels, forged(handle.id, task_id, key, other), strict=True))
        reasons = {}
        for label, payload in tries.items():
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(SIGNAL_APPROVE, payload, result_type=AnswerReply)
            assert isinstance(refused.value.cause, ApplicationError), refused.value.cause
            reasons[label] = refused.value.cause.message
        assert await answers_in_history(handle) == []  # refused before history, all of them

        # A signed feedback to a running task is taken once; the same signature again is
        # refused by the validator, and the first sender was told what it did.
        await wait_for(slow, lambda st: st.phase == "make")
        feedback = signed(FeedbackSignal(text="once"), running["id"], "feedback", "alice", key)
        reply = await slow.execute_update(SIGNAL_FEEDBACK, feedback, result_type=AnswerReply)
        with pytest.raises(WorkflowUpdateFailedError) as again:
            await slow.execute_update(SIGNAL_FEEDBACK, feedback, result_type=AnswerReply)
        await slow.cancel()

        approved = await cli("approve", task_id, "--note", "shipped")
        result = await result_of(handle)
    for label, why in reasons.items():
        assert why.startswith(f"task {task_id}: approve refused: "), why
        assert label.partition(" (another")[0] in why, (label, why)
    assert reply.signed and reply.did == "your feedback goes into the next attempt"
    assert "replayed (that signature was used before)" in str(again.value.cause)
    assert approved.code == 0, approved.err
    # The CLI names the commit the task waited with, and says which.
    assert re.fullmatch(
        rf"{task_id}: approved; merge of loop/{task_id} into main requested "
        rf"\(commit [0-9a-f]{{40}}\)",
        approved.out.strip().splitlines()[0],
    ), approved.out
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    taken = [e.detail for e in result.events if e.kind == "signal"]
    assert taken == [f"approve: shipped (by {local_user()})"], taken
    assert not [e for e in result.events if e.kind in ("answer-refused", "signal-ignored")]
