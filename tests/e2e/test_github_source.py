"""The live ``github`` source: triage reading a repository's issues over real HTTP.

The API is ``tests.support.github``'s stand-in (its answers are checked against GitHub's
OpenAPI description in tests/unit/test_github_spec.py), the client githubkit, unmocked.
Workflows run on the real dev server; the error answers are read by the discover
activity alone, in Temporal's activity environment.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.discover import DiscoverActivities
from activities.github_issues import RATE_LIMITED
from loop.contracts import SOURCE_MISCONFIGURED, DiscoverInput, GitHubSource
from loop.loaders import load_sources
from loop.settings import Settings
from tests.e2e.test_triage import by_task, loop_cli, run_triage, started_spec
from tests.support.agents import write_agent
from tests.support.github import GitHubStandIn, issue, serving
from tests.support.triage import NOTHING, template, write_sources
from worker import build_worker

pytestmark = pytest.mark.timeout(150)

TOKEN = "ghp_standin0123456789abcdefghijklmnopqrst"
REPO = "acme/app"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[GitHubStandIn]:
    """The stand-in with acme/app, two issues to a page, and the worker's variables set."""
    issues = [
        issue(REPO, 1, "Punctuation in slugs", ["loop", "bug"], body="Keep hyphens."),
        issue(REPO, 2, "Slug PR", ["loop"], pull_request={}),
        issue(REPO, 3, "Write docs", ["docs"]),
        issue(REPO, 4, "Old", ["loop"], state="closed"),
        issue(REPO, 5, "Unicode slugs", ["loop"]),
    ]
    with serving(GitHubStandIn(token=TOKEN, repos={REPO: issues}, per_page_max=2)) as h:
        monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
        monkeypatch.setenv("GITHUB_API_URL", h.url)
        yield h


def sources_file(tmp_path: Path, demo_repo: Path, name: str) -> Path:
    source = {"name": name, "kind": "github", "repo": REPO, "labels": {"include": ["loop"]}}
    return write_sources(tmp_path, template(demo_repo, write_agent(tmp_path, NOTHING)), [source])


async def test_labeled_issues_become_tasks_and_an_unchanged_repo_costs_nothing(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, hub: GitHubStandIn
):
    name = f"gh{uuid.uuid4().hex[:6]}"
    file = sources_file(tmp_path, demo_repo, name)
    async with build_worker(client, settings):
        first = await run_triage(client, settings, file)
        spec, _ = await started_spec(client, f"{name}-acme-app-1")
        # The listing (the tasks started also keep a status comment on their issues).
        listings = [s for s in hub.seen if s.path == f"/repos/{REPO}/issues"]
        listed = [(s.query["page"], s.status, s.if_none_match) for s in listings]
        assert listed == [("1", 200, ""), ("2", 200, "")], "page 2 came from the Link header"
        assert all(s.authorization == f"token {TOKEN}" for s in hub.seen)
        assert listings[0].query["state"] == "open"
        spent = hub.remaining

        second = await run_triage(client, settings, file)

    d = by_task(first)
    assert d[f"{name}-acme-app-1"].action == "started"
    assert d[f"{name}-acme-app-5"].action == "started"
    assert d[f"{name}-acme-app-2"].reason == "pull request"
    assert d[f"{name}-acme-app-3"].reason == "needs a label of: loop"
    assert f"{name}-acme-app-4" not in d, "closed issues are not listed"
    assert spec.goal.startswith("Punctuation in slugs\n\nKeep hyphens.")
    assert f"(GitHub issue https://github.com/{REPO}/issues/1)" in spec.goal
    assert spec.repo == str(demo_repo)
    assert spec.github_issue is not None and spec.github_issue.number == 1
    assert spec.github_issue.repo == REPO

    again = [s for s in hub.seen if s.path == f"/repos/{REPO}/issues"][2:]
    assert [(s.query["page"], s.status) for s in again] == [("1", 304), ("2", 304)]
    assert all(s.if_none_match.startswith('W/"') for s in again)
    assert hub.remaining == spent, "a 304 costs no rate limit"
    assert "(2 requests, 2 not modified)" in second.notes[0]
    d2 = by_task(second)
    assert sorted(d2) == sorted(d), "a 304 changes nothing of what triage sees"
    assert d2[f"{name}-acme-app-1"].reason.startswith("task open")


