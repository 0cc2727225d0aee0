"""Answers bound to what they answer, on a real server and worker with an answer key.

An answer names itself (``answer_id``): however often it arrives (a retried step, a
redelivery, a form sent twice), and however it is signed each time, the task takes it
once and says what it did the first time. An approval names the commit it approves:
one naming another commit than the one waiting is refused with the reason, from the
CLI (exit 2), an update, a signal and the review page alike; a hand-typed signal that
names none approves the commit waiting (docs/guides/answering.md).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
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
from loop.errors import BadInput
from loop.hardened import answers
from loop.settings import Settings
from loop.tasks import answer, local_user, signed, start_task
from tests.e2e.test_cli import SLOW, Cli, assert_one_error_line, cli, expect_code  # noqa: F401
from tests.support.agents import FIX_AT_ONCE, write_agent
from tests.support.tasks import answers_in_history, result_of, task, wait_for
from tests.support.ui import loop_ui
from worker import build_worker

pytestmark = pytest.mark.timeout(150)


async def trace_of(handle) -> TaskResult:
    return await handle.query(QUERY_TRACE, result_type=TaskResult)


async def test_one_answer_arriving_twice_is_taken_once(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """The same feedback, signed anew each time it is sent (so no signature repeats):
    as an update it is taken once and the second sender hears what it did; as a signal
    it is a trace event. Another answer with the same words is another answer."""
    key = settings.home / answers.KEY_NAME
    answers.create_key(key)
    spec = task(demo_repo, write_agent(tmp_path, SLOW))
    spec["agent"]["timeout"] = 90
    task_id = spec["id"]
    async with build_worker(client, settings):
        handle, _ = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
        await wait_for(handle, lambda st: st.phase == "make")
        once = FeedbackSignal(text="keep hyphens", answer_id="cli:one")
        first = await answer(client, task_id, "feedback", once, "ann", key)
        second = await answer(client, task_id, "feedback", once, "ann", key)
        await handle.signal(SIGNAL_FEEDBACK, signed(once, task_id, "feedback", "ann", key))
        other = once.model_copy(update={"answer_id": "cli:two"})
        third = await answer(client, task_id, "feedback", other, "ann", key)
        # The very same payload again (its signature too): refused before history.
        exact = signed(once.model_copy(update={"answer_id": "cli:3"}), task_id, "feedback",
                       "ann", key)  # fmt: skip
        await handle.execute_update(SIGNAL_FEEDBACK, exact, result_type=AnswerReply)
        before = len(await answers_in_history(handle))
        with pytest.raises(WorkflowUpdateFailedError) as replayed:
            await handle.execute_update(SIGNAL_FEEDBACK, exact, result_type=AnswerReply)
        after = len(await answers_in_history(handle))
        deadline = asyncio.get_running_loop().time() + 30
        while not [e for e in (await trace_of(handle)).events if e.kind == "signal-ignored"]:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.2)
        await handle.cancel()
        result = await result_of(handle)
    assert first.did == "your feedback goes into the next attempt"
    assert second.did == "already taken: your feedback goes into the next attempt"
    assert third.did == first.did
    assert "replayed (that signature was used before)" in str(replayed.value.cause)
    assert after == before, "the replay left nothing in the history"
    taken = [e.detail for e in result.events if e.kind == "signal"]
    assert taken == ["feedback: keep hyphens (by ann)"] * 3, taken
    ignored = [e.detail for e in result.events if e.kind == "signal-ignored"]
    assert ignored == ["feedback: answer cli:one was taken before"], ignored


async def test_an_approval_names_the_commit_it_approves(
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    cli: Cli,  # noqa: F811
) -> None:
    """Another commit than the one waiting is refused wherever the approval comes from;
    the commit waiting, named in full or by 7 hex digits, is approved."""
    key = settings.home / answers.KEY_NAME
    answers.create_key(key)
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    task_id = spec["id"]
    async with build_worker(client, settings):
        handle, _ = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
        st = await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        shown = await cli("status", task_id)
        other = "0123456789abcdef0123456789abcdef01234567"
        wrong = await cli("approve", task_id, "--commit", other[:9])
        garbage = await cli("approve", task_id, "--commit", f"{st.commit[:8]};true")
        short = await cli("approve", task_id, "--commit", st.commit[:6])
        with pytest.raises(BadInput) as by_update:
            await answer(client, task_id, "approve", ApproveSignal(commit=other), "ann", key)
        assert await answers_in_history(handle) == []  # refused in the validator
        # The same, signalled; and a signed approval of another commit with the commit
        # taken out (as if it named none): its signature no longer holds.
        named = signed(ApproveSignal(commit=other), task_id, "approve", "ann", key)
        await handle.signal(SIGNAL_APPROVE, named)
        unsent = signed(ApproveSignal(commit=other), task_id, "approve", "ann", key)
        await handle.signal(SIGNAL_APPROVE, unsent.model_copy(update={"commit": ""}))
        deadline = asyncio.get_running_loop().time() + 30
        while len([e for e in (await trace_of(handle)).events if e.kind == "answer-refused"]) < 2:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.2)
        still = await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        approved = await cli("approve", task_id, "--commit", st.commit[:7].upper(), "--note", "ok")
        result = await result_of(handle)
    assert len(st.commit) == 40 and still.commit == st.commit
    assert f"commit to approve: {st.commit}" in shown.out, shown.out
    refusal = f"task {task_id} waits for approval of commit {st.commit[:12]}, not"
    assert_one_error_line(wrong, refusal, other[:9])
    assert_one_error_line(garbage, "is not a commit (name at least 7 hex digits of one)")
    assert_one_error_line(short, "is not a commit")
    for ran in (wrong, garbage, short):
        expect_code(ran, 2)
    assert str(by_update.value).startswith(refusal), by_update.value
    assert approved.code == 0, approved.err
    assert approved.out.strip().splitlines()[0].endswith(f"(commit {st.commit[:7].upper()})")
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    refused = sorted(e.detail for e in result.events if e.kind == "answer-refused")
    assert refused == [
        f"approve: {refusal} {other[:12]}; look at it again (loop status {task_id}) "
        "and approve what it shows",
        "approve: the signature does not hold",
    ], refused
    taken = [e.detail for e in result.events if e.kind == "signal"]
    assert taken == [f"approve: ok (by {local_user()})"], taken


async def test_the_review_page_approves_the_commit_it_shows_once(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
) -> None:
    """The approve form carries the commit the page shows and an answer id: the same
    form sent twice (a double click) is taken once; one naming another commit (a page
    left open while the task moved on) is refused with the reason."""
    secret = "s3cret-for-the-review-page"
    answers.create_key(settings.home / answers.KEY_NAME)
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    task_id = spec["id"]
    auth = {"Authorization": f"Bearer {secret}"}
    async with (
        build_worker(client, settings),
        loop_ui(env, settings, LOOP_UI_TOKEN=f"reviewer:{secret}") as url,
    ):
        handle, _ = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
        st = await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=40) as web:
            page = (await web.get(f"/tasks/{task_id}")).text
            form = dict(re.findall(r'name="(answer_id|commit)" value="([^"]*)"', page))
            stale = await web.post(f"/tasks/{task_id}/approve", data={**form, "commit": "f" * 40})
            twice = await asyncio.gather(
                *(web.post(f"/tasks/{task_id}/approve", data=form) for _ in range(2))
            )
        result = await result_of(handle)
    assert form["commit"] == st.commit, form
    assert re.fullmatch(r"[0-9a-f]{32}", form["answer_id"]), form
    assert f"approves commit <code>{st.commit[:12]}</code>" in page
    assert stale.status_code == 409
    assert stale.json()["error"].startswith(
        f"task {task_id} waits for approval of commit {st.commit[:12]}, not ffffffffffff"
    )
    said = sorted(r.json().get("message") or r.json().get("error") for r in twice)
    assert sum(s.startswith(f"{task_id}: approved; merge of") for s in said) == 1, said
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    taken = [e.detail for e in result.events if e.kind == "signal"]
    assert taken == ["approve:  (by reviewer)"], taken
