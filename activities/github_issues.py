"""The open issues of a GitHub repository, read live for a ``github`` source.

Triage polls: a schedule may run it every few minutes, and GitHub counts every request
against the token's hourly limit except a ``304 Not Modified``. So each page's ETag and
the issues it held are kept in ``LOOP_HOME/triage/github-<source>.json``, and the next
poll asks with ``If-None-Match``: a repository that did not change costs nothing and
reads its issues from that file. A file, not workflow state, because polls are separate
triage runs (a schedule starts each afresh) that share nothing else; the file is
written only after a complete listing, so a poll that failed half-way never leaves a
mix of old and new pages. A worker of another host has no file and asks in full.

``since`` is not used: the open issues updated since the last poll would not say which
ones closed meanwhile, and the ETag already makes an unchanged listing free.

A rate-limited answer (403 or 429 with ``X-RateLimit-Remaining: 0`` or ``Retry-After``)
is not retried at once: the activity fails retryably with ``next_retry_delay`` set to
the reset time, so the wait is a timer in Temporal that outlives the worker, and
nothing is sent to GitHub before it ends. The client is githubkit's, with its own
retries and in-memory cache off so that every request is one this module decided.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.host import github_sdk
from activities.pull_request import API_TIMEOUT_S, GITHUB_API
from loop.contracts import SOURCE_MISCONFIGURED, GitHubSource
from loop.errors import permanent

PER_PAGE = 100
MAX_PAGES = 30
"""3,000 open issues and pull requests per poll; a repository with more is listed in part
(the note says so), since ``max_items`` keeps at most 200 of them anyway."""
RATE_LIMITED = "GitHubRateLimited"
"""The error type of a rate-limited poll, retried at the reset time."""


class _Page(BaseModel):
    etag: str = ""
    issues: list[dict[str, Any]]
    next: int | None = None


class _Polled(BaseModel):
    """The cache file: what the last complete listing of ``repo`` returned, by page."""

    repo: str
    pages: dict[int, _Page]


@dataclass(frozen=True)
class Listing:
    issues: list[dict[str, Any]]
    """Issues and pull requests in the shape of ``activities.discover``'s GitHub items."""
    requests: int
    not_modified: int
    partial: bool


def api_base() -> str:
    return (os.environ.get("GITHUB_API_URL") or GITHUB_API).rstrip("/")


def token_of(source: GitHubSource) -> str:
    token = os.environ.get(source.token_env, "").strip()
    if not token:
        raise misconfigured(
            f"{source.token_env} is not set where the worker runs; export a token that can "
            f"read the issues of {source.repo} in the worker's environment (the source's "
            "token_env names the variable)"
        )
    return token


async def open_issues(source: GitHubSource, home: Path) -> Listing:
    """Every page of the repository's open issues, each asked with its last ETag."""
    owner, name = source.repo.split("/", 1)
    cache_file = home / "triage" / f"github-{source.name}.json"
    cached = await asyncio.to_thread(_read_cache, cache_file, source.repo)
    pages: dict[int, _Page] = {}
    issues: list[dict[str, Any]] = []
    requests = not_modified = 0
    page: int | None = 1
    async with github_sdk.GitHub(
        token_of(source),
        base_url=api_base(),
        timeout=API_TIMEOUT_S,
        auto_retry=False,
        http_cache=False,
        user_agent="loopwork-triage",
    ) as gh:
        while page is not None and len(pages) < MAX_PAGES:
            activity.heartbeat(f"page {page}")
            before = cached.get(page)
            headers = {"If-None-Match": before.etag} if before and before.etag else {}
            requests += 1
            try:
                resp = await gh.rest.issues.async_list_for_repo(
                    owner, name, state="open", per_page=PER_PAGE, page=page, headers=headers
                )
            except github_sdk.RequestFailed as e:
                raise _failure(source, e) from None
            if resp.status_code == 304 and before is not None:
                not_modified += 1
                entry = before
                if entry.next is None and len(entry.issues) >= PER_PAGE:
                    # A full last page that did not change: an issue reopened since may
                    # have made a page after it, which its old Link header cannot name.
                    entry = entry.model_copy(update={"next": page + 1})
            else:
                entry = _Page(
                    etag=resp.headers.get("etag", ""),
                    issues=[_issue(i) for i in resp.parsed_data],
                    next=_next_page(resp.raw_response.links),
                )
            pages[page] = entry
            issues += entry.issues
            page = entry.next
    if pages != cached:  # every page unchanged: the file already says so
        await asyncio.to_thread(_write_cache, cache_file, _Polled(repo=source.repo, pages=pages))
    return Listing(issues, requests, not_modified, partial=page is not None)


