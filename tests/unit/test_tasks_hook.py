"""``POST /hooks/tasks``'s pure checks: the bearer token, a body's keys and the reasons it
is refused, and ``loop ui``'s settings for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from loop.contracts import TriageSources
from loop.errors import BadInput
from loop.ui.config import hooks_token, tasked, webhook
from loop.ui.tasks_hook import TasksHook, token_ok
from tests.support.repos import make_demo_repo
from tests.support.triage import template, write_sources

TOKEN = "hooks-token-0123456789abcdefghij"


def test_only_the_bearer_token_is_taken():
    assert token_ok(TOKEN, f"Bearer {TOKEN}") and token_ok(TOKEN, f"bearer  {TOKEN} ")
    for header in ("", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer "):
        assert not token_ok(TOKEN, header), header


def hook() -> TasksHook:
    sources = TriageSources.model_validate(
        {"template": {"repo": "/r"}, "sources": [{"name": "lin", "kind": "webhook"}]}
    )
    return TasksHook(TOKEN, {"lin": sources}, client=None, task_queue="q")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ([], "the body is not a JSON object"),
        ({"source": "lin", "id": "1", "title": "t", "agent": {}}, "a body may not set 'agent'"),
        ({"source": "lin", "id": "1", "title": "t", "verify": []}, "a body may not set 'verify'"),
        ({"source": "lin", "id": "1", "title": "t", "repo": "/x"}, "a body may not set 'repo'"),
        ({"source": "gh", "id": "1", "title": "t"}, "source 'gh' is not a source of --sources"),
        ({"source": "lin", "title": "t"}, "id must be the item's id"),
        ({"source": "lin", "id": "x" * 65, "title": "t"}, "id must be the item's id"),
        ({"source": "lin", "id": "1", "labels": ["a"]}, "say what must be true when done"),
    ],
)
def test_a_body_that_would_configure_the_task_or_says_nothing_is_refused(body, why):
    said = hook().refused(body)
    assert said.startswith(why), said
    assert "\n" not in said


def test_a_body_of_goal_level_fields_is_taken():
    body = {"source": "lin", "id": 42, "title": "Fix it", "body": "...", "labels": ["bug"]}
    assert hook().refused(body | {"budget": {"max_attempts": 1}, "autonomy": "report"}) == ""


def test_the_token_and_the_sources_go_together(tmp_path: Path):
    short = tmp_path / "short"
    short.write_text("short")
    with pytest.raises(BadInput, match="shorter than 16"):
        hooks_token(str(short))
    assert hooks_token("") is None
    with pytest.raises(BadInput, match="name the sources whose templates make the tasks"):
        tasked([])
    spec = template(make_demo_repo(tmp_path / "repo"), ["true"])
    file = write_sources(tmp_path, spec, [{"name": "lin", "kind": "webhook"}])
    assert [s.name for s in tasked([file])["lin"].sources] == ["lin"]
    assert webhook("", [file], tasks=True) == (None, [])
    with pytest.raises(BadInput, match="LOOP_HOOKS_TOKEN_FILE"):
        webhook("", [file])
