"""``POST /hooks/slack``: a Slack button or modal, checked and turned into the CLI's answer.

Enabled only when ``LOOP_SLACK_SIGNING_SECRET_FILE`` names the app's signing secret
(otherwise 404). A request is taken only when ``X-Slack-Signature`` is Slack's HMAC of
``v0:{X-Slack-Request-Timestamp}:{body}`` and the timestamp is within 5 minutes
(``slack-sdk``'s ``SignatureVerifier``): anything else is 401 and nothing is done. Like
``/hooks/github``, its signature is its sign-in, so the page's other checks do not apply.

Slack wants an answer within 3 s. A button that needs words (reject, feedback, extend)
opens its modal at once (``views.open``: the trigger id is good for 3 s). An approve
button and a submitted modal start one ``SlackAnswerWorkflow`` whose id is made of
what Slack's payload makes unique (the press's ``action_ts`` and user, the modal's
view id and user; ``REJECT_DUPLICATE``), so the same interaction twice is one answer,
and the answer is sent by a worker through ``loop.tasks.answer`` as ``loop approve``
sends it, retried by Temporal until one takes it: an answer pressed while no worker
runs is not lost. The person is credited as ``slack:<name>``; the task rewrites its
message once its wait is over, and a refusal is said in the message instead.

When ``LOOP_SLACK_ANSWERERS`` lists Slack member ids, anyone else's press or modal does
nothing and is told why (an ephemeral message only they see; the modal's error). When
Temporal does not answer, nothing is started and the person is told the same way, the
buttons left as they were.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl

from slack_sdk.signature import SignatureVerifier
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from loop.contracts import (
    SLACK_ANSWER_WORKFLOW,
    SlackAnswerInput,
    SlackAnswerResult,
    SlackMessage,
    slack_answer_workflow_id,
)
from loop.errors import BadInput
from loop.hardened import json_in
from loop.hardened.text import for_slack
from loop.slack import api, blocks
from loop.tasks import payload_for
from loop.ui import bodies
from loop.ui.bodies import said

PATH = "/hooks/slack"
MAX_BODY = 1 << 20
"""Bytes read of a request; an interaction's payload is a few KB."""
MAX_FIELDS = 20
"""Form fields read of a request; Slack sends one, ``payload``."""
START_TIMEOUT_S = 2.0
"""Starting the answer's workflow (the client's own retries of an unreachable server
included) must leave time to answer Slack within its 3 s."""
ANSWER_TIMEOUT = timedelta(hours=24)
"""An answer not taken within a day is stale: the task has surely moved on (or its
worker is gone for good); the person answers again."""
log = logging.getLogger(__name__)


