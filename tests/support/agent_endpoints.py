"""Scripted model endpoints for the real agent CLIs, each in its provider's wire protocol.

- ``ScriptedClaude``: Anthropic Messages (``POST /v1/messages``, SSE), for Claude Code;
- ``ScriptedResponses``: OpenAI Responses (``POST /v1/responses``, SSE), for Codex;
- streaming chat completions are ``tests.support.model_server.ScriptedModel`` (aider).

Each is a real HTTP server on 127.0.0.1 in a daemon thread. Every model request that
offers tools takes the next scripted ``turn`` (text, tool calls, usage); the others
(a CLI's side requests) get a short text. ``.requests`` records what was asked, with
headers, so a test can check the key and the usage it sent against what the CLI
reports. A turn can instead be an error status. Tool inputs may hold ``{cwd}``: the
directory the CLI says it works in (Claude Code wants absolute paths).
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Turn:
    text: str = ""
    tools: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    usage: tuple[int, int] = (1000, 50)
    """(input tokens, output tokens) reported for this call."""
    status: int = 200
    """Anything but 200: an error answer in the provider's shape, nothing else."""


def turn(
    text: str = "", *tools: tuple[str, dict[str, Any]], usage: tuple[int, int] = (1000, 50)
) -> Turn:
    return Turn(text=text, tools=list(tools), usage=usage)


def refuse(status: int) -> Turn:
    return Turn(status=status)


def _fill(value: Any, cwd: str) -> Any:
    if isinstance(value, str):
        return value.replace("{cwd}", cwd)
    if isinstance(value, list):
        return [_fill(v, cwd) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, cwd) for k, v in value.items()}
    return value


class _Scripted:
    """Lifecycle, the script and the record, shared by the protocols."""

    def __init__(self, *turns: Turn, key: str = "", models: tuple[str, ...] = ()) -> None:
        self.turns: deque[Turn] = deque(turns)
        self.key = key
        """When set, the only key it takes: any other gets 401, as a provider answers."""
        self.models = models
        """When set, the only models it serves (listed, and found by name); others: 404."""
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._sent = (0, 0)

    def __enter__(self) -> _Scripted:
        owner = self

        class Handler(_Handler):
            scripted = owner

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *turns: Turn) -> None:
        with self.lock:
            self.turns.extend(turns)

    def take(self, body: dict[str, Any], headers: dict[str, str]) -> Turn:
        """The next turn for a request with tools; a plain text for a side request."""
        with self.lock:
            self.requests.append({"body": body, "headers": headers})
            if body.get("tools") and self.turns:
                return self.turns.popleft()
        return Turn(text="OK", usage=(10, 2))

    @property
    def usage_sent(self) -> tuple[int, int]:
        """What every answered call reported, summed: (input, output)."""
        return self._sent

    def count(self, t: Turn) -> None:
        with self.lock:
            self._sent = (self._sent[0] + t.usage[0], self._sent[1] + t.usage[1])

    def error(self, status: int) -> dict[str, Any]:
        raise NotImplementedError

    def answer(self, h: _Handler, body: dict[str, Any], t: Turn) -> None:
        raise NotImplementedError


class _Handler(BaseHTTPRequestHandler):
    scripted: _Scripted
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:  # Claude Code checks it can connect
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        """The model list, and one model by name (``/v1/models/<id>``): what a provider
        answers with the key it takes; 401 with another, 404 for a model it lacks."""
        headers = {k.lower(): v for k, v in self.headers.items()}
        given = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        if self.scripted.key and given != self.scripted.key:
            self.json(401, self.scripted.error(401))
            return
        served = self.scripted.models or ("scripted",)
        named = self.path.split("?")[0].rstrip("/").removeprefix("/v1/models")
        if not named:
            self.json(
                200, {"object": "list", "data": [{"id": m, "object": "model"} for m in served]}
            )
        elif self.scripted.models and named.strip("/") not in served:
            self.json(404, self.scripted.error(404))
        else:
            self.json(200, {"id": named.strip("/"), "object": "model"})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        headers = {k.lower(): v for k, v in self.headers.items()}
        t = self.scripted.take(body, headers)
        if t.status != 200:
            self.json(t.status, self.scripted.error(t.status))
            return
        self.scripted.count(t)
        self.scripted.answer(self, body, t)

    def json(self, status: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def open_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # Codex ends a turn at end of stream
        self.end_headers()
        self.close_connection = True

    def event(self, name: str, data: dict[str, Any]) -> None:
        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()


class ScriptedClaude(_Scripted):
    """Anthropic Messages, streamed: what Claude Code speaks (``ANTHROPIC_BASE_URL``)."""

    def error(self, status: int) -> dict[str, Any]:
        kind = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}
        return {
            "type": "error",
            "error": {"type": kind.get(status, "api_error"), "message": f"scripted {status}"},
        }

    def answer(self, h: _Handler, body: dict[str, Any], t: Turn) -> None:
        system = body.get("system", "")
        if isinstance(system, list):
            system = "\n".join(b.get("text", "") for b in system if isinstance(b, dict))
        found = re.search(r"Primary working directory: (\S+)", str(system))
        cwd = found.group(1) if found else "."
        blocks: list[dict[str, Any]] = [{"type": "text", "text": t.text}] if t.text else []
        for name, args in t.tools:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{uuid.uuid4().hex[:20]}",
                    "name": name,
                    "input": _fill(args, cwd),
                }
            )
        usage = {
            "input_tokens": t.usage[0],
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message = {
            "id": f"msg_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "scripted"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        h.open_stream()
        h.event("message_start", {"type": "message_start", "message": message})
        for i, block in enumerate(blocks):
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                start = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            h.event(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": start},
            )
            h.event(
                "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
            )
            h.event("content_block_stop", {"type": "content_block_stop", "index": i})
        stop = "tool_use" if t.tools else "end_turn"
        h.event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": t.usage[1]},
            },
        )
        h.event("message_stop", {"type": "message_stop"})


class ScriptedResponses(_Scripted):
    """OpenAI Responses, streamed: what Codex speaks (a ``wire_api = "responses"`` provider)."""

    def error(self, status: int) -> dict[str, Any]:
        return {
            "error": {
                "message": f"scripted {status}",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key" if status == 401 else None,
            }
        }

    def answer(self, h: _Handler, body: dict[str, Any], t: Turn) -> None:
        items: list[dict[str, Any]] = []
        if t.text:
            items.append(
                {
                    "type": "message",
                    "id": f"msg_{uuid.uuid4().hex[:12]}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": t.text, "annotations": []}],
                }
            )
        for name, args in t.tools:
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{uuid.uuid4().hex[:12]}",
                    "status": "completed",
                    "call_id": f"call_{uuid.uuid4().hex[:12]}",
                    "name": name,
                    "arguments": json.dumps(args),
                }
            )
        usage = {
            "input_tokens": t.usage[0],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": t.usage[1],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": sum(t.usage),
        }
        response = {
            "id": f"resp_{uuid.uuid4().hex[:12]}",
            "object": "response",
            "model": body.get("model", "scripted"),
            "status": "in_progress",
            "output": [],
            "usage": None,
            "error": None,
        }
        h.open_stream()
        h.event("response.created", {"type": "response.created", "response": response})
        for i, item in enumerate(items):
            h.event(
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": i, "item": item},
            )
        done = {**response, "status": "completed", "output": items, "usage": usage}
        h.event("response.completed", {"type": "response.completed", "response": done})
