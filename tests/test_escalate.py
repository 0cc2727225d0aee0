"""escalate: one message per escalation to the inbox file and a webhook served here."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.escalate import EscalateActivities
from loop.contracts import EscalateInput, TaskState
from loop.settings import Settings


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict]]]:
    received: list[dict] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(json.loads(body))
            self.send_response(200 if self.path == "/ok" else 500)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", received
    server.shutdown()


def escalation(**kw: object) -> EscalateInput:
    data = {
        "task_id": "fix-1",
        "goal": "make it so\nmore",
        "state": TaskState.NEEDS_HUMAN,
        "reason": "attempts exhausted",
        "waiting_for": "feedback/extend_budget/reject",
        "attempt": 3,
        "last_verdict": "tests FAIL",
    }
    data.update(kw)
    return EscalateInput.model_validate(data)


async def test_webhook_and_inbox_get_one_message(tmp_path: Path, webhook):
    url, received = webhook
    acts = EscalateActivities(Settings(home=tmp_path, webhook_url=f"{url}/ok"))
    result = await acts.escalate(escalation())
    await acts.escalate(escalation())  # a retried activity: no second inbox line
    assert f"{url}/ok" in result.notified
    assert received[0]["task_id"] == "fix-1" and received[0]["reason"] == "attempts exhausted"
    assert "loop extend fix-1" in received[0]["text"]  # Slack-compatible text with the answer
    lines = (tmp_path / "inbox.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["waiting_for"].startswith("feedback")


async def test_failing_webhook_raises_for_a_retry_and_writes_the_inbox_once(
    tmp_path: Path, webhook
):
    url, received = webhook
    acts = EscalateActivities(Settings(home=tmp_path, webhook_url=f"{url}/broken"))
    waiting = escalation(state=TaskState.AWAITING_APPROVAL, waiting_for="approve/reject")
    for _ in range(2):  # the activity and its retry
        with pytest.raises(ApplicationError, match="500") as failed:
            await acts.escalate(waiting)
        assert not failed.value.non_retryable
    assert len(received) == 2
    lines = (tmp_path / "inbox.jsonl").read_text().splitlines()
    assert len(lines) == 1 and "loop approve fix-1" in json.loads(lines[0])["text"]


async def test_task_parks_at_once_while_a_failing_webhook_is_retried(
    client: Client, demo_repo: Path, tmp_path: Path
):
    from loop.contracts import TaskResult, TaskSpec
    from loop.tasks import start_task
    from tests.conftest import task, write_agent
    from tests.test_task_e2e import wait_for
    from worker import build_worker

    calls: list[float] = []

    class Flaky(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            calls.append(time.monotonic())
            self.send_response(500 if len(calls) == 1 else 200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = Settings(
        home=tmp_path / "home",
        task_queue=f"esc-{tmp_path.name[-12:]}",
        webhook_url=f"http://127.0.0.1:{server.server_port}/hook",
    )
    agent = write_agent(tmp_path, 'pathlib.Path("slugify.py").write_text("x = 1\\n")\n')
    spec = TaskSpec.model_validate(task(demo_repo, agent, budget={"max_attempts": 1}))
    try:
        async with build_worker(client, settings):
            handle, _ = await start_task(client, spec, settings.task_queue)
            st = await wait_for(handle, lambda s: s.state == TaskState.NEEDS_HUMAN)
            parked_at = time.monotonic()
            assert st.reason == "attempts exhausted"
            deadline = time.monotonic() + 20
            while len(calls) < 2:  # the retry delivers it
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            await handle.signal("reject", {"reason": "enough"})
            result: TaskResult = await handle.result()
    finally:
        server.shutdown()
    assert calls[0] <= parked_at + 0.5 < calls[1]  # parked before the retry went out
    assert result.state == TaskState.REJECTED
    assert not [e for e in result.events if e.kind == "notify-failed"]
