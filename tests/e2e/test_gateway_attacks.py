"""A hostile agent against the model gateway: each test is a trick that must not work.

The agent holds only its run's token and sends what it likes. Each test attaches a
grant (as ``test_gateway`` does) in front of a tiny raw upstream of its own, which
answers as a real provider (or an OpenAI-compatible server) would and bills what it
answers; the assertion says what the gateway must do.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from activities.host.gateway import Grant
from tests.support.gateway import attached, bearer, grant, raw

pytestmark = pytest.mark.timeout(60)

Reply = Callable[[dict[str, Any], asyncio.StreamWriter], Awaitable[None]]


class Upstream:
    """A raw HTTP/1.1 upstream on 127.0.0.1: records each request, answers with ``reply``."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, *rest = head.decode("latin-1").split("\r\n")
                headers = {k.lower(): v.strip() for k, _, v in
                           (h.partition(":") for h in rest if h)}  # fmt: skip
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                method, target, _ = line.split(" ", 2)
                doc = json.loads(body) if body else None
                record = {"method": method, "path": target, "headers": headers, "body": doc}
                self.requests.append(record)
                await self.reply(record, writer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> Upstream:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()
        await asyncio.sleep(0)


def whole(doc: dict[str, Any], headers: dict[str, str] | None = None, raw: bytes | None = None):
    data = raw if raw is not None else json.dumps(doc).encode()

    async def reply(_: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        writer.write(f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{extra}"
                     f"content-length: {len(data)}\r\n\r\n".encode() + data)  # fmt: skip

    return reply


USAGE = {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}
CHAT = {"id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "hi"}}],
        "usage": USAGE}  # fmt: skip


# --- calls the provider bills that the meter does not read --------------------------


@pytest.mark.parametrize(
    ("path", "answer"),
    [
        ("/v1/completions", {"id": "x", "object": "text_completion", "model": "gpt-4o-mini",
                             "choices": [{"text": "hi", "index": 0, "finish_reason": "stop"}],
                             "usage": USAGE}),
        ("/v1/embeddings", {"object": "list", "model": "gpt-4o-mini",
                            "data": [{"object": "embedding", "index": 0, "embedding": [0.1]}],
                            "usage": {"prompt_tokens": 1000, "total_tokens": 1000}}),
    ],
)  # fmt: skip
async def test_forwarded_billed_paths_are_metered_or_refused(
    path: str, answer: dict[str, Any]
) -> None:
    async with Upstream(whole(answer)) as up:
        g = grant(up.url, model="gpt-4o-mini", max_tokens=1500)
        async with attached(g) as client:
            statuses = []
            for _ in range(3):  # a 1500-token budget; each call bills 1000+
                body = {"model": "gpt-4o-mini", "prompt": "x", "input": "x"}
                statuses.append((await client.post(path, json=body, headers=bearer(g))).status_code)
    forwarded = len(up.requests)
    assert forwarded <= 2, (
        f"{path} is forwarded but never metered: {forwarded} calls billed ~1000 tokens each "
        f"went through a 1500-token budget, the grant counted {g.tokens} tokens "
        f"(metered={[c.metered for c in g.calls]}, statuses {statuses})"
    )


async def test_a_background_response_is_not_a_free_call() -> None:
    """``background: true`` answers at once, queued, with no usage: the model still runs
    (and bills) upstream, the gateway counts 0 and lets the next one through."""
    queued = {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-4o-mini",
              "status": "queued", "output": [], "usage": None, "background": True}  # fmt: skip
    async with Upstream(whole(queued)) as up:
        g = grant(up.url, model="gpt-4o-mini", max_tokens=1000)
        async with attached(g) as client:
            for _ in range(5):
                body = {"model": "gpt-4o-mini", "input": "write 100k tokens", "background": True}
                await client.post("/v1/responses", json=body, headers=bearer(g))
    assert len(up.requests) <= 1, (
        f"{len(up.requests)} background responses went upstream under a 1000-token budget; "
        f"each was counted {[c.tokens_in + c.tokens_out for c in g.calls]} tokens: background "
        "runs are billed later and never metered (refuse `background`, or meter it)"
    )


async def test_a_truthy_non_boolean_stream_is_refused() -> None:
    """An OpenAI-compatible server (pydantic's lax bool: vLLM, LiteLLM) streams for
    ``"stream": "true"`` or ``1``, and the gateway would neither ask for the usage nor
    read the stream as one: such a body goes nowhere."""
    async with Upstream(whole(CHAT)) as up:
        g = grant(up.url, model="gpt-4o-mini")
        async with attached(g) as client:
            answers = [
                await client.post("/v1/chat/completions", headers=bearer(g),
                                  json={"model": "gpt-4o-mini", "stream": value, "messages": []})
                for value in ("true", 1, None)
            ]  # fmt: skip
    assert [a.status_code for a in answers] == [400] * 3
    assert "`stream` must be true or false" in answers[0].json()["error"]["message"]
    assert not up.requests


# --- the stream is cut before its usage ----------------------------------------------


async def test_a_stream_the_agent_cuts_short_is_still_metered() -> None:
    """The agent reads what it wants (the prompt said: answer, then pad) and hangs up; the
    gateway drops the upstream before the usage chunk, counts 0, and the provider bills
    the whole prompt and what it generated."""

    async def padded(record: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip

        def event(doc: dict[str, Any]) -> bytes:
            data = b"data: " + json.dumps(doc).encode() + b"\n\n"
            return f"{len(data):x}\r\n".encode() + data + b"\r\n"

        chunk = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "delta": {"content": "END"}}],
        }
        writer.write(event(chunk))
        await writer.drain()
        for _ in range(40):  # the padding the agent asked for, and will not read
            await asyncio.sleep(0.05)
            writer.write(event({**chunk, "choices": [{"index": 0, "delta": {"content": "pad"}}]}))
            await writer.drain()
        writer.write(event({**chunk, "choices": [], "usage": USAGE}) + b"0\r\n\r\n")

    async with Upstream(padded) as up:
        g = grant(up.url, model="gpt-4o-mini")
        async with attached(g) as client:
            url = httpx.URL(str(client.base_url))
            body = json.dumps(
                {
                    "model": "gpt-4o-mini",
                    "stream": True,
                    "messages": [{"role": "user", "content": "x" * 4000}],
                }
            ).encode()
            reader, writer = await asyncio.open_connection(url.host, url.port)
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                         + f"authorization: Bearer {g.token}\r\ncontent-type: application/json\r\n"
                           f"content-length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
            got = b""
            while b"END" not in got:
                got += await reader.read(4096)
            writer.transport.abort()  # what the agent wanted has come: hang up
            for _ in range(60):
                if g.count:
                    break
                await asyncio.sleep(0.1)
    assert g.count == 1
    assert g.tokens > 0 and g.calls[0].metered, (
        f"a stream cut by the agent before its usage chunk was counted {g.tokens} tokens "
        f"(metered={g.calls[0].metered}); the upstream billed the prompt and the padding. "
        "Keep reading the upstream to its usage after the agent hangs up (bounded), or "
        "charge an estimate and stop a limited run after an unmetered call"
    )


