"""GitHub webhook deliveries for tests: real payloads, signed as GitHub signs them.

The payloads are ``@octokit/webhooks-examples`` (GitHub's own examples, which ``.ci/run``
installs into ``.ci/node``), with the example repository's names replaced by the test's
and the fields a test is about (issue number, labels, sender, comment) set.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import itertools
import json
import os
import uuid
from datetime import UTC, datetime
from functools import cache
from typing import Any

import httpx
import pytest

from loop.rules.hooks import delivery_key
from tests.support.repos import ROOT

EXAMPLES = ROOT / ".ci/node/node_modules/@octokit/webhooks-examples/api.github.com/index.json"
REQUIRED = os.environ.get("LOOP_GITHUB_SPEC_REQUIRED") == "1"
EXAMPLE_REPO = "Codertocat/Hello-World"

needs_examples = pytest.mark.skipif(
    not EXAMPLES.is_file() and not REQUIRED,
    reason="GitHub's webhook examples are not installed (npm install --prefix .ci/node "
    "@octokit/webhooks-examples; .ci/run does)",
)


@cache
def _examples() -> dict[str, list[dict[str, Any]]]:
    entries = json.loads(EXAMPLES.read_text())
    return {e["name"]: e["examples"] for e in entries}


def example(event: str, action: str, repo: str) -> dict[str, Any]:
    """The first example of ``event`` with ``action`` (``closed``, which the package has no
    example of, is its ``reopened`` one closed), names replaced by ``repo``'s."""
    found = [e for e in _examples()[event] if e.get("action") == action]
    if not found and (event, action) == ("issues", "closed"):
        reopened = next(e for e in _examples()[event] if e.get("action") == "reopened")
        found = [copy.deepcopy(reopened) | {"action": "closed"}]
        found[0]["issue"]["state"] = "closed"
    owner, name = repo.split("/")
    text = json.dumps(found[0]).replace(EXAMPLE_REPO, repo)
    payload: dict[str, Any] = json.loads(text)
    payload["repository"]["name"], payload["repository"]["owner"]["login"] = name, owner
    return payload


IDS = itertools.count(int(datetime.now(UTC).timestamp() * 1000))
"""Ids GitHub gives what a test makes (a comment, a check run): each a new one."""


def now() -> str:
    """GitHub's ``updated_at``/``created_at``: a new event on an object changes it."""
    return datetime.now(UTC).isoformat()


def issue_event(
    action: str, repo: str, number: int, labels: list[str], sender: str = "octocat"
) -> dict[str, Any]:
    payload = example("issues", action, repo)
    issue = payload["issue"]
    issue["number"] = number
    issue["id"], issue["updated_at"] = 10_000 + number, now()
    issue["html_url"] = f"https://github.com/{repo}/issues/{number}"
    issue["title"] = f"Fix slugify (#{number})"
    issue["body"] = 'slugify("Hello, World!") must return "hello-world".'
    label = issue["labels"][0] if issue.get("labels") else {"id": 1, "color": "d73a4a"}
    issue["labels"] = [label | {"name": n} for n in labels]
    payload["sender"]["login"] = sender
    return payload


def comment_event(
    repo: str, number: int, body: str, sender: str, *, on_pull: bool = False
) -> dict[str, Any]:
    """A comment created on issue ``number``, or (``on_pull``) on pull request ``number``,
    whose issue object then carries GitHub's ``pull_request`` links and no branch."""
    payload = example("issue_comment", "created", repo)
    payload["issue"]["number"] = number
    payload["issue"].pop("pull_request", None)
    if on_pull:
        api = f"https://api.github.com/repos/{repo}"
        payload["issue"]["pull_request"] = {
            "url": f"{api}/pulls/{number}",
            "html_url": f"https://github.com/{repo}/pull/{number}",
            "diff_url": f"https://github.com/{repo}/pull/{number}.diff",
            "patch_url": f"https://github.com/{repo}/pull/{number}.patch",
        }
    payload["comment"]["body"] = body
    payload["comment"]["id"], payload["comment"]["created_at"] = next(IDS), now()
    payload["comment"]["user"]["login"] = sender
    payload["sender"]["login"] = sender
    payload["sender"]["type"] = "User"
    return payload


def signature(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


async def deliver(
    url: str,
    event: str,
    payload: dict[str, Any],
    secret: bytes,
    *,
    delivery: str = "",
    signed: str | None = None,
    host: str = "",
) -> tuple[httpx.Response, str]:
    """POST the payload to ``url``/hooks/github as GitHub does, under delivery id
    ``delivery`` (a new one by default); (answer, what the delivery is about: its
    workflow is ``delivery_workflow_id`` of it). ``signed`` overrides the signature
    header (``""``: none at all); ``host`` the ``Host`` header (a proxy in front of the
    page passes the public name on)."""
    body = json.dumps(payload).encode()
    delivery = delivery or str(uuid.uuid4())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/5d6b6d2",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Hook-ID": "292430182",
    }
    sig = signature(secret, body) if signed is None else signed
    if sig:
        headers["X-Hub-Signature-256"] = sig
    if host:
        headers["Host"] = host
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.post(f"{url}/hooks/github", content=body, headers=headers)
    return resp, delivery_key(event, payload)


def review_event(
    repo: str, number: int, branch: str, review_id: int, state: str, body: str, sender: str,
    commit: str = "",
) -> dict[str, Any]:  # fmt: skip
    """A ``pull_request_review`` submitted on the pull request of ``branch`` (at ``commit``,
    the head the reviewer saw; the example's by default)."""
    payload = example("pull_request_review", "submitted", repo)
    pr = payload["pull_request"]
    pr["number"] = number
    pr["head"]["ref"] = branch
    payload["review"].update(id=review_id, state=state, body=body, submitted_at=now())
    if commit:
        payload["review"]["commit_id"] = pr["head"]["sha"] = commit
    payload["review"]["user"]["login"] = sender
    payload["sender"]["login"] = sender
    payload["sender"]["type"] = "User"
    return payload


def closed_event(
    repo: str, number: int, branch: str, *, merged: bool, sender: str
) -> dict[str, Any]:
    """A ``pull_request`` closed, merged or not, on the pull request of ``branch``."""
    payload = example("pull_request", "closed", repo)
    pr = payload["pull_request"]
    pr["number"] = number
    pr["id"], pr["updated_at"] = 20_000 + number, now()
    pr["head"]["ref"] = branch
    pr["merged"] = merged
    pr["merged_by"] = copy.deepcopy(payload["sender"]) if merged else None
    payload["sender"]["login"] = sender
    payload["sender"]["type"] = "User"
    return payload


def checks_event(
    event: str, repo: str, sha: str, branch: str, conclusion: str, name: str = "build"
) -> dict[str, Any]:
    """A ``check_run``, ``check_suite`` or ``workflow_run`` completed on ``sha`` of
    ``branch`` (a check run's branch is its suite's, as GitHub nests it)."""
    payload = example(event, "completed", repo)
    ran = payload[event]
    ran.update(head_sha=sha, conclusion=conclusion, status="completed")
    ran.update(id=next(IDS), updated_at=now())
    if event == "check_suite":
        ran["head_branch"] = branch
    elif event == "check_run":
        ran["name"] = name
        ran["check_suite"].update(head_sha=sha, head_branch=branch)
    else:
        ran.update(head_branch=branch, name=name)
    payload["sender"]["type"] = "Bot"
    return payload
