"""The ``github_checks`` gate: the remote CI's verdict on the attempt's pushed commit.

The commit is on GitHub when the task's repository is a URL (each attempt's commit is
pushed before verify runs) and GitHub is named (``finalize.github``, or a ``github.com``
remote). The gate asks GitHub for the commit's check runs until every required one has
completed or its ``timeout`` passed (the verify activity heartbeats meanwhile, and a
retried activity asks again: the wait survives a worker), honouring a spent rate limit
until its reset. All succeeded (or neutral, or skipped): pass. Otherwise each failed
check's conclusion, title, summary, annotations and link are the evidence the next
attempt reads. A commit GitHub cannot have, or checks that never completed, is
``uncertain``: no attempt can change that, a person decides.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from typing import Any

from activities.gates.judging import Judging
from activities.host import github_sdk
from loop.contracts import Evidence, GateResult, GitHubChecksGate

KIND = GitHubChecksGate.KIND
API_TIMEOUT_S = 30.0
_GITHUB_URL = re.compile(r"github\.com[:/]([\w.-]+)/([\w.-]+?)(?:\.git)?/?$")
"""As ``activities.pull_request``'s (which reaches the model step, which imports gates)."""
POLL_S = 15.0
"""Seconds between two looks at the commit's checks."""
PASSING = ("success", "neutral", "skipped")
MAX_ANNOTATIONS = 50
MAX_TEXT = 2_000


async def evaluate(gate: GitHubChecksGate, judging: Judging) -> GateResult:
    task, ws = judging.task, judging.ws
    found = _GITHUB_URL.search(ws.remote)
    repo = task.finalize.github or (f"{found.group(1)}/{found.group(2)}" if found else "")
    required = gate.github_checks.required
    result = GateResult(
        name=gate.name,
        kind=KIND,
        passed=False,
        requirement=f"GitHub's checks {', '.join(required)} succeed on the pushed commit",
    )
    if not ws.remote or not repo:
        detail = "the commit is not on GitHub (the task's repository must be a GitHub URL)"
        return result.model_copy(update={"uncertain": True, "evidence": Evidence(detail=detail)})
    token_env = task.github_issue.token_env if task.github_issue else "GITHUB_TOKEN"
    token = os.environ.get(token_env, "").strip()
    if not token:
        detail = f"{token_env} is not set where the worker runs: GitHub's checks cannot be read"
        return result.model_copy(update={"uncertain": True, "evidence": Evidence(detail=detail)})
    owner, name = repo.split("/", 1)
    deadline = time.monotonic() + gate.github_checks.timeout
    async with github_sdk.GitHub(
        token,
        base_url=(os.environ.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/"),
        timeout=API_TIMEOUT_S,
        auto_retry=False,
        http_cache=False,
        user_agent="loopwork-checks",
    ) as gh:
        while True:
            runs = await check_runs(gh, owner, name, judging.commit, deadline)
            latest = {r["name"]: r for r in reversed(runs)}  # the newest run of each name
            waiting = [n for n in required if latest.get(n, {}).get("status") != "completed"]
            if not waiting:
                break
            if time.monotonic() + POLL_S > deadline:
                detail = (
                    f"not completed within {gate.github_checks.timeout} s: {', '.join(waiting)}"
                )
                evidence = Evidence(detail=detail)
                return result.model_copy(update={"uncertain": True, "evidence": evidence})
            await asyncio.sleep(POLL_S)
        failed = [latest[n] for n in required if latest[n].get("conclusion") not in PASSING]
        lines: list[str] = []
        for run in failed:
            lines += await described_run(gh, owner, name, run)
    if not failed:
        detail = f"all succeeded on {judging.commit[:12]}: {', '.join(required)}"
        return result.model_copy(update={"passed": True, "evidence": Evidence(detail=detail)})
    said = ", ".join(f"{r['name']} {r.get('conclusion')}" for r in failed)
    return result.model_copy(update={"evidence": Evidence(detail=said, failure=lines)})


async def check_runs(
    gh: github_sdk.GitHub[Any], owner: str, name: str, sha: str, deadline: float
) -> list[dict[str, Any]]:
    """The commit's check runs (a spent rate limit is waited out, within the deadline)."""
    while True:
        try:
            resp = await gh.arequest(
                "GET",
                f"/repos/{owner}/{name}/commits/{sha}/check-runs",
                params={"per_page": 100, "filter": "latest"},
            )
        except github_sdk.RateLimitExceeded as e:
            wait = max(e.retry_after.total_seconds(), 1.0)
            if time.monotonic() + wait > deadline:
                raise
            await asyncio.sleep(wait)
            continue
        except github_sdk.RequestFailed as e:
            if e.response.status_code in (404, 422):  # GitHub has no such commit (yet)
                return []
            raise
        data = resp.json()
        runs = data.get("check_runs") if isinstance(data, dict) else None
        return [r for r in runs or [] if isinstance(r, dict)]


async def described_run(
    gh: github_sdk.GitHub[Any], owner: str, name: str, run: dict[str, Any]
) -> list[str]:
    """A failed check as the next attempt reads it: conclusion, title, summary, link and
    each annotation with its place. GitHub's text is the CI's output: data, cut short."""
    output = run.get("output") or {}
    lines = [f"{run['name']}: {run.get('conclusion')}"]
    for key in ("title", "summary"):
        text = str(output.get(key) or "").strip()
        if text:
            lines.append(f"{run['name']} {key}: {text[:MAX_TEXT]}")
    if run.get("details_url") or run.get("html_url"):
        lines.append(f"{run['name']} log: {run.get('details_url') or run.get('html_url')}")
    if int(output.get("annotations_count") or 0):
        try:
            resp = await gh.arequest(
                "GET",
                f"/repos/{owner}/{name}/check-runs/{int(run['id'])}/annotations",
                params={"per_page": MAX_ANNOTATIONS},
            )
            notes = resp.json()
        except github_sdk.RequestFailed:
            notes = []
        for a in notes if isinstance(notes, list) else []:
            where = f"{a.get('path')}:{a.get('start_line')}"
            level = a.get("annotation_level")
            lines.append(f"{where}: [{level}] {str(a.get('message') or '')[:MAX_TEXT]}")
    return lines
