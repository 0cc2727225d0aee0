"""A model call's usage, read by the gateway from the provider's response as it streams.

The streams are the scripted endpoints' own (``tests.support``): written by their code
into memory, so the meter reads exactly what the real agent CLIs are answered with.
Every body is fed whole and byte by byte: a chunk may end anywhere.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from typing import Any

import pytest

from loop.rules import metering
from loop.rules.metering import CallUsage, Meter, prepare, streamed
from tests.support import agent_endpoints, model_server
from tests.support.agent_endpoints import ScriptedClaude, ScriptedResponses, turn


class Wire:
    """Stands in for a scripted endpoint's request handler: its framing, in memory."""

    def __init__(self) -> None:
        self.wfile = io.BytesIO()

    def headers(self, *args: object) -> None:
        """Status and headers are the HTTP server's business, not the body's."""

    open_stream = send_response = send_header = end_headers = headers
    event = agent_endpoints._Handler.event
    stream = model_server._Handler._stream


def claude_stream(t: agent_endpoints.Turn, model: str = "claude-sonnet-4-6") -> bytes:
    wire = Wire()
    ScriptedClaude().answer(wire, {"model": model}, t)  # type: ignore[arg-type]
    return wire.wfile.getvalue()


def responses_stream(t: agent_endpoints.Turn, model: str = "gpt-5.1-codex") -> bytes:
    wire = Wire()
    ScriptedResponses().answer(wire, {"model": model}, t)  # type: ignore[arg-type]
    return wire.wfile.getvalue()


def chat_completion(usage: tuple[int, int] = (10, 5), model: str = "gpt-4.1") -> dict[str, Any]:
    entry = model_server.reply("done", tool_calls=[("read", {"path": "a.py"})], usage=usage)
    assert entry.completion is not None
    return {**entry.completion, "model": model}


def chat_stream(usage: tuple[int, int] = (10, 5), with_usage: bool = True) -> bytes:
    wire = Wire()
    wire.stream(chat_completion(usage), with_usage)
    return wire.wfile.getvalue()


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def metered(api: metering.Api, path: str, is_streamed: bool, chunks: Iterable[bytes]) -> CallUsage:
    meter = Meter(api, path, streamed=is_streamed, model="asked")
    for chunk in chunks:
        meter.feed(chunk)
    return meter.result()


def both_ways(api: metering.Api, path: str, body: bytes, is_streamed: bool) -> CallUsage:
    """The usage read from ``body`` in one piece, checked equal to it read byte by byte."""
    whole = metered(api, path, is_streamed, [body])
    bytewise = (body[i : i + 1] for i in range(len(body)))
    assert metered(api, path, is_streamed, bytewise) == whole
    return whole


def from_stream(api: metering.Api, path: str, body: bytes) -> CallUsage:
    return both_ways(api, path, body, True)


def from_body(api: metering.Api, path: str, body: bytes) -> CallUsage:
    return both_ways(api, path, body, False)


MESSAGES, CHAT, RESPONSES = "/v1/messages", "/v1/chat/completions", "/v1/responses"


# ---------------------------------------------------------------- Anthropic Messages


def test_claude_stream_counts_input_from_message_start_and_the_final_output() -> None:
    body = claude_stream(turn("Fixed.", ("Read", {"file_path": "{cwd}/a.py"}), usage=(1234, 56)))
    assert from_stream("anthropic", MESSAGES, body) == CallUsage(
        1234, 56, "claude-sonnet-4-6", True
    )


def test_claude_stream_message_delta_replaces_the_output_and_the_input() -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 20,
                "cache_creation_input_tokens": 300,
                "cache_read_input_tokens": 4000,
                "output_tokens": 1,
            },
        },
    }
    delta = {"type": "message_delta", "delta": {"stop_reason": None, "stop_sequence": None}}
    body = sse(
        start,
        {"type": "ping"},
        {**delta, "usage": {"output_tokens": 10}},
        {
            **delta,
            "usage": {"output_tokens": 30, "input_tokens": 25, "cache_read_input_tokens": 4000},
        },
        {"type": "message_stop"},
    )
    assert from_stream("anthropic", MESSAGES, body) == CallUsage(4325, 30, "claude-opus-4-5", True)


