"""escalate on a real server: a task parks at once, while a failing webhook is retried.

The activity itself (one inbox line, a webhook, retries) is in tests/unit/test_escalate.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from temporalio.client import Client

from loop.contracts import TaskResult, TaskSpec, TaskState
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import write_agent
from tests.support.tasks import result_of, task, wait_for
from worker import build_worker


async def test_task_parks_at_once_while_a_failing_webhook_is_retried(
    client: Client, demo_repo: Path, tmp_path: Path
):
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
            assert st.reason.endswith("; attempts exhausted") and "failed once" in st.reason
            deadline = time.monotonic() + 20
            while len(calls) < 2:  # the retry delivers it
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            await handle.signal("reject", {"reason": "enough"})
            result: TaskResult = await result_of(handle)
    finally:
        server.shutdown()
    assert calls[0] <= parked_at + 0.5 < calls[1]  # parked before the retry went out
    assert result.state == TaskState.REJECTED
    assert not [e for e in result.events if e.kind == "notify-failed"]
