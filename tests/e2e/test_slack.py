"""Slack, end to end: a waiting task posts a message with buttons, a button answers it
through ``loop ui``'s ``POST /hooks/slack``, and the message always ends up saying how
the wait ended, wherever it was answered.

A real worker, real git, ``loop ui`` and ``loop`` as subprocesses against the test
server; Slack's Web API is ``tests.support.slack``'s stand-in (blocks and views read
back with ``slack-sdk``'s models), and every interaction is signed with ``slack-sdk``'s
own signature code, as Slack signs it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from loop.contracts import WAITING_APPROVAL, FinalAction, TaskState, slack_answer_workflow_id
from loop.devserver import DevServer
from loop.hardened import answers
from loop.settings import Settings
from loop.slack.blocks import waiting
from loop.ui.slack import PATH as SLACK_PATH
from loop.ui.slack import SlackHook
from tests.support.agents import FIX_AT_ONCE, write_agent
from tests.support.net import free_port
from tests.support.slack import (
    CHANNEL,
    SIGNING_SECRET,
    TOKEN,
    Posted,
    SlackStandIn,
    interact,
    pressed,
    serving,
    submitted,
)
from tests.support.tasks import replays, result_of, start, task, wait_for
from tests.support.triage import NOTHING
from tests.support.ui import LOOP, loop_ui, ui_env
from worker import build_worker

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    with serving(SlackStandIn()) as hub:
        yield hub


@pytest.fixture
def slacked(settings: Settings, slack: SlackStandIn, tmp_path: Path) -> Settings:
    """The worker's settings with Slack: a bot token's file and a channel."""
    token = tmp_path / "slack.token"
    token.write_text(TOKEN + "\n")
    answers.create_key(settings.home / answers.KEY_NAME)  # answers are signed
    return settings.model_copy(
        update={"slack_token_file": token, "slack_channel": CHANNEL, "slack_api_url": slack.url}
    )


def ui_vars(settings: Settings, tmp_path: Path) -> dict[str, str]:
    secret = tmp_path / "slack.secret"
    secret.write_text(SIGNING_SECRET + "\n")
    assert settings.slack_token_file is not None
    return {
        "LOOP_SLACK_SIGNING_SECRET_FILE": str(secret),
        "LOOP_SLACK_BOT_TOKEN_FILE": str(settings.slack_token_file),
        "LOOP_SLACK_API_URL": settings.slack_api_url,
    }


async def until(what: str, cond: Callable[[], object], within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(0.1)


async def posted(slack: SlackStandIn, n: int = 1) -> Posted:
    await until(f"message {n} in Slack", lambda: len(slack.messages) >= n)
    return slack.messages[n - 1]


async def test_the_approve_button_merges_and_the_message_says_who_approved(
    client: Client, env: WorkflowEnvironment, slacked: Settings, slack: SlackStandIn,
    demo_repo: Path, tmp_path: Path,
):  # fmt: skip
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    ui = loop_ui(env, slacked, **ui_vars(slacked, tmp_path))
    async with build_worker(client, slacked), ui as url:
        handle = await start(client, slacked, spec)
        waiting = await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        message = await posted(slack)
        shown = [(b["action_id"], b["value"]) for b in message.buttons()]
        first = message.shown()
        approve = pressed(message, "loop_approve", user="ann")
        answered = await interact(url, approve)
        result = await result_of(handle)
        closed = message.shown()
        # The same button again, now that the task has ended: said so, nothing done.
        again = await interact(url, pressed_again(approve, "bob"))
        await until("the refusal in the message", lambda: "nothing was done" in message.shown())
        await replays(handle, "slack_approval")
        bobs = f"{approve['actions'][0]['action_ts']}-UBOB"
        refused = client.get_workflow_handle(slack_answer_workflow_id(bobs))
        said = await refused.result()
        await replays(refused, "slack_refused")

    assert message.channel == CHANNEL
    assert f"*Loopwork task `{spec['id']}` is AWAITING_APPROVAL*: verified; " in first
    # The approve button names the commit the message shows: the one the task waits with.
    assert shown == [
        ("loop_approve", f"{spec['id']} {waiting.commit}"),
        ("loop_reject", spec["id"]),
    ]
    assert f"Approve approves commit `{waiting.commit}`" in first
    assert answered.status_code == 200
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert result.final_action == FinalAction.MERGED
    signals = [e.detail for e in result.events if e.kind == "signal"]
    assert signals == ["approve:  (by slack:ann)"], signals
    assert "approved (by slack:ann)" in closed, closed
    assert again.status_code == 200
    assert not message.buttons(), "no live button is left"
    assert f"slack:bob pressed approve: nothing was done: task {spec['id']} has ended" in (
        message.shown()
    )
    assert [e.detail for e in result.events if e.kind == "signal"] == signals
    ended = f"task {spec['id']} has ended DONE_WITH_EVIDENCE; approve does not apply"
    assert said["refused"] == ended, said


def pressed_again(payload: dict, user: str) -> dict:
    return payload | {"user": {"id": f"U{user.upper()}", "username": user, "team_id": "T0"}}


async def test_reject_asks_for_a_reason_in_a_modal_and_ends_the_task_rejected(
    client: Client, env: WorkflowEnvironment, slacked: Settings, slack: SlackStandIn,
    demo_repo: Path, tmp_path: Path,
):  # fmt: skip
    spec = task(demo_repo, write_agent(tmp_path, NOTHING), budget={"max_attempts": 1})
    ui = loop_ui(env, slacked, **ui_vars(slacked, tmp_path))
    async with build_worker(client, slacked), ui as url:
        handle = await start(client, slacked, spec)
        await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        message = await posted(slack)
        buttons = [b["action_id"] for b in message.buttons()]
        opening = await interact(url, pressed(message, "loop_reject", trigger="1.2.trig"))
        await until("the modal", lambda: slack.views)
        (opened,) = slack.views
        empty = await interact(url, submitted(opened, {"reason": "  "}))
        still = await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        reason = "not needed <!channel> after all"
        taken = await interact(url, submitted(opened, {"reason": reason}, user="ann"))
        result = await result_of(handle)
        await replays(handle, "slack_rejection")

    assert buttons == ["loop_feedback", "loop_extend", "loop_reject"]
    assert opening.status_code == 200
    assert opened["trigger_id"] == "1.2.trig"
    assert opened["view"]["callback_id"] == "loop_reject"
    assert empty.status_code == 200
    assert empty.json() == {
        "response_action": "errors",
        "errors": {"reason": "say why it is rejected (the reason is recorded in the trace)"},
    }
    assert still.state == TaskState.NEEDS_HUMAN, "an empty reason does nothing"
    assert taken.status_code == 200 and not taken.content
    assert result.state == TaskState.REJECTED and result.reason == reason
    assert not message.buttons()
    said = message.shown()
    assert "rejected (by slack:ann): not needed &lt;!channel&gt; after all" in said, said
    assert "<!channel>" not in said, "Slack markup in a person's words stays text"


async def test_forged_or_old_requests_are_refused_and_a_cli_answer_closes_the_message(
    client: Client, env: WorkflowEnvironment, slacked: Settings, slack: SlackStandIn,
    demo_repo: Path, tmp_path: Path,
):  # fmt: skip
    spec = task(demo_repo, write_agent(tmp_path, NOTHING), budget={"max_attempts": 1})
    slack.down = True  # Slack unreachable when the task comes to wait
    ui = loop_ui(env, slacked, **ui_vars(slacked, tmp_path))
    async with build_worker(client, slacked), ui as url:
        handle = await start(client, slacked, spec)
        st = await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        await until("a try at posting", lambda: "chat.postMessage" in slack.calls)
        slack.down = False  # Temporal retries the post
        message = await posted(slack)
        press = pressed(message, "loop_reject")
        forged = await interact(url, press, secret="not-the-signing-secret-0123")
        old = await interact(url, press, at=int(time.time()) - 5 * 60 - 30)
        after = await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        assert not slack.views and not message.updates
        proc = await asyncio.create_subprocess_exec(
            LOOP, "reject", spec["id"], "--reason", "done by hand",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=ui_env(env, slacked),
        )  # fmt: skip
        _, err = await proc.communicate()
        result = await result_of(handle)
    async with loop_ui(env, slacked) as plain:  # no signing secret: no such path
        off = await interact(plain, press)

    assert st.reason.endswith("attempts exhausted"), "the task waited while Slack was down"
    assert [forged.status_code, old.status_code] == [401, 401]
    assert forged.json() == {
        "message": "refused: X-Slack-Signature is wrong or the request is older than 5 minutes"
    }
    assert after.state == TaskState.NEEDS_HUMAN, "nothing changed"
    assert proc.returncode == 0, err.decode()
    assert result.state == TaskState.REJECTED and result.reason == "done by hand"
    assert not message.buttons()
    assert "rejected (by " in message.shown() and ": done by hand" in message.shown()
    assert off.status_code == 404


async def test_feedback_from_a_modal_reaches_the_next_attempt_and_each_wait_has_its_message(
    client: Client, env: WorkflowEnvironment, slacked: Settings, slack: SlackStandIn,
    demo_repo: Path, tmp_path: Path,
):  # fmt: skip
    spec = task(demo_repo, write_agent(tmp_path, NOTHING), budget={"max_attempts": 1})
    ui = loop_ui(env, slacked, **ui_vars(slacked, tmp_path))
    async with build_worker(client, slacked), ui as url:
        handle = await start(client, slacked, spec)
        await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        first = await posted(slack)
        await interact(url, pressed(first, "loop_feedback"))
        await until("the feedback modal", lambda: slack.views)
        said = "keep hyphens\nand add a test"
        taken = await interact(url, submitted(slack.views[0], {"text": said}, user="ann"))
        await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN and st.attempt == 2)
        prompt = (slacked.runs / spec["id"] / "attempt-2" / "prompt.md").read_text()
        second = await posted(slack, 2)
        await interact(url, pressed(second, "loop_extend"))
        await until("the extend modal", lambda: len(slack.views) == 2)
        bad = await interact(url, submitted(slack.views[1], {"attempts": "", "seconds": "soon"}))
        await handle.cancel()
        result = await result_of(handle)

    assert taken.status_code == 200
    assert said in prompt
    assert not first.buttons() and "feedback given (by slack:ann): keep hyphens" in first.shown()
    assert [b["action_id"] for b in second.buttons()] == []  # closed: the task was cancelled
    assert "cancelled" in second.shown()
    assert bad.json() == {
        "response_action": "errors",
        "errors": {"seconds": "seconds: 'soon' is not a number"},
    }
    assert result.state == TaskState.CANCELLED
    assert len(slack.messages) == 2, "one message per wait"


async def answer_workflows(client: Client, task_id: str) -> list[str]:
    """The ids of the SlackAnswerWorkflows started for ``task_id``."""
    found = []
    async for w in client.list_workflows("WorkflowType = 'SlackAnswerWorkflow'"):
        desc = await client.get_workflow_handle(w.id).describe()
        if f" {task_id} " in (await desc.static_summary() or ""):
            found.append(w.id)
    return found


async def test_an_answer_pressed_while_no_worker_runs_is_taken_once_one_starts_and_only_once(
    client: Client, env: WorkflowEnvironment, slacked: Settings, slack: SlackStandIn,
    demo_repo: Path, tmp_path: Path,
):  # fmt: skip
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    async with loop_ui(env, slacked, **ui_vars(slacked, tmp_path)) as url:
        async with build_worker(client, slacked):
            handle = await start(client, slacked, spec)
            await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
            message = await posted(slack)
        # No worker polls the queue now: the press is taken by Temporal, not lost.
        approve = pressed(message, "loop_approve", user="ann")
        answered = await interact(url, approve)
        twice = await interact(url, approve)  # the same interaction again
        await asyncio.sleep(2)
        waiting = await handle.describe()
        started = await answer_workflows(client, spec["id"])
        async with build_worker(client, slacked):
            result = await result_of(handle)
            (one,) = started
            sent = await client.get_workflow_handle(one).result()
        await replays(client.get_workflow_handle(one), "slack_answer")

    assert [answered.status_code, twice.status_code] == [200, 200]
    assert waiting.status == WorkflowExecutionStatus.RUNNING, "nothing answered it yet"
    assert len(started) == 1, started
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert [e.detail for e in result.events if e.kind == "signal"] == ["approve:  (by slack:ann)"]
    assert sent["refused"] == "" and sent["did"], sent
    assert "approved (by slack:ann)" in message.shown()
    assert "nothing was done" not in message.shown(), "the second delivery did nothing"
    assert not message.buttons()


async def test_only_the_answerers_may_answer_and_anyone_else_is_told_why(
    client: Client, env: WorkflowEnvironment, slacked: Settings, slack: SlackStandIn,
    demo_repo: Path, tmp_path: Path,
):  # fmt: skip
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    allowed = ui_vars(slacked, tmp_path) | {"LOOP_SLACK_ANSWERERS": "UBOB, UCAROL"}
    ui = loop_ui(env, slacked, **allowed)
    async with build_worker(client, slacked), ui as url:
        handle = await start(client, slacked, spec)
        await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        message = await posted(slack)
        by_ann = await interact(url, pressed(message, "loop_approve", user="ann"))
        modal = await interact(url, pressed(message, "loop_reject", user="ann"))
        await until("two ephemeral replies", lambda: len(slack.ephemeral) == 2)
        still = await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        started = await answer_workflows(client, spec["id"])
        updates = list(message.updates)
        await interact(url, pressed(message, "loop_approve", user="bob"))
        result = await result_of(handle)
    bad = await asyncio.create_subprocess_exec(
        LOOP, "ui", "--bind", "127.0.0.1:0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=ui_env(env, slacked, **(allowed | {"LOOP_SLACK_ANSWERERS": "ann,UBOB"})),
    )  # fmt: skip
    _, err = await asyncio.wait_for(bad.communicate(), 30)

    assert [by_ann.status_code, modal.status_code] == [200, 200]
    assert [(e["channel"], e["user"]) for e in slack.ephemeral] == [(CHANNEL, "UANN")] * 2
    assert (
        "slack:ann may not answer Loopwork's tasks (not in LOOP_SLACK_ANSWERERS)"
        in (slack.ephemeral[0]["text"])
    )
    assert not slack.views, "no modal for someone who may not answer"
    assert still.state == TaskState.AWAITING_APPROVAL and not started and not updates
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert [e.detail for e in result.events if e.kind == "signal"] == ["approve:  (by slack:bob)"]
    assert bad.returncode == 2
    said = err.decode().strip().splitlines()
    assert len(said) == 1 and "LOOP_SLACK_ANSWERERS: 'ann' is not a Slack member id" in said[0]


async def test_an_extension_from_the_modal_extends_the_budget(
    client: Client, env: WorkflowEnvironment, slacked: Settings, slack: SlackStandIn,
    demo_repo: Path, tmp_path: Path,
):  # fmt: skip
    spec = task(demo_repo, write_agent(tmp_path, NOTHING), budget={"max_attempts": 1})
    ui = loop_ui(env, slacked, **ui_vars(slacked, tmp_path))
    async with build_worker(client, slacked), ui as url:
        handle = await start(client, slacked, spec)
        before = await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        first = await posted(slack)
        await interact(url, pressed(first, "loop_extend"))
        await until("the extend modal", lambda: slack.views)
        taken = await interact(url, submitted(slack.views[0], {"attempts": "1", "seconds": ""}))
        after = await wait_for(
            handle, lambda st: st.state == TaskState.NEEDS_HUMAN and st.attempt == 2
        )
        await posted(slack, 2)
        await handle.cancel()
        await result_of(handle)

    assert taken.status_code == 200 and not taken.content
    assert before.budget.left.attempts == 0
    assert after.budget.used.attempts == 2, "the extension gave one more attempt"
    assert not first.buttons() and "budget extended (by slack:ann)" in first.shown(), first.shown()


async def test_an_answer_from_the_review_page_updates_the_slack_message(
    client: Client, env: WorkflowEnvironment, slacked: Settings, slack: SlackStandIn,
    demo_repo: Path, tmp_path: Path,
):  # fmt: skip
    spec = task(demo_repo, write_agent(tmp_path, NOTHING), budget={"max_attempts": 1})
    secret = "review-page-token-0123456789abcdef"
    ui = loop_ui(env, slacked, LOOP_UI_TOKEN=f"ops:{secret}")
    async with build_worker(client, slacked), ui as url:
        handle = await start(client, slacked, spec)
        await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        message = await posted(slack)
        live = [b["action_id"] for b in message.buttons()]
        async with httpx.AsyncClient(timeout=30) as web:
            sent = await web.post(
                f"{url}/tasks/{spec['id']}/reject",
                data={"reason": "not <!here> today"},
                headers={"Authorization": f"Bearer {secret}"},
            )
        result = await result_of(handle)
        await until("the message closed", lambda: not message.buttons())

    assert live == ["loop_feedback", "loop_extend", "loop_reject"]
    assert sent.status_code == 200 and sent.json()["sent"] is True, sent.text
    assert result.state == TaskState.REJECTED and result.reason == "not <!here> today"
    said = message.shown()
    assert "rejected (by " in said and "not &lt;!here&gt; today" in said, said
    assert "<!here>" not in said


async def test_when_temporal_does_not_answer_the_person_is_told_and_the_buttons_stay(
    slack: SlackStandIn, tmp_path: Path
):
    """``/hooks/slack`` in process, its client connected to a Temporal server of its own
    that is then stopped: nothing can be started, and the person hears so at once."""
    server = DevServer.start(home=tmp_path, port=free_port(), headless=True)
    try:
        await server.wait_ready(timeout=30)
        down = await Client.connect(server.address, data_converter=pydantic_data_converter)
    finally:
        server.stop()
    hook = SlackHook(SIGNING_SECRET, TOKEN, slack.url, down, "no-queue")
    app = Starlette(routes=[Route(SLACK_PATH, hook.handle, methods=["POST"])])
    text, shown = waiting("t-down", "AWAITING_APPROVAL", "verified", "a goal", WAITING_APPROVAL)
    posted = slack.answer("chat.postMessage", f"Bearer {TOKEN}", {
        "channel": CHANNEL, "text": text, "blocks": shown,
    })[1]  # fmt: skip
    message = slack.message(posted["ts"])
    view = {"id": "VDOWN0001", "callback_id": "loop_reject", "private_metadata": json.dumps(
        {"task_id": "t-down", "channel": CHANNEL, "ts": message.ts}
    )}  # fmt: skip
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://loop") as web:
        pressed_at = time.monotonic()
        press = await interact(str(web.base_url), pressed(message, "loop_approve"), http=web)
        took = time.monotonic() - pressed_at
        modal = await interact(
            str(web.base_url),
            submitted({"view": view}, {"reason": "not now"}),
            http=web,
        )

    assert press.status_code == 200 and took < 3, took
    (told,) = slack.ephemeral
    assert (told["channel"], told["user"]) == (CHANNEL, "UANN")
    assert told["text"].startswith("Loopwork did not take your approve: Temporal did not answer")
    assert [b["action_id"] for b in message.buttons()] == ["loop_approve", "loop_reject"]
    assert not message.updates, "the message is left as it was"
    assert modal.status_code == 200
    errors = modal.json()
    assert errors["response_action"] == "errors"
    assert errors["errors"]["reason"].startswith("Loopwork did not take your reject: Temporal")


async def test_a_task_of_a_source_with_its_own_channel_posts_there(
    client: Client, slacked: Settings, slack: SlackStandIn, demo_repo: Path, tmp_path: Path
):
    spec = task(
        demo_repo, write_agent(tmp_path, NOTHING), budget={"max_attempts": 1},
        slack_channel="C0OPS",
    )  # fmt: skip
    async with build_worker(client, slacked):
        handle = await start(client, slacked, spec)
        await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        message = await posted(slack)
        await handle.cancel()
        await result_of(handle)
        await until("the message closed", lambda: not message.buttons())

    assert slacked.slack_channel == CHANNEL
    assert message.channel == "C0OPS", "the task's channel, over the worker's"
    assert [m.channel for m in slack.messages] == ["C0OPS"]
    assert "cancelled" in message.shown()
