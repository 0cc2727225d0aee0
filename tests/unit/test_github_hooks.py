"""The pure parts of GitHub's webhook: the ``/loop`` parser, the signature, the settings."""

from __future__ import annotations

import copy
import hashlib
import hmac
import re
from pathlib import Path

import pytest

from loop.contracts import ReviewComment
from loop.errors import BadInput
from loop.rules.answers import unapproved
from loop.rules.hooks import Command, addressed, delivery_key, parse, review_feedback
from loop.ui.config import webhook
from loop.ui.hooks import _ignored, signature_ok
from tests.support.triage import template, write_sources


def test_only_a_first_line_beginning_with_loop_is_addressed():
    assert addressed("/loop approve") and addressed("  /loop\n") and addressed("/loop run")
    assert not addressed("/loopy approve") and not addressed("please /loop approve")
    assert not addressed("looks good\n/loop approve"), "the command is the first line"


def test_commands_are_parsed_as_data():
    assert parse("/loop approve") == Command("approve", {"note": ""})
    assert parse("/loop APPROVE ship it") == Command("approve", {"note": "ship it"})
    assert parse("/loop reject too risky\nsee the diff") == Command(
        "reject", {"reason": "too risky\nsee the diff"}
    )
    assert parse("/loop feedback $(rm -rf ~); `id`") == Command(
        "feedback", {"text": "$(rm -rf ~); `id`"}
    ), "text stays text"
    assert parse("/loop run now please") == Command("run")
    assert parse("/loop retry") == Command("retry")
    assert parse("/loop extend attempts=2 --seconds 600") == Command(
        "extend", {"attempts": "2", "seconds": "600"}
    )
    assert parse("/loop extend cost-usd=0.5").fields == {"cost_usd": "0.5"}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("/loop", "say what to do"),
        ("/loop merge", "`merge` is not a command"),
        ("/loop rm`-rf", "`rm'-rf` is not a command"),
        ("/loop reject", "say why it is rejected"),
        ("/loop feedback  ", "the feedback is empty"),
        ("/loop extend", "say what to add"),
        ("/loop extend attempts=two", "attempts: `two` is not a number"),
        ("/loop extend --shell 1", "`/loop extend` takes attempts"),
    ],
)
def test_a_bad_command_says_why_in_one_line(body: str, error: str):
    command = parse(body)
    assert command.verb == "" and command.error.startswith(error), command.error
    assert "\n" not in command.error


def test_the_signature_is_githubs():
    secret, body = b"It's a Secret to Everybody", b"Hello, World!"
    # GitHub's documented example of X-Hub-Signature-256 for this secret and body.
    documented = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert signature_ok(secret, body, documented)
    assert not signature_ok(secret, body + b" ", documented)
    assert not signature_ok(secret, body, "")
    assert not signature_ok(secret, body, documented.removeprefix("sha256="))
    mac = hmac.new(b"other", body, hashlib.sha256).hexdigest()
    assert not signature_ok(secret, body, f"sha256={mac}")


def test_the_secret_and_the_sources_go_together(tmp_path: Path, demo_repo: Path):
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123\n")
    gh = {"name": "gh", "kind": "github", "repo": "acme/app"}
    file = write_sources(tmp_path, template(demo_repo, ["true"]), [gh])
    got, hooked = webhook(str(secret), [file])
    assert got == b"0123456789abcdef0123"
    assert [(h.source.name, h.source.repo) for h in hooked] == [("gh", "acme/app")]
    assert webhook("", []) == (None, [])

    cases = {
        "set LOOP_GITHUB_WEBHOOK_SECRET_FILE": ("", [file]),
        "cannot read": (str(tmp_path / "nope"), [file]),
        "no --sources file has a github source": (str(secret), []),
        "two github sources are for acme/app": (str(secret), [file, file]),
    }
    for said, (secret_file, files) in cases.items():
        with pytest.raises(BadInput) as e:
            webhook(secret_file, files)
        assert said in str(e.value) and "\n" not in str(e.value)
    short = tmp_path / "short"
    short.write_text("pin")
    with pytest.raises(BadInput, match="shorter than 16 characters"):
        webhook(str(short), [file])


def test_a_review_is_one_feedback_with_each_inline_comment():
    comments = [
        ReviewComment(path="a.py", line=3, diff_hunk="@@ -1 +1 @@\n-x\n+y", body="Why?"),
        ReviewComment(path="b.py", line=None, diff_hunk="", body="Gone now."),
    ]
    text = review_feedback("ann", "changes_requested", " Fix it. ", comments)
    assert text == (
        "Review on GitHub by ann (requested changes):\n\nFix it.\n\n"
        "a.py:3\n```diff\n@@ -1 +1 @@\n-x\n+y\n```\nWhy?\n\n"
        "b.py (outdated)\nGone now."
    )
    assert review_feedback("ann", "commented", "", []) == ""
    assert review_feedback("bo", "commented", "nit", []).startswith(
        "Review on GitHub by bo (commented)"
    )
    long = review_feedback("ann", "commented", "x" * 30_000, [])
    assert len(long) <= 20_000 and long.endswith("[… cut]")


