"""The model gateway: the only way an agent's model calls leave its sandbox with a key.

A run with ``agent.provider`` gets a token instead of the key, and its CLI's endpoint
variables point at ``127.0.0.1:3129`` inside its own network namespace. The launcher
listens there and hands the socket to the worker, as it does for the egress proxy;
connections accepted on it belong to that run and no other (docs/concepts/gateway.md).

For each request the gateway checks, on its head and before reading its body, that
the token is the run's (another live run's token is refused and logged with both
tasks), the path is one of the api's model paths and the body it declares is under
``MAX_BODY``; then, reading the body in chunks, that it stays under ``MAX_BODY`` and
under what the run may hold in flight (``MAX_IN_FLIGHT``, over all its connections,
at most ``MAX_CONNECTIONS``), that it is a JSON object within ``MAX_DEPTH`` and
``MAX_ITEMS`` (measured before anything is built: ``loop.hardened.json_in``) whose
usage will come back with the answer, and that the attempt's budget is not spent. So
no agent makes the worker hold more than a few times ``MAX_IN_FLIGHT`` for it
(docs/concepts/gateway.md). It then puts the real key in, sends the request with
the API's own headers to the upstream the task file names (never one the request
names) over verified TLS, and streams the answer back as it arrives, metering it on
the way (``loop.rules.metering``), counting and journaling it before the answer's end
reaches the agent (``Grant.note``), and tracing it where tracing is on (``spans``).
While a budget is set the run's calls go one at a time, so no attempt overshoots by
more than the one call in flight; after an answer whose usage could not be read, such
a run gets no more calls. A candidate's run also asks its task's pool before each call
(``activities.host.pool``): the task's budget across its candidates, and whether
another candidate was chosen.

One gateway serves every run of the worker process, on an event loop of its own in a
thread: a slow upstream never stalls the worker's activities and workflows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import h11

from activities.host.gateway.grant import Call, Grant
from activities.host.gateway.preflight import provider_message
from activities.host.gateway.spans import record_call
from activities.host.gateway.transcript import Transcript
from loop.hardened import json_in
from loop.logs import log_for
from loop.pricing import call_cost, lookup
from loop.rules.metering import Meter, prepare, streamed

if TYPE_CHECKING:
    import httpx

GATEWAY_PORT = 3129
"""Where the gateway answers inside every sandbox's own network namespace."""
GATEWAY_URL = f"http://127.0.0.1:{GATEWAY_PORT}"
MAX_BODY = 8 * 1024 * 1024
"""A request body past this is refused, 413 (a model call's context is far smaller; an
image is a few MB at most)."""
MAX_IN_FLIGHT = 16 * 1024 * 1024
"""Bytes of request bodies one run may hold at once over all its connections; a request
past it is refused, 429 (a CLI tries again), never queued."""
MAX_ITEMS = 250_000
"""JSON values one request may hold (``json_in``): a long conversation with its tools
holds tens of thousands; millions of ``{}`` would build hundreds of MB."""
MAX_DEPTH = 128
"""Nesting a request's JSON may have (a tool's schema nests a few dozen at most)."""
DISCARD = 64 * 1024 * 1024
"""Of a body refused before its end, what is read and dropped (never kept) before the
connection closes, so the client, still sending, reads the refusal instead of a reset."""
IDLE_S = 300.0
"""How long a kept-alive connection may wait for its next request."""
REQUEST_S = 60.0
"""How long a request may take to arrive once it has begun (a stalled one is dropped)."""
DRAIN_S = 120.0
"""How long the agent may stop reading an answer before it counts as gone."""
AFTER_GONE = 64 * 1024 * 1024
"""Read of an answer after its agent has gone, for the usage at its end."""
REFUSAL_BYTES = 4096
"""Of an error answer, what is kept for its message (the provider's words in the trace)."""
MAX_HEAD = 64 * 1024
CHUNK = 64 * 1024
CONNECT_S = 10.0
READ_S = 600.0
"""How long an upstream may stay silent mid-answer (a long generation streams slowly)."""
MAX_CONNECTIONS = 32
"""Connections one run may hold open at once."""

