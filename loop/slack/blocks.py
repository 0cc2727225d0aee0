"""What Loopwork shows in Slack, as Block Kit JSON: a waiting task's message with its
answers as buttons, the same message once the wait is over (no buttons left), and the
modals that ask for a reject's reason, feedback's text or an extension's figures.

No I/O: the worker's ``slack_post``/``slack_close`` and ``loop ui``'s ``POST /hooks/slack``
build their requests from these, and the tests read them back with ``slack-sdk``'s
models. Every text a task carries (its reason, goal, a person's words) can quote an agent
or an issue, so it goes through ``for_slack``: Slack's ``<!channel>``, ``<url|text>`` and
``&`` entities come out inert.
"""

from __future__ import annotations

import json
import re
from typing import Any

from loop.contracts import ACTION_PREFIX, WAITING_APPROVAL, WAITING_DECISION, WAITING_PULL_REQUEST
from loop.hardened.text import for_slack

BUTTONS = {
    WAITING_APPROVAL: ("approve", "reject"),
    WAITING_DECISION: ("feedback", "extend", "reject"),
    WAITING_PULL_REQUEST: ("feedback", "reject"),  # merging is done on GitHub
}
"""The buttons of a wait: the answers that apply to it (``loop.rules.answers``)."""
LABELS = {"approve": "Approve", "reject": "Reject", "feedback": "Give feedback", "extend": "Extend"}
MODALS = ("reject", "feedback", "extend")
"""Answers that need words or figures first: their button opens a modal."""
SECTION_CHARS = 2900
"""Slack refuses a section's text past 3000 characters."""
CONTEXT_CHARS = 600
REVIEW_ACTION = f"{ACTION_PREFIX}review_page"
"""The review page's link button: Slack tells the app it was pressed, which is no answer."""
USER = re.compile(r"[^A-Za-z0-9._-]")


def action_id(answer: str) -> str:
    return ACTION_PREFIX + answer


def answer_of(action: str) -> str:
    """The answer a button or modal names, or "" when it is not one of Loopwork's."""
    name = action.removeprefix(ACTION_PREFIX)
    return name if action.startswith(ACTION_PREFIX) and name in LABELS else ""


def by(user: dict[str, Any]) -> str:
    """Who answered, as the trace credits them: ``slack:<name>`` (Slack's user name, else
    its id), cut to what a name may hold."""
    name = str(user.get("username") or user.get("name") or user.get("id") or "unknown")
    return "slack:" + (USER.sub("-", name)[:40] or "unknown")


def _summary(task_id: str, state: str, reason: str, goal: str) -> str:
    head = f"*Loopwork task `{for_slack(task_id)}` is {for_slack(state)}*: {for_slack(reason)}"
    first = goal.strip().split("\n")[0][:200]
    return (head + (f"\n>{for_slack(first)}" if first else ""))[:SECTION_CHARS]


def button_value(task_id: str, commit: str) -> str:
    """A button's value: the task, and for an approval the commit it approves (task ids
    hold no space)."""
    return f"{task_id} {commit}" if commit else task_id


def button_answer(value: str) -> tuple[str, str]:
    """(task id, commit) of a button's value ("" for a message posted before buttons named
    the commit: it approves the one waiting, as long as the message lives)."""
    task_id, _, commit = value.partition(" ")
    return task_id, commit.strip()