class SlackHook:
    def __init__(
        self,
        secret: str,
        token: str,
        api_url: str,
        client: Client,
        task_queue: str,
        answerers: frozenset[str] = frozenset(),
    ) -> None:
        self.verifier = SignatureVerifier(signing_secret=secret)
        self.web = api.client(token, api_url)
        self.client = client
        self.task_queue = task_queue
        self.answerers = answerers

    async def handle(self, request: Request) -> Response:
        body = await bodies.capped(request, MAX_BODY)
        if body is None:
            return said(413, f"refused: a request is at most {MAX_BODY} bytes")
        if not self.verifier.is_valid(
            body,
            request.headers.get("x-slack-request-timestamp"),
            request.headers.get("x-slack-signature"),
        ):
            return said(
                401, "refused: X-Slack-Signature is wrong or the request is older than 5 minutes"
            )
        try:
            form = dict(parse_qsl(body.decode("utf-8", "replace"), max_num_fields=MAX_FIELDS))
        except ValueError:
            form = {}
        if not form.get("payload"):
            return said(400, "refused: no interaction payload (form field payload)")
        payload, refusal = bodies.parsed(form["payload"])
        if refusal is not None:
            return refusal
        if not isinstance(payload, dict):
            return said(400, "refused: the payload is not a JSON object")
        kind = payload.get("type")
        if kind == "block_actions":
            return await self._pressed(payload)
        if kind == "view_submission":
            return await self._submitted(payload)
        return Response(status_code=200)  # nothing Loopwork acts on

    def _refused_user(self, user: dict[str, Any]) -> str:
        """Why this person may not answer ("" when they may)."""
        uid = str(user.get("id") or "")
        if not self.answerers or uid in self.answerers:
            return ""
        return (
            f"{blocks.by(user)} may not answer Loopwork's tasks (not in LOOP_SLACK_ANSWERERS), "
            "so nothing was done"
        )

    async def _pressed(self, p: dict[str, Any]) -> Response:
        actions = p.get("actions") or [{}]
        pressed = actions[0] if isinstance(actions[0], dict) else {}
        what = blocks.answer_of(str(pressed.get("action_id") or ""))
        task_id, commit = blocks.button_answer(str(pressed.get("value") or ""))
        container = p.get("container") or {}
        channel = str(container.get("channel_id") or (p.get("channel") or {}).get("id") or "")
        ts = str(container.get("message_ts") or (p.get("message") or {}).get("ts") or "")
        user = p.get("user") or {}
        if not what or not task_id:
            return Response(status_code=200)
        refused = self._refused_user(user)
        if refused:
            await self._tell(channel, user, refused)
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
        interaction = f"{pressed.get('action_ts') or ''}-{user.get('id') or ''}"
        inp = SlackAnswerInput(
            task_id=task_id,
            answer=what,
            fields={"commit": commit} if commit else {},
            by=blocks.by(user),
            message=SlackMessage(channel=channel, ts=ts),
        )
        not_taken = await self._start(interaction, inp)
        if not_taken:
            await self._tell(channel, user, not_taken)
        return Response(status_code=200)

    async def _submitted(self, p: dict[str, Any]) -> Response:
        view = p.get("view") or {}
        what = blocks.answer_of(str(view.get("callback_id") or ""))
        try:
            meta = json_in.loads(str(view.get("private_metadata") or "{}"))
        except ValueError:
            meta = {}
        if not what or not isinstance(meta, dict) or not meta.get("task_id"):
            return Response(status_code=200)
        form = blocks.submitted(view)
        user = p.get("user") or {}
        who = blocks.by(user)
        first = next(iter(form), "reason")
        refused = self._refused_user(user)
        if refused:
            return _errors(first, refused)
        try:
            payload_for(what, form, who)  # a missing reason is said in the modal
        except BadInput as e:
            # Said under the field it is about (``seconds: 'x' is not a number``), else the first.
            named = str(e).split(":", 1)[0]
            return _errors(named if named in form else first, str(e))
        inp = SlackAnswerInput(
            task_id=str(meta["task_id"]),
            answer=what,
            fields=form,
            by=who,
            message=SlackMessage(
                channel=str(meta.get("channel") or ""), ts=str(meta.get("ts") or "")
            ),
        )
        not_taken = await self._start(f"{view.get('id') or ''}-{user.get('id') or ''}", inp)
        if not_taken:
            return _errors(first, not_taken)  # the modal stays open: submit again later
        return Response(status_code=200)

    async def _start(self, interaction: str, inp: SlackAnswerInput) -> str:
        """The answer handed to Temporal; "" when it was (or already had been), else why not."""
        try:
            await asyncio.wait_for(self._started(interaction, inp), START_TIMEOUT_S)
        except WorkflowAlreadyStartedError:
            return ""  # Slack (or someone) sent the same interaction again: one answer
        except (RPCError, TimeoutError) as e:
            why = (e.message or str(e.status)) if isinstance(e, RPCError) else "timed out"
            log.warning("a Slack %s for %s was not taken: %s", inp.answer, inp.task_id, why)
            return (
                f"Loopwork did not take your {inp.answer}: Temporal did not answer ({why}). "
                f"Try again in a minute (or `loop {inp.answer} {inp.task_id}`); should it "
                "have been taken after all, the message will say so"
            )
        return ""

    async def _started(self, interaction: str, inp: SlackAnswerInput) -> None:
        await self.client.start_workflow(
            SLACK_ANSWER_WORKFLOW,
            inp,
            id=slack_answer_workflow_id(interaction),
            task_queue=self.task_queue,
            result_type=SlackAnswerResult,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            execution_timeout=ANSWER_TIMEOUT,
            static_summary=f"{inp.answer} {inp.task_id} from Slack ({inp.by})",
        )

    async def _tell(self, channel: str, user: dict[str, Any], text: str) -> None:
        """An ephemeral message only ``user`` sees, beside the message they pressed."""
        uid = str(user.get("id") or "")
        if not channel or not uid:
            return
        try:
            await api.call(
                self.web, "chat.postEphemeral", channel=channel, user=uid, text=for_slack(text)
            )
        except Exception as e:
            log.warning(
                "Slack chat.postEphemeral failed: %s", api.classified("chat.postEphemeral", e)
            )


def _errors(field: str, message: str) -> Response:
    """A modal's answer that keeps it open with ``message`` under ``field``."""
    return JSONResponse({"response_action": "errors", "errors": {field: message[:2000]}})