SHA = "3f786850e387550fdab836ed7e6dc881de23001b"


@pytest.mark.parametrize(
    ("event", "ran", "ci", "why"),
    [
        ("check_run", {"check_suite": {"head_branch": "main"}, "conclusion": "failure"}, True, ""),
        ("check_suite", {"head_branch": "loop/gh-1", "conclusion": "success"}, False, ""),
        (
            "workflow_run",
            {"head_branch": "main", "conclusion": "success"},
            True,
            "workflow_run success on main",
        ),
        (
            "check_suite",
            {"head_branch": "main", "conclusion": "failure"},
            False,
            "check_suite on main: the source names no ci_checks",
        ),
        (
            "check_run",
            {"head_sha": "not-a-sha", "conclusion": "failure"},
            True,
            "check_run without a commit",
        ),
    ],
)
def test_which_check_deliveries_reach_a_workflow(event: str, ran: dict, ci: bool, why: str):
    payload = {"action": "completed", event: {"head_sha": SHA} | ran}
    assert _ignored(event, payload, ci=ci) == why
    assert _ignored(event, payload | {"action": "requested"}, ci=ci) == f"{event} requested"


def test_a_delivery_is_keyed_by_what_its_signed_body_is_about():
    """The key is the object's id and the action (and, for what may happen to it again,
    when it last changed): the same body has the same key whatever the unsigned delivery
    id; another comment, label, change or kind of event has another."""
    comment = {"action": "created", "comment": {"id": 123, "body": "/loop extend attempts=1"}}
    assert delivery_key("issue_comment", comment) == "comment-123-created"
    assert delivery_key("issue_comment", copy.deepcopy(comment)) == "comment-123-created"
    edited = copy.deepcopy(comment)
    edited["comment"]["body"] = "/loop approve"  # one comment is one answer, whatever it says
    assert delivery_key("issue_comment", edited) == "comment-123-created"
    review = {"action": "submitted", "review": {"id": 123}}
    assert delivery_key("pull_request_review", review) == "review-123-submitted"

    def labeled(label: int, at: str) -> dict:
        return {"action": "labeled", "label": {"id": label},
                "issue": {"id": 9, "number": 1, "updated_at": at}}  # fmt: skip

    one = delivery_key("issues", labeled(1, "2026-01-01T00:00:00Z"))
    assert one.startswith("issue-9-labeled-") and one == delivery_key(
        "issues", labeled(1, "2026-01-01T00:00:00Z")
    )
    assert one != delivery_key("issues", labeled(2, "2026-01-01T00:00:00Z"))  # another label
    assert one != delivery_key("issues", labeled(1, "2026-01-01T00:00:09Z"))  # labeled again
    run = {"action": "completed", "check_run": {"id": 5, "updated_at": "t", "conclusion": "x"}}
    rerun = copy.deepcopy(run)
    rerun["check_run"]["conclusion"] = "failure"
    assert delivery_key("check_run", run) != delivery_key("check_run", rerun)
    # No id to key by: the whole body is the key, so only the same body is the same.
    no_id = {"action": "created", "comment": {"body": "x"}}
    key = delivery_key("issue_comment", no_id)
    assert key.startswith("issue_comment-created-body-")
    assert key != delivery_key("issue_comment", {**no_id, "sender": {"login": "a"}})
    assert delivery_key("issue_comment", {"action": "created", "comment": {"id": True}}) != (
        "comment-True-created"
    ), "a bool is no id"
    for k in (one, key, delivery_key("issues", {"action": "Weird Action!/..", "issue": {}})):
        assert re.fullmatch(r"[a-z0-9_-]{1,100}", k), k


def test_an_approval_names_a_commit_or_none():
    waiting = "3f2a9c1b7d40" + "0" * 28
    assert unapproved("t", "", waiting) == ""  # a hand-typed signal: the one waiting
    assert unapproved("t", waiting, waiting) == ""
    assert unapproved("t", waiting[:7].upper(), waiting) == ""
    assert "waits for approval of commit 3f2a9c1b7d40, not 3f2a9c1b7d41" in unapproved(
        "t", "3f2a9c1b7d41", waiting
    )
    for bad in (waiting[:6], waiting + "0" * 30, "3f2a9c1; rm", "HEAD", "main"):
        assert "is not a commit" in unapproved("t", bad, waiting), bad
    assert "commit (none)" in unapproved("t", waiting, ""), "nothing waits: nothing approved"