async def test_an_upstream_answer_compressed_despite_identity_is_still_metered() -> None:
    data = gzip.compress(json.dumps(CHAT).encode())
    async with Upstream(whole(CHAT, {"content-encoding": "gzip"}, raw=data)) as up:
        g = grant(up.url, model="gpt-4o-mini")
        async with attached(g) as client:
            answer = await client.post("/v1/chat/completions", headers=bearer(g),
                                       json={"model": "gpt-4o-mini", "messages": []})  # fmt: skip
    assert answer.json()["usage"]["prompt_tokens"] == 1000  # the CLI read its usage
    assert up.requests[0]["headers"]["accept-encoding"] == "identity"
    assert g.tokens == 1200, (
        f"a gzip answer (sent despite accept-encoding: identity) was metered as {g.tokens} "
        "tokens: meter the decoded body (or refuse an encoded answer) while passing the "
        "raw one on"
    )


# --- the agent picks the model, the table prices its family --------------------------


@pytest.mark.parametrize(("model", "list_usd"), [("o1-pro", 150.0), ("gpt-5-pro", 15.0),
                                                  ("o3-pro", 20.0)])  # fmt: skip
async def test_a_pricier_model_of_a_listed_family_is_not_priced_as_the_family(
    model: str, list_usd: float
) -> None:
    million = {**CHAT, "model": model,
               "usage": {"prompt_tokens": 1_000_000, "completion_tokens": 0}}  # fmt: skip
    async with Upstream(whole(million)) as up:
        g = grant(up.url, model="gpt-4o-mini", max_cost_usd=5.0)
        async with attached(g) as client:
            answer = await client.post("/v1/chat/completions", headers=bearer(g),
                                       json={"model": model, "messages": []})  # fmt: skip
    if not up.requests:  # refused before it could cost anything: the table has no price
        assert answer.status_code == 400 and "prices.json" in answer.json()["error"]["message"]
        return
    assert g.cost_usd >= list_usd, (
        f"1M input tokens of {model} (list ${list_usd}) were priced ${g.cost_usd}: the "
        "agent chooses the model and a `-pro` tier is priced as its family; refuse a model "
        "the table does not price exactly (or one other than agent.model) under a cost limit"
    )


