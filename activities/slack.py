"""slack_post and slack_close: a waiting task's message in Slack, and the same message
once the wait is over.

``slack_post`` is sent beside the wait (``Waiting._notify``, ``workflows/waiting.py``),
like the plain webhook: Slack being down never holds a decision up, Temporal retries the
post about a minute, and the CLI and the review page answer all along. Its result (channel and ts)
is in history, so ``slack_close`` rewrites exactly that message when the wait ends:
answered from anywhere, timed out or cancelled, no live button is left behind.

A worker without a bot token and a channel posts nothing (an empty ``SlackMessage``),
so a task's history does not depend on which worker has Slack configured beyond that.
"""

from __future__ import annotations

from temporalio import activity

from loop.contracts import (
    SLACK_CLOSE,
    SLACK_POST,
    SlackCloseInput,
    SlackCloseResult,
    SlackMessage,
    SlackPostInput,
)
from loop.errors import BadInput, permanent
from loop.settings import Settings
from loop.slack import api, blocks


class SlackActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def _web(self) -> api.WebClient:
        assert self.settings.slack_token_file is not None
        try:
            token = api.read_token(self.settings.slack_token_file)
        except BadInput as e:
            raise permanent(str(e)) from None
        return api.client(token, self.settings.slack_api_url)

    @activity.defn(name=SLACK_POST.name)
    async def slack_post(self, inp: SlackPostInput) -> SlackMessage:
        channel = inp.channel or self.settings.slack_channel_for(inp.repo)
        if self.settings.slack_token_file is None or not channel:
            return SlackMessage()
        review = (self.settings.review_url or "").rstrip("/")
        text, shown = blocks.waiting(
            inp.task_id, str(inp.state), inp.reason, inp.goal, inp.waiting_for, inp.commit,
            verdict=inp.verdict, review=f"{review}/tasks/{inp.task_id}" if review else "",
        )  # fmt: skip
        try:
            said = await api.call(
                self._web(),
                "chat.postMessage",
                channel=channel,
                text=text,
                blocks=shown,
                unfurl_links=False,
                unfurl_media=False,
            )
        except Exception as e:
            raise api.classified("chat.postMessage", e) from None
        return SlackMessage(channel=str(said.get("channel") or ""), ts=str(said.get("ts") or ""))

    @activity.defn(name=SLACK_CLOSE.name)
    async def slack_close(self, inp: SlackCloseInput) -> SlackCloseResult:
        """The message says how the wait ended, its buttons gone (idempotent: the same
        update twice reads the same)."""
        if self.settings.slack_token_file is None or not inp.message.ts:
            return SlackCloseResult()
        text, shown = blocks.closed(inp.task_id, inp.outcome)
        try:
            await api.call(
                self._web(),
                "chat.update",
                channel=inp.message.channel,
                ts=inp.message.ts,
                text=text,
                blocks=shown,
            )
        except Exception as e:
            raise api.classified("chat.update", e) from None
        return SlackCloseResult(updated=True)