PATHS: dict[str, set[tuple[str, str]]] = {
    "anthropic": {("POST", "/v1/messages"), ("POST", "/v1/messages/count_tokens"),
                  ("GET", "/v1/models")},
    "openai": {("POST", "/v1/chat/completions"), ("POST", "/v1/responses"),
               ("GET", "/v1/models")},
}  # fmt: skip
"""The model API's paths, per api: nothing else is forwarded. Each billed one is read by
the meter (``loop.rules.metering``); legacy completions and embeddings are not."""
ONE_MODEL = re.compile(r"/v1/models/[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}")
QUERY = re.compile(r"[A-Za-z0-9._~=&%-]{0,500}")
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailer", "transfer-encoding", "upgrade", "host", "content-length"}  # fmt: skip
FORWARDED = {"content-type", "accept", "user-agent", "anthropic-version", "anthropic-beta",
             "anthropic-dangerous-direct-browser-access", "openai-beta", "x-request-id",
             "idempotency-key"}  # fmt: skip
"""The agent's headers that reach the provider (and the SDKs' ``x-stainless-*``): the
API's own; none that a proxy reads as routing or that picks what the key bills."""
NOT_RETURNED = HOP_BY_HOP | {"set-cookie"}
ERROR_KINDS = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 502: "api_error"}  # fmt: skip

T = TypeVar("T")


def allowed(api: str, method: str, path: str) -> bool:
    return (method, path) in PATHS[api] or (method == "GET" and bool(ONE_MODEL.fullmatch(path)))


def error_body(api: str, status: int, message: str) -> bytes:
    """An error in the provider's own shape, so the CLI shows ``message`` as it would the
    provider's (and does not retry a 4xx)."""
    kind = ERROR_KINDS.get(status, "api_error")
    if api == "anthropic":
        doc: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        doc = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return json.dumps(doc).encode()


def presented_token(headers: dict[str, str]) -> str:
    bearer = headers.get("authorization", "")
    if bearer.lower().startswith("bearer "):
        return bearer[7:].strip()
    return headers.get("x-api-key", "").strip()


