"""``POST /hooks/slack``: a Slack button or modal, checked and turned into the CLI's answer.

Enabled only when ``LOOP_SLACK_SIGNING_SECRET_FILE`` names the app's signing secret
(otherwise 404). A request is taken only when ``X-Slack-Signature`` is Slack's HMAC of
``v0:{X-Slack-Request-Timestamp}:{body}`` and the timestamp is within 5 minutes
(``slack-sdk``'s ``SignatureVerifier``): anything else is 401 and nothing is done. Like
``/hooks/github``, its signature is its sign-in, so the page's other checks do not apply.

Slack wants an answer within 3 s. A button that needs words (reject, feedback, extend)
opens its modal at once (``views.open``: the trigger id is good for 3 s); an approve
button and a submitted modal are answered with 200 first, and the answer goes to the
task afterwards, through ``loop.tasks.answer`` as ``loop approve`` sends it: the task's
own validator decides whether it applies, the answer key signs it, the person is
credited as ``slack:<name>``. The task then rewrites its message itself once its wait
is over (``slack_close``); an answer it refuses (the task no longer waits) is said in
the message instead, its buttons gone, and the task is left as it was.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from slack_sdk.signature import SignatureVerifier
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from temporalio.client import Client
from temporalio.service import RPCError

from loop.errors import BadInput, LoopError, UnknownTask
from loop.settings import Settings
from loop.slack import api, blocks
from loop.tasks import answer, payload_for

PATH = "/hooks/slack"
MAX_BODY = 1 << 20
"""Bytes read of a request; an interaction's payload is a few KB."""
log = logging.getLogger(__name__)


class SlackHook:
    def __init__(self, secret: str, token: str, api_url: str, client: Client) -> None:
        self.verifier = SignatureVerifier(signing_secret=secret)
        self.web = api.client(token, api_url)
        self.client = client

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        if len(body) > MAX_BODY:
            return _said(413, f"refused: a request is at most {MAX_BODY} bytes")
        if not self.verifier.is_valid(
            body,
            request.headers.get("x-slack-request-timestamp"),
            request.headers.get("x-slack-signature"),
        ):
            return _said(
                401, "refused: X-Slack-Signature is wrong or the request is older than 5 minutes"
            )
        form = await request.form()
        try:
            payload = json.loads(str(form.get("payload") or ""))
        except ValueError:
            return _said(400, "refused: no interaction payload (form field payload)")
        if not isinstance(payload, dict):
            return _said(400, "refused: the payload is not a JSON object")
        kind = payload.get("type")
        if kind == "block_actions":
            return await self._pressed(payload)
        if kind == "view_submission":
            return self._submitted(payload)
        return Response(status_code=200)  # nothing Loopwork acts on

    async def _pressed(self, p: dict[str, Any]) -> Response:
        actions = p.get("actions") or [{}]
        pressed = actions[0] if isinstance(actions[0], dict) else {}
        what = blocks.answer_of(str(pressed.get("action_id") or ""))
        task_id = str(pressed.get("value") or "")
        container = p.get("container") or {}
        channel = str(container.get("channel_id") or (p.get("channel") or {}).get("id") or "")
        ts = str(container.get("message_ts") or (p.get("message") or {}).get("ts") or "")
        if not what or not task_id:
            return Response(status_code=200)
        if what in blocks.MODALS:
            try:
                await api.call(
                    self.web,
                    "views.open",
                    trigger_id=str(p.get("trigger_id") or ""),
                    view=blocks.modal(what, task_id, channel, ts),
                )
            except Exception as e:
                log.warning("Slack views.open failed: %s", api.classified("views.open", e))
            return Response(status_code=200)
        who = blocks.by(p.get("user") or {})
        job = BackgroundTask(self._answer, task_id, what, {}, who, channel, ts)
        return Response(status_code=200, background=job)

    def _submitted(self, p: dict[str, Any]) -> Response:
        view = p.get("view") or {}
        what = blocks.answer_of(str(view.get("callback_id") or ""))
        try:
            meta = json.loads(str(view.get("private_metadata") or "{}"))
        except ValueError:
            meta = {}
        if not what or not isinstance(meta, dict) or not meta.get("task_id"):
            return Response(status_code=200)
        form = blocks.submitted(view)
        who = blocks.by(p.get("user") or {})
        try:
            payload_for(what, form, who)  # a missing reason is said in the modal
        except BadInput as e:
            # Said under the field it is about (``seconds: 'x' is not a number``), else the first.
            named = str(e).split(":", 1)[0]
            field = named if named in form else next(iter(form), "reason")
            return JSONResponse({"response_action": "errors", "errors": {field: str(e)}})
        job = BackgroundTask(
            self._answer,
            str(meta["task_id"]),
            what,
            form,
            who,
            str(meta.get("channel") or ""),
            str(meta.get("ts") or ""),
        )
        return Response(status_code=200, background=job)

    async def _answer(
        self, task_id: str, what: str, form: dict[str, str], who: str, channel: str, ts: str
    ) -> None:
        """After Slack has its 200: the CLI's answer; a refusal is said in the message."""
        key: Path | None = Settings.from_env().answer_key
        try:
            await answer(self.client, task_id, what, payload_for(what, form, who), who, key)
        except (BadInput, UnknownTask) as e:
            await self._say(task_id, channel, ts, f"{who} pressed {what}: nothing was done: {e}")
        except (LoopError, RPCError) as e:
            # No worker took it in time, or Temporal did not answer: the buttons stay, so
            # the person can press again (the CLI and the review page answer as well).
            log.warning("a Slack %s for %s was not taken: %s", what, task_id, e)

    async def _say(self, task_id: str, channel: str, ts: str, outcome: str) -> None:
        if not channel or not ts:
            return
        text, shown = blocks.closed(task_id, outcome)
        try:
            await api.call(self.web, "chat.update", channel=channel, ts=ts, text=text, blocks=shown)
        except Exception as e:
            log.warning("Slack chat.update failed: %s", api.classified("chat.update", e))


def _said(status: int, message: str) -> Response:
    return JSONResponse({"message": message}, status_code=status)