def _issue(issue: Any) -> dict[str, Any]:
    """What discovery reads of an issue, as JSON that the cache file can hold."""
    labels = [label if isinstance(label, str) else label.name for label in issue.labels]
    body = issue.body if isinstance(issue.body, str) else ""
    return {
        "number": issue.number,
        "title": issue.title,
        "body": body,
        "labels": [label for label in labels if isinstance(label, str)],
        "state": issue.state,
        "html_url": issue.html_url,
        "pull_request": bool(issue.pull_request),  # githubkit's UNSET when absent is falsy
    }


def _next_page(links: dict[str | None, dict[str, str]]) -> int | None:
    """The ``page`` of the Link header's ``next``: the next page is asked of the same API
    with the same token, never of a URL the answer named."""
    url = links.get("next", {}).get("url", "")
    found = parse_qs(urlsplit(url).query).get("page", [])
    return int(found[0]) if found and found[0].isdigit() else None


def _failure(source: GitHubSource, e: github_sdk.RequestFailed) -> ApplicationError:
    if isinstance(e, github_sdk.RateLimitExceeded):
        wait = max(e.retry_after, timedelta(seconds=1))
        return ApplicationError(
            f"GitHub's rate limit for the token is spent; the next poll of {source.repo} "
            f"waits {int(wait.total_seconds())} s, until it resets",
            type=RATE_LIMITED,
            next_retry_delay=wait,
        )
    status = e.response.status_code
    said = _message(e)
    if status == 401:
        return misconfigured(
            f"the token was refused by GitHub ({source.token_env}: 401 {said}); "
            "set a valid one where the worker runs"
        )
    if status == 404:
        return misconfigured(f"repository {source.repo} not found or not visible to the token")
    if status == 403:
        return misconfigured(
            f"GitHub refused to list the issues of {source.repo} (403 {said}); "
            f"the token in {source.token_env} needs read access to its issues"
        )
    if status == 410:
        return misconfigured(f"repository {source.repo} has its issues turned off")
    failure = f"GitHub answered {status} {said} for {source.repo}'s issues"
    # GitHub's own trouble passes; any other answer would be the same on a retry.
    return ApplicationError(failure) if status >= 500 else permanent(failure)


def misconfigured(message: str) -> ApplicationError:
    """Not retried, and ``loop triage`` exits 2: a person must fix the file or the token."""
    return permanent(message, kind=SOURCE_MISCONFIGURED)


def _message(e: github_sdk.RequestFailed) -> str:
    try:
        data = e.response.json()
    except ValueError:
        return e.response.raw_response.reason_phrase
    text = data.get("message") if isinstance(data, dict) else None
    return str(text) if text else e.response.raw_response.reason_phrase


def _read_cache(file: Path, repo: str) -> dict[int, _Page]:
    """The last listing's pages; none when there is no file, or it is of another repo."""
    try:
        polled = _Polled.model_validate_json(file.read_bytes())
    except (OSError, ValidationError):
        return {}
    return polled.pages if polled.repo == repo else {}


def _write_cache(file: Path, polled: _Polled) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f".{file.name}.{uuid.uuid4().hex}")  # two polls may overlap
    tmp.write_text(polled.model_dump_json())
    tmp.replace(file)
