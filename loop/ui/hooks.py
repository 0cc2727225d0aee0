"""``POST /hooks/github``: a GitHub webhook delivery, checked and handed to Temporal.

Enabled only when ``LOOP_GITHUB_WEBHOOK_SECRET_FILE`` names the secret (otherwise the
path does not exist: 404). A delivery is taken only when ``X-Hub-Signature-256`` is the
HMAC-SHA256 of the raw body under that secret, compared in constant time: anything
else is 401 and starts nothing. The signature is the whole of its authentication, so
the path skips the page's sign-in, same-origin and loopback-name checks (GitHub signs
in, not a browser).

Nothing slow happens here: GitHub gives up after 10 s. A delivery that concerns a
source of ``--sources`` starts one ``GitHubDeliveryWorkflow`` whose workflow id holds
what the delivery is about, read from the signed body (``loop.rules.hooks.delivery_key``:
the comment's or review's id and its action), never the unsigned ``X-GitHub-Delivery``:
the same body sent again, under any delivery id, is refused by the server (``200``,
already received) rather than handled twice; the workflow does the rest. The body is
read in chunks up to ``MAX_BODY`` and its JSON parsed within bounds (``loop.ui.bodies``):
too deep is ``400``. Events and actions
Loopwork does not act on are answered ``200`` with what was ignored, so GitHub's
delivery log reads as a record.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from loop.contracts import (
    CHECK_EVENTS,
    GITHUB_DELIVERY_WORKFLOW,
    GitHubDelivery,
    GitHubDeliveryResult,
    GitHubSource,
    TriageSources,
    branch_for,
    delivery_workflow_id,
    is_valid_delivery_id,
)
from loop.rules import hooks
from loop.ui import bodies
from loop.ui.bodies import said

PATH = "/hooks/github"
MAX_BODY = 5 << 20
"""Bytes read of a delivery; GitHub caps payloads at 25 MB, an issue's is a few KB."""
ISSUE_ACTIONS = frozenset({"opened", "labeled", "reopened", "closed"})
DELIVERY_TIMEOUT = timedelta(hours=1)
"""A delivery's workflow asks GitHub and answers a task: minutes at the very most."""


@dataclass(frozen=True)
class Hooked:
    """A ``github`` source of ``--sources``, with the file it came from (its policy)."""

    sources: TriageSources
    source: GitHubSource


def signature_ok(secret: bytes, body: bytes, header: str) -> bool:
    """``sha256=<hex>`` of the body under the secret, as GitHub signs a delivery."""
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.strip().encode())


class GitHubHook:
    def __init__(
        self, secret: bytes, hooked: list[Hooked], client: Client, task_queue: str
    ) -> None:
        self.secret = secret
        self.by_repo = {h.source.repo.lower(): h for h in hooked}
        self.client = client
        self.task_queue = task_queue

    async def handle(self, request: Request) -> Response:
        body = await bodies.capped(request, MAX_BODY)
        if body is None:
            return said(413, f"refused: a delivery is at most {MAX_BODY} bytes")
        if not signature_ok(self.secret, body, request.headers.get("x-hub-signature-256", "")):
            return said(401, "refused: X-Hub-Signature-256 is missing or wrong")
        event = request.headers.get("x-github-event", "")
        delivery = request.headers.get("x-github-delivery", "")
        if not is_valid_delivery_id(delivery):
            return said(400, "refused: X-GitHub-Delivery is missing or not a delivery id")
        payload, refusal = bodies.parsed(body)
        if refusal is not None:
            return refusal
        if not isinstance(payload, dict):
            return said(400, "refused: the body is not a JSON object")
        if event == "ping":
            return said(200, "pong")
        repo = str((payload.get("repository") or {}).get("full_name") or "")
        hooked = self.by_repo.get(repo.lower())
        if hooked is None:
            return said(200, f"ignored: no github source of --sources is for {repo or '?'}")
        why_not = _ignored(
            event,
            payload,
            approving=hooked.source.approve_on_review,
            ci=bool(hooked.source.ci_checks),
        )
        if why_not:
            return said(200, f"ignored: {why_not}")
        d = _delivery(delivery, event, payload, hooked)
        wid = delivery_workflow_id(d.key)
        try:
            await self.client.start_workflow(
                GITHUB_DELIVERY_WORKFLOW,
                d,
                id=wid,
                task_queue=self.task_queue,
                result_type=GitHubDeliveryResult,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                execution_timeout=DELIVERY_TIMEOUT,
                static_summary=f"GitHub {event} {d.action} #{d.issue.get('number')} in {repo}",
            )
        except WorkflowAlreadyStartedError:
            # The same content under another delivery id is a replay, or GitHub's own
            # redelivery: either way it was acted on once.
            return said(200, f"already received: {d.key} (workflow {wid})")
        except RPCError as e:
            # GitHub shows the failure and a person can redeliver it once Temporal is back.
            return said(503, f"not taken: Temporal did not answer ({e.message or e.status})")
        return said(202, f"taken: workflow {wid}")


