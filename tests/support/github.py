"""A stand-in for GitHub's REST API: the issues listing of a ``github`` triage source,
and what a webhook delivery's workflow asks (a collaborator's permission, a new comment).

Real HTTP on 127.0.0.1, answers in GitHub's shapes (checked against GitHub's own
OpenAPI description by ``tests/unit/test_github_source.py``): full issue objects,
pagination through ``Link`` headers, ``ETag`` and ``304 Not Modified`` (which, as on
GitHub, does not count against the rate limit), the rate-limit headers and a spent
limit's ``403``, and ``401``/``404`` with GitHub's error bodies. It records every
request, so a test can tell what the client sent and when.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

RATE_LIMIT = 5_000
DOCS = "https://docs.github.com/rest"


@dataclass
class Seen:
    path: str
    query: dict[str, str]
    authorization: str
    if_none_match: str
    status: int
    at: float


@dataclass
class GitHubStandIn:
    token: str
    repos: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """``owner/name`` to its issues and pull requests, open and closed (full objects)."""
    per_page_max: int = 100
    remaining: int = RATE_LIMIT
    limited_until: float = 0.0
    """While ``time.time()`` is before it, every request gets a spent limit's 403."""
    throttled_for: int = 0
    """When set, every request gets a secondary limit's 429 with ``Retry-After`` of it."""
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    permissions: dict[str, str] = field(default_factory=dict)
    """login -> ``admin``, ``maintain``, ``write``, ``triage`` or ``read``; others: 404."""
    comments: list[dict[str, Any]] = field(default_factory=list)
    """Comments created, as GitHub returns them, with ``repo`` and ``number`` added."""
    reviews: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """A review's id to its inline comments (``review_comment``)."""
    pulls: list[dict[str, Any]] = field(default_factory=list)
    """Pull requests opened, as GitHub returns them, with ``repo`` added."""
    made: int = 0
    """Comments ever made (ids are never reused, as GitHub's are not)."""
    edits: list[tuple[int, str]] = field(default_factory=list)
    """Every comment edit (``PATCH …/issues/comments/{id}``): its id and new body."""
    check_plan: list[list[dict[str, Any]]] = field(default_factory=list)
    """The check runs of each commit asked about, in the order first asked (``check_run``):
    the first commit gets the first list, and so on; later ones the last list."""
    check_shas: list[str] = field(default_factory=list)
    polls_pending: int = 0
    """How many looks at a commit's checks find none yet (the CI has not started)."""
    polls: dict[str, int] = field(default_factory=dict)
    annotations: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    """Commit statuses set (``POST …/statuses/{sha}``), as returned, with ``sha`` added."""
    pushed: list[dict[str, Any]] = field(default_factory=list)
    lose_created: int = 0
    """How many comment creates succeed and yet answer ``502`` (the answer lost on the way
    back, as a timeout loses it: the caller cannot tell it was made)."""
    """Every ``POST …/pulls``'s body, also the refused ones (a retried or updated one)."""

    def spend_limit(self, seconds: float) -> None:
        self.limited_until = time.time() + seconds

    def responses(self) -> list[int]:
        return [s.status for s in self.seen]


def issue(repo: str, number: int, title: str, labels: list[str], **fields: Any) -> dict[str, Any]:
    """An issue as the issues API returns it; ``pull_request={}`` makes it a pull request."""
    api = f"https://api.github.com/repos/{repo}"
    user = _user("octocat", 1)
    data: dict[str, Any] = {
        "id": 1_000_000 + number,
        "node_id": f"I_kwDO{number:08d}",
        "url": f"{api}/issues/{number}",
        "repository_url": api,
        "labels_url": f"{api}/issues/{number}/labels{{/name}}",
        "comments_url": f"{api}/issues/{number}/comments",
        "events_url": f"{api}/issues/{number}/events",
        "html_url": f"https://github.com/{repo}/issues/{number}",
        "number": number,
        "state": "open",
        "title": title,
        "body": f"Body of {title}.",
        "user": user,
        "labels": [_label(repo, name, i) for i, name in enumerate(labels)],
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "locked": False,
        "active_lock_reason": None,
        "comments": 0,
        "closed_at": None,
        "created_at": "2026-11-30T10:00:00Z",
        "updated_at": "2026-11-30T11:00:00Z",
        "author_association": "OWNER",
    }
    if "pull_request" in fields:
        fields["pull_request"] = {
            "url": f"{api}/pulls/{number}",
            "html_url": f"https://github.com/{repo}/pull/{number}",
            "diff_url": f"https://github.com/{repo}/pull/{number}.diff",
            "patch_url": f"https://github.com/{repo}/pull/{number}.patch",
            "merged_at": None,
        }
    return data | fields


