"""The GitHub stand-in answers as GitHub's own REST description says GitHub does.

The description is the npm package ``@octokit/openapi`` (``.ci/run`` installs it into
``.ci/node``); without it these tests skip, unless ``LOOP_GITHUB_SPEC_REQUIRED=1``.
``openapi-core`` checks the requests githubkit sent (route and query) and the listing's
answers (``200`` with its ``Link`` header, ``404``). The answers GitHub gives to any
operation and does not list under this one (``304``, ``401``, a spent limit's ``403``,
a secondary limit's ``429``) are checked against the description's shared responses.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_core import Config, OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from openapi_schema_validator import OAS30Validator
from temporalio.testing import ActivityEnvironment

from activities.discover import DiscoverActivities
from activities.github_hooks import GitHubHookActivities, status_marker
from loop.contracts import (
    CommentInput,
    CommitStatusInput,
    DiscoverInput,
    GitHubSource,
    PermissionInput,
    PermissionResult,
    PullHeadInput,
    ReviewCommentsInput,
    StatusCommentInput,
    TaskState,
    TaskStatusView,
)
from loop.hardened import answers
from loop.settings import Settings
from tests.support.github import (
    GitHubStandIn,
    annotation,
    check_run,
    issue,
    review_comment,
    serving,
)
from tests.support.repos import ROOT
from tests.support.webhooks import needs_examples

SPEC = ROOT / ".ci/node/node_modules/@octokit/openapi/generated/api.github.com.json"
REQUIRED = os.environ.get("LOOP_GITHUB_SPEC_REQUIRED") == "1"
TOKEN = "ghp_standin0123456789abcdefghijklmnopqrst"
REPO = "acme/app"

pytestmark = pytest.mark.skipif(
    not SPEC.is_file() and not REQUIRED,
    reason="GitHub's REST description is not installed, so the GitHub stand-in is not checked "
    "against it (npm install --prefix .ci/node @octokit/openapi; .ci/run does)",
)


@cache
def description() -> dict[str, Any]:
    return json.loads(Path(SPEC).read_text())


@cache
def api() -> OpenAPI:
    return OpenAPI.from_dict(description(), config=Config(spec_validator_cls=None))


@pytest.fixture
def hub() -> Iterator[GitHubStandIn]:
    issues = [
        issue(REPO, 1, "One", ["loop"]),
        issue(REPO, 2, "A PR", ["loop"], pull_request={}),
        issue(REPO, 3, "Three", []),
    ]
    with serving(GitHubStandIn(token=TOKEN, repos={REPO: issues}, per_page_max=2)) as h:
        yield h


def get(hub: GitHubStandIn, path: str, token: str = TOKEN, **headers: str) -> httpx.Response:
    auth = {"Authorization": f"token {token}"} if token else {}
    return httpx.get(f"{hub.url}{path}", headers=auth | headers)


def checked(path: str, resp: httpx.Response) -> None:
    """The answer against the listing operation's own responses."""
    query = dict(httpx.URL(path).params)
    request = MockRequest("https://api.github.com", "get", httpx.URL(path).path, args=query)
    api().validate_request(request)
    answer = MockResponse(
        resp.content,
        status_code=resp.status_code,
        headers=dict(resp.headers),
        content_type=resp.headers.get("content-type", "").split(";")[0],
    )
    api().validate_response(request, answer)


def shared(name: str, resp: httpx.Response) -> None:
    """The answer against one of the description's shared responses (a body, or none)."""
    described = description()["components"]["responses"][name]
    if "content" not in described:
        assert resp.content == b""
        return
    schema = described["content"]["application/json"]["schema"]
    ref = schema["$ref"].removeprefix("#/components/schemas/")
    OAS30Validator(description()["components"]["schemas"][ref]).validate(resp.json())
    for header in ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"):
        if header in resp.headers:
            assert resp.headers[header].isdigit()  # the description's x-rate-limit-*: integer


