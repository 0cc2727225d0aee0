"""escalate: one message per escalation to the inbox file and a webhook served here.

That a task parks at once while a failing webhook is retried is in tests/e2e/test_escalate.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
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
