"""Every hook of ``loop ui`` reads what comes from outside within bounds: a body nested
10,000 deep, signed or with the right token, is answered 400 with the reason (not 500,
not a ``RecursionError``), one of too many values 413, and the page goes on serving.

``loop ui`` as a user runs it, with ``POST /hooks/github``, ``/hooks/slack`` and
``/hooks/tasks`` all on; each body is signed (or carries the token) as its sender would.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from loop.settings import Settings
from tests.support.agents import write_agent
from tests.support.slack import SIGNING_SECRET, signed_headers
from tests.support.triage import NOTHING, template, write_sources
from tests.support.ui import loop_ui
from tests.support.webhooks import signature

pytestmark = pytest.mark.timeout(60)

SECRET = b"webhook-secret-0123456789abcdef"
TOKEN = "hooks-token-0123456789abcdefghij"
DEEP = b'{"action": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
WIDE = b'{"action": [' + b"0," * 120_000 + b"0]}"


def configured(tmp_path: Path, demo_repo: Path) -> tuple[Path, dict[str, str]]:
    """A sources file with a github and a webhook source, and the three hooks' secrets."""
    spec = template(demo_repo, write_agent(tmp_path, NOTHING))
    github = {"name": f"gh{uuid.uuid4().hex[:5]}", "kind": "github", "repo": "acme/app"}
    file = write_sources(tmp_path, spec, [github, {"name": "lin", "kind": "webhook"}])
    files = {"webhook.secret": SECRET.decode(), "hooks.token": TOKEN}
    files |= {"slack.secret": SIGNING_SECRET, "slack.token": "xoxb-0000-not-used"}
    for name, text in files.items():
        (tmp_path / name).write_text(text + "\n")
    return file, {
        "LOOP_GITHUB_WEBHOOK_SECRET_FILE": str(tmp_path / "webhook.secret"),
        "LOOP_HOOKS_TOKEN_FILE": str(tmp_path / "hooks.token"),
        "LOOP_SLACK_SIGNING_SECRET_FILE": str(tmp_path / "slack.secret"),
        "LOOP_SLACK_BOT_TOKEN_FILE": str(tmp_path / "slack.token"),
    }


async def github(http: httpx.AsyncClient, body: bytes, event: str = "issues") -> httpx.Response:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": signature(SECRET, body),
    }
    return await http.post("/hooks/github", content=body, headers=headers)


async def slack(http: httpx.AsyncClient, payload: bytes) -> httpx.Response:
    body = urlencode({"payload": payload.decode()}).encode()
    return await http.post("/hooks/slack", content=body, headers=signed_headers(body))


async def tasks(http: httpx.AsyncClient, body: bytes) -> httpx.Response:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    return await http.post("/hooks/tasks", content=body, headers=headers)


async def test_a_body_too_deep_is_400_on_every_hook_and_the_page_goes_on(
    env: WorkflowEnvironment, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    sources, secrets = configured(tmp_path, demo_repo)
    async with (
        loop_ui(env, settings, "--sources", str(sources), **secrets) as url,
        httpx.AsyncClient(base_url=url, timeout=20) as http,
    ):
        deep = [await github(http, DEEP), await slack(http, DEEP), await tasks(http, DEEP)]
        wide = [await github(http, WIDE), await tasks(http, WIDE)]
        # Each hook still answers, and so does the page.
        pong = await github(http, b"{}", event="ping")
        nothing = await slack(http, b'{"type": "shortcut"}')
        unknown = await tasks(http, b'{"source": "nope", "id": 1, "goal": "x"}')
        page = await http.get("/")
    for answered in deep:
        assert answered.status_code == 400, (answered.request.url, answered.text)
        assert answered.json() == {"message": "refused: the body nests deeper than 64 levels"}
    for answered in wide:
        assert answered.status_code == 413, (answered.request.url, answered.text)
        assert answered.json() == {
            "message": "refused: the body holds more than 100,000 JSON values"
        }
    assert pong.json() == {"message": "pong"}
    assert nothing.status_code == 200
    assert unknown.status_code == 400 and "source 'nope' is not a source" in unknown.text
    assert page.status_code == 200
