"""model_step: one chat-completions call of the openai backend's model loop.

The conversation lives on disk in the attempt's folder, never in history:

    prompt.md                      the user message (the task prompt)
    step-NNNN.model.json           {"message": <assistant message>, "usage", "finish_reason",
                                    "model", "cost_usd"}
    step-NNNN.tool-I.json          {"message": <tool message>, "result": {...}}  (tool_step)

A step rebuilds the messages from those files, calls the endpoint once, writes
its own artifact, and returns only references (tool call ids and names, token
counts, cost, a short content preview, the artifact's path and hash), so a
step's history bytes do not grow with the conversation.

Never pay twice: when the step's artifact exists (the call answered but the
activity did not complete), the result is rebuilt from it and no request is
sent. The client does not retry (``max_retries=0``); Temporal does, and the
errors say which kind they are: rate limits, 5xx, timeouts and dropped
connections are retryable (with the server's Retry-After as the next delay);
other 4xx and invalid responses are permanent, in one line naming the model,
the endpoint and the status, never the API key.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import time
import uuid
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from temporalio import activity
from temporalio.exceptions import ApplicationError

if TYPE_CHECKING:
    import openai

from activities.host.pool import Pool
from activities.host.proc import heartbeating
from activities.host.step_files import model_artifact, tool_artifact
from activities.host.toolbox import TOOL_SCHEMAS
from loop.contracts import (
    ENDPOINT_PREFLIGHT_S,
    MODEL_STEP,
    ModelStepInput,
    ModelStepResult,
    ToolCallRef,
)
from loop.errors import permanent
from loop.logs import log_for
from loop.pricing import call_cost, load_prices
from loop.redact import redact
from loop.rules import metering
from loop.settings import Settings

SYSTEM_PROMPT = """\
You are Loopwork's coding agent. Rules:
- Work only inside the task's git worktree, and only through the tools you are given. \
Paths are relative to the worktree; never touch .git, anything outside the worktree, \
or files the task names as protected (that blocks the task).
- Your result is checked by fixed gates, listed in the task; you cannot change them. \
Your claims are recorded, not trusted: the gates decide, so make them pass (run the \
checks yourself when you can) rather than saying they pass.
- Work in small steps: read before you edit, keep changes to what the goal needs.
- When the work is done, or you cannot go further, call finish(answer) with your final \
answer: what you changed and the evidence. That ends the attempt."""

CONTENT_PREVIEW = 2_000
"""Characters of the assistant's text in the result; the whole is in the artifact."""
NAME_CHARS = 128
DEFAULT_CALL_TIMEOUT = 570.0
"""Seconds for one HTTP call: under the workflow's 10-minute start-to-close, so a slow
endpoint ends in a classified, retryable error rather than an activity timeout."""
MAX_RETRY_AFTER = 600.0
RETRYABLE_STATUS = {408, 409, 429}
"""Plus every 5xx (the statuses the openai client itself would retry)."""
_REASONING_MODEL = re.compile(r"^(?:[\w.-]+/)?(?:o\d|gpt-5)(?:[-:@]|$)")
"""OpenAI reasoning models refuse ``max_tokens``; they take ``max_completion_tokens``."""


