"""Slack's pure parts and the Web API calls: the message and its buttons as slack-sdk
reads them, hostile text made inert, who answered, a modal's fields, and how each of
Slack's failures is classified for Temporal's retries (against the stand-in)."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from pathlib import Path

import pytest
from slack_sdk.models.blocks import ActionsBlock, Block, SectionBlock
from slack_sdk.models.views import View

from activities.slack import SlackActivities
from loop.contracts import (
    PERMANENT,
    SIGNAL_APPROVE,
    SIGNAL_EXTEND_BUDGET,
    SIGNAL_FEEDBACK,
    SIGNAL_REJECT,
    WAITING_APPROVAL,
    WAITING_DECISION,
    WAITING_PULL_REQUEST,
    SlackCloseInput,
    SlackMessage,
    SlackPostInput,
    TaskState,
    slack_answer_workflow_id,
)
from loop.errors import BadInput, TaskFileError
from loop.loaders import load_sources
from loop.rules import answers
from loop.settings import Settings
from loop.slack import api, blocks
from loop.tasks import payload_for
from loop.ui.config import slack as slack_config
from loop.ui.config import slack_answerers
from tests.support.agents import write_agent
from tests.support.slack import CHANNEL, TOKEN, SlackStandIn, serving
from tests.support.triage import NOTHING, template, write_sources


def test_a_wait_shows_the_answers_that_apply_as_buttons():
    _, approval = blocks.waiting(
        "fix-1", "AWAITING_APPROVAL", "verified", "Fix it", WAITING_APPROVAL
    )
    _, decision = blocks.waiting("fix-1", "NEEDS_HUMAN", "stalled", "Fix it", WAITING_DECISION)
    for shown, ids in (
        (approval, ["loop_approve", "loop_reject"]),
        (decision, ["loop_feedback", "loop_extend", "loop_reject"]),
    ):
        section, actions = (Block.parse(b) for b in shown)
        assert isinstance(section, SectionBlock) and isinstance(actions, ActionsBlock)
        section.validate_json()
        actions.validate_json()
        assert [e.action_id for e in actions.elements] == ids
        assert {e.value for e in actions.elements} == {"fix-1"}
    assert [blocks.answer_of(i) for i in ("loop_approve", "loop_extend", "loop_x", "approve")] == [
        "approve",
        "extend",
        "",
        "",
    ]


def test_the_approve_button_names_the_commit_its_message_shows():
    commit = "3f2a9c1b7d40" + "0" * 28
    _, shown = blocks.waiting(
        "fix-1", "AWAITING_APPROVAL", "verified", "Fix it", WAITING_APPROVAL, commit
    )
    section, actions = (Block.parse(b) for b in shown)
    assert isinstance(section, SectionBlock) and isinstance(actions, ActionsBlock)
    section.validate_json()
    assert section.text is not None and f"Approve approves commit `{commit}`" in section.text.text
    values = {e.action_id: e.value for e in actions.elements}
    assert values == {"loop_approve": f"fix-1 {commit}", "loop_reject": "fix-1"}
    assert blocks.button_answer(values["loop_approve"]) == ("fix-1", commit)
    # A message posted before buttons named their commit: the task alone.
    assert blocks.button_answer("fix-1") == ("fix-1", "")


def test_hostile_text_is_inert_in_every_message():
    reason = "<!channel> see <https://evil.example|the fix> & \x1b[2Jdone"
    text, shown = blocks.waiting("t", "NEEDS_HUMAN", reason, "<@U1> goal", WAITING_DECISION)
    said = shown[0]["text"]["text"] + text
    closed_text, closed = blocks.closed("t", f"rejected (by slack:ann): {reason}")
    said += closed[0]["text"]["text"] + closed_text
    for markup in ("<!channel>", "<https://", "<@U1>", "\x1b"):
        assert markup not in said
    assert "&lt;!channel&gt;" in said and "&amp;" in said
    assert len(closed) == 1 and closed[0]["type"] == "section", "no buttons left"


def test_who_answered_is_a_name_a_trace_can_hold():
    assert blocks.by({"id": "U1", "username": "ann"}) == "slack:ann"
    assert blocks.by({"id": "U1"}) == "slack:U1"
    assert blocks.by({"username": "a b;$(rm -rf ~)"}) == "slack:a-b---rm--rf---"
    assert blocks.by({}) == "slack:unknown"


def test_modals_are_views_slack_takes_and_their_fields_are_the_cli_form():
    for answer in blocks.MODALS:
        view = blocks.modal(answer, "fix-1", CHANNEL, "1.2")
        View(**view).validate_json()
        assert view["callback_id"] == f"loop_{answer}"
    extend = blocks.modal("extend", "fix-1", CHANNEL, "1.2")
    values = {"attempts": {"attempts": {"value": "2"}}, "seconds": {"seconds": {"value": None}}}
    form = blocks.submitted(extend | {"state": {"values": values}})
    assert form == {"attempts": "2", "seconds": ""}
    payload = payload_for("extend", form, "slack:ann")
    assert (payload.attempts, payload.seconds, payload.by) == (2, 0, "slack:ann")
    with pytest.raises(BadInput, match="say why it is rejected"):
        payload_for("reject", blocks.submitted({"state": {"values": {}}}), "slack:ann")


def test_loop_ui_takes_the_signing_secret_and_the_token_together(tmp_path: Path):
    secret, token = tmp_path / "secret", tmp_path / "token"
    secret.write_text("s" * 32)
    token.write_text(TOKEN)
    assert slack_config({}) is None
    with pytest.raises(BadInput, match="set LOOP_SLACK_BOT_TOKEN_FILE too"):
        slack_config({"LOOP_SLACK_SIGNING_SECRET_FILE": str(secret)})
    (tmp_path / "short").write_text("short")
    with pytest.raises(BadInput, match="shorter than 16"):
        slack_config(
            {
                "LOOP_SLACK_SIGNING_SECRET_FILE": str(tmp_path / "short"),
                "LOOP_SLACK_BOT_TOKEN_FILE": str(token),
            }
        )
    got = slack_config(
        {"LOOP_SLACK_SIGNING_SECRET_FILE": str(secret), "LOOP_SLACK_BOT_TOKEN_FILE": str(token)}
    )
    assert got is not None and got.token == TOKEN and got.api_url == api.DEFAULT_API


def _activities(tmp_path: Path, url: str, token: str = TOKEN) -> SlackActivities:
    file = tmp_path / "token"
    file.write_text(token)
    return SlackActivities(
        Settings(home=tmp_path, slack_token_file=file, slack_channel=CHANNEL, slack_api_url=url)
    )


POST = SlackPostInput(
    task_id="fix-1",
    goal="Fix it",
    state=TaskState.NEEDS_HUMAN,
    reason="attempts exhausted",
    waiting_for=WAITING_DECISION,
    attempt=3,
)


def test_a_worker_without_slack_posts_nothing(tmp_path: Path):
    plain = SlackActivities(Settings(home=tmp_path))
    assert asyncio.run(plain.slack_post(POST)) == SlackMessage()
    close = SlackCloseInput(task_id="fix-1", message=SlackMessage(), outcome="cancelled")
    assert not asyncio.run(plain.slack_close(close)).updated


def test_a_post_and_its_close_reach_the_same_message(tmp_path: Path):
    with serving(SlackStandIn()) as hub:
        acts = _activities(tmp_path, hub.url)
        posted = asyncio.run(acts.slack_post(POST))
        close = SlackCloseInput(task_id="fix-1", message=posted, outcome="approved (by ann)")
        closed = asyncio.run(acts.slack_close(close))
    (m,) = hub.messages
    assert (posted.channel, posted.ts) == (CHANNEL, m.ts) and closed.updated
    assert not m.buttons() and "approved (by ann)" in m.shown()


def test_a_waiting_message_carries_the_verdict_and_a_link_to_the_review_page(tmp_path: Path):
    """What a person needs to decide from Slack: the last verdict and where to look at it
    whole. The verdict's text is escaped like any other (a gate name is the task file's),
    and the link button is no answer when pressed."""
    with serving(SlackStandIn()) as hub:
        acts = _activities(tmp_path, hub.url)
        acts.settings = acts.settings.model_copy(update={"review_url": "https://loop.example/"})
        verdict = "tests pass, <!channel> FAIL"
        asyncio.run(acts.slack_post(POST.model_copy(update={"verdict": verdict})))
        plain = _activities(tmp_path, hub.url)  # no LOOP_REVIEW_URL: no link
        asyncio.run(plain.slack_post(POST))
    linked, bare = hub.messages
    assert "Last verdict: tests pass, &lt;!channel&gt; FAIL" in linked.shown()
    (review,) = [b for b in linked.buttons() if "url" in b]
    assert review["url"] == "https://loop.example/tasks/fix-1"
    assert blocks.answer_of(review["action_id"]) == ""
    assert not [b for b in bare.buttons() if "url" in b] and "Last verdict" not in bare.shown()


def test_slack_failures_are_classified_for_temporal(tmp_path: Path):
    with serving(SlackStandIn()) as hub:
        bad = _activities(tmp_path, hub.url, token="xoxb-wrong")
        with pytest.raises(Exception) as refused:
            asyncio.run(bad.slack_post(POST))
        hub.down = True
        with pytest.raises(Exception) as down:
            asyncio.run(_activities(tmp_path, hub.url).slack_post(POST))
        hub.down, hub.limited = False, 7
        with pytest.raises(Exception) as limited:
            asyncio.run(_activities(tmp_path, hub.url).slack_post(POST))
    with pytest.raises(Exception) as gone:
        asyncio.run(_activities(tmp_path, "http://127.0.0.1:9/api/").slack_post(POST))
    assert refused.value.type == PERMANENT and refused.value.non_retryable
    assert "invalid_auth" in refused.value.message
    assert not down.value.non_retryable and down.value.type == "SlackFailed"
    assert limited.value.type == api.RATE_LIMITED
    assert limited.value.next_retry_delay == timedelta(seconds=7)
    assert not gone.value.non_retryable and gone.value.type == "SlackUnreachable"


def test_a_channel_per_repository_and_a_default(tmp_path: Path):
    app, lib = tmp_path / "app", tmp_path / "lib"
    both = f"{app}=C0APP, https://github.com/acme/lib.git=C0LIB"
    settings = Settings(home=tmp_path, slack_channel=f"C0ALL,{both}")
    assert settings.slack_channel_for(str(app)) == "C0APP"
    assert settings.slack_channel_for(str(app / ".." / "app")) == "C0APP"
    assert settings.slack_channel_for("https://github.com/acme/lib") == "C0LIB"
    assert settings.slack_channel_for(str(lib)) == "C0ALL"
    only = Settings(home=tmp_path, slack_channel=both)
    assert only.slack_channel_for(str(lib)) == "", "no default: that repository posts nothing"
    with serving(SlackStandIn()) as hub:
        acts = _activities(tmp_path, hub.url)
        acts.settings = acts.settings.model_copy(update={"slack_channel": both})
        posted = asyncio.run(acts.slack_post(POST.model_copy(update={"repo": str(app)})))
        none = asyncio.run(acts.slack_post(POST.model_copy(update={"repo": str(lib)})))
    assert posted.channel == "C0APP" and [m.channel for m in hub.messages] == ["C0APP"]
    assert none == SlackMessage()


@pytest.mark.parametrize(
    ("waiting_for", "state"),
    [
        (WAITING_APPROVAL, TaskState.AWAITING_APPROVAL),
        (WAITING_DECISION, TaskState.NEEDS_HUMAN),
        (WAITING_PULL_REQUEST, TaskState.AWAITING_APPROVAL),
    ],
)
def test_a_wait_has_a_button_for_each_answer_that_applies_and_no_other(
    waiting_for: str, state: TaskState
):
    """The buttons and the task's own rule must agree: a button the rule refuses is a
    dead end, an answer it takes without a button sends people to a terminal."""
    signal = {"approve": SIGNAL_APPROVE, "reject": SIGNAL_REJECT, "feedback": SIGNAL_FEEDBACK,
              "extend": SIGNAL_EXTEND_BUDGET}  # fmt: skip
    taken = {button for button, name in signal.items() if answers.applies(name, state, waiting_for)}
    assert set(blocks.BUTTONS[waiting_for]) == taken


def test_the_answerers_are_slack_member_ids_or_loop_ui_does_not_start():
    assert slack_answerers("") == frozenset()
    assert slack_answerers(" UBOB , W0CAROL,") == {"UBOB", "W0CAROL"}
    for bad, said in [
        ("ann", "'ann' is not a Slack member id"),
        ("UBOB,<@UANN>", "'<@UANN>' is not a Slack member id"),
        (" , ", "no member id"),
    ]:
        with pytest.raises(BadInput, match=r"^LOOP_SLACK_ANSWERERS: ") as e:
            slack_answerers(bad)
        assert said in str(e.value) and "\n" not in str(e.value)


def test_an_interaction_is_one_workflow_id_whatever_slack_sends():
    assert slack_answer_workflow_id("1764612345.123456-UANN") == (
        "slack-answer-1764612345.123456-UANN"
    )
    hostile = slack_answer_workflow_id("V1/../<!channel>\n" + "x" * 500)
    assert hostile.startswith("slack-answer-V1-..---channel--x")
    assert len(hostile) <= len("slack-answer-") + 120
    assert re.fullmatch(r"[A-Za-z0-9._-]+", hostile)


def test_a_source_names_its_own_channel_over_the_workers(demo_repo: Path, tmp_path: Path):
    """``slack_channel`` is a task-file field, so a source's ``template`` sets it for its
    items; the post goes there whatever ``LOOP_SLACK_CHANNEL`` says."""
    tmpl = template(demo_repo, write_agent(tmp_path, NOTHING))
    ci = {"name": "ops", "kind": "ci", "run": "true", "template": {"slack_channel": "C0OPS"}}
    loaded = load_sources(write_sources(tmp_path, tmpl, [ci]))
    assert loaded.sources[0].template["slack_channel"] == "C0OPS"
    bad = {**ci, "template": {"slack_channel": "#ops <!channel>"}}
    with pytest.raises(TaskFileError, match="slack_channel"):
        load_sources(write_sources(tmp_path, tmpl, [bad]))
    with serving(SlackStandIn()) as hub:
        acts = _activities(tmp_path, hub.url)  # the worker's LOOP_SLACK_CHANNEL: CHANNEL
        own = asyncio.run(acts.slack_post(POST.model_copy(update={"channel": "C0OPS"})))
        default = asyncio.run(acts.slack_post(POST))
    assert [m.channel for m in hub.messages] == ["C0OPS", CHANNEL]
    assert (own.channel, default.channel) == ("C0OPS", CHANNEL)