def _delivery(delivery: str, event: str, payload: dict[str, Any], hooked: Hooked) -> GitHubDelivery:
    """What the workflow reads of a payload ``_ignored`` let by."""
    review = payload.get("review") or {}
    pr = payload.get("pull_request") or {}
    comment = payload.get("comment") if event == "issue_comment" else None
    ran = _ran(event, payload)
    return GitHubDelivery(
        delivery=delivery,
        event=event,  # type: ignore[arg-type]  # _ignored let only the known ones by
        action=str(payload.get("action") or ""),
        sources=hooked.sources.model_copy(update={"sources": [hooked.source]}),
        source=hooked.source.name,
        issue=payload["issue"] if event in ("issues", "issue_comment") else pr,
        sender=str((payload.get("sender") or {}).get("login") or ""),
        comment=str((comment or review or {}).get("body") or ""),
        review_id=int(review.get("id") or 0),
        review_state=str(review.get("state") or "").lower(),
        head_ref=str((pr.get("head") or {}).get("ref") or ""),
        merged=pr.get("merged") is True,
        head_sha=str(ran.get("head_sha") or ""),
        head_branch=str(ran.get("head_branch") or ""),
        conclusion=str(ran.get("conclusion") or ""),
        key=hooks.delivery_key(event, payload),
        commit=str(review.get("commit_id") or "") if event == "pull_request_review" else "",
        said_at=str((comment or {}).get("created_at") or ""),
    )


def _ran(event: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A ``CHECK_EVENTS`` delivery's run or suite, with ``head_branch`` where GitHub puts
    it (a check run's is its suite's); {} for any other event."""
    if event not in CHECK_EVENTS:
        return {}
    ran = payload.get(event)
    if not isinstance(ran, dict):
        return {}
    suite = ran.get("check_suite")
    if event == "check_run" and isinstance(suite, dict):
        return ran | {"head_branch": suite.get("head_branch")}
    return ran


def _ignored(
    event: str, payload: dict[str, Any], *, approving: bool = False, ci: bool = False
) -> str:
    """Why Loopwork does nothing with this delivery, or "" when it acts on it
    (``approving``: the source takes an approving review as an approval; ``ci``: it
    names ``ci_checks``, so a failed run on a branch may matter)."""
    action = str(payload.get("action") or "")
    issue = payload.get("issue")
    if event == "pull_request_review":
        return _review_ignored(action, payload, approving)
    if event == "pull_request":
        return _closed_ignored(action, payload)
    if event in CHECK_EVENTS:
        return _checks_ignored(event, action, payload, ci)
    if event not in ("issues", "issue_comment"):
        return (
            f"{event or 'an event'} is not acted on (subscribe to issues, issue comments, "
            "pull requests, pull request reviews, check suites, check runs, workflow runs)"
        )
    if not isinstance(issue, dict) or not isinstance(issue.get("number"), int):
        return f"{event} without an issue"
    if event == "issues" and action not in ISSUE_ACTIONS:
        return f"issues {action}"
    if event == "issue_comment":
        comment = payload.get("comment") or {}
        if action != "created":
            return f"issue_comment {action}"
        if not isinstance(comment, dict) or not hooks.addressed(str(comment.get("body") or "")):
            return "a comment not beginning with /loop"
        if (payload.get("sender") or {}).get("type") == "Bot":
            return "a comment by a bot"
    return ""


def _review_ignored(action: str, payload: dict[str, Any], approving: bool) -> str:
    review, pr = payload.get("review"), payload.get("pull_request")
    if not isinstance(review, dict) or not isinstance(pr, dict):
        return "pull_request_review without a review"
    if not isinstance(pr.get("number"), int) or not isinstance(review.get("id"), int):
        return "pull_request_review without a number"
    if action != "submitted":
        return f"pull_request_review {action}"
    state = str(review.get("state") or "").lower()
    if state not in hooks.REVIEW_STATES and not (approving and state == "approved"):
        return f"a review that {review.get('state')} (merging is the approval)"
    ref = str((pr.get("head") or {}).get("ref") or "")
    if not ref.startswith(branch_for("")):
        return f"a review of {ref or '?'}, not of a task's branch"
    return ""


def _checks_ignored(event: str, action: str, payload: dict[str, Any], ci: bool) -> str:
    """CI completed on a task's branch (recorded) or failed on some other branch of a
    source naming ``ci_checks`` (the workflow knows the source's base); a passing run
    elsewhere, or any run elsewhere for a source naming none, is nothing."""
    ran = _ran(event, payload)
    if action != "completed":
        return f"{event} {action}"
    if not re.fullmatch(r"[0-9a-f]{40}", str(ran.get("head_sha") or "")):
        return f"{event} without a commit"
    branch = str(ran.get("head_branch") or "")
    if branch.startswith(branch_for("")):
        return ""
    if str(ran.get("conclusion") or "") in ("success", "neutral", "skipped"):
        return f"{event} {ran.get('conclusion')} on {branch[:60] or '?'}"
    if not ci:
        return f"{event} on {branch[:60] or '?'}: the source names no ci_checks"
    return ""


def _closed_ignored(action: str, payload: dict[str, Any]) -> str:
    """A task's pull request closed (merged or not) is acted on; the rest of its life is
    GitHub's (pushes to it are the task's own)."""
    pr = payload.get("pull_request")
    if not isinstance(pr, dict) or not isinstance(pr.get("number"), int):
        return "pull_request without a pull request"
    if action != "closed":
        return f"pull_request {action}"
    ref = str((pr.get("head") or {}).get("ref") or "")
    if not ref.startswith(branch_for("")):
        return f"a pull request of {ref or '?'}, not of a task's branch"
    return ""
