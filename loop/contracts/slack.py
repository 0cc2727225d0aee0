"""Slack: the message a waiting task posts, and the step that closes it.

When the worker has a Slack bot token and a channel (``LOOP_SLACK_BOT_TOKEN_FILE``,
``LOOP_SLACK_CHANNEL``), each wait for a person posts one Block Kit message with the
answers as buttons (``slack_post``), and when the wait ends, however it ends, the task
rewrites that message to say how (``slack_close``), so no live button outlives its
decision. ``POST /hooks/slack`` in ``loop ui`` turns a button into the CLI's answer,
handed to ``SlackAnswerWorkflow`` (one per interaction) so that it is sent durably.
"""

import re

from pydantic import Field

from loop.contracts.base import _Record
from loop.contracts.states import TaskState

ACTION_PREFIX = "loop_"
"""Every Loopwork button's ``action_id`` (and modal's ``callback_id``): ``loop_<answer>``."""
SLACK_ANSWER_WORKFLOW = "SlackAnswerWorkflow"
INTERACTION_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def slack_answer_workflow_id(interaction: str) -> str:
    """The one workflow a Slack interaction may start: ``slack-answer-<interaction>``,
    where the interaction is what Slack's payload makes unique (a press's ``action_ts``
    and user, a modal's view id and user), cut to characters a workflow id may hold."""
    return "slack-answer-" + INTERACTION_CHARS.sub("-", interaction)[:120]


class SlackPostInput(_Record):
    task_id: str
    goal: str
    state: TaskState
    reason: str
    waiting_for: str
    attempt: int
    repo: str = ""
    """The task's repository: ``LOOP_SLACK_CHANNEL`` may name a channel per repository."""
    channel: str = ""
    """The task's own channel (``slack_channel``, a source's); empty: the repository's."""
    commit: str = ""
    """While the task waits for approval: the commit its approve button approves."""
    verdict: str = ""
    """The last verdict in a few words (``tests pass, scope FAIL``), "" before any."""


class SlackMessage(_Record):
    """Where a posted message is (``chat.update`` finds it by both); empty: none posted
    (Slack is not configured on the worker that took the step)."""

    channel: str = ""
    ts: str = ""


class SlackCloseInput(_Record):
    task_id: str
    message: SlackMessage
    outcome: str
    """How the wait ended, in a few words (``approved (by slack:ann)``); may quote a
    person, so it is escaped where shown."""


class SlackCloseResult(_Record):
    updated: bool = False


class SlackAnswerInput(_Record):
    """A person's answer from Slack, as ``loop ui`` checked it (signature, allow-list):
    sent durably by ``SlackAnswerWorkflow``, whatever happens to ``loop ui`` after."""

    task_id: str
    answer: str
    """``approve``, ``reject``, ``feedback`` or ``extend``."""
    fields: dict[str, str] = Field(default_factory=dict)
    by: str
    """``slack:<name>``."""
    message: SlackMessage = Field(default_factory=SlackMessage)
    """The message the button was on: a refusal is said there."""


class SlackAnswerResult(_Record):
    did: str = ""
    refused: str = ""