def review_comment(
    repo: str, number: int, review_id: int, path: str, line: int, hunk: str, body: str
) -> dict[str, Any]:
    """An inline comment of a review, as ``GET …/reviews/{review_id}/comments`` lists it."""
    cid = 7_000_000 + review_id % 1000 * 100 + line
    api = f"https://api.github.com/repos/{repo}/pulls"
    html = f"https://github.com/{repo}/pull/{number}#discussion_r{cid}"
    return {
        "id": cid,
        "node_id": f"PRRC_kwDO{cid:08d}",
        "url": f"{api}/comments/{cid}",
        "pull_request_review_id": review_id,
        "diff_hunk": hunk,
        "path": path,
        "position": line,
        "original_position": line,
        "commit_id": "6dcb09b5b57875f334f61aebed695e2e4193db5e",
        "original_commit_id": "6dcb09b5b57875f334f61aebed695e2e4193db5e",
        "user": _user("ann", 3_003),
        "body": body,
        "created_at": "2026-11-30T12:00:00Z",
        "updated_at": "2026-11-30T12:00:00Z",
        "html_url": html,
        "pull_request_url": f"{api}/{number}",
        "author_association": "MEMBER",
        "_links": {
            "self": {"href": f"{api}/comments/{cid}"},
            "html": {"href": html},
            "pull_request": {"href": f"{api}/{number}"},
        },
        "line": line,
        "side": "RIGHT",
    }


def _user(login: str, uid: int) -> dict[str, Any]:
    api = f"https://api.github.com/users/{login}"
    return {
        "login": login,
        "id": uid,
        "node_id": f"MDQ6VXNlcj{uid}",
        "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}?v=4",
        "gravatar_id": "",
        "url": api,
        "html_url": f"https://github.com/{login}",
        "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}",
        "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events",
        "type": "User",
        "site_admin": False,
    }


def _label(repo: str, name: str, i: int) -> dict[str, Any]:
    return {
        "id": 2_000_000 + i,
        "node_id": f"LA_kwDO{i:08d}",
        "url": f"https://api.github.com/repos/{repo}/labels/{name}",
        "name": name,
        "description": None,
        "color": "d73a4a",
        "default": False,
    }