class ModelActivities:
    def __init__(
        self,
        settings: Settings,
        *,
        tools: list[dict[str, Any]] | None = None,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
    ) -> None:
        self.settings = settings
        self.prices = load_prices(settings.home)
        """Built-in prices merged with LOOP_HOME/prices.json, read once (a bad file stops here)."""
        self._tools = tools
        self.call_timeout = call_timeout

    @activity.defn(name=MODEL_STEP.name)
    async def model_step(self, inp: ModelStepInput) -> ModelStepResult:
        import openai  # at first use: see ``client_for``

        log = log_for(inp.task_id, inp.attempt, "model_step").bind(step=inp.step)
        path = model_artifact(inp.attempt_dir, inp.step)
        if path.exists():
            log.info("step already answered; returning its artifact, not calling the model")
            return result_from(path, inp.step)
        pool = Pool.of(self.settings.home, inp.shared) if inp.shared is not None else None
        if pool is not None:
            stopped = (await asyncio.to_thread(pool.check))[0]
            if stopped:
                log.info("the task's pool refuses the call", why=stopped)
                return ModelStepResult(step=inp.step, refused=stopped)

        request = self.request(inp, build_messages(inp.attempt_dir, inp.step))
        api_key = key()
        async with client_for(inp.base_url, self.call_timeout) as client:
            endpoint = display_url(str(client.base_url))
            where = f"model {inp.model} at {endpoint}"
            try:
                response = await heartbeating(client.chat.completions.create(**request))
            except openai.OpenAIError as e:
                err = classify(e, where, api_key)
                log.warning("model call failed", error=err.message, retryable=not err.non_retryable)
                raise err from None

        artifact = self.artifact(inp, response, where)
        if pool is not None:  # before the artifact: a crash between counts it twice, never not
            used = _metered({"usage": artifact["usage"], "model": artifact["model"]})
            tokens = used.tokens_in + used.tokens_out
            await asyncio.to_thread(pool.add, tokens, artifact["cost_usd"])
        write_once(path, (json.dumps(artifact, indent=2, ensure_ascii=False) + "\n").encode())
        result = result_from(path, inp.step)
        log.info(
            "model answered",
            model=artifact["model"],
            tool_calls=[c.name for c in result.tool_calls],
            finish_reason=result.finish_reason,
            tokens_in=result.tokens_in,
            tokens_out=result.tokens_out,
            cost_usd=result.cost_usd,
        )
        return result

    def tools(self) -> list[dict[str, Any]]:
        return self._tools if self._tools is not None else TOOL_SCHEMAS

    def request(self, inp: ModelStepInput, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create``."""
        req: dict[str, Any] = {"model": inp.model, "messages": messages}
        tools = self.tools()
        if tools:
            req["tools"] = tools
        cap = "max_completion_tokens" if _REASONING_MODEL.match(inp.model.lower()) else "max_tokens"
        req[cap] = inp.max_tokens
        return req

    def artifact(self, inp: ModelStepInput, response: Any, where: str) -> dict[str, Any]:
        """The step's artifact from a response; an answer without a message is permanent."""
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise permanent(f"{where}: invalid response: no choices")
        choice = choices[0]
        msg = getattr(choice, "message", None)
        if msg is None:
            raise permanent(f"{where}: invalid response: the first choice has no message")
        content = getattr(msg, "content", None)
        if content is not None and not isinstance(content, str):
            content = json.dumps(content, default=str)
        calls = []
        for i, tc in enumerate(getattr(msg, "tool_calls", None) or []):
            fn = getattr(tc, "function", None)
            if fn is None:  # not a function call: not something we offered
                continue
            args = fn.arguments
            if not isinstance(args, str):
                args = json.dumps(args)
            calls.append(
                {
                    "id": getattr(tc, "id", None) or f"call_{inp.step}_{i}",
                    "type": "function",
                    "function": {"name": str(fn.name or ""), "arguments": args},
                }
            )
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        usage_obj = getattr(response, "usage", None)
        usage = usage_obj.model_dump(mode="json", exclude_none=True) if usage_obj else {}
        answered_by = getattr(response, "model", None) or inp.model
        used = _metered({"usage": usage, "model": answered_by})
        return {
            "message": message,
            "usage": usage,
            "finish_reason": getattr(choice, "finish_reason", None) or "",
            "model": answered_by,
            "cost_usd": call_cost(
                used.model, inp.model, used.tokens_in, used.tokens_out, self.prices
            ),
        }


# --------------------------------------------------------------------------- conversation


def build_messages(attempt_dir: str | Path, step: int) -> list[dict[str, Any]]:
    """System, user (prompt.md), then every earlier step's assistant and tool messages.

    A missing or broken file is a permanent error naming it: the model is never
    called with a hole in the conversation.
    """
    folder = Path(attempt_dir)
    prompt = folder / "prompt.md"
    try:
        user = prompt.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise permanent(f"missing {prompt}: the task prompt of this attempt") from None
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]
    for k in range(1, step):
        path = model_artifact(folder, k)
        assistant = _read_artifact(path, f"the model artifact of step {k}").get("message")
        if not isinstance(assistant, dict) or assistant.get("role") != "assistant":
            raise permanent(f"broken artifact {path}: no assistant message")
        messages.append(assistant)
        for i, call in enumerate(assistant.get("tool_calls") or []):
            tpath = tool_artifact(folder, k, i)
            tool = _read_artifact(tpath, f"the result of tool call {i} of step {k}").get("message")
            if not isinstance(tool, dict) or tool.get("role") != "tool":
                raise permanent(f"broken artifact {tpath}: no tool message")
            if tool.get("tool_call_id") != call.get("id"):
                raise permanent(
                    f"broken artifact {tpath}: tool_call_id {tool.get('tool_call_id')!r}"
                    f" does not answer call {call.get('id')!r}"
                )
            messages.append(tool)
    return messages