def test_the_listing_pages_and_errors_match_the_description(hub: GitHubStandIn):
    first = "/repos/acme/app/issues?state=open&per_page=100&page=1"
    page1 = get(hub, first)
    assert page1.status_code == 200 and len(page1.json()) == 2
    checked(first, page1)
    following = page1.links["next"]["url"].removeprefix(hub.url)
    page2 = get(hub, following)
    assert page2.status_code == 200 and [i["number"] for i in page2.json()] == [3]
    checked(following, page2)
    assert "pull_request" in page1.json()[1] and "pull_request" not in page1.json()[0]

    missing = "/repos/acme/gone/issues?state=open"
    gone = get(hub, missing)
    assert gone.status_code == 404
    checked(missing, gone)

    unchanged = get(hub, first, **{"If-None-Match": page1.headers["etag"]})
    assert unchanged.status_code == 304
    shared("not_modified", unchanged)
    refused = get(hub, first, token="ghp_revoked")
    assert refused.status_code == 401
    shared("requires_authentication", refused)
    hub.spend_limit(60)
    limited = get(hub, first)
    assert limited.status_code == 403 and limited.headers["x-ratelimit-remaining"] == "0"
    shared("forbidden", limited)
    hub.limited_until, hub.throttled_for = 0, 60
    throttled = get(hub, first)
    assert throttled.status_code == 429 and throttled.headers["retry-after"] == "60"
    shared("forbidden", throttled)  # a basic-error body, as the 429 of GET /advisories


