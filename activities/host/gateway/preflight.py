"""Before the first attempt: will the provider take the worker's key, and does it serve
the task's model? An answer no retry can change (401, 403, a model it does not have)
ends the task BLOCKED with the provider's own words, before an attempt is spent on an
agent whose every call would be refused (docs/concepts/gateway.md).

Asked of the provider's model list, which costs nothing: ``GET …/models`` with the key
(a 401 or 403 is the key), then, for a model the list does not name (lists are paged,
and some servers list aliases only), ``GET …/models/<model>`` (a 404 is the model). A
server that lists no models, or answers anything else, is not judged here: the agent's
first call says more.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from loop.contracts import Provider
from loop.redact import redact

CHECK_S = 10.0
ANTHROPIC_VERSION = "2023-06-01"
MESSAGE_CHARS = 300


async def provider_refusal(provider: Provider, key: str, model: str | None) -> str:
    """Why every call of the task's agent would be refused ("" when nothing says so)."""
    import httpx  # here, not at the top: a new worker starts without it

    models = provider.upstream + ("/models" if provider.api == "openai" else "/v1/models")
    if provider.api == "anthropic":
        headers = {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
    else:
        headers = {"authorization": f"Bearer {key}"}
    where = f"agent.provider: {provider.upstream}"
    async with httpx.AsyncClient(timeout=CHECK_S, trust_env=False) as client:
        try:
            listed = await client.get(models, headers=headers)
            if listed.status_code in (401, 403):
                return (
                    f"{where} refused the key in {provider.key_variable} "
                    f"({_status(listed)}){_said(listed, key)}"
                )
            ids = _ids(listed) if listed.status_code == 200 else None
            if not model or ids is None or model in ids:
                return ""
            named = await client.get(f"{models}/{model}", headers=headers)
        except httpx.HTTPError:
            return ""  # whether it answers at all is checked before, with patience
    if named.status_code == 404:
        return f"{where} has no model {model} (agent.model; {_status(named)}){_said(named, key)}"
    return ""


def _ids(answer: Any) -> set[str] | None:
    """The model ids a list answer names; None when it is no list of models."""
    try:
        data = answer.json().get("data")
    except (ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    return {str(m.get("id")) for m in data if isinstance(m, dict)}


def _status(answer: Any) -> str:
    try:
        return f"{answer.status_code} {HTTPStatus(answer.status_code).phrase}"
    except ValueError:
        return str(answer.status_code)


def _said(answer: Any, key: str) -> str:
    text = provider_message(answer.content, key)
    return f": {text}" if text else ""


def provider_message(body: bytes, key: str) -> str:
    """What a provider's error answer says (OpenAI's and Anthropic's ``error.message``,
    else its text), one line, without the key: a provider may quote part of it."""
    text = body.decode("utf-8", "replace")
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    inner = doc.get("error", doc) if isinstance(doc, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else None
    said = message if isinstance(message, str) else text
    return " ".join(redact(said, also=(key,)).split())[:MESSAGE_CHARS]