def test_claude_stream_stop_reason_newer_than_the_sdk_still_counts() -> None:
    body = claude_stream(turn("hi", usage=(7, 3))).replace(b'"end_turn"', b'"compacted"')
    assert from_stream("anthropic", MESSAGES, body) == CallUsage(7, 3, "claude-sonnet-4-6", True)


def test_anthropic_message_counts_cache_writes_and_reads_as_input() -> None:
    message = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": "OK"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 11,
            "cache_creation_input_tokens": 200,
            "cache_read_input_tokens": 3000,
            "output_tokens": 4,
        },
    }
    body = json.dumps(message).encode()
    assert from_body("anthropic", MESSAGES, body) == CallUsage(3211, 4, "claude-haiku-4-5", True)
    del message["usage"]["cache_creation_input_tokens"], message["usage"]["cache_read_input_tokens"]
    body = json.dumps(message).encode()
    assert from_body("anthropic", "/v1/messages?beta=true", body).tokens_in == 11


# ---------------------------------------------------------------- OpenAI chat completions


def test_chat_stream_reads_the_usage_chunk_asked_for() -> None:
    body = chat_stream(usage=(321, 45))
    assert from_stream("openai", CHAT, body) == CallUsage(321, 45, "gpt-4.1", True)


def test_chat_stream_without_a_usage_chunk_is_unmetered_but_names_its_model() -> None:
    body = chat_stream(with_usage=False)
    assert from_stream("openai", CHAT, body) == CallUsage(0, 0, "gpt-4.1", False)


def test_chat_stream_ends_at_done() -> None:
    after = b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m",'
    after += (
        b'"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}\n\n'
    )
    assert from_stream("openai", CHAT, chat_stream(usage=(3, 2)) + after).tokens_in == 3


def test_chat_completion() -> None:
    body = json.dumps(chat_completion(usage=(1500, 70))).encode()
    assert from_body("openai", "/v1/chat/completions/", body) == CallUsage(
        1500, 70, "gpt-4.1", True
    )


# ---------------------------------------------------------------- OpenAI Responses


def test_responses_stream_reads_response_completed() -> None:
    body = responses_stream(turn("", ("shell", {"command": ["ls"]}), usage=(2048, 99)))
    assert from_stream("openai", RESPONSES, body) == CallUsage(2048, 99, "gpt-5.1-codex", True)


@pytest.mark.parametrize("end", ["response.incomplete", "response.failed"])
def test_responses_stream_cut_short_still_counts(end: str) -> None:
    body = responses_stream(turn("partial", usage=(500, 20)))
    assert from_stream("openai", RESPONSES, body.replace(b"response.completed", end.encode())) == (
        CallUsage(500, 20, "gpt-5.1-codex", True)
    )


def test_responses_stream_created_alone_is_unmetered() -> None:
    body = responses_stream(turn("hi")).split(b"event: response.completed")[0]
    assert from_stream("openai", RESPONSES, body) == CallUsage(0, 0, "asked", False)


def test_response() -> None:
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-5.1",
        "status": "completed",
        "output": [],
        "usage": {
            "input_tokens": 800,
            "input_tokens_details": {"cached_tokens": 600},
            "output_tokens": 12,
            "output_tokens_details": {"reasoning_tokens": 4},
            "total_tokens": 812,
        },
    }
    body = json.dumps(response).encode()
    assert from_body("openai", RESPONSES, body) == CallUsage(800, 12, "gpt-5.1", True)


# ---------------------------------------------------------------- not a model call


