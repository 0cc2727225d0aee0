"""open_pull_request: hand a verified task over for review instead of merging it.

The branch ``loop/<id>`` goes to the remote (a task on a URL has pushed it after
every commit; a local repository pushes it to its ``origin``, if it has one), the
title and body go to ``LOOP_HOME/runs/<id>/pull-request.md``, and with
``GITHUB_TOKEN`` set and a GitHub repository (from the remote's URL, or the task's
``finalize.github``) the pull request is opened through GitHub's REST API. Opening
it twice finds the one already open, so a retried step opens one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from temporalio import activity

from activities.host import remote
from activities.host.git import GitError, git
from activities.model import one_line
from loop.contracts import PULL_REQUEST, PullRequestInput, PullRequestResult
from loop.settings import Settings

GITHUB_API = "https://api.github.com"
"""Overridden by GITHUB_API_URL (GitHub Enterprise, or a test's local server)."""
API_TIMEOUT_S = 30.0
_GITHUB_URL = re.compile(r"github\.com[:/]([\w.-]+)/([\w.-]+?)(?:\.git)?/?$")


def github_repo(url: str) -> str:
    """``owner/repo`` of a GitHub remote URL ("" for any other host)."""
    found = _GITHUB_URL.search(url)
    return f"{found.group(1)}/{found.group(2)}" if found else ""


class PullRequestActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=PULL_REQUEST.name)
    async def open_pull_request(self, inp: PullRequestInput) -> PullRequestResult:
        ws = inp.workspace
        url = ws.remote or await git(["remote", "get-url", remote.ORIGIN], ws.repo, check=False)
        if url and not ws.remote:
            try:
                await git(["push", "-q", remote.ORIGIN, f"+{inp.commit}:refs/heads/{ws.branch}"],
                          ws.repo)  # fmt: skip
            except GitError as e:
                raise RuntimeError(f"cannot push {ws.branch} to {url}: {e.message}") from None
        trace = self.settings.runs / f"{ws.task_id}.json"
        body = f"{inp.body}\n- trace: `{trace}`\n"
        path = Path(ws.run_dir) / "pull-request.md"
        path.write_text(f"# {inp.title}\n\nbranch `{ws.branch}` → `{ws.base_ref}`\n\n{body}")
        result = PullRequestResult(path=str(path), pushed_to=url)
        slug = inp.github or github_repo(url)
        token = os.environ.get("GITHUB_TOKEN")
        if not url:
            return result.model_copy(update={"note": "the repository has no remote to push to"})
        if not slug:
            return result.model_copy(update={"note": f"{url} is not a GitHub repository"})
        if not token:
            return result.model_copy(update={"note": "GITHUB_TOKEN is not set on the worker"})
        opened = await _open_on_github(slug, token, ws.branch, ws.base_ref, inp.title, body)
        return result.model_copy(update={"url": opened})


async def _open_on_github(
    slug: str, token: str, branch: str, base: str, title: str, body: str
) -> str:
    import httpx  # here, not at the top: a new worker starts without it

    api = os.environ.get("GITHUB_API_URL") or GITHUB_API
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
    }
    owner = slug.split("/")[0]
    async with httpx.AsyncClient(base_url=api, headers=headers, timeout=API_TIMEOUT_S) as client:
        made = await client.post(
            f"/repos/{slug}/pulls",
            json={"title": title, "head": branch, "base": base, "body": body},
        )
        if made.status_code == 201:
            return str(made.json()["html_url"])
        if made.status_code == 422:  # one is open already (a retried step): that one
            found = await client.get(
                f"/repos/{slug}/pulls", params={"head": f"{owner}:{branch}", "state": "open"}
            )
            if found.status_code == 200 and found.json():
                return str(found.json()[0]["html_url"])
        text = one_line(f"GitHub answered {made.status_code}: {made.text[:300]}", token)
        if made.status_code >= 500 or made.status_code == 429:
            raise RuntimeError(text)  # retried
        raise RuntimeError(text) from None
