"""A scripted OpenAI-compatible chat-completions server for tests.

Real sockets on 127.0.0.1 (port 0), a ``ThreadingHTTPServer`` in a daemon
thread, so the test process and a Temporal worker subprocess can both call it::

    with ScriptedModel() as model:
        model.script([reply(tool_calls=[("read", {"path": "a.py"})], usage=(10, 5)),
                      status(429, headers={"Retry-After": "3"}),
                      drop(),
                      reply("done")])
        ... base_url=model.url ...
        assert len(model.requests) == 3

Every ``POST /v1/chat/completions`` takes the next entry; ``.requests`` records
each one's JSON body and headers (the Authorization header included, so a test
can check that the key is sent). When the script runs out the server answers
500 with a message saying so, and counts it in ``.exhausted``.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ToolCallSpec = tuple[str, Any] | tuple[str, Any, str]
_call_ids = itertools.count(1)


@dataclass
class Entry:
    """One scripted answer: a status with a JSON (or raw text) body, or a dropped connection."""

    status: int = 200
    body: Any = None
    """A dict is sent as JSON; a str is sent as is; None means an empty body."""
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    delay: float = 0.0
    """Seconds to wait before answering (a slow model)."""
    completion: dict[str, Any] | None = None
    """For ``reply``: the completion without ``model``, filled from the request when unset."""


def reply(
    content: str | None = None,
    tool_calls: list[ToolCallSpec] | None = None,
    usage: tuple[int, int] | None = (10, 5),
    model: str | None = None,
    finish_reason: str | None = None,
    delay: float = 0.0,
) -> Entry:
    """A valid ``chat.completion``: text and/or tool calls ``(name, args[, id])``.

    ``args`` is a dict (sent JSON-encoded, as OpenAI does) or a raw string (sent
    as is, to script malformed arguments). ``model`` defaults to the requested one.
    """
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    calls = []
    for spec in tool_calls or []:
        name, args = spec[0], spec[1]
        call_id = spec[2] if len(spec) > 2 else None
        calls.append(
            {
                "id": call_id or f"call_{next(_call_ids)}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
    if calls:
        message["tool_calls"] = calls
    completion: dict[str, Any] = {
        "id": f"chatcmpl-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
    }
    if model is not None:
        completion["model"] = model
    if usage is not None:
        completion["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        }
    return Entry(completion=completion, delay=delay)


_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def status(
    code: int,
    body: Any = None,
    headers: dict[str, str] | None = None,
    delay: float = 0.0,
) -> Entry:
    """An answer with this status; the default body is an OpenAI-style error."""
    if body is None:
        kind, err_code = _ERROR_TYPES.get(code, ("server_error", None))
        body = {
            "error": {
                "message": f"scripted {code} {HTTPStatus(code).phrase}",
                "type": kind,
                "param": None,
                "code": err_code,
            }
        }
    return Entry(status=code, body=body, headers=dict(headers or {}), delay=delay)


def drop(delay: float = 0.0) -> Entry:
    """Read the request, then close the connection without answering."""
    return Entry(drop=True, delay=delay)


class ScriptedModel:
    """The server; a context manager. ``url`` is the base_url (ending in ``/v1``)."""

    def __init__(self, *, key: str = "", models: tuple[str, ...] = ()) -> None:
        self.key = key
        """When set, the only key it takes: any other gets 401 (the list, every call)."""
        self.models = models
        """When set, the only models it serves (listed, and found by name); others: 404."""
        self._entries: deque[Entry] = deque()
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        """Each chat request in order: ``{"path", "body", "headers"}`` (header names lower-case)."""
        self.exhausted = 0
        """Requests that found the script empty (answered 500)."""
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> ScriptedModel:
        owner = self

        class Handler(_Handler):
            model = owner

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="scripted-model",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        assert self._server is not None, "use ScriptedModel as a context manager"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    # ------------------------------------------------------------------ script

    def script(self, entries: list[Entry]) -> ScriptedModel:
        """Append entries; they answer the next chat requests in order."""
        with self._lock:
            self._entries.extend(entries)
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._entries)

    def _next(self, record: dict[str, Any]) -> Entry | None:
        with self._lock:
            self.requests.append(record)
            if self._entries:
                return self._entries.popleft()
            self.exhausted += 1
            return None


class _Handler(BaseHTTPRequestHandler):
    model: ScriptedModel
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        """The model list, and one model by name, as a provider answers them: 401 for a
        key it does not take, 404 for a model it does not serve."""
        given = self.headers.get("Authorization", "").removeprefix("Bearer ")
        path = self.path.split("?")[0].rstrip("/")
        served = self.model.models or ("scripted",)
        if not path.startswith("/v1/models"):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        elif self.model.key and given != self.model.key:
            self._send(401, status(401).body)
        elif path == "/v1/models":
            self._send(
                200, {"object": "list", "data": [{"id": m, "object": "model"} for m in served]}
            )
        elif self.model.models and path.removeprefix("/v1/models/") not in served:
            self._send(404, status(404).body)
        else:
            self._send(200, {"id": path.removeprefix("/v1/models/"), "object": "model"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            body = json.loads(raw or b"null")
        except json.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in self.headers.items()}
        entry = self.model._next({"path": self.path, "body": body, "headers": headers})
        if entry is None:
            n = len(self.model.requests)
            self._send(
                500,
                {
                    "error": {
                        "message": f"ScriptedModel: script exhausted at request {n}",
                        "type": "server_error",
                    }
                },
            )
            return
        if entry.delay:
            time.sleep(entry.delay)
        if entry.drop:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if entry.completion is not None:
            out = dict(entry.completion)
            if "model" not in out:
                out["model"] = body.get("model", "scripted") if isinstance(body, dict) else ""
            if isinstance(body, dict) and body.get("stream"):
                self._stream(out, bool((body.get("stream_options") or {}).get("include_usage")))
            else:
                self._send(200, out, entry.headers)
        else:
            self._send(entry.status, entry.body, entry.headers)

    def _stream(self, completion: dict[str, Any], with_usage: bool) -> None:
        """The completion as ``chat.completion.chunk`` events (``stream: true``, as aider
        asks): the message in one delta, the finish reason, the usage if asked, [DONE]."""
        choice = completion["choices"][0]
        message = choice["message"]
        base = {k: completion[k] for k in ("id", "created", "model")}
        base["object"] = "chat.completion.chunk"
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            delta["tool_calls"] = [
                {"index": i, **call} for i, call in enumerate(message["tool_calls"])
            ]
        chunks = [
            {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {
                **base,
                "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
            },
        ]
        if with_usage and completion.get("usage"):
            chunks.append({**base, "choices": [], "usage": completion["usage"]})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _send(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        if body is None:
            data, ctype = b"", "application/json"
        elif isinstance(body, str | bytes):
            data = body.encode() if isinstance(body, str) else body
            ctype = "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(body).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