def waiting(
    task_id: str,
    state: str,
    reason: str,
    goal: str,
    waiting_for: str,
    commit: str = "",
    verdict: str = "",
    review: str = "",
) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) of the message a wait posts; ``commit``: the one its
    approve button approves, shown in the message; ``verdict``: the last verdict's
    summary; ``review``: the task's review page, where ``LOOP_REVIEW_URL`` says people
    reach it (a button's link, never text Slack would read as markup)."""
    text = for_slack(f"Loopwork task {task_id} is {state}: {reason}")[:SECTION_CHARS]
    buttons = [
        {
            "type": "button",
            "action_id": action_id(a),
            "text": {"type": "plain_text", "text": LABELS[a]},
            "value": button_value(task_id, commit if a == "approve" else ""),
            **({"style": "primary"} if a == "approve" else {}),
            **({"style": "danger"} if a == "reject" else {}),
        }
        for a in BUTTONS.get(waiting_for, ())
    ]
    if review:
        buttons.append(
            {
                "type": "button",
                "action_id": REVIEW_ACTION,
                "text": {"type": "plain_text", "text": "Review page"},
                "url": review,
            }
        )
    summary = _summary(task_id, state, reason, goal)
    if commit:  # git's hex, what the approve button approves
        summary = f"{summary[: SECTION_CHARS - 70]}\nApprove approves commit `{commit[:40]}`"
    blocks: list[dict[str, Any]] = [{"type": "section", "text": _mrkdwn(summary)}]
    if verdict:  # gate names are the task file's: escaped like any text from outside
        said = f"Last verdict: {for_slack(verdict)}"[:CONTEXT_CHARS]
        blocks.append({"type": "context", "elements": [_mrkdwn(said)]})
    if buttons:
        blocks.append({"type": "actions", "block_id": "loop_answers", "elements": buttons})
    return text, blocks


def _mrkdwn(text: str) -> dict[str, str]:
    return {"type": "mrkdwn", "text": text}


def closed(task_id: str, outcome: str) -> tuple[str, list[dict[str, Any]]]:
    """(text, blocks) of a message whose wait is over: how it ended, no buttons."""
    said = for_slack(f"Loopwork task {task_id}: {outcome}")[:SECTION_CHARS]
    return said, [{"type": "section", "text": _mrkdwn(said)}]


def modal(answer: str, task_id: str, channel: str, ts: str) -> dict[str, Any]:
    """The modal a reject, feedback or extend button opens; it carries the task and the
    message in ``private_metadata`` (Slack sends it back with the submission)."""
    fields = {
        "reject": [_text_input("reason", "Why is it rejected? (recorded in the trace)", True)],
        "feedback": [_text_input("text", "What should the agent do differently?", True)],
        "extend": [
            _text_input("attempts", "More attempts", False, multiline=False, optional=True),
            _text_input("seconds", "More seconds", False, multiline=False, optional=True),
        ],
    }[answer]
    titles = {"reject": "Reject the task", "feedback": "Give feedback", "extend": "Extend"}
    return {
        "type": "modal",
        "callback_id": action_id(answer),
        "title": {"type": "plain_text", "text": titles[answer]},
        "submit": {"type": "plain_text", "text": LABELS[answer]},
        "close": {"type": "plain_text", "text": "Cancel"},
        "private_metadata": json.dumps({"task_id": task_id, "channel": channel, "ts": ts}),
        "blocks": [
            {
                "type": "section",
                "text": _mrkdwn(f"Task `{for_slack(task_id)}`"),
            },
            *fields,
        ],
    }


def _text_input(
    name: str, label: str, required: bool, *, multiline: bool = True, optional: bool = False
) -> dict[str, Any]:
    return {
        "type": "input",
        "block_id": name,
        "optional": optional or not required,
        "label": {"type": "plain_text", "text": label},
        "element": {
            "type": "plain_text_input",
            "action_id": name,
            "multiline": multiline,
            "max_length": 3000,
        },
    }


def submitted(view: dict[str, Any]) -> dict[str, str]:
    """A modal's fields as the CLI's form (``loop.tasks.payload_for``): name -> text."""
    values = (view.get("state") or {}).get("values") or {}
    form: dict[str, str] = {}
    for block_id, inputs in values.items():
        if isinstance(inputs, dict) and isinstance(inputs.get(block_id), dict):
            form[str(block_id)] = str(inputs[block_id].get("value") or "")
    return form
