"""A task's own clone, so tasks on one repository never see each other's work.

A git worktree shares its repository's refs and objects: an agent that can read its
worktree's ``.git`` can list every other task's branch and read their unmerged
commits. So each task works in a clone of its own (``LOOP_HOME/worktrees/<id>``)
that has only its own branch, and whose objects are its own plus, through git's
alternates, a store of base history (``LOOP_HOME/stores/<repo>.git``, read-only to
every sandbox). The store receives only commits that are some task's base, pushed
from the repository: history everyone may read. A task's work reaches the
repository (or the host's mirror of a URL) when it must: its reviewable commit
(``commit_branch``), and for a URL after every attempt, so another host can take it
over; each attempt's commit is kept there under ``refs/loopwork/<id>`` for its diff to
outlive the clone. The repository itself is hidden from every sandbox.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from activities.host.git import git, git_ok, repo_lock
from activities.host.worktree import worktrees
from loop.contracts import Workspace
from loop.errors import permanent

ALLOW_LOCAL = ["-c", "protocol.file.allow=always"]
"""Between the worker's own repositories (store, clone, mirror) local transport is fine."""


def store_for(stores: Path, top: str) -> Path:
    return stores / f"{hashlib.sha256(top.encode()).hexdigest()[:16]}.git"


async def fill_store(top: str, store: Path, commit: str, locks: Path) -> None:
    """``commit`` and its history in the store (a bare repository, readable by every task
    uid, written only here)."""
    async with repo_lock(locks, str(store)):
        if not (store / "objects").is_dir():
            store.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(store.parent, 0o755)
            await git(["init", "-q", "--bare", "--shared=0644", str(store)], store.parent)
        if await _has(store, commit):
            return
        await git([*ALLOW_LOCAL, "push", "-q", str(store), f"{commit}:refs/bases/{commit}"], top)


async def _has(repo: Path, commit: str) -> bool:
    return await git_ok(["cat-file", "-e", f"{commit}^{{commit}}"], repo)


async def make(
    path: Path, store: Path, branch: str, start: str, source: str, *, stored: bool = False
) -> None:
    """A clone at ``path`` on ``branch`` at ``start``: objects from the store; ``start``
    fetched from ``source`` (the repository, or a mirror) when the store lacks it (a
    task's own pushed work, taking it over from a lost host). ``stored``: the caller has
    just put ``start`` in the store (``fill_store``), so it is not looked for.

    It is made beside ``path`` and renamed into place when whole, so a worker killed
    half-way leaves no half-made clone there for the retry to refuse; the retry removes
    the half-made one (a name no task id can have: it starts with a dot)."""
    making = path.with_name(f".{path.name}.making")
    shutil.rmtree(making, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    await git(["init", "-q", "-b", branch, str(making)], path.parent)
    alternates = making / ".git" / "objects" / "info" / "alternates"
    alternates.write_text(f"{store / 'objects'}\n")
    if not stored and not await _has(making, start):
        await git([*ALLOW_LOCAL, "fetch", "-q", "--no-tags", source, start], making)
    # On the unborn branch ``init`` named, a hard reset makes the branch at ``start``.
    await git(["reset", "-q", "--hard", start], making)
    making.rename(path)


async def bring(clone: str, into: str, branch: str, locks: Path) -> None:
    """The clone's ``branch`` into ``into`` (the repository, or a mirror) as the same
    branch: what a person reviews and merges, what a URL's remote receives."""
    async with repo_lock(locks, into):
        await bring_locked(clone, into, branch)


async def bring_locked(clone: str, into: str, branch: str) -> None:
    """``bring`` for a caller that holds ``into``'s lock already."""
    await refuse_checked_out(into, branch)
    await git(
        [*ALLOW_LOCAL, "fetch", "-q", "--no-tags", clone,
         f"+refs/heads/{branch}:refs/heads/{branch}"],
        into,
    )  # fmt: skip


KEPT_REFS = "refs/loopwork"
"""Where the repository keeps each task's latest attempt (``refs/loopwork/<id>``): its
diff stays readable once the task's clone and branch are gone (a merged task's too)."""


async def keep_attempt(ws: Workspace, commit: str, locks: Path) -> None:
    """``commit``, an attempt's, in the repository (or this host's mirror) as the task's
    kept ref: pushed from the task's clone, whose objects nothing else holds; a worktree
    of the repository (before clones) shares its objects, so the ref alone is moved."""
    ref = f"{KEPT_REFS}/{ws.task_id}"
    async with repo_lock(locks, ws.repo):
        if ws.isolated:
            await git([*ALLOW_LOCAL, "push", "-q", "--no-verify", ws.repo, f"+{commit}:{ref}"],
                      ws.path)  # fmt: skip
        else:
            await git(["update-ref", ref, commit], ws.repo)


async def refuse_checked_out(top: str, branch: str) -> None:
    """A person's checkout of the task branch in the repository: moving the branch under
    it would leave that tree out of step, so the step fails and says where."""
    ref = f"refs/heads/{branch}"
    holder = next((e for e in await worktrees(top) if e.get("branch") == ref), None)
    if holder is not None:
        raise permanent(
            f"branch {branch} is checked out in {holder['worktree']}; check out another "
            "branch there (the task's own clone holds its work)"
        )


def alternates(git_dir: str) -> list[str]:
    """The object folders a repository borrows (``objects/info/alternates``), absolute."""
    try:
        text = Path(git_dir, "objects", "info", "alternates").read_text()
    except OSError:
        return []
    return [os.path.realpath(line.strip()) for line in text.splitlines() if line.startswith("/")]