# --- paths outside the model API ------------------------------------------------------


@pytest.mark.parametrize("target", ["/v1/models/..", "/v1/models/.", "/v1/models/..?x=1"])
async def test_a_dot_segment_model_id_does_not_reach_another_upstream_path(target: str) -> None:
    async with Upstream(whole({"object": "list", "data": []})) as up:
        g = grant(up.url + "/v1")
        async with attached(g) as client:
            url = httpx.URL(str(client.base_url))
            reader, writer = await asyncio.open_connection(url.host, url.port)
            writer.write(f"GET {target} HTTP/1.1\r\nhost: x\r\n"
                         f"authorization: Bearer {g.token}\r\n\r\n".encode())  # fmt: skip
            await writer.drain()
            await reader.readline()
            writer.close()
    reached = [r["path"] for r in up.requests]
    assert all(p.startswith("/v1/models/") for p in reached), (
        f"GET {target} passed the path check as a model id and reached upstream {reached}: "
        "a `.`/`..` model id is a dot segment that httpx resolves; refuse ids of dots only"
    )


# --- a body the gateway cannot parse -------------------------------------------------


async def test_a_deeply_nested_body_gets_an_answer() -> None:
    async with Upstream(whole(CHAT)) as up:
        g = grant(up.url)
        async with attached(g) as client:
            body = b'{"model": "m", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
            try:
                answer = await client.post("/v1/chat/completions", content=body,
                                           headers=bearer(g))  # fmt: skip
                status: int | str = answer.status_code
            except httpx.HTTPError as e:
                status = f"no answer ({type(e).__name__})"
    assert not up.requests
    assert status == 400, (
        f"a body nested 100000 deep got {status}: json.loads raises RecursionError, which "
        "`_json_object` does not catch (only ValueError), so the connection task dies "
        "with an unhandled exception instead of answering 400"
    )


