"""What one model call cost, read from the provider's own response as it streams past.

A model gateway forwards an agent CLI's requests to the provider; the agent's own
report of its usage is a claim, the provider's response is the bill. So the gateway
feeds each response body, in whatever chunks it arrives, to a ``Meter``, and asks for
usage to be reported where a provider only reports it on request (``prepare``).

The shapes are the providers' SDK types (``anthropic``, ``openai``), read the way
their own clients read a response: ``model_construct``, which these SDKs override to
build nested models from the annotations without validating. Validating would lose
a call's usage whenever the provider is ahead of the installed SDK (a new
``stop_reason``, a newly required field) or an OpenAI-compatible server leaves out
what it does not use (``created_at``, ``sequence_number``); the counts alone, the
only thing metered, are checked to be whole numbers in range.

The body is hostile input: nothing in it makes ``feed`` or ``result`` raise, and at
most ``MAX_HELD`` bytes of it are kept; past that, metering stops.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

from loop.rules.clis.base import count

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

__all__ = ["MAX_HELD", "Api", "CallUsage", "Meter", "prepare", "streamed"]

Api = Literal["openai", "anthropic"]

MAX_HELD = 16 * 1024 * 1024
"""Bytes kept of a non-streamed body, or of a streamed event not yet complete."""

_EOL = re.compile(rb"\r\n|\r|\n")
_DONE = b"[DONE]"


@dataclass
class CallUsage:
    tokens_in: int = 0
    tokens_out: int = 0
    model: str = ""
    """The model the response names, else the one the request asked for."""
    found: bool = False
    """Whether any usage was read at all: a call without it is unmetered, not free."""


@dataclass(frozen=True)
class _Reading:
    """What one piece of a response says; None where it says nothing, so that an
    Anthropic ``message_delta``, which restates only some counts, keeps the others."""

    input: int | None = None
    cache_creation: int | None = None
    cache_read: int | None = None
    output: int | None = None
    model: str | None = None

    def over(self, earlier: _Reading) -> _Reading:
        """Every provider's counts are running totals: a later one replaces, never adds."""
        later = {f.name: getattr(self, f.name) for f in fields(self)}
        return _Reading(**{k: getattr(earlier, k) if v is None else v for k, v in later.items()})

    def usage(self, requested: str) -> CallUsage:
        parts = (self.input, self.cache_creation, self.cache_read, self.output)
        return CallUsage(
            tokens_in=sum(n or 0 for n in parts[:3]),
            tokens_out=self.output or 0,
            model=self.model or requested,
            found=any(n is not None for n in parts),
        )


def _name(model: object) -> str | None:
    return model if isinstance(model, str) and model else None


def _anthropic_usage(usage: object) -> _Reading:
    """Anthropic counts cache writes and reads apart from ``input_tokens``; all are input."""
    from anthropic.types import MessageDeltaUsage, Usage  # see _message

    if not isinstance(usage, Usage | MessageDeltaUsage):
        return _Reading()
    return _Reading(
        input=count(usage.input_tokens),
        cache_creation=count(usage.cache_creation_input_tokens),
        cache_read=count(usage.cache_read_input_tokens),
        output=count(usage.output_tokens),
    )


def _message(message: object) -> _Reading:
    # The providers' types load on the first call that needs them: importing them all
    # costs up to a second, which every worker start would pay for calls it may never see.
    from anthropic.types import Message

    if not isinstance(message, Message):
        return _Reading()
    return _Reading(model=_name(message.model)).over(_anthropic_usage(message.usage))


def _anthropic_event(doc: dict[str, Any]) -> _Reading:
    """``message_start`` holds the input and a first output count, ``message_delta`` the
    output so far (and, lately, the input again); the other events say nothing of usage."""
    from anthropic.types import RawMessageDeltaEvent, RawMessageStartEvent  # see _message

    if doc.get("type") == "message_start":
        return _message(RawMessageStartEvent.model_construct(**doc).message)
    if doc.get("type") == "message_delta":
        return _anthropic_usage(RawMessageDeltaEvent.model_construct(**doc).usage)
    return _Reading()


def _chat(completion: ChatCompletion | ChatCompletionChunk) -> _Reading:
    """A whole completion, or a chunk of one: only the last chunk (asked for by
    ``prepare``, its ``choices`` empty) has the usage; every chunk names the model."""
    from openai.types.completion_usage import CompletionUsage  # see _message

    usage = completion.usage
    reading = _Reading(model=_name(completion.model))
    if not isinstance(usage, CompletionUsage):
        return reading
    counts = _Reading(input=count(usage.prompt_tokens), output=count(usage.completion_tokens))
    return counts.over(reading)