@pytest.mark.parametrize(
    ("api", "path"),
    [
        ("openai", "/v1/models"),
        ("anthropic", "/v1/messages/count_tokens"),
        ("openai", MESSAGES),
        ("anthropic", CHAT),
        ("openai", "/v1/responses/resp_1"),
    ],
)
def test_other_calls_are_not_metered(api: metering.Api, path: str) -> None:
    body = b'{"input_tokens": 40, "usage": {"prompt_tokens": 1, "completion_tokens": 1}}'
    assert from_body(api, path, body) == CallUsage(0, 0, "asked", False)
    assert from_stream(api, path, b"data: " + body + b"\n\n") == CallUsage(0, 0, "asked", False)


# ---------------------------------------------------------------- hostile bodies


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b'{"usage": {"prompt_tokens": 5',
        b"\xff\xfe\x00garbage",
        b"[1, 2, 3]",
        b"[" * 100_000,
        b'{"usage": "lots"}',
        b'{"usage": {"prompt_tokens": -1, "completion_tokens": true}}',
        b'{"usage": {"prompt_tokens": "5", "completion_tokens": 1e3}}',
        b'{"usage": {"prompt_tokens": 10000000000000000, "completion_tokens": null}}',
        b'{"model": ["x"], "choices": 7, "usage": [1]}',
        b'{"id": ' + b"1" * 5000 + b"}",
    ],
)
def test_malformed_body_is_no_usage(body: bytes) -> None:
    assert from_body("openai", CHAT, body) == CallUsage(0, 0, "asked", False)


@pytest.mark.parametrize(
    "event",
    [
        b"data: {not json\n\n",
        b'data: {"type": "message_start", "message": "hello"}\n\n',
        b'data: {"type": "message_start", "message": {"usage": {"input_tokens": "9"}}}\n\n',
        b'data: {"type": "message_delta", "usage": null}\n\n',
        b'data: {"type": "brand_new_event", "usage": {"output_tokens": 5}}\n\n',
        b'data: {"type": "error", "error": {"type": "overloaded_error"}}\n\n',
        b"data: [1]\n\n",
        b": a comment\nretry: 100\nid: 4\n\n\n\n",
    ],
)
def test_malformed_events_are_skipped(event: bytes) -> None:
    body = claude_stream(turn("hi", usage=(100, 10)))
    start, rest = body.split(b"\n\n", 1)
    got = from_stream("anthropic", MESSAGES, start + b"\n\n" + event + rest)
    assert got == CallUsage(100, 10, "claude-sonnet-4-6", True)
    assert from_stream("anthropic", MESSAGES, event).found is False


def test_crlf_framing_and_data_split_over_lines() -> None:
    chunk = json.loads(chat_stream(usage=(64, 8)).split(b"\n\n")[2][len(b"data: ") :])
    lines = json.dumps(chunk, indent=1).splitlines()
    event = "".join(f"data: {line}\r\n" for line in lines) + "\r\n"
    body = b"event: chunk\r\n" + event.encode() + b"data: [DONE]\r\n\r\n"
    assert from_stream("openai", CHAT, body) == CallUsage(64, 8, "gpt-4.1", True)


def test_an_unended_event_counts_nothing() -> None:
    body = chat_stream(usage=(64, 8)).removesuffix(b"data: [DONE]\n\n").removesuffix(b"\n\n")
    assert from_stream("openai", CHAT, body).found is False


# ---------------------------------------------------------------- bounded memory


def test_a_long_stream_holds_only_the_event_not_yet_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metering, "MAX_HELD", 4096)
    body = claude_stream(turn("x" * 1000, usage=(5000, 300)))
    start, rest = body.split(b"\n\n", 1)
    pings = b'event: ping\ndata: {"type": "ping"}\n\n' * 20_000
    stream = start + b"\n\n" + pings + rest
    meter = Meter("anthropic", MESSAGES, streamed=True)
    most = 0
    for i in range(0, len(stream), 1500):
        meter.feed(stream[i : i + 1500])
        most = max(most, meter.held)
    assert 0 < most <= 4096 < len(stream)
    assert meter.result() == CallUsage(5000, 300, "claude-sonnet-4-6", True)


