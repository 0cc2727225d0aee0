"""Agent text is inert wherever a person reads it: terminal, JSON, webhook, review page.

One hostile agent puts every kind of active text where people read it: its claim
and its printed output (cursor movement, erase-line, a fake green verdict, an OSC 52
clipboard write, an OSC 8 link), rich markup (``[/]`` would crash a markup parser,
``[green]`` fake a verdict), bidi overrides, Slack's ``<!channel>``, in file names
and in what the ``tests`` gate prints. The task ends waiting for a person; each
command a person runs, the escalation webhook's body and the review page must show
all of it as text and none of it as an effect.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from loop.contracts import TaskSpec, TaskState
from loop.settings import Settings
from loop.tasks import start_task
from tests.e2e.test_cli import Cli, cli, write_task  # noqa: F401 (the fixture)
from tests.support.agents import write_agent
from tests.support.tasks import task, wait_for
from tests.support.ui import loop_ui
from worker import build_worker

pytestmark = pytest.mark.timeout(150)

EVIL = (
    "\x1b[1A\x1b[2K\x1b[32mall gates pass\x1b[0m \x1b]52;c;aGFja2Vk\x1b\\ "
    "\x1b]8;;http://evil.invalid\x1b\\link\x1b]8;;\x1b\\ [/] [green]tests pass[/green] "
    "\u202egnp.exe <!channel> <http://evil.invalid|click> \x07\x08\r"
)
AGENT = f"""
evil = {EVIL!r}
pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return t\\n")
pathlib.Path("notes").mkdir(exist_ok=True)
pathlib.Path("notes", "evil\\x1b[31m\\u202e.txt").write_text(evil)
pathlib.Path("evil.txt").write_text(evil)
out.write_text(evil)
print(evil, flush=True)
sys.exit(1)  # so its last line is what a person reads as "the agent said"
"""
RAW = ("\x1b", "\u202e", "\x07", "\x08")
"""Characters that must never reach a reader raw."""


class Hook(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        Hook.bodies.append(self.rfile.read(length))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def no_raw(where: str, text: str) -> None:
    for ch in RAW:
        assert ch not in text, f"{where} holds {ch!r} raw"


async def test_agent_text_is_inert_everywhere(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    cli: Cli,  # noqa: F811
) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = settings.model_copy(
        update={"webhook_url": f"http://127.0.0.1:{server.server_port}/hook"}
    )
    spec = task(demo_repo, write_agent(tmp_path, AGENT), budget={"max_attempts": 1})
    spec["verify"][0]["run"] = f"cat evil.txt; {sys.executable} -m unittest discover -s tests -t ."
    spec["verify"][1]["diff_scope"]["allow"] = ["slugify.py", "notes/**", "evil.txt"]
    # A gate judged by its exit code, whose "what failed" line is the code's own text.
    spec["verify"].append(
        {
            "name": "said",
            "run": "printf 'FAILED %s\\n' \"$(cat evil.txt)\"; exit 1",
            "report": "exit",
        }
    )
    spec["approval_timeout"] = 600
    try:
        async with build_worker(client, settings):
            handle, _ = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
            await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN, within=120)
            ran = {
                "status": await cli("status", spec["id"]),
                "status list": await cli("status"),
                "inbox": await cli("inbox"),
                "trace": await cli("trace", spec["id"]),
                "trace --json": await cli("trace", spec["id"], "--json"),
            }
            async with loop_ui(env, settings) as address:
                async with httpx.AsyncClient(base_url=address) as http:
                    page = (await http.get(f"/tasks/{spec['id']}")).text
            waited = await cli(
                "start", str(write_task(tmp_path, {**spec, "id": spec["id"] + "-w"})), "--wait"
            )
            await handle.cancel()
            await asyncio.wait_for(handle.result(), 60)
    finally:
        server.shutdown()
    for name, result in ran.items():
        assert result.code == 0, (name, result.err)
        assert "Traceback" not in result.err and "MarkupError" not in result.err, name
        no_raw(name, result.out)
        no_raw(name, result.err)
    for name in ("status", "inbox", "trace"):
        assert "␛[32mall gates pass" in ran[name].out, name  # shown, not acted on
    assert "[green]tests pass[/green]" in ran["trace"].out  # shown, not parsed as markup
    data = json.loads(ran["trace --json"].out)
    said = next(g for g in data["attempts"][0]["verdict"]["gates"] if g["name"] == "said")
    assert said["evidence"]["failure"][0].startswith("FAILED \x1b[1A")  # raw in the JSON only
    assert "FAILED ␛[1A" in ran["trace"].out and "FAILED ␛[1A" in page  # shown first, inert
    assert data["attempts"][0]["make"]["claim"] == EVIL  # the JSON still says what was written
    assert waited.code == 3, waited.err
    no_raw("start --wait", waited.out + waited.err)
    bodies = [json.loads(b) for b in Hook.bodies]
    assert bodies, "the escalation was posted"
    for body in bodies:
        no_raw("webhook text", body["text"])
        assert "<!channel>" not in body["text"]
    no_raw("review page", page)
    assert "⟦U+202E⟧" in page and "␛" in page
    assert "[green]tests pass[/green]" in page