def _response(response: object) -> _Reading:
    """A Responses ``input_tokens`` already includes the cached ones, unlike Anthropic's."""
    from openai.types.responses import Response, ResponseUsage  # see _message

    if not isinstance(response, Response):
        return _Reading()
    reading = _Reading(model=_name(response.model))
    usage = response.usage
    if not isinstance(usage, ResponseUsage):
        return reading
    counts = _Reading(input=count(usage.input_tokens), output=count(usage.output_tokens))
    return counts.over(reading)


def _responses_event(doc: dict[str, Any]) -> _Reading:
    """The events that end a Responses stream hold the whole response and its usage (a
    failed or cut-short response may still have been billed)."""
    from openai.types.responses import (  # see _message
        ResponseCompletedEvent,
        ResponseFailedEvent,
        ResponseIncompleteEvent,
    )

    ends: dict[str, type[ResponseCompletedEvent | ResponseIncompleteEvent | ResponseFailedEvent]]
    ends = {
        "response.completed": ResponseCompletedEvent,
        "response.incomplete": ResponseIncompleteEvent,
        "response.failed": ResponseFailedEvent,
    }
    end = ends.get(str(doc.get("type")))
    return _Reading() if end is None else _response(end.model_construct(**doc).response)


_Reader = Callable[[dict[str, Any]], _Reading]


def _route(path: str) -> str:
    return path.split("?", 1)[0].rstrip("/")


def _whole_message(doc: dict[str, Any]) -> _Reading:
    from anthropic.types import Message  # see _message

    return _message(Message.model_construct(**doc))


def _completion(doc: dict[str, Any]) -> _Reading:
    from openai.types.chat import ChatCompletion  # see _message

    return _chat(ChatCompletion.model_construct(**doc))


def _chunk(doc: dict[str, Any]) -> _Reading:
    from openai.types.chat import ChatCompletionChunk  # see _message

    return _chat(ChatCompletionChunk.model_construct(**doc))


def _whole_response(doc: dict[str, Any]) -> _Reading:
    from openai.types.responses import Response  # see _message

    return _response(Response.model_construct(**doc))


_READERS: dict[tuple[Api, str], tuple[_Reader, _Reader]] = {
    ("anthropic", "/messages"): (_whole_message, _anthropic_event),
    ("openai", "/chat/completions"): (_completion, _chunk),
    ("openai", "/responses"): (_whole_response, _responses_event),
}
"""The model calls, by API and the end of their path: how to read the whole body, and
how to read each event of a stream."""


def _reader(api: Api, path: str, is_streamed: bool) -> _Reader | None:
    """None for a call that is not a model call (``/v1/models``, ``count_tokens``, getting
    a stored response back): it has no usage, or one already metered."""
    route = _route(path)
    for (owner, ending), (whole, events) in _READERS.items():
        if owner == api and route.endswith(ending):
            return events if is_streamed else whole
    return None


def _read(reader: _Reader, data: bytes) -> _Reading:
    """One JSON document's usage; nothing from one that is not JSON or not the SDK's shape."""
    try:
        doc = json.loads(data)
        return reader(doc) if isinstance(doc, dict) else _Reading()
    except Exception:  # any failure on a hostile body (even a RecursionError) is no usage
        return _Reading()


class _Events:
    """Server-sent events framing: lines ended by CRLF, LF or CR; ``data:`` lines joined
    by newlines; a blank line ends an event. Holds only the event not yet ended."""

    def __init__(self) -> None:
        self._line = bytearray()
        self._data: list[bytes] = []
        self._size = 0
        self.over = False
        """The held part grew past ``MAX_HELD``: framing is lost, nothing more is read."""

    @property
    def held(self) -> int:
        return len(self._line) + self._size

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of each event this chunk ends."""
        if self.over:
            return []
        start = max(len(self._line) - 1, 0)  # a CR held back may end a line now
        self._line += chunk
        ended: list[bytes] = []
        if _EOL.search(self._line, start) is not None:
            ended = self._lines()
        if self.held > MAX_HELD:
            self.over, self._line, self._data, self._size = True, bytearray(), [], 0
        return ended

    def _lines(self) -> list[bytes]:
        """Split off the ended lines; a trailing CR waits, for it may be half a CRLF."""
        cr = self._line.endswith(b"\r")
        *lines, rest = _EOL.split(self._line[:-1] if cr else self._line)
        self._line = bytearray(rest + b"\r" if cr else rest)
        ended = []
        for line in lines:
            if not line and self._data:
                ended.append(b"\n".join(self._data))
                self._data, self._size = [], 0
            elif line.startswith(b"data:"):
                value = bytes(line[6:] if line.startswith(b"data: ") else line[5:])
                self._data.append(value)
                self._size += len(value)
        return ended


TAIL = 256 * 1024
"""Kept of the end of a body past ``MAX_HELD``: where a whole answer's ``usage`` is."""


