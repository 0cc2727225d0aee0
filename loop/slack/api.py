"""Slack's Web API through ``slack-sdk``'s ``WebClient``, configured in one place.

The bot token is read from the file ``LOOP_SLACK_BOT_TOKEN_FILE`` names (never from a
variable's value or a command line), the API's base from ``LOOP_SLACK_API_URL`` (default
Slack's; tests point it at a stand-in). The client retries nothing itself: in the
worker, Temporal's retry policy is the only one (``classified`` says which failures are
worth another try), and ``loop ui`` must answer Slack within 3 s.

``WebClient`` is synchronous (its asynchronous twin needs aiohttp), so calls run in a
thread: ``call``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.exceptions import ApplicationError

if TYPE_CHECKING:
    from slack_sdk import WebClient

from loop.errors import BadInput, permanent

DEFAULT_API = "https://slack.com/api/"
TIMEOUT_S = 10
RATE_LIMITED = "SlackRateLimited"
PERMANENT_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "missing_scope",
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "invalid_blocks",
        "invalid_arguments",
        "msg_too_long",
        "no_text",
    }
)
"""Errors another try would meet again; anything else (Slack's 5xx, ``fatal_error``,
``internal_error``, a connection that failed) is retried."""


def read_token(file: Path) -> str:
    """The bot token (``xoxb-…``) in ``file``; ``BadInput`` with one line otherwise."""
    try:
        token = file.expanduser().read_text().strip()
    except OSError as e:
        raise BadInput(f"LOOP_SLACK_BOT_TOKEN_FILE: cannot read {file}: {e.strerror}") from None
    if not token:
        raise BadInput(f"LOOP_SLACK_BOT_TOKEN_FILE: {file} is empty")
    return token


def client(token: str, base_url: str) -> WebClient:
    # slack-sdk is imported on first use, as are its errors in ``classified``: most
    # workers never post to Slack, and each one's start is on the path of a recovery.
    from slack_sdk import WebClient

    url = base_url if base_url.endswith("/") else base_url + "/"
    return WebClient(token=token, base_url=url, timeout=TIMEOUT_S, retry_handlers=[])


async def call(web: WebClient, method: str, **fields: Any) -> dict[str, Any]:
    """One Web API method (``chat.postMessage``…) with JSON fields; Slack's answer."""
    resp = await asyncio.to_thread(web.api_call, method, json=fields)
    data: dict[str, Any] = dict(resp.data) if isinstance(resp.data, dict) else {}
    return data


def classified(method: str, e: Exception) -> ApplicationError:
    """A failed call as Temporal should see it: rate-limited waits Slack's Retry-After,
    a refusal another try would meet again is permanent, the rest is retried."""
    from slack_sdk.errors import SlackApiError, SlackRequestError

    if isinstance(e, SlackApiError):
        error = str(e.response.get("error") or "")
        if e.response.status_code == 429 or error == "ratelimited":
            wait = int(e.response.headers.get("Retry-After", "1") or 1)
            return ApplicationError(
                f"Slack rate-limits {method}; waiting {wait} s",
                type=RATE_LIMITED,
                next_retry_delay=timedelta(seconds=max(wait, 1)),
            )
        message = f"Slack refused {method}: {error or e.response.status_code}"
        if error in PERMANENT_ERRORS:
            return permanent(message)
        return ApplicationError(message, type="SlackFailed")
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    if isinstance(e, SlackRequestError):
        return permanent(f"Slack {method}: {reason}")
    return ApplicationError(f"Slack {method} unreachable: {reason}", type="SlackUnreachable")