async def test_what_githubkit_sends_matches_the_description(
    hub: GitHubStandIn, settings: Settings, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", hub.url)
    source = GitHubSource(name="gh", kind="github", repo=REPO)
    for _ in range(2):  # a full listing, then one answered 304
        await ActivityEnvironment().run(
            DiscoverActivities(settings).discover, DiscoverInput(source=source)
        )
    assert hub.responses() == [200, 200, 304, 304]
    for seen in hub.seen:
        request = MockRequest("https://api.github.com", "get", seen.path, args=seen.query)
        api().validate_request(request)


def send(hub: GitHubStandIn, method: str, path: str, body: bytes = b"") -> httpx.Response:
    """A request to the stand-in, and both checked against the operation's description."""
    resp = httpx.request(
        method,
        f"{hub.url}{path}",
        content=body or None,
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    url = httpx.URL(path)
    request = MockRequest(
        "https://api.github.com", method.lower(), url.path, args=dict(url.params), data=body or None
    )
    api().validate_request(request)
    answer = MockResponse(
        resp.content,
        status_code=resp.status_code,
        headers=dict(resp.headers),
        content_type=resp.headers.get("content-type", "").split(";")[0],
    )
    api().validate_response(request, answer)
    return resp


def test_the_permission_and_comment_routes_match_the_description(hub: GitHubStandIn):
    hub.permissions = {"ann": "maintain", "bo": "read"}
    ann = send(hub, "GET", f"/repos/{REPO}/collaborators/ann/permission").json()
    assert (ann["permission"], ann["role_name"]) == ("write", "maintain")
    assert send(hub, "GET", f"/repos/{REPO}/collaborators/bo/permission").json()["role_name"] == (
        "read"
    )
    assert send(hub, "GET", f"/repos/{REPO}/collaborators/eve/permission").status_code == 404
    hub.reviews[80] = [review_comment(REPO, 2, 80, "slugify.py", 3, "@@ -1,3 +1,3 @@", "No.")]
    listed = send(hub, "GET", f"/repos/{REPO}/pulls/2/reviews/80/comments?per_page=100&page=1")
    assert [c["path"] for c in listed.json()] == ["slugify.py"]
    assert send(hub, "GET", f"/repos/{REPO}/pulls/2/reviews/81/comments").status_code == 404
    made = send(hub, "POST", f"/repos/{REPO}/issues/1/comments", b'{"body": "Loopwork: hi"}')
    assert made.status_code == 201 and made.json()["body"] == "Loopwork: hi"
    assert [(c["number"], c["body"]) for c in hub.comments] == [(1, "Loopwork: hi")]


async def test_what_the_webhook_activities_send_matches_the_description(
    hub: GitHubStandIn, settings: Settings, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", hub.url)
    hub.permissions = {"ann": "maintain", "bo": "triage"}
    acts = GitHubHookActivities(settings)
    env = ActivityEnvironment()

    async def permission(login: str) -> PermissionResult:
        asked = PermissionInput(repo=REPO, token_env="GITHUB_TOKEN", login=login)
        return await env.run(acts.github_permission, asked)

    assert [
        (p.permission, p.may_write) for p in [await permission(x) for x in "ann bo eve".split()]
    ] == [
        ("maintain", True),
        ("triage", False),
        ("none", False),
    ]
    said = CommentInput(repo=REPO, token_env="GITHUB_TOKEN", number=3, body="Loopwork: no")
    posted = await env.run(acts.github_comment, said)
    assert posted.comment_id == hub.comments[0]["id"] and hub.comments[0]["number"] == 3
    hub.reviews[80] = [
        review_comment(REPO, 2, 80, "slugify.py", n, f"@@ -{n} +{n} @@", f"c{n}") for n in (1, 2, 3)
    ]
    hub.per_page_max = 2  # two pages
    monkeypatch.setattr("activities.github_hooks.PER_PAGE", 2)
    asked = ReviewCommentsInput(repo=REPO, token_env="GITHUB_TOKEN", number=2, review_id=80)
    review = await env.run(acts.github_review_comments, asked)
    assert [(c.path, c.line, c.body) for c in review.comments] == [
        ("slugify.py", 1, "c1"),
        ("slugify.py", 2, "c2"),
        ("slugify.py", 3, "c3"),
    ]
    assert review.comments[0].diff_hunk == "@@ -1 +1 @@"
    assert [s.status for s in hub.seen] == [200, 200, 404, 201, 200, 200]
    for seen in hub.seen:
        method = "post" if seen.path.endswith("/3/comments") else "get"
        data = b'{"body": "Loopwork: no"}' if method == "post" else None
        api().validate_request(
            MockRequest("https://api.github.com", method, seen.path, args=seen.query, data=data)
        )


@needs_examples
def test_the_pull_request_routes_match_the_description(hub: GitHubStandIn):
    asked = {"title": "Fix it", "head": "loop/gh-1", "base": "main", "body": "Evidence."}
    made = send(hub, "POST", f"/repos/{REPO}/pulls", json.dumps(asked).encode())
    assert made.status_code == 201
    pr = made.json()
    assert (pr["head"]["ref"], pr["base"]["ref"], pr["title"]) == ("loop/gh-1", "main", "Fix it")
    assert pr["html_url"] == f"https://github.com/{REPO}/pull/{pr['number']}"
    again = send(hub, "POST", f"/repos/{REPO}/pulls", json.dumps(asked).encode())
    assert again.status_code == 422, "one pull request open per head"
    found = send(hub, "GET", f"/repos/{REPO}/pulls?head=acme:loop/gh-1&state=open")
    assert [p["number"] for p in found.json()] == [pr["number"]]
    assert send(hub, "GET", f"/repos/{REPO}/pulls?head=acme:loop/other&state=open").json() == []
    one = send(hub, "GET", f"/repos/{REPO}/pulls/{pr['number']}")
    assert one.json()["head"]["ref"] == "loop/gh-1"
    assert send(hub, "GET", f"/repos/{REPO}/pulls/999").status_code == 404


def test_the_comment_edit_route_matches_the_description(hub: GitHubStandIn):
    made = send(hub, "POST", f"/repos/{REPO}/issues/1/comments", b'{"body": "first"}').json()
    cid = made["id"]
    edited = send(hub, "PATCH", f"/repos/{REPO}/issues/comments/{cid}", b'{"body": "second"}')
    assert edited.status_code == 200 and edited.json()["body"] == "second"
    assert hub.comments[0]["body"] == "second" and hub.edits == [(cid, "second")]
    # The operation lists no 404 of its own: a deleted comment's answer is GitHub's common one.
    gone = httpx.patch(
        f"{hub.url}/repos/{REPO}/issues/comments/99",
        content=b'{"body": "x"}',
        headers={"Authorization": f"token {TOKEN}"},
    )
    assert gone.status_code == 404
    shared("not_found", gone)


async def test_the_status_comment_is_made_once_then_edited(
    hub: GitHubStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", hub.url)
    settings = Settings(home=tmp_path, review_url="https://loop.example.com/")
    acts = GitHubHookActivities(settings)
    env = ActivityEnvironment()

    def said(comment_id: int, state: TaskState) -> StatusCommentInput:
        shown = TaskStatusView(task_id="gh-1", state=state, attempt=1, reason="@here <b>")
        return StatusCommentInput(
            repo=REPO, token_env="GITHUB_TOKEN", number=1, comment_id=comment_id, view=shown
        )

    made = await env.run(acts.github_status_comment, said(0, TaskState.RUNNING))
    done = said(made.comment_id, TaskState.DONE_WITH_EVIDENCE)
    edited = await env.run(acts.github_status_comment, done)
    hub.comments.clear()  # a person deleted it: a new one is made
    again = await env.run(acts.github_status_comment, done)
    assert edited.comment_id == made.comment_id != again.comment_id
    link = "\n\n[Review page](https://loop.example.com/tasks/gh-1)\n\n<!-- loopwork:gh-1 -->"
    running = "**Loopwork** · task `gh-1` · **RUNNING** · attempt 1\n\n＠here &lt;b&gt;" + link
    ended = running.replace("RUNNING", "DONE_WITH_EVIDENCE")
    assert hub.edits == [(made.comment_id, ended)]
    assert hub.comments[0]["body"] == ended
    assert [s.status for s in hub.seen] == [201, 200, 404, 201]
    monkeypatch.setenv("LOOP_UI_URL", "https://temporal.example.com/")
    await env.run(acts.github_status_comment, done.model_copy(update={"comment_id": 0}))
    assert hub.comments[-1]["body"].endswith(
        "[Review page](https://loop.example.com/tasks/gh-1) · "
        "[Temporal UI](https://temporal.example.com/namespaces/default/workflows/task-gh-1)"
        "\n\n<!-- loopwork:gh-1 -->"
    )
    for seen, (method, text) in zip(
        hub.seen,
        [("post", running), ("patch", ended), ("patch", ended), ("post", ended)],
        strict=False,  # the last one, with the Temporal UI's link, is checked above
    ):
        body = json.dumps({"body": text}).encode()
        api().validate_request(
            MockRequest("https://api.github.com", method, seen.path, args=seen.query, data=body)
        )


async def test_the_commit_status_matches_the_description(
    hub: GitHubStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", hub.url)
    acts = GitHubHookActivities(Settings(home=tmp_path, review_url="https://loop.example.com"))
    env = ActivityEnvironment()
    sha = "6dcb09b5b57875f334f61aebed695e2e4193db5e"

    def verdict(passed: bool, **where: str) -> CommitStatusInput:
        return CommitStatusInput(
            token_env="GITHUB_TOKEN", sha=sha, passed=passed, task_id="gh-1",
            description="tests FAIL, scope pass" if not passed else "tests pass", **where,
        )  # fmt: skip

    failed = await env.run(acts.github_commit_status, verdict(False, repo=REPO))
    by_url = await env.run(
        acts.github_commit_status, verdict(True, repo="", remote=f"https://github.com/{REPO}.git")
    )
    elsewhere = await env.run(
        acts.github_commit_status, verdict(True, repo="", remote="file:///srv/app.git")
    )
    assert failed.posted and by_url.posted and not elsewhere.posted
    assert elsewhere.note == "the commit is not on GitHub"
    assert [(s["state"], s["context"], s["sha"]) for s in hub.statuses] == [
        ("failure", "loopwork/verify", sha),
        ("success", "loopwork/verify", sha),
    ]
    assert hub.statuses[0]["target_url"] == "https://loop.example.com/tasks/gh-1"
    for seen, s in zip(hub.seen, hub.statuses, strict=True):
        sent = {k: s[k] for k in ("state", "description", "context", "target_url")}
        request = MockRequest(
            "https://api.github.com", "post", seen.path, data=json.dumps(sent).encode()
        )
        api().validate_request(request)
        answer = {k: v for k, v in s.items() if k != "sha"}
        api().validate_response(
            request,
            MockResponse(
                json.dumps(answer).encode(), status_code=201, content_type="application/json"
            ),
        )


@needs_examples
def test_the_check_run_routes_match_the_description(hub: GitHubStandIn):
    sha = "6dcb09b5b57875f334f61aebed695e2e4193db5e"
    hub.check_plan = [[check_run(REPO, 41, "build", "failure", "2 errors", "It broke.")]]
    hub.annotations[41] = [annotation("slugify.py", 3, "failure", "E501 line too long")]
    hub.polls_pending = 1
    path = f"/repos/{REPO}/commits/{sha}/check-runs?per_page=100&filter=latest"
    pending = send(hub, "GET", path).json()["check_runs"]
    done = send(hub, "GET", path).json()["check_runs"]
    assert pending == [], "the CI has not reported yet"
    assert [(r["name"], r["status"], r["conclusion"], r["head_sha"]) for r in done] == [
        ("build", "completed", "failure", sha)
    ]
    assert done[0]["output"]["annotations_count"] == 1
    notes = send(hub, "GET", f"/repos/{REPO}/check-runs/41/annotations?per_page=50").json()
    assert [(a["path"], a["start_line"], a["message"]) for a in notes] == [
        ("slugify.py", 3, "E501 line too long")
    ]


@needs_examples
async def test_the_pull_head_activity_reads_the_branch_as_described(
    hub: GitHubStandIn, settings: Settings, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", hub.url)
    asked = {"title": "Fix it", "head": "loop/gh-1", "base": "main", "body": "Evidence."}
    number = send(hub, "POST", f"/repos/{REPO}/pulls", json.dumps(asked).encode()).json()["number"]
    acts, env = GitHubHookActivities(settings), ActivityEnvironment()
    found = await env.run(
        acts.github_pull_head, PullHeadInput(repo=REPO, token_env="GITHUB_TOKEN", number=number)
    )
    gone = await env.run(
        acts.github_pull_head, PullHeadInput(repo=REPO, token_env="GITHUB_TOKEN", number=7)
    )
    assert (found.head_ref, gone.head_ref) == ("loop/gh-1", "")
    assert [s.status for s in hub.seen][-2:] == [200, 404]
    for seen in hub.seen[-2:]:
        api().validate_request(MockRequest("https://api.github.com", "get", seen.path))


async def test_a_retried_status_comment_create_is_not_posted_twice(
    hub: GitHubStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The create made the comment but its answer was lost: the retry finds the comment by
    its hidden marker and edits it, so the issue has one status comment."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", hub.url)
    acts = GitHubHookActivities(Settings(home=tmp_path))
    env = ActivityEnvironment()
    other = send(
        hub, "POST", f"/repos/{REPO}/issues/1/comments", b'{"body": "<!-- loopwork:gh-9 -->"}'
    )
    shown = TaskStatusView(task_id="gh-1", state=TaskState.RUNNING, attempt=1)
    asked = StatusCommentInput(repo=REPO, token_env="GITHUB_TOKEN", number=1, view=shown)
    hub.lose_created = 1
    with pytest.raises(Exception, match="502"):
        await env.run(acts.github_status_comment, asked)
    env.info = dataclasses.replace(env.info, attempt=2)  # Temporal's retry of the activity
    again = await env.run(acts.github_status_comment, asked)
    mine = [c for c in hub.comments if c["body"].endswith("<!-- loopwork:gh-1 -->")]
    assert len(mine) == 1 and again.comment_id == mine[0]["id"] != other.json()["id"]
    assert hub.edits == [(again.comment_id, mine[0]["body"])]
    assert [s.status for s in hub.seen] == [201, 502, 200, 200]
    listed = hub.seen[2]
    assert listed.path == f"/repos/{REPO}/issues/1/comments"
    api().validate_request(
        MockRequest("https://api.github.com", "get", listed.path, args=listed.query)
    )
    page = send(hub, "GET", f"/repos/{REPO}/issues/1/comments?per_page=100&page=1")
    assert [c["id"] for c in page.json()] == [other.json()["id"], again.comment_id]
    hub.lose_created, hub.comments[:] = 0, []
    fresh = await env.run(acts.github_status_comment, asked)  # none to find: made anew
    assert [c["id"] for c in hub.comments] == [fresh.comment_id]


async def test_a_later_run_finds_its_comment_by_a_signed_marker_no_one_else_can_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """With the answer key, the marker is signed for the issue and the task: a rerun (a
    `/loop retry`) edits the comment the earlier run made; a comment someone planted with
    the plain marker, or with a signed one of another issue, is never taken for it."""
    with serving(GitHubStandIn(token=TOKEN, repos={REPO: [issue(REPO, 1, "One", [])]})) as hub:
        await _signed_marker(hub, tmp_path, monkeypatch)


async def _signed_marker(hub: GitHubStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", hub.url)
    answers.create_key(tmp_path / answers.KEY_NAME)
    acts = GitHubHookActivities(Settings(home=tmp_path))
    env = ActivityEnvironment()
    key = answers.read_key(tmp_path / answers.KEY_NAME)
    elsewhere = status_marker("gh-1", key, REPO, 2)  # the same task id, another issue's
    for planted in ("<!-- loopwork:gh-1 -->", elsewhere):
        body = json.dumps({"body": f"ask me: {planted}"}).encode()
        send(hub, "POST", f"/repos/{REPO}/issues/1/comments", body)
    shown = TaskStatusView(task_id="gh-1", state=TaskState.RUNNING, attempt=1)
    first = StatusCommentInput(repo=REPO, token_env="GITHUB_TOKEN", number=1, view=shown)
    made = await env.run(acts.github_status_comment, first)
    later = TaskStatusView(task_id="gh-1", state=TaskState.NEEDS_HUMAN, attempt=1)
    rerun = first.model_copy(update={"view": later})
    again = await env.run(acts.github_status_comment, rerun)  # a new run: comment_id 0
    assert again.comment_id == made.comment_id
    assert hub.edits == [(made.comment_id, hub.comments[-1]["body"])]
    assert [c["body"].startswith("ask me") for c in hub.comments] == [True, True, False]
    assert hub.comments[-1]["body"].endswith(status_marker("gh-1", key, REPO, 1))
