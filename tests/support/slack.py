"""Slack for tests: a stand-in for its Web API, and interactions signed as Slack signs them.

The stand-in answers ``chat.postMessage``, ``chat.update``, ``chat.postEphemeral`` and
``views.open`` on a free port of 127.0.0.1 (``LOOP_SLACK_API_URL``), checks the bot
token, and reads every block and view it is sent back with ``slack-sdk``'s own models
(``Block.parse``, ``View``, each ``validate_json``), so a message Slack would refuse
fails here. What it
answers has Slack's shapes (``ok``, ``channel``, ``ts``, ``message``; ``view``).

``interact`` POSTs an interaction payload (``block_actions``, ``view_submission``) to
``loop ui``'s ``/hooks/slack`` as Slack does: a form with a ``payload`` field, signed with
``slack-sdk``'s ``SignatureVerifier.generate_signature`` over ``v0:{timestamp}:{body}``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlencode

import httpx
from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View
from slack_sdk.signature import SignatureVerifier

TOKEN = "xoxb-standin-0123456789-abcdefghijklmnop"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0LOOPWORK"


@dataclass
class Posted:
    """One message, as the channel shows it now (its updates applied)."""

    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    updates: list[dict[str, Any]] = field(default_factory=list)

    def buttons(self) -> list[dict[str, Any]]:
        return [e for b in self.blocks if b["type"] == "actions" for e in b["elements"]]

    def shown(self) -> str:
        """Every text a person reads in it."""
        texts = [str((b.get("text") or {}).get("text") or "") for b in self.blocks]
        texts += [
            str(e.get("text") or "")
            for b in self.blocks
            if b["type"] == "context"
            for e in b["elements"]
        ]
        return "\n".join(texts) + "\n" + self.text


@dataclass
class SlackStandIn:
    token: str = TOKEN
    url: str = ""
    messages: list[Posted] = field(default_factory=list)
    views: list[dict[str, Any]] = field(default_factory=list)
    """Modals opened, with the ``trigger_id`` they were opened with."""
    ephemeral: list[dict[str, Any]] = field(default_factory=list)
    """``chat.postEphemeral`` calls: what only one person was shown."""
    calls: list[str] = field(default_factory=list)
    down: bool = False
    """While set, every call is a 503: Slack unreachable."""
    limited: int = 0
    """When set, every call is a 429 with ``Retry-After`` of it."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def message(self, ts: str) -> Posted:
        return next(m for m in self.messages if m.ts == ts)

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        blocks = _checked_blocks(body.get("blocks"))
        ts = f"{int(time.time())}.{len(self.messages) + 1:06d}"
        posted = Posted(str(body["channel"]), ts, str(body.get("text") or ""), blocks)
        self.messages.append(posted)
        message = {"type": "message", "user": "U0LOOPBOT", "ts": ts, "text": posted.text}
        return {
            "ok": True,
            "channel": posted.channel,
            "ts": ts,
            "message": message | {"blocks": blocks},
        }

    def _update(self, body: dict[str, Any]) -> dict[str, Any]:
        found = [m for m in self.messages if m.ts == body.get("ts")]
        if not found or found[0].channel != body.get("channel"):
            return {"ok": False, "error": "message_not_found"}
        m = found[0]
        m.blocks = _checked_blocks(body.get("blocks"))
        m.text = str(body.get("text") or "")
        m.updates.append(body)
        return {"ok": True, "channel": m.channel, "ts": m.ts, "text": m.text}

    def _open(self, body: dict[str, Any]) -> dict[str, Any]:
        view = body.get("view") or {}
        View(**view).validate_json()
        for b in view.get("blocks") or []:
            parsed = Block.parse(b)
            assert parsed is not None, b
            parsed.validate_json()
        if not body.get("trigger_id"):
            return {"ok": False, "error": "invalid_trigger_id"}
        view = view | {"id": f"V{uuid.uuid4().hex[:10].upper()}"}  # unique, as Slack's are
        self.views.append({"trigger_id": body["trigger_id"], "view": view})
        return {"ok": True, "view": view}

    def _ephemeral(self, body: dict[str, Any]) -> dict[str, Any]:
        if not body.get("channel") or not body.get("user") or not body.get("text"):
            return {"ok": False, "error": "invalid_arguments"}
        self.ephemeral.append(body)
        return {"ok": True, "message_ts": f"{time.time():.6f}"}

    def answer(self, method: str, auth: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.calls.append(method)
            if self.down:
                return 503, {"ok": False, "error": "service_unavailable"}
            if self.limited:
                return 429, {"ok": False, "error": "ratelimited"}
            if auth != f"Bearer {self.token}":
                return 200, {"ok": False, "error": "invalid_auth"}
            handlers = {
                "chat.postMessage": self._post,
                "chat.update": self._update,
                "views.open": self._open,
                "chat.postEphemeral": self._ephemeral,
            }
            if method not in handlers:
                return 200, {"ok": False, "error": "unknown_method"}
            return 200, handlers[method](body)


def _checked_blocks(raw: Any) -> list[dict[str, Any]]:
    """Blocks as Slack takes them: each parsed and validated by slack-sdk's models."""
    assert isinstance(raw, list) and raw, raw
    for b in raw:
        parsed = Block.parse(b)
        assert parsed is not None, f"not a block slack-sdk knows: {b}"
        parsed.validate_json()
        assert parsed.to_dict() == b, (parsed.to_dict(), b)
    return raw


def _handler(hub: SlackStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(size)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            method = self.path.rsplit("/", 1)[-1]
            status, said = hub.answer(method, self.headers.get("Authorization", ""), body)
            data = json.dumps(said).encode()
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", str(hub.limited))
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serving(hub: SlackStandIn) -> Iterator[SlackStandIn]:
    """The stand-in on a free port of 127.0.0.1; ``hub.url`` is its API base."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    hub.url = f"http://127.0.0.1:{server.server_port}/api/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()


def pressed(m: Posted, action: str, user: str = "ann", trigger: str = "") -> dict[str, Any]:
    """A ``block_actions`` payload: ``user`` pressed the message's ``action`` button."""
    button = next(b for b in m.buttons() if b["action_id"] == action)
    return {
        "type": "block_actions",
        "user": {"id": f"U{user.upper()}", "username": user, "name": user, "team_id": "T0"},
        "api_app_id": "A0LOOP",
        "token": "legacy-verification-token",
        "container": {"type": "message", "message_ts": m.ts, "channel_id": m.channel},
        "trigger_id": trigger or f"{int(time.time())}.trigger",
        "team": {"id": "T0", "domain": "acme"},
        "channel": {"id": m.channel, "name": "loop"},
        "message": {"type": "message", "ts": m.ts, "text": m.text, "blocks": m.blocks},
        "actions": [
            {
                "type": "button",
                "action_id": action,
                "block_id": "loop_answers",
                "value": button["value"],
                "text": button["text"],
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


def submitted(opened: dict[str, Any], values: dict[str, str], user: str = "ann") -> dict[str, Any]:
    """A ``view_submission`` payload of a modal the stand-in opened, its fields filled."""
    view = opened["view"]
    state = {
        name: {name: {"type": "plain_text_input", "value": value}} for name, value in values.items()
    }
    return {
        "type": "view_submission",
        "user": {"id": f"U{user.upper()}", "username": user, "name": user, "team_id": "T0"},
        "team": {"id": "T0", "domain": "acme"},
        "view": view | {"state": {"values": state}},
    }


def signed_headers(body: bytes, secret: str = SIGNING_SECRET, at: int = 0) -> dict[str, str]:
    ts = str(at or int(time.time()))
    sig = SignatureVerifier(signing_secret=secret).generate_signature(timestamp=ts, body=body)
    assert sig is not None
    return {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": sig,
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
    }


async def interact(
    url: str,
    payload: dict[str, Any],
    *,
    secret: str = SIGNING_SECRET,
    at: int = 0,
    http: httpx.AsyncClient | None = None,
) -> httpx.Response:
    """POST the interaction to ``url``/hooks/slack as Slack does (``at``: its timestamp;
    ``http``: a client of its own, such as one bound to an app in process)."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    headers = signed_headers(body, secret, at)
    if http is not None:
        return await http.post(f"{url}/hooks/slack", content=body, headers=headers)
    async with httpx.AsyncClient(timeout=10) as own:
        return await own.post(f"{url}/hooks/slack", content=body, headers=headers)