class Meter:
    """One call's response, fed as it arrives (decoded first when the provider compressed
    it anyway: ``gzip`` or ``deflate``; another encoding is read as nothing)."""

    def __init__(
        self, api: Api, path: str, *, streamed: bool, model: str = "", encoding: str = ""
    ) -> None:
        self._reader = _reader(api, path, streamed)
        self._streamed = streamed
        self._requested = model
        self._reading = _Reading()
        self._events = _Events()
        self._body = bytearray()
        self._tail = bytearray()
        self._decoder = _decoder(encoding)
        self._stopped = self._reader is None or self._decoder is False

    @property
    def metering(self) -> bool:
        """The call is one whose answer holds a usage (a model call, not a listing)."""
        return self._reader is not None

    @property
    def held(self) -> int:
        """Bytes kept of the response: what ``MAX_HELD`` bounds."""
        return self._events.held if self._streamed else len(self._body) + len(self._tail)

    def feed(self, chunk: bytes) -> None:
        """Any chunking: an event or a JSON body may be split anywhere."""
        if self._stopped or self._reader is None:
            return
        if self._decoder is not None:
            try:
                chunk = self._decoder.decompress(chunk, MAX_HELD)
            except zlib.error:
                self._stopped, self._body = True, bytearray()
                return
        if not self._streamed:
            if self._tail or len(self._body) + len(chunk) > MAX_HELD:
                # Too big to parse whole: keep its end, where the usage is.
                self._tail = (self._tail + self._body + chunk)[-TAIL:]
                self._body = bytearray()
            else:
                self._body += chunk
            return
        for data in self._events.feed(chunk):
            self._stopped = data == _DONE
            if self._stopped:
                return
            self._reading = _read(self._reader, data).over(self._reading)

    def result(self) -> CallUsage:
        """The usage read so far: a stream's running totals, or the whole body's."""
        reading = self._reading
        if not self._streamed and self._reader is not None and self._body:
            reading = _read(self._reader, bytes(self._body))
        elif not self._streamed and self._reader is not None and self._tail:
            reading = _usage_in_tail(self._reader, bytes(self._tail))
        return reading.usage(self._requested)


_DECODERS = {"gzip": 31, "x-gzip": 31, "deflate": 15}
"""``zlib`` window bits per encoding a provider may send though asked for ``identity``."""


def _decoder(encoding: str) -> Any:
    """A decompressor for ``encoding``; None for none. An encoding this cannot decode
    (``br``, ``zstd``) stops the meter at once: its body is read as nothing."""
    kind = encoding.strip().lower()
    if kind in ("", "identity"):
        return None
    bits = _DECODERS.get(kind)
    return zlib.decompressobj(wbits=bits) if bits is not None else False


def _usage_in_tail(reader: _Reader, tail: bytes) -> _Reading:
    """The last ``"usage": {...}`` object at the end of a body too big to parse whole
    (a provider puts it after the choices or the content)."""
    text = tail.decode("utf-8", "replace")
    at = text.rfind('"usage"')
    _, colon, rest = text[at + len('"usage"') :].partition(":") if at >= 0 else ("", "", "")
    try:
        usage, _ = json.JSONDecoder().raw_decode(rest.lstrip())
    except (ValueError, RecursionError):
        return _Reading()
    return _read(reader, json.dumps({"usage": usage}).encode()) if colon else _Reading()


def usage_of(api: Api, path: str, doc: dict[str, Any], *, model: str = "") -> CallUsage:
    """A whole answer's usage, already parsed: what the ``openai`` backend's own calls
    are metered with, by the same readers as the gateway's."""
    reader = _reader(api, path, False)
    if reader is None:
        return CallUsage(model=model)
    try:
        reading = reader(doc)
    except Exception:  # as in ``_read``: a body not of the SDK's shape has no usage
        reading = _Reading()
    return reading.usage(model)


def streamed(body: dict[str, Any]) -> bool:
    return body.get("stream") is True


def prepare(api: Api, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The request body as forwarded: a streamed chat completion reports its usage only
    when asked (``stream_options.include_usage``); other calls report it anyway."""
    forwarded = dict(body)
    if api == "openai" and _route(path).endswith("/chat/completions") and streamed(body):
        options = body.get("stream_options")
        kept = options if isinstance(options, dict) else {}
        forwarded["stream_options"] = {**kept, "include_usage": True}
    return forwarded
