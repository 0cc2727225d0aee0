"""escalate: tell people that a task waits for them, and why.

Every escalation is logged, appended to ``LOOP_HOME/inbox.jsonl`` and, when a
webhook is configured, POSTed as JSON (with a Slack-compatible ``text``). A
person not being pinged must never stop the task from waiting for them: the
workflow sends the message alongside the wait, and Temporal retries a failing
webhook while the inbox line is written once.
"""

from __future__ import annotations

import json
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from loop.contracts import (
    ESCALATE,
    EscalateInput,
    EscalateResult,
    workflow_id_for,
)
from loop.hardened.text import for_slack, for_terminal
from loop.logs import log_for
from loop.rules.answers import answer_with
from loop.settings import Settings


class EscalateActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=ESCALATE.name)
    async def escalate(self, inp: EscalateInput) -> EscalateResult:
        message = self.message(inp)
        log_for(inp.task_id, inp.attempt, "escalate").warning(
            "task waits for a person", reason=inp.reason, waiting_for=inp.waiting_for
        )
        result = EscalateResult()
        inbox = self.settings.home / "inbox.jsonl"
        inbox.parent.mkdir(parents=True, exist_ok=True)
        key = f"{inp.task_id}:{inp.attempt}:{inp.state}:{inp.reason}"
        if not _already_written(inbox, key):
            with inbox.open("a") as f:
                f.write(json.dumps({**message, "key": key}) + "\n")
        result.notified.append(str(inbox))
        import httpx  # here, not at the top: a new worker starts without it

        url = self.settings.webhook_url
        if url:
            try:
                async with httpx.AsyncClient(timeout=10) as client:
                    response = await client.post(url, json=message)
                    response.raise_for_status()
            except httpx.HTTPError as e:
                # Retried by Temporal; the inbox line above is not written twice.
                raise ApplicationError(
                    f"webhook {url}: {type(e).__name__}: {e}".splitlines()[0],
                    type="WebhookFailed",
                ) from None
            result.notified.append(url)
        return result

    @staticmethod
    def message(inp: EscalateInput) -> dict[str, object]:
        wid = workflow_id_for(inp.task_id)
        answer = answer_with(inp.task_id, inp.waiting_for)
        return {
            # Slack reads <!channel>, <url|text> and &-entities in ``text``: the reason may
            # quote an agent or an issue, so it is escaped the way Slack asks.
            "text": for_slack(f"Loopwork task {inp.task_id} is {inp.state}: {inp.reason}. ")
            + f"Answer: `{for_slack(answer)}`",
            "task_id": inp.task_id,
            "workflow_id": wid,
            "state": str(inp.state),
            "reason": for_terminal(inp.reason),
            "waiting_for": inp.waiting_for,
            "attempt": inp.attempt,
            "last_verdict": inp.last_verdict,
            "goal": for_terminal(inp.goal.strip().split("\n")[0][:200]),
            "answer_with": answer,
        }


def _already_written(inbox: Path, key: str) -> bool:
    """A retried escalate must not append the same message twice."""
    try:
        tail = inbox.read_text().splitlines()[-50:]
    except FileNotFoundError:
        return False
    return any(json.loads(line).get("key") == key for line in tail if line.strip())