def _read_artifact(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise permanent(
            f"missing {path} ({what}): the conversation has a hole; not calling the model"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise permanent(f"broken artifact {path} ({what}): {e}") from None
    if not isinstance(data, dict):
        raise permanent(f"broken artifact {path} ({what}): not a JSON object")
    return data


def result_from(path: Path, step: int) -> ModelStepResult:
    """The activity's result, from the artifact alone (so a retry returns the same)."""
    raw = path.read_bytes()
    try:
        art = json.loads(raw)
        message = art["message"]
        calls = message.get("tool_calls") or []
        refs = [
            ToolCallRef(index=i, id=c["id"], name=c["function"]["name"][:NAME_CHARS])
            for i, c in enumerate(calls)
        ]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
        raise permanent(f"broken artifact {path}: {type(e).__name__}: {e}") from None
    used = _metered({"usage": art.get("usage") or {}})
    tokens_in, tokens_out = used.tokens_in, used.tokens_out
    return ModelStepResult(
        step=step,
        tool_calls=refs,
        content=(message.get("content") or "")[:CONTENT_PREVIEW],
        finish_reason=art.get("finish_reason") or "",
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        cost_usd=float(art.get("cost_usd") or 0.0),
        artifact=str(path),
        artifact_sha256=hashlib.sha256(raw).hexdigest(),
    )


def _metered(doc: dict[str, Any]) -> metering.CallUsage:
    """A chat completion's usage, read as the model gateway reads a command agent's."""
    return metering.usage_of("openai", "/v1/chat/completions", doc)


def write_once(path: Path, data: bytes) -> None:
    """Write atomically, and never over an artifact a concurrent attempt already wrote."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # the other attempt's answer is the one the loop follows
        except OSError:  # a filesystem without hard links
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# --------------------------------------------------------------------------- the endpoint


def key() -> str:
    return os.environ.get("OPENAI_API_KEY") or "not-needed"


def client_for(base_url: str | None, timeout: float) -> openai.AsyncOpenAI:
    """The one way to reach a model: the task's endpoint, else OPENAI_BASE_URL, else
    OpenAI's; no retries of the client's own (Temporal's policy retries).

    ``openai`` is imported at first use here and in this module's other functions: it is
    half a second of a worker's start, and a worker's start is crash-recovery time."""
    import openai

    return openai.AsyncOpenAI(
        base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
        api_key=key(),
        max_retries=0,
        timeout=timeout,
    )


PREFLIGHT_CALL_S = 10.0
LOOPBACK = ("localhost", "127.0.0.1", "::1")


async def preflight(
    base_url: str | None, model: str, *, bound_s: float = ENDPOINT_PREFLIGHT_S
) -> None:
    """Before the first attempt: the endpoint answers, takes the key and serves the model,
    or the task ends BLOCKED with the reason, rather than retrying ``connection failed``
    until cancelled or spending attempts on calls that cannot succeed.

    Any HTTP answer to ``GET /models`` but 401/403 counts as reachable (not every
    OpenAI-compatible server lists models); no answer is retried for ``bound_s``. A model
    a list does not name is asked for by name: a 404 there is the model.
    """
    import openai

    async with client_for(base_url, PREFLIGHT_CALL_S) as client:
        endpoint = display_url(str(client.base_url))
        where = f"model {model} at {endpoint}"
        host = urlsplit(endpoint).hostname or ""
        if not os.environ.get("OPENAI_API_KEY") and host not in LOOPBACK:
            raise permanent(
                f"{where}: OPENAI_API_KEY is not set in the worker's environment; "
                "set it where `loop worker` runs"
            )
        deadline = time.monotonic() + bound_s
        delay = 1.0
        while True:
            try:
                listed = await client.models.list()
                break
            except openai.APIStatusError as e:
                if e.status_code in (401, 403):
                    raise classify(e, where, key()) from None
                return  # it answers; the first call will say more if it must
            except (openai.APIConnectionError, openai.APITimeoutError) as e:
                if time.monotonic() + delay > deadline:
                    reason = classify(e, where, key()).message
                    raise permanent(f"{reason}; unreachable for {bound_s:.0f} s") from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
        if model in {m.id for m in listed.data}:
            return
        try:
            # Lists are paged, and some servers list aliases only: asked by its name.
            await client.models.retrieve(model)
        except openai.NotFoundError as e:
            raise classify(e, where, key()) from None
        except openai.OpenAIError:
            return  # not judged here: the first call says more


# --------------------------------------------------------------------------- errors


def classify(e: openai.OpenAIError, where: str, api_key: str) -> ApplicationError:
    """A Temporal error of the right kind, in one line, with secrets taken out."""
    import openai

    if isinstance(e, openai.APITimeoutError):
        return _retryable(f"{where}: timed out", "ModelTimeout", None, api_key)
    if isinstance(e, openai.APIConnectionError):
        cause = e.__cause__
        detail = f"{type(cause).__name__}: {cause}" if cause else e.message
        return _retryable(
            f"{where}: connection failed ({detail})", "ModelConnection", None, api_key
        )
    if isinstance(e, openai.APIStatusError):
        code = e.status_code
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        text = f"{where}: {code} {phrase}"
        detail = _error_detail(e.body)
        if detail:
            text += f": {detail}"
        if code in RETRYABLE_STATUS or code >= 500:
            return _retryable(text, "ModelUnavailable", retry_after(e.response.headers), api_key)
        if code == 401 and not os.environ.get("OPENAI_API_KEY"):
            text += " (OPENAI_API_KEY is not set)"
        return permanent(one_line(text, api_key))
    if isinstance(e, openai.APIResponseValidationError):
        return permanent(one_line(f"{where}: invalid response: {e.message}", api_key))
    return permanent(one_line(f"{where}: {type(e).__name__}: {e}", api_key))


def _retryable(text: str, kind: str, delay: timedelta | None, api_key: str) -> ApplicationError:
    return ApplicationError(
        one_line(text, api_key), type=kind, non_retryable=False, next_retry_delay=delay
    )


def _error_detail(body: object) -> str:
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        text = message if isinstance(message, str) else ""
    elif isinstance(body, str):
        text = body
    else:
        text = ""
    return " ".join(text.split())[:300]


def one_line(text: str, api_key: str) -> str:
    """One line, without the key, key-like tokens or bearer credentials."""
    keep = (api_key,) if api_key and api_key != "not-needed" else ()
    return " ".join(redact(text, also=keep).split())


def retry_after(headers: Any) -> timedelta | None:
    """The server's wish (``retry-after-ms``, ``retry-after`` seconds or date), capped."""
    seconds: float | None = None
    ms = headers.get("retry-after-ms")
    ra = headers.get("retry-after")
    try:
        if ms:
            seconds = float(ms) / 1000
        elif ra:
            try:
                seconds = float(ra)
            except ValueError:
                when = parsedate_to_datetime(ra)
                if when.tzinfo is None:
                    when = when.replace(tzinfo=UTC)
                seconds = (when - datetime.now(UTC)).total_seconds()
    except (ValueError, TypeError, OverflowError):
        return None
    if seconds is None or not seconds > 0:
        return None
    return timedelta(seconds=min(seconds, MAX_RETRY_AFTER))


def display_url(url: str) -> str:
    """The endpoint for messages: no credentials, no query, no trailing slash."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))