async def test_an_answer_past_the_meters_hold_is_still_metered() -> None:
    """``n``, ``logprobs`` and ``top_logprobs: 20`` make a non-streamed answer as big as
    the agent likes; past ``MAX_HELD`` the meter drops it, and its usage (at its end)."""
    from loop.rules.metering import MAX_HELD

    top = [{"token": "x", "logprob": -0.1, "bytes": [120]}] * 20
    tokens = [{"token": "x", "logprob": -0.1, "bytes": [120], "top_logprobs": top}]
    per_choice = (MAX_HELD // 8) // len(json.dumps(tokens[0])) + 1
    choices = [{"index": i, "finish_reason": "length", "message": {"role": "assistant",
                "content": "x" * per_choice}, "logprobs": {"content": tokens * per_choice}}
               for i in range(8)]  # fmt: skip
    big = {**CHAT, "choices": choices}
    async with Upstream(whole(big)) as up:
        g = grant(up.url, model="gpt-4o-mini")
        async with attached(g) as client:
            body = {"model": "gpt-4o-mini", "n": 8, "logprobs": True, "top_logprobs": 20,
                    "messages": [{"role": "user", "content": "x"}]}  # fmt: skip
            answer = await client.post("/v1/chat/completions", json=body, headers=bearer(g))
    size = len(answer.content)
    assert answer.status_code == 200 and size > MAX_HELD
    assert g.tokens == 1200, (
        f"a {size // 2**20} MiB answer (n=8, top_logprobs=20) was metered as {g.tokens} "
        f"tokens (metered={g.calls[0].metered}): past MAX_HELD the meter drops the body, and "
        "the usage at its end; keep a bounded tail (or read `usage` incrementally)"
    )


async def test_only_the_model_apis_own_headers_are_forwarded() -> None:
    """Headers an upstream (or a proxy in front of it) reads as routing or billing:
    method overrides and rewritten URLs get past the path check there, and
    ``OpenAI-Organization``/``-Project`` pick which org the worker's key bills."""
    async with Upstream(whole(CHAT)) as up:
        g = grant(up.url, model="gpt-4o-mini")
        async with attached(g) as client:
            planted = {"x-http-method-override": "DELETE", "x-original-url": "/v1/files",
                       "x-rewrite-url": "/v1/files", "x-forwarded-host": "evil.example",
                       "forwarded": "host=evil.example", "openai-organization": "org-other",
                       "openai-project": "proj-other"}  # fmt: skip
            await client.post("/v1/chat/completions", json={"model": "m", "messages": []},
                              headers={**bearer(g), **planted})  # fmt: skip
    passed = {k: v for k, v in up.requests[0]["headers"].items() if k in planted}
    assert not passed, (
        f"the agent's routing/billing headers reached the upstream: {passed}; forward an "
        "allowlist (content-type, anthropic-version, anthropic-beta, openai-beta, ...), "
        "and set organization/project from the task file if at all"
    )


async def test_an_answer_without_usage_stops_a_limited_run() -> None:
    """Whatever the trick that kept an answer's usage from the meter (an encoding it cannot
    read, a body cut short, a server that leaves it out), a run with a budget gets no
    call after it: the budget could no longer be held."""
    bare = {k: v for k, v in CHAT.items() if k != "usage"}
    async with Upstream(whole(bare)) as up:
        g = grant(up.url, model="gpt-4o-mini", max_tokens=100_000)
        async with attached(g) as client:
            body = {"model": "gpt-4o-mini", "messages": []}
            first = await client.post("/v1/chat/completions", json=body, headers=bearer(g))
            second = await client.post("/v1/chat/completions", json=body, headers=bearer(g))
    assert first.status_code == 200 and second.status_code == 400
    assert "usage could not be read" in second.json()["error"]["message"]
    assert len(up.requests) == 1 and g.unmetered == 1


async def test_a_request_without_the_token_is_answered_before_its_body_is_read() -> None:
    async with Upstream(whole(CHAT)) as up:
        g = grant(up.url)
        async with attached(g) as client:
            url = httpx.URL(str(client.base_url))
            reader, writer = await asyncio.open_connection(url.host, url.port)
            head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 10000000\r\n"
            writer.write(head + b"\r\n")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), 5)  # no body was sent at all
            writer.close()
    assert line.startswith(b"HTTP/1.1 401"), line
    assert not up.requests