async def test_a_spent_rate_limit_is_waited_out_by_temporal(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, hub: GitHubStandIn
):
    name = f"gh{uuid.uuid4().hex[:6]}"
    hub.spend_limit(2)
    until = hub.limited_until
    async with build_worker(client, settings):
        result = await run_triage(
            client, settings, sources_file(tmp_path, demo_repo, name), dry_run=True
        )
    assert not result.errors and by_task(result)[f"{name}-acme-app-1"].action == "start"
    assert hub.responses() == [403, 200, 200], "one request while limited, none hammering"
    assert hub.seen[1].at >= until, "the retry came after the reset"


async def test_loop_triage_exits_2_when_the_worker_has_no_token(
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,
    monkeypatch: pytest.MonkeyPatch,
):
    name = f"gh{uuid.uuid4().hex[:6]}"
    file = sources_file(tmp_path, demo_repo, name)
    monkeypatch.delenv("GITHUB_TOKEN")  # in the worker's environment: it runs in this process
    async with build_worker(client, settings):
        result = await run_triage(client, settings, file, dry_run=True)
        ran = await loop_cli(client, settings)("triage", str(file), "--dry-run")
    assert result.misconfigured == [name] and not hub.seen
    assert result.errors == [
        f"{name}: GITHUB_TOKEN is not set where the worker runs; export a token that can "
        f"read the issues of {REPO} in the worker's environment (the source's token_env "
        "names the variable)"
    ]
    assert ran.code == 2, (ran.out, ran.err)
    assert [ln for ln in ran.err.splitlines() if ln.strip()] == [
        f"source failed: {result.errors[0]}"
    ]


def discover(settings: Settings, **fields: object):
    source = GitHubSource.model_validate({"name": "gh", "kind": "github", "repo": REPO} | fields)
    return ActivityEnvironment().run(
        DiscoverActivities(settings).discover, DiscoverInput(source=source)
    )


async def test_a_rate_limited_answer_retries_at_the_reset(settings: Settings, hub: GitHubStandIn):
    hub.spend_limit(600)
    with pytest.raises(ApplicationError) as e:
        await discover(settings)
    assert e.value.type == RATE_LIMITED and not e.value.non_retryable
    delay = e.value.next_retry_delay
    assert delay is not None and timedelta(seconds=590) < delay <= timedelta(seconds=602)
    assert "rate limit" in e.value.message and len(hub.seen) == 1

    hub.limited_until, hub.throttled_for = 0, 90  # a secondary limit: 429 with Retry-After
    with pytest.raises(ApplicationError) as e:
        await discover(settings)
    assert e.value.type == RATE_LIMITED and e.value.next_retry_delay == timedelta(seconds=90)
    assert hub.responses() == [403, 429]


async def test_token_errors_are_one_clear_line(
    settings: Settings, hub: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("GITHUB_TOKEN")
    with pytest.raises(ApplicationError) as e:
        await discover(settings)
    assert e.value.non_retryable and e.value.type == SOURCE_MISCONFIGURED and not hub.seen
    assert e.value.message.startswith("GITHUB_TOKEN is not set where the worker runs; ")

    monkeypatch.setenv("LOOP_GH_TOKEN", "ghp_revoked")
    with pytest.raises(ApplicationError) as e:
        await discover(settings, token_env="LOOP_GH_TOKEN")
    assert e.value.non_retryable and hub.responses() == [401]
    assert e.value.message.startswith("the token was refused by GitHub (LOOP_GH_TOKEN: 401")

    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    with pytest.raises(ApplicationError) as e:
        await discover(settings, repo="acme/gone")
    assert e.value.non_retryable
    assert e.value.message == "repository acme/gone not found or not visible to the token"
    assert "\n" not in e.value.message


def test_the_sources_file_takes_a_github_source(tmp_path: Path, demo_repo: Path):
    file = sources_file(tmp_path, demo_repo, "gh")
    (source,) = load_sources(file).sources
    assert isinstance(source, GitHubSource)
    assert (source.repo, source.token_env) == (REPO, "GITHUB_TOKEN")
    assert source.labels.include == ["loop"]


async def test_an_issue_reopened_past_a_full_unchanged_page_is_found(
    settings: Settings, hub: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("activities.github_issues.PER_PAGE", 2)  # the stand-in's page size
    hub.repos[REPO] = hub.repos[REPO][:2]  # exactly one full page
    first = await discover(settings)
    assert [i.key for i in first.items] == ["1", "2"] and hub.responses() == [200]
    hub.repos[REPO].append(issue(REPO, 0, "Reopened", ["loop"]))  # the oldest: sorts last
    again = await discover(settings)
    assert [i.key for i in again.items] == ["1", "2", "0"]
    assert hub.responses() == [200, 304, 200]
