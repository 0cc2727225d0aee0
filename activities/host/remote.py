"""Repositories that live somewhere else: one bare mirror per URL on each host.

A task whose ``repo`` is a git URL gets its worktree from this host's mirror
(``LOOP_HOME/repos/<hash>.git``): fetched under the repository's lock, never
cloned twice. The remote's branches arrive as ``refs/remotes/origin/*``, so a
fetch never moves a branch a worktree has checked out; the mirror's own branches
are the tasks' ``loop/<id>``.

Every attempt's work is pushed to ``loop/<id>`` with a lease (the push fails if
the remote's branch is not what this host last saw, so a host thought lost that
comes back cannot overwrite the host that took over), and a merge is pushed to
the base branch without force: a base that moved meanwhile is fetched and merged
again, never overwritten.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from activities.host import clone
from activities.host.git import GitError, git, repo_lock
from loop.contracts import Workspace

ORIGIN = "origin"
FETCH = f"+refs/heads/*:refs/remotes/{ORIGIN}/*"


def _allow_file(url: str) -> list[str]:
    """git refuses the file protocol unless told (Loopwork's default refuses it for
    anything an agent could name); the task's own ``file://`` URL is the person's."""
    return ["-c", "protocol.file.allow=always"] if url.startswith("file:") else []


def mirror_path(repos: Path, url: str) -> Path:
    digest = hashlib.sha1(url.encode(), usedforsecurity=False).hexdigest()[:16]
    return Path(repos).resolve() / f"{digest}.git"


async def mirror(repos: Path, locks: Path, url: str) -> str:
    """This host's mirror of ``url``, made on first use and fetched now; its path."""
    path = mirror_path(repos, url)
    async with repo_lock(locks, str(path)):
        if not (path / "HEAD").exists():
            path.mkdir(parents=True, exist_ok=True)
            await git(["init", "-q", "--bare", str(path)], path)
            await git(["remote", "add", ORIGIN, url], path)
            await git(["config", f"remote.{ORIGIN}.fetch", FETCH], path)
        await fetch(str(path), url)
    return str(path)


async def fetch(path: str, url: str) -> None:
    try:
        await git([*_allow_file(url), "fetch", "-q", "--prune", ORIGIN], path)
    except GitError as e:
        raise RemoteError(f"cannot fetch {url}: {e.message}") from None


async def default_branch(path: str, url: str) -> str:
    """The remote's HEAD branch (what a task without ``base`` starts from)."""
    out = await git([*_allow_file(url), "ls-remote", "--symref", ORIGIN, "HEAD"], path)
    for line in out.splitlines():
        if line.startswith("ref: refs/heads/"):
            return line.split()[1].removeprefix("refs/heads/")
    raise RemoteError(f"{url} has no HEAD branch; give the task a base")


def tracking(branch: str) -> str:
    """Where this mirror keeps the remote's ``branch``."""
    return f"refs/remotes/{ORIGIN}/{branch}"


async def push_branch(path: str, url: str, branch: str) -> None:
    """Publish the task branch (force, with a lease on what this host last saw of it)."""
    lease = f"--force-with-lease=refs/heads/{branch}"
    try:
        await git(
            [*_allow_file(url), "push", "-q", lease, ORIGIN,
             f"+refs/heads/{branch}:refs/heads/{branch}"],
            path,
        )  # fmt: skip
    except GitError as e:
        raise RemoteError(f"cannot push {branch} to {url}: {e.message}") from None


async def publish(ws: Workspace, locks: Path) -> None:
    """After each commit on the task branch: the branch on the remote too (a local
    repository has nothing to publish to), through this host's mirror (the task's clone
    brings it there first). A refused push is retried by the step."""
    if not ws.remote:
        return
    if ws.isolated:
        await clone.bring(ws.path, ws.repo, ws.branch, locks)
    try:
        await push_branch(ws.repo, ws.remote, ws.branch)
    except RemoteError as e:
        raise RuntimeError(str(e)) from None


async def delete_branch(path: str, url: str, branch: str) -> None:
    """Remove the task branch from the remote once base holds it (gone already is fine)."""
    await git([*_allow_file(url), "push", "-q", ORIGIN, f":refs/heads/{branch}"], path, check=False)


async def push_base(path: str, url: str, commit: str, base: str) -> bool:
    """Move the remote's ``base`` to ``commit`` without force; False when the remote
    refused because ``base`` moved meanwhile (fetch, merge again, retry)."""
    try:
        await git([*_allow_file(url), "push", "-q", ORIGIN, f"{commit}:refs/heads/{base}"], path)
    except GitError as e:
        text = f"{e.stderr}\n{e.stdout}"
        if "non-fast-forward" in text or "fetch first" in text or "rejected" in text:
            return False
        raise RemoteError(f"cannot push {base} to {url}: {e.message}") from None
    return True


class RemoteError(Exception):
    """The remote could not be reached or refused; the message is one line."""