def _handler(hub: GitHubStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self._serve(b"")

        def do_POST(self) -> None:
            self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def do_PATCH(self) -> None:
            self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def _serve(self, sent: bytes) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            status, headers, body = self._answer(parts.path, query, sent)
            hub.seen.append(
                Seen(
                    path=parts.path,
                    query=query,
                    authorization=self.headers.get("Authorization", ""),
                    if_none_match=self.headers.get("If-None-Match", ""),
                    status=status,
                    at=time.time(),
                )
            )
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _answer(
            self, path: str, query: dict[str, str], sent: bytes
        ) -> tuple[int, dict[str, str], bytes]:
            now = time.time()
            if hub.limited_until > now:
                reset = int(hub.limited_until) + 1
                return _error(
                    403,
                    "API rate limit exceeded for user ID 1.",
                    "rate-limits-for-the-rest-api",
                    _limits(0, reset),
                )
            if hub.throttled_for:
                return _error(
                    429,
                    "You have exceeded a secondary rate limit. Please wait a few minutes "
                    "before you try again.",
                    "overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
                    {"Retry-After": str(hub.throttled_for)},
                )
            scheme, _, given = self.headers.get("Authorization", "").partition(" ")
            if scheme.lower() not in ("token", "bearer") or given != hub.token:
                return _error(401, "Bad credentials", "authentication", {})
            segments = path.strip("/").split("/")
            repo = "/".join(segments[1:3])
            if self.command == "PATCH":
                return _edit_comment(hub, repo, segments, sent)
            if self.command == "POST" and len(segments) == 5 and segments[3] == "statuses":
                return _commit_status(hub, repo, segments[4], sent)
            if self.command == "POST" and segments[3:] == ["pulls"]:
                return _open_pull(hub, repo, sent)
            if self.command == "POST":
                return _comment(hub, repo, segments, sent)
            if segments[0] == "repos" and segments[3:] == ["pulls"]:
                return _list_pulls(hub, repo, query)
            if len(segments) == 6 and segments[3] == "issues" and segments[5] == "comments":
                return _list_comments(hub, repo, segments[4], query)
            if len(segments) == 5 and segments[3] == "pulls":
                return _get_pull(hub, repo, segments[4])
            if (
                len(segments) == 6
                and segments[3] == "collaborators"
                and segments[5] == "permission"
            ):
                return _permission(hub, repo, segments[4])
            if len(segments) == 6 and segments[3] == "commits" and segments[5] == "check-runs":
                return _check_runs(hub, repo, segments[4])
            if len(segments) == 6 and segments[3] == "check-runs" and segments[5] == "annotations":
                return _annotations(hub, repo, segments[4])
            if len(segments) == 8 and segments[3] == "pulls" and segments[7] == "comments":
                return _review_comments(hub, repo, segments, query)
            if len(segments) != 4 or segments[0] != "repos" or segments[3] != "issues":
                return _error(404, "Not Found", "", _limits(hub.remaining, int(now) + 3600))
            if repo not in hub.repos:
                return _error(404, "Not Found", "repos/repos#get-a-repository", {})
            state = query.get("state", "open")
            listed = [i for i in hub.repos[repo] if state == "all" or i["state"] == state]
            per_page = min(int(query.get("per_page", "30")), hub.per_page_max)
            page = int(query.get("page", "1"))
            body = json.dumps(listed[(page - 1) * per_page : page * per_page]).encode()
            etag = f'W/"{hashlib.sha256(body).hexdigest()}"'
            reset = int(now) + 3600
            if self.headers.get("If-None-Match") == etag:
                return 304, {"ETag": etag, **_limits(hub.remaining, reset)}, b""
            hub.remaining -= 1
            last = max(1, -(-len(listed) // per_page))
            headers = {
                "Content-Type": "application/json; charset=utf-8",
                "ETag": etag,
                **_limits(hub.remaining, reset),
            }
            links = _links(hub.url, repo, query, page, last)
            if links:
                headers["Link"] = links
            return 200, headers, body

    return Handler


JSON = {"Content-Type": "application/json; charset=utf-8"}


def _permission(hub: GitHubStandIn, repo: str, login: str) -> tuple[int, dict[str, str], bytes]:
    """``GET /repos/{owner}/{repo}/collaborators/{username}/permission``."""
    granted = hub.permissions.get(login)
    if repo not in hub.repos or granted is None:
        return _error(404, "Not Found", "collaborators/collaborators", {})
    # The REST answer's ``permission`` knows admin, write, read, none; role_name says more.
    legacy = {"maintain": "write", "triage": "read"}.get(granted, granted)
    rights = {"permissions": _rights(granted), "role_name": granted}
    user = _user(login, 3_000 + len(login)) | rights
    body = {"permission": legacy, "role_name": granted, "user": user}
    return 200, JSON, json.dumps(body).encode()


def _review_comments(
    hub: GitHubStandIn, repo: str, segments: list[str], query: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    """``GET /repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/comments``."""
    review = int(segments[6]) if segments[6].isdigit() else -1
    if repo not in hub.repos or segments[5] != "reviews" or review not in hub.reviews:
        return _error(404, "Not Found", "pulls/reviews#list-comments-for-a-pull-request-review", {})
    per_page = min(int(query.get("per_page", "30")), hub.per_page_max)
    page = int(query.get("page", "1"))
    listed = hub.reviews[review][(page - 1) * per_page : page * per_page]
    return 200, JSON, json.dumps(listed).encode()


def _edit_comment(
    hub: GitHubStandIn, repo: str, segments: list[str], sent: bytes
) -> tuple[int, dict[str, str], bytes]:
    """``PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}``."""
    doc = "issues/comments#update-an-issue-comment"
    if len(segments) != 6 or segments[3:5] != ["issues", "comments"]:
        return _error(404, "Not Found", "", {})
    cid = int(segments[5]) if segments[5].isdigit() else -1
    found = [c for c in hub.comments if c["id"] == cid and c["repo"] == repo]
    if not found:
        return _error(404, "Not Found", doc, {})
    text = json.loads(sent or b"{}").get("body")
    if not isinstance(text, str) or not text:
        return _error(422, "Validation Failed", doc, {})
    found[0].update(body=text, updated_at="2026-11-30T12:30:00Z")
    hub.edits.append((cid, text))
    comment = {k: v for k, v in found[0].items() if k not in ("repo", "number")}
    return 200, JSON, json.dumps(comment).encode()


def check_run(
    repo: str, run_id: int, name: str, conclusion: str, title: str = "", summary: str = ""
) -> dict[str, Any]:
    """A completed check run as ``GET …/commits/{ref}/check-runs`` lists it (GitHub's own
    example's, ``@octokit/webhooks-examples``, with these fields); ``head_sha`` is set
    when it is listed."""
    from tests.support.webhooks import example

    run: dict[str, Any] = example("check_run", "completed", repo)["check_run"]
    api = f"https://api.github.com/repos/{repo}/check-runs/{run_id}"
    run.update(id=run_id, name=name, status="completed", conclusion=conclusion, url=api)
    run["html_url"] = run["details_url"] = f"https://github.com/{repo}/runs/{run_id}"
    run["output"] = {
        "title": title or None,
        "summary": summary or None,
        "text": None,
        "annotations_count": 0,
        "annotations_url": f"{api}/annotations",
    }
    return run


def annotation(path: str, line: int, level: str, message: str) -> dict[str, Any]:
    """One annotation of a check run, as ``GET …/check-runs/{id}/annotations`` lists it."""
    return {
        "path": path,
        "blob_href": f"https://github.com/acme/app/blob/main/{path}",
        "start_line": line,
        "end_line": line,
        "start_column": None,
        "end_column": None,
        "annotation_level": level,
        "title": None,
        "message": message,
        "raw_details": None,
    }


def _check_runs(hub: GitHubStandIn, repo: str, sha: str) -> tuple[int, dict[str, str], bytes]:
    """``GET /repos/{owner}/{repo}/commits/{ref}/check-runs``."""
    if repo not in hub.repos or not hub.check_plan:
        return _error(404, "Not Found", "checks/runs#list-check-runs-for-a-git-reference", {})
    if sha not in hub.check_shas:
        hub.check_shas.append(sha)
    runs = [
        dict(r, head_sha=sha)
        for r in hub.check_plan[min(hub.check_shas.index(sha), len(hub.check_plan) - 1)]
    ]
    for r in runs:
        r["output"] = dict(r["output"], annotations_count=len(hub.annotations.get(r["id"], [])))
    hub.polls[sha] = hub.polls.get(sha, 0) + 1
    if hub.polls[sha] <= hub.polls_pending:
        runs = []  # the CI has not reported on the commit yet
    body = {"total_count": len(runs), "check_runs": runs}
    return 200, JSON, json.dumps(body).encode()


def _annotations(hub: GitHubStandIn, repo: str, run: str) -> tuple[int, dict[str, str], bytes]:
    """``GET /repos/{owner}/{repo}/check-runs/{check_run_id}/annotations``."""
    found = hub.annotations.get(int(run)) if run.isdigit() else None
    if repo not in hub.repos or found is None:
        return _error(404, "Not Found", "checks/runs#list-check-run-annotations", {})
    return 200, JSON, json.dumps(found).encode()


def _commit_status(
    hub: GitHubStandIn, repo: str, sha: str, sent: bytes
) -> tuple[int, dict[str, str], bytes]:
    """``POST /repos/{owner}/{repo}/statuses/{sha}``."""
    doc = "commits/statuses#create-a-commit-status"
    if repo not in hub.repos:
        return _error(404, "Not Found", doc, {})
    asked = json.loads(sent or b"{}")
    if asked.get("state") not in ("error", "failure", "pending", "success"):
        return _error(422, "Validation Failed", doc, {})
    sid = 8_000_000 + len(hub.statuses)
    api = f"https://api.github.com/repos/{repo}"
    status = {
        "url": f"{api}/statuses/{sha}",
        "avatar_url": "https://avatars.githubusercontent.com/u/2?v=4",
        "id": sid,
        "node_id": f"SC_kwDO{sid:08d}",
        "state": asked["state"],
        "description": asked.get("description"),
        "target_url": asked.get("target_url"),
        "context": asked.get("context") or "default",
        "created_at": "2026-11-30T12:00:00Z",
        "updated_at": "2026-11-30T12:00:00Z",
        "creator": _user("loopwork-bot", 2),
    }
    hub.statuses.append(status | {"sha": sha})
    return 201, {**JSON, "Location": status["url"]}, json.dumps(status).encode()


def _open_pull(hub: GitHubStandIn, repo: str, sent: bytes) -> tuple[int, dict[str, str], bytes]:
    """``POST /repos/{owner}/{repo}/pulls``: 422 when one is open for the head already,
    as GitHub answers. The object is GitHub's own example's (``@octokit/webhooks-examples``)
    with this one's fields: the schema's nested repositories are too many to write."""
    from tests.support.webhooks import example

    doc = "pulls/pulls#create-a-pull-request"
    asked = json.loads(sent or b"{}")
    hub.pushed.append(asked)
    if repo not in hub.repos:
        return _error(404, "Not Found", doc, {})
    head, base, title = asked.get("head"), asked.get("base"), asked.get("title")
    if not all(isinstance(x, str) and x for x in (head, base, title)):
        return _error(422, "Validation Failed", doc, {})
    if any(p["head"]["ref"] == head and p["state"] == "open" for p in hub.pulls):
        owner = repo.split("/")[0]
        body = {
            "message": "Validation Failed",
            "errors": [
                {
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": f"A pull request already exists for {owner}:{head}.",
                }
            ],
            "documentation_url": f"{DOCS}/{doc}",
            "status": "422",
        }
        return 422, JSON, json.dumps(body).encode()
    number = 100 + len(hub.pulls)
    pr = example("pull_request", "opened", repo)["pull_request"]
    text = json.dumps(pr).replace(f"/pull/{pr['number']}", f"/pull/{number}")
    text = text.replace(f"/pulls/{pr['number']}", f"/pulls/{number}")
    pr = json.loads(text) | {"number": number, "title": title, "body": asked.get("body")}
    pr["id"] = 9_000_000 + number
    pr["auto_merge"] = None
    pr["head"]["ref"], pr["base"]["ref"] = head, base
    pr["head"]["label"] = f"{repo.split('/')[0]}:{head}"
    hub.pulls.append(pr | {"repo": repo})
    return 201, {**JSON, "Location": pr["url"]}, json.dumps(pr).encode()


def _list_pulls(
    hub: GitHubStandIn, repo: str, query: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    """``GET /repos/{owner}/{repo}/pulls`` by ``head`` (``owner:branch``) and ``state``."""
    if repo not in hub.repos:
        return _error(404, "Not Found", "pulls/pulls#list-pull-requests", {})
    state, head = query.get("state", "open"), query.get("head", "")
    listed = [
        {k: v for k, v in p.items() if k != "repo"}
        for p in hub.pulls
        if p["repo"] == repo
        and (state == "all" or p["state"] == state)
        and (not head or p["head"]["label"] == head)
    ]
    return 200, JSON, json.dumps(listed).encode()


def _list_comments(
    hub: GitHubStandIn, repo: str, number: str, query: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    """``GET /repos/{owner}/{repo}/issues/{issue_number}/comments``, oldest first, paged."""
    if repo not in hub.repos or not number.isdigit():
        return _error(404, "Not Found", "issues/comments#list-issue-comments", {})
    on = [
        {k: v for k, v in c.items() if k not in ("repo", "number")}
        for c in hub.comments
        if c["repo"] == repo and c["number"] == int(number)
    ]
    per_page = min(int(query.get("per_page", "30")), hub.per_page_max)
    page = int(query.get("page", "1"))
    return 200, JSON, json.dumps(on[(page - 1) * per_page : page * per_page]).encode()


def _get_pull(hub: GitHubStandIn, repo: str, number: str) -> tuple[int, dict[str, str], bytes]:
    """``GET /repos/{owner}/{repo}/pulls/{pull_number}``."""
    found = [p for p in hub.pulls if p["repo"] == repo and str(p["number"]) == number]
    if not found:
        return _error(404, "Not Found", "pulls/pulls#get-a-pull-request", {})
    pr = {k: v for k, v in found[0].items() if k != "repo"}
    return 200, JSON, json.dumps(pr).encode()


def _rights(granted: str) -> dict[str, bool]:
    order = ["read", "triage", "write", "maintain", "admin"]
    level = order.index(granted)
    names = {"read": "pull", "triage": "triage", "write": "push", "maintain": "maintain"}
    return {names.get(n, n): level >= i for i, n in enumerate(order)}


def _comment(
    hub: GitHubStandIn, repo: str, segments: list[str], sent: bytes
) -> tuple[int, dict[str, str], bytes]:
    """``POST /repos/{owner}/{repo}/issues/{issue_number}/comments``."""
    if len(segments) != 6 or segments[3] != "issues" or segments[5] != "comments":
        return _error(404, "Not Found", "", {})
    if repo not in hub.repos or not segments[4].isdigit():
        return _error(404, "Not Found", "issues/comments#create-an-issue-comment", {})
    number = int(segments[4])
    text = json.loads(sent or b"{}").get("body")
    if not isinstance(text, str) or not text:
        return _error(422, "Validation Failed", "issues/comments#create-an-issue-comment", {})
    cid = 5_000_000 + hub.made
    hub.made += 1
    api = f"https://api.github.com/repos/{repo}"
    comment = {
        "id": cid,
        "node_id": f"IC_kwDO{cid:08d}",
        "url": f"{api}/issues/comments/{cid}",
        "html_url": f"https://github.com/{repo}/issues/{number}#issuecomment-{cid}",
        "body": text,
        "user": _user("loopwork-bot", 2),
        "created_at": "2026-11-30T12:00:00Z",
        "updated_at": "2026-11-30T12:00:00Z",
        "issue_url": f"{api}/issues/{number}",
        "author_association": "NONE",
    }
    hub.comments.append(comment | {"repo": repo, "number": number})
    if hub.lose_created:
        hub.lose_created -= 1
        return _error(502, "Server Error", "", {})
    headers = {**JSON, "Location": comment["url"]}
    return 201, headers, json.dumps(comment).encode()


def _limits(remaining: int, reset: int) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(RATE_LIMIT),
        "X-RateLimit-Remaining": str(remaining),
        "X-RateLimit-Reset": str(reset),
        "X-RateLimit-Used": str(RATE_LIMIT - remaining),
        "X-RateLimit-Resource": "core",
    }


def _error(
    status: int, message: str, doc: str, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    body = {"message": message, "documentation_url": f"{DOCS}/{doc}", "status": str(status)}
    return (
        status,
        {"Content-Type": "application/json; charset=utf-8", **headers},
        (json.dumps(body).encode()),
    )


def _links(base: str, repo: str, query: dict[str, str], page: int, last: int) -> str:
    def url(n: int) -> str:
        args = "&".join(f"{k}={v}" for k, v in ({**query, "page": str(n)}).items())
        return f"<{base}/repos/{repo}/issues?{args}>"

    rels = []
    if page < last:
        rels += [f'{url(page + 1)}; rel="next"', f'{url(last)}; rel="last"']
    if page > 1:
        rels += [f'{url(1)}; rel="first"', f'{url(page - 1)}; rel="prev"']
    return ", ".join(rels)


@contextmanager
def serving(hub: GitHubStandIn) -> Iterator[GitHubStandIn]:
    """The stand-in on a free port of 127.0.0.1; ``hub.url`` is its API base."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    hub.url = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