def test_an_event_past_the_limit_stops_metering(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metering, "MAX_HELD", 4096)
    body = claude_stream(turn("hi", usage=(70, 7)))
    start, rest = body.split(b"\n\n", 1)
    meter = Meter("anthropic", MESSAGES, streamed=True)
    meter.feed(start + b"\n\n")
    for _ in range(100):
        meter.feed(b"data: " + b"y" * 1000 + b"\n")
        assert meter.held <= 4096
    meter.feed(b"\n" + rest)
    assert meter.held == 0
    assert meter.result() == CallUsage(70, 1, "claude-sonnet-4-6", True)


def test_a_body_past_the_limit_keeps_only_its_end_and_the_usage_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metering, "MAX_HELD", 4096)
    monkeypatch.setattr(metering, "TAIL", 1024)
    meter = Meter("openai", CHAT, streamed=False, model="gpt-4.1")
    body = json.dumps({"padding": "z" * 50_000, **chat_completion((700, 30))}).encode()
    for i in range(0, len(body), 100):
        meter.feed(body[i : i + 100])
        assert meter.held <= 4096
    assert meter.result() == CallUsage(700, 30, "gpt-4.1", True)
    cut = Meter("openai", CHAT, streamed=False, model="gpt-4.1")
    for i in range(0, len(body) - 200, 100):  # cut before its usage: nothing is made up
        cut.feed(body[i : i + 100])
    assert cut.result() == CallUsage(0, 0, "gpt-4.1", False)


def test_a_compressed_answer_is_read_decoded() -> None:
    import gzip
    import zlib

    body = json.dumps(chat_completion((40, 2))).encode()
    packed = gzip.compress(body)
    meter = Meter("openai", CHAT, streamed=False, model="m", encoding="gzip")
    for i in range(0, len(packed), 7):
        meter.feed(packed[i : i + 7])
    assert meter.result().tokens_in == 40
    deflated = Meter("openai", CHAT, streamed=False, encoding="deflate")
    deflated.feed(zlib.compress(body))
    assert deflated.result().tokens_out == 2
    unknown = Meter("openai", CHAT, streamed=False, encoding="br")
    unknown.feed(body)
    assert not unknown.result().found  # an encoding it cannot read is read as nothing


# ---------------------------------------------------------------- the request


def test_prepare_asks_a_streamed_chat_completion_for_its_usage() -> None:
    body = {"model": "gpt-4.1", "stream": True, "stream_options": {"include_obfuscation": False}}
    forwarded = prepare("openai", "/v1/chat/completions?x=1", body)
    assert forwarded == {
        "model": "gpt-4.1",
        "stream": True,
        "stream_options": {"include_obfuscation": False, "include_usage": True},
    }
    assert body == {
        "model": "gpt-4.1",
        "stream": True,
        "stream_options": {"include_obfuscation": False},
    }
    assert prepare("openai", CHAT, {"stream": True, "stream_options": "junk"})[
        "stream_options"
    ] == {"include_usage": True}


@pytest.mark.parametrize(
    ("api", "path", "body"),
    [
        ("openai", CHAT, {"model": "gpt-4.1"}),
        ("openai", CHAT, {"stream": "true"}),
        ("openai", CHAT, {"stream": False, "stream_options": {"include_usage": False}}),
        ("openai", RESPONSES, {"stream": True}),
        ("anthropic", MESSAGES, {"stream": True}),
        ("anthropic", CHAT, {"stream": True}),
    ],
)
def test_prepare_leaves_other_requests_as_they_are(
    api: metering.Api, path: str, body: dict[str, Any]
) -> None:
    forwarded = prepare(api, path, body)
    assert forwarded == body
    assert forwarded is not body


def test_streamed_means_stream_true_only() -> None:
    assert streamed({"stream": True})
    assert not streamed({"stream": "true"})
    assert not streamed({"stream": 1})
    assert not streamed({})