async def test_a_usage_the_model_writes_in_its_answer_is_not_the_answers_usage() -> None:
    """The agent asks the model to write a tiny "usage" into its text; in an answer too big
    to parse whole the meter reads the usage at its end, never one inside a string."""
    from loop.rules.metering import MAX_HELD

    forged = '"usage": {"prompt_tokens": 1, "completion_tokens": 1}'
    big = {**CHAT, "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "x" * MAX_HELD + forged}}]}  # fmt: skip
    first = {"usage": USAGE, **{k: v for k, v in big.items() if k != "usage"}}  # usage first
    for answer, counted in ((big, 1200), (first, 0)):
        async with Upstream(whole(answer)) as up:
            g = grant(up.url, model="gpt-4o-mini")
            async with attached(g) as client:
                await client.post("/v1/chat/completions", headers=bearer(g),
                                  json={"model": "gpt-4o-mini", "messages": []})  # fmt: skip
        assert g.tokens == counted, (answer is first, g.tokens)  # the real one, or nothing
        assert g.tokens != 2


async def test_a_request_line_with_escapes_never_reaches_a_person() -> None:
    """What the gateway refused is shown in ``loop status`` and on the review page; a
    target holding a terminal escape is dropped by the HTTP parser, not recorded."""
    async with Upstream(whole(CHAT)) as up:
        g = grant(up.url)
        async with attached(g) as client:
            answer = await raw(client, f"GET /v1/\x1b]52;c;cHduZWQ=\x07x HTTP/1.1\r\nhost: x\r\n"
                                       f"authorization: Bearer {g.token}\r\n\r\n")  # fmt: skip
    assert not answer.startswith(b"HTTP/1.1 2")
    assert not any("\x1b" in r or "\x07" in r for r in g.refused) and not up.requests


# --- the worker's memory: bodies, connections, values --------------------------------

FLOOD = b'{"model": "gpt-4o-mini", "messages": [' + b"{}," * ((16 << 20) // 3 - 20)
FLOOD += b"{}]}"
"""16 MiB of ``{},{},…``: five million dicts once parsed, the body of the attack."""


async def flood_one(url: httpx.URL, token: str, body: bytes, *, chunked: bool) -> int:
    """One connection sending ``body`` whole (``content-length``) or in 1 MiB chunks, as
    fast as the gateway reads it; the status it gets back (0: none)."""
    reader, writer = await asyncio.open_connection(url.host, url.port)
    sized = b"transfer-encoding: chunked" if chunked else b"content-length: %d" % len(body)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                 b"authorization: Bearer %s\r\ncontent-type: application/json\r\n%s\r\n\r\n"
                 % (token.encode(), sized))  # fmt: skip
    try:
        for i in range(0, len(body), 1 << 20):
            part = body[i : i + (1 << 20)]
            writer.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
            await writer.drain()
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 30)
    except (ConnectionError, TimeoutError):
        return 0
    finally:
        writer.close()
    return int(line.split()[1]) if line.startswith(b"HTTP/1.1 ") else 0


async def let_go(g: Grant) -> None:
    """Until the gateway has closed every connection of ``g``'s run (it closes its side
    just after the client has read its answer)."""
    from activities.host.gateway import GATEWAY

    deadline = asyncio.get_running_loop().time() + 30
    while GATEWAY._connections.get(g.token):
        assert asyncio.get_running_loop().time() < deadline, "connections left open"
        await asyncio.sleep(0.05)


async def test_thirty_two_bodies_of_16_mib_are_refused_and_nothing_is_left_held() -> None:
    """The attack: 32 connections, each 16 MiB of ``{},{},…``. Declared, each is refused
    on its head (413); sent in chunks without a length, each is refused once it passes
    ``MAX_BODY`` (413) or what the run may hold at once (429); just under ``MAX_BODY``,
    for the values it would build (413) or the bytes in flight (429). Nothing reaches the
    upstream, the run holds nothing after, and its next honest call is answered."""
    from activities.host.gateway.server import MAX_BODY

    under = FLOOD[: MAX_BODY - 4] + b"{}]}"
    async with Upstream(whole(CHAT)) as up:
        g = grant(up.url, model="gpt-4o-mini")
        async with attached(g) as client:
            url = httpx.URL(str(client.base_url))
            rounds = []
            for body, chunked in ((FLOOD, False), (FLOOD, True), (under, False)):
                rounds.append(
                    await asyncio.gather(
                        *(flood_one(url, g.token, body, chunked=chunked) for _ in range(32))
                    )
                )
                await let_go(g)  # the 32 connections closed on the gateway's side too
            declared, chunked, just_under = rounds
            held = g.in_flight
            honest = await client.post("/v1/chat/completions", headers=bearer(g),
                                       json={"model": "gpt-4o-mini", "messages": []})  # fmt: skip
    assert declared == [413] * 32, declared
    assert set(chunked) <= {413, 429} and 413 in chunked, chunked
    assert set(just_under) <= {413, 429} and 413 in just_under, just_under
    assert held == 0
    assert honest.status_code == 200 and len(up.requests) == 1
    assert any("holds more than 250,000 JSON values" in r for r in g.refused), g.refused[-3:]
    assert any("at most 16 MiB at once" in r for r in g.refused), g.refused[-3:]


async def test_a_body_nested_past_the_bound_is_400_before_it_is_built() -> None:
    async with Upstream(whole(CHAT)) as up:
        g = grant(up.url)
        async with attached(g) as client:
            body = b'{"model": "m", "x": ' + b"[" * 129 + b"]" * 129 + b"}"
            answer = await client.post("/v1/chat/completions", content=body, headers=bearer(g))
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "Loopwork: the body nests deeper than 128 levels"
    assert not up.requests