class Gateway:
    """The worker's one gateway; runs attach to it for as long as their agent runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None
        self._live: dict[str, Grant] = {}
        self._connections: dict[str, set[asyncio.Task[None]]] = {}

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="loop-gateway", daemon=True).start()
                self._loop = loop
            return self._loop

    async def _on_gateway(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the gateway's loop and wait for it from the caller's."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._running()))

    @contextlib.asynccontextmanager
    async def serving(self, listener: socket.socket, grant: Grant) -> AsyncIterator[Grant]:
        """Answer what ``listener`` accepts for ``grant``'s run until the block ends; the
        token dies with it."""
        server = await self._on_gateway(self._attach(listener, grant))
        try:
            yield grant
        finally:
            await asyncio.shield(self._on_gateway(self._detach(server, grant)))

    async def _attach(self, listener: socket.socket, grant: Grant) -> asyncio.Server:
        if self._client is None:
            import httpx  # here, not at the top: a new worker starts without it

            timeout = httpx.Timeout(READ_S, connect=CONNECT_S)
            pool = httpx.Limits(max_connections=None, max_keepalive_connections=64)
            self._client = httpx.AsyncClient(timeout=timeout, limits=pool, http2=False)
        grant.one_at_a_time = asyncio.Lock()
        self._live[grant.token] = grant
        held = self._connections[grant.token] = set()

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            if len(held) >= MAX_CONNECTIONS:
                writer.close()
                return
            held.add(task)
            client = writer.get_extra_info("socket")
            if client is not None:  # no Nagle: an answer's head and body go out at once
                with contextlib.suppress(OSError):
                    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                await self._connection(reader, writer, grant)
            except asyncio.CancelledError:
                pass  # the run ended (``_detach``); asyncio's server would log it as an error
            finally:
                held.discard(task)

        listener.setblocking(False)
        return await asyncio.start_server(accepted, sock=listener)

    async def _detach(self, server: asyncio.Server, grant: Grant) -> None:
        self._live.pop(grant.token, None)
        server.close()
        held = self._connections.pop(grant.token, set())
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, grant: Grant
    ) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            while True:
                held = _Held(grant)
                try:
                    got = await self._request(conn, reader, writer, grant, held)
                    if got is None:
                        return
                    await self._answer(conn, writer, grant, *got)
                finally:
                    held.release()
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (h11.ProtocolError, ConnectionError, OSError, TimeoutError):
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _request(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        grant: Grant, held: _Held,
    ) -> tuple[_Head, bytes] | None:  # fmt: skip
        """One request, admitted on its head (the token, the path, the size it declares)
        before its body is read, then read in chunks within the run's limits (``held``
        counts what it holds); None when the connection is done (closed, idle too long,
        refused)."""
        head: _Head | None = None
        chunks: list[bytes] = []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                # Between requests a kept-alive connection may idle; within one, it may not.
                wait = IDLE_S if head is None and conn.their_state is h11.IDLE else REQUEST_S
                conn.receive_data(await asyncio.wait_for(reader.read(CHUNK), wait))
            elif isinstance(event, h11.Request):
                head = _Head.of(event)
                refusal = self._admit(head, grant) or self._declared(head, grant, held)
                if refusal is not None:
                    await self._refuse_request(conn, reader, writer, grant, *refusal)
                    return None
            elif isinstance(event, h11.Data):
                chunks.append(event.data)
                held.read += len(event.data)
                refusal = self._holds(grant, held, held.read)
                if refusal is not None:
                    chunks.clear()  # dropped, and given back, before the rest is read
                    held.release()
                    await self._refuse_request(conn, reader, writer, grant, *refusal)
                    return None
            elif isinstance(event, h11.EndOfMessage) and head is not None:
                return head, b"".join(chunks)
            else:
                return None

    async def _refuse_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        grant: Grant, status: int, message: str,
    ) -> None:  # fmt: skip
        """The gateway's answer to a request that goes no further; what is left of its
        body is read and dropped (``DISCARD`` at most), so the client hears the answer."""
        await self._send(conn, writer, grant, status, message)
        dropped = 0
        with contextlib.suppress(h11.ProtocolError, ConnectionError, OSError, TimeoutError):
            while conn.their_state is h11.SEND_BODY and dropped < DISCARD:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await asyncio.wait_for(reader.read(CHUNK), REQUEST_S))
                elif isinstance(event, h11.Data):
                    dropped += len(event.data)

    def _declared(self, head: _Head, grant: Grant, held: _Held) -> tuple[int, str] | None:
        """The body a request declares (``content-length``), held from its head on, or
        refused before a byte of it is read."""
        declared = head.headers.get("content-length", "")
        return self._holds(grant, held, int(declared) if declared.isdigit() else 0)

    def _holds(self, grant: Grant, held: _Held, size: int) -> tuple[int, str] | None:
        """The request holding a body of ``size`` bytes (declared, or read so far), or the
        refusal: over ``MAX_BODY`` (413), over the run's ``MAX_IN_FLIGHT`` (429)."""
        if size > MAX_BODY:
            why = f"a request body over {MAX_BODY >> 20} MiB"
            self._refused(grant, why)
            return 413, f"Loopwork: {why} is refused"
        if not held.take(size):
            why = (f"this run's requests hold {grant.in_flight >> 20} MiB of bodies; at "
                   f"most {MAX_IN_FLIGHT >> 20} MiB at once")  # fmt: skip
            self._refused(grant, why)
            return 429, f"Loopwork: {why}; try again when an answer has come"
        return None

    def _admit(self, head: _Head, grant: Grant) -> tuple[int, str] | None:
        """The gateway's own answer to a request that goes no further, from its head."""
        method, path, query, headers = head.method, head.path, head.query, head.headers
        if method in ("HEAD", "GET") and path in ("/", "/v1", "/v1/"):
            return 200, ""  # a CLI's "can I connect"
        token = presented_token(headers)
        if token != grant.token:
            other = self._live.get(token) if token else None
            if other is not None:
                why = (f"the token of task {other.task_id} (attempt {other.attempt}) was used "
                       f"from task {grant.task_id}'s sandbox")  # fmt: skip
                self._refused(grant, why)
                return 403, f"Loopwork: {why}"
            why = "a request without this run's token"
            self._refused(grant, why)
            return 401, f"Loopwork: {why}"
        if not allowed(grant.api, method, path) or not QUERY.fullmatch(query):
            why = f"{method} {head.target[:200]}: not a model API path"
            self._refused(grant, why)
            return 404, f"Loopwork's gateway forwards no {why}"
        return None

    async def _answer(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, grant: Grant,
        head: _Head, body: bytes,
    ) -> None:  # fmt: skip
        method, path, query, headers = head.method, head.path, head.query, head.headers
        doc: dict[str, Any] | None = {}
        if method == "POST":
            try:
                # A big body is parsed off the gateway's loop: the other runs' calls go on.
                doc = await asyncio.to_thread(_json_object, body) if len(body) > 1 << 20 else (
                    _json_object(body))  # fmt: skip
            except json_in.Refused as e:
                self._refused(grant, f"the body {e}")
                status = 413 if e.too_big else 400
                await self._send(conn, writer, grant, status, f"Loopwork: the body {e}")
                return
        if doc is None:
            await self._send(conn, writer, grant, 400, "Loopwork: the body is not a JSON object")
            return
        unmetered = _unmeterable(grant.api, path, doc)
        if unmetered:
            self._refused(grant, unmetered)
            await self._send(conn, writer, grant, 400, f"Loopwork: {unmetered}")
            return
        one_at_a_time = grant.one_at_a_time if grant.limited else None
        async with one_at_a_time or contextlib.nullcontext():
            spent = grant.spent()
            shared = "" if spent else grant.shared()
            if spent or shared:
                if grant.spent_after is None:
                    grant.spent_after = grant.count
                message = (f"Loopwork: this task's {spent.removesuffix(' spent')} is spent "
                           f"({_spent_words(grant)} after {grant.count} calls)"
                           if spent else f"Loopwork: {shared}")  # fmt: skip
                self._refused(grant, spent or grant.stopped)
                await self._send(conn, writer, grant, 400, message)
                return
            if grant.limited and grant.unmetered:
                why = ("a call's usage could not be read from its answer, so this task's "
                       "budget cannot be held")  # fmt: skip
                self._refused(grant, why)
                await self._send(conn, writer, grant, 400, f"Loopwork: {why}")
                return
            unpriced = _unpriced(grant, doc)
            if unpriced:
                self._refused(grant, unpriced)
                await self._send(conn, writer, grant, 400, f"Loopwork: {unpriced}")
                return
            await self._forward(conn, writer, grant, method, path, query, headers, body, doc)

    async def _forward(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, grant: Grant, method: str,
        path: str, query: str, headers: dict[str, str], body: bytes, doc: dict[str, Any],
    ) -> None:  # fmt: skip
        import httpx  # loaded by the first _attach

        assert self._client is not None
        sent = prepare(grant.api, path, doc) if method == "POST" else doc
        content = body if sent == doc else json.dumps(sent).encode()
        tail = path.removeprefix("/v1") if grant.api == "openai" else path
        url = grant.upstream + tail + (f"?{query}" if query else "")
        out = {k: v for k, v in headers.items() if k in FORWARDED or k.startswith("x-stainless-")}
        out["accept-encoding"] = "identity"  # what is metered is what is passed on
        if grant.api == "anthropic":
            out["x-api-key"] = grant.key
        else:
            out["authorization"] = f"Bearer {grant.key}"
        requested = str(doc.get("model", ""))
        transcript = Transcript(content) if grant.transcript_dir is not None else None
        started = time.monotonic()
        try:
            request = self._client.build_request(method, url, headers=out, content=content)
            answer = await self._client.send(request, stream=True)
        except httpx.HTTPError as e:
            why = f"Loopwork's gateway could not reach {grant.upstream}: {type(e).__name__}"
            await self._send(conn, writer, grant, 502, why)
            return
        status = answer.status_code
        encoding = answer.headers.get("content-encoding", "")
        meter = Meter(grant.api, path, streamed=streamed(sent), model=requested, encoding=encoding)
        gone = counted = False
        refusal = bytearray()  # an error answer's first bytes: its message, for the trace

        async def keep_transcript() -> None:
            """The call's transcript, once (``agent.transcript``)."""
            nonlocal transcript
            if transcript is None or grant.transcript_dir is None:
                return
            record, transcript = transcript, None
            file = grant.transcript_dir / f"call-{grant.count:04d}.log"
            head = f"{method} {path}{f'?{query}' if query else ''}"
            await asyncio.to_thread(record.write, file, head, status, (grant.key, grant.token))

        try:
            kept = [(k, v) for k, v in answer.headers.raw if k.decode().lower() not in NOT_RETURNED]
            writer.write(conn.send(h11.Response(status_code=status, headers=kept)) or b"")
            relayed = 0
            async for chunk in answer.aiter_raw():
                meter.feed(chunk)
                if status >= 400 and len(refusal) < REFUSAL_BYTES:
                    refusal.extend(chunk[: REFUSAL_BYTES - len(refusal)])
                if transcript is not None:
                    transcript.feed(chunk)
                relayed += len(chunk)
                if not gone:
                    gone = not await self._relay(conn, writer, chunk)
                elif relayed > AFTER_GONE:
                    break  # the agent left long ago: its usage is not worth more bytes
            # Counted (and journaled), and its transcript written, before the answer's end
            # reaches the agent: no agent holds a whole answer whose cost a crash of this
            # worker could forget, or that a person cannot read yet.
            self._count(grant, meter, path, status, started, requested, bytes(refusal))
            counted = True
            await keep_transcript()
            if not gone:
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await asyncio.wait_for(writer.drain(), DRAIN_S)
        finally:
            if not counted:
                # Before any await, as above.
                self._count(grant, meter, path, status, started, requested, bytes(refusal))
            await answer.aclose()
            await keep_transcript()
        if gone:
            raise ConnectionError("the agent hung up mid-answer")

    async def _relay(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, chunk: bytes
    ) -> bool:
        """Pass ``chunk`` on; False once the agent has gone (hung up, or stopped reading
        for ``DRAIN_S``): the upstream is then read to its end for its usage, which the
        provider bills whether or not the agent read it."""
        try:
            writer.write(conn.send(h11.Data(data=chunk)) or b"")
            await asyncio.wait_for(writer.drain(), DRAIN_S)
        except (ConnectionError, OSError, TimeoutError):
            return False
        return True

    def _count(
        self, grant: Grant, meter: Meter, path: str, status: int, started: float, requested: str,
        refusal: bytes = b"",
    ) -> None:  # fmt: skip
        """Count the call (before any await: no agent holds an answer a crash could forget)."""
        used = meter.result()
        model = used.model or grant.model
        price = call_cost(used.model, grant.model, used.tokens_in, used.tokens_out, grant.prices)
        took = time.monotonic() - started
        call = Call(path=path, model=model, status=status, tokens_in=used.tokens_in,
                    tokens_out=used.tokens_out, cost_usd=price, ms=round(took * 1000, 1),
                    metered=used.found,
                    said=provider_message(refusal, grant.key) if refusal else "")  # fmt: skip
        grant.note(call)
        if meter.metering and not used.found and status < 400:
            grant.unmetered += 1
        record_call(grant, call, requested, took)

    def _refused(self, grant: Grant, why: str) -> None:
        grant.refuse(why)
        log_for(grant.task_id, grant.attempt, "gateway").warning("gateway refused", why=why)

    async def _send(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, grant: Grant, status: int,
        message: str,
    ) -> None:  # fmt: skip
        """A whole answer of the gateway's own: empty for 200, else the provider's shape."""
        data = b"" if status == 200 else error_body(grant.api, status, message)
        head = [("content-type", "application/json"), ("content-length", str(len(data)))]
        if conn.their_state is not h11.DONE:
            head.append(("connection", "close"))  # answered on its head: the rest is not read
        writer.write(conn.send(h11.Response(status_code=status, headers=head)) or b"")
        if data:
            writer.write(conn.send(h11.Data(data=data)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()


class _Held:
    """What one request holds of its run's ``MAX_IN_FLIGHT``: the body it declares from
    its head on, more as a body without a length arrives; given back once it is answered
    (or refused, or its connection gone)."""

    def __init__(self, grant: Grant) -> None:
        self.grant = grant
        self.read = 0
        self.reserved = 0

    def take(self, size: int) -> bool:
        """Hold ``size`` bytes in all; False (nothing more held) past the run's limit."""
        more = size - self.reserved
        if more <= 0:
            return True
        if self.grant.in_flight + more > MAX_IN_FLIGHT:
            return False
        self.grant.in_flight += more
        self.reserved += more
        return True

    def release(self) -> None:
        self.grant.in_flight -= self.reserved
        self.reserved = 0


@dataclass(frozen=True)
class _Head:
    """A request's line and headers, decoded once."""

    method: str
    target: str
    path: str
    query: str
    headers: dict[str, str]

    @classmethod
    def of(cls, request: h11.Request) -> _Head:
        target = request.target.decode("ascii", "replace")
        path, _, query = target.partition("?")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
        return cls(request.method.decode("ascii", "replace"), target, path, query, headers)


def _json_object(body: bytes) -> dict[str, Any] | None:
    """The body's JSON object (None: it is none), parsed within ``MAX_DEPTH`` and
    ``MAX_ITEMS`` (``json_in.Refused`` past them)."""
    try:
        doc = json_in.loads(body, max_depth=MAX_DEPTH, max_items=MAX_ITEMS)
    except json_in.Refused:
        raise
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _unmeterable(api: str, path: str, doc: dict[str, Any]) -> str:
    """Why a call could be billed without its usage reaching the gateway ("" when not):
    a ``stream`` that is not a boolean (a lenient server streams for ``"true"``, and the
    usage would go unasked), or a Responses call run in the background (billed later)."""
    if "stream" in doc and not isinstance(doc["stream"], bool):
        return "`stream` must be true or false"
    if api == "openai" and path == "/v1/responses" and doc.get("background"):
        return "background responses are not forwarded: their usage comes after the call"
    return ""


def _unpriced(grant: Grant, doc: dict[str, Any]) -> str:
    """Under a cost limit, a model the price table does not know costs 0, so the limit
    could not hold: such a call is refused, with where to add its price."""
    model = doc.get("model")
    if grant.max_cost_usd is None or not isinstance(model, str) or not model:
        return ""
    if lookup(model, grant.prices) is not None:
        return ""
    return (f"model {model[:80]!r} has no price in LOOP_HOME/prices.json, so this task's cost "
            "budget cannot be held; add its price there")  # fmt: skip


def _spent_words(grant: Grant) -> str:
    if grant.max_tokens is not None and grant.tokens >= grant.max_tokens:
        return f"{grant.tokens} tokens of {grant.max_tokens}"
    return f"${grant.cost_usd:.4f} of ${grant.max_cost_usd or 0:.4f}"


GATEWAY = Gateway()
"""The worker process's gateway (started on the first run that uses it)."""


def host_listener() -> socket.socket:
    """A listener on the host's loopback, for a run without a network namespace of its
    own (``sandbox.mode: off`` or ``network: host``): reachable by anything on the host,
    so only the token guards it (docs/concepts/gateway.md)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    return listener
