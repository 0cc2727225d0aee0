"""The attempt's artifact: what may become a commit, and the clean copy gates judge.

The agent leaves a worktree; the artifact is the commit made from it. Between the
two, nothing the agent controls may decide what the gates see:

- ``scan`` walks the worktree (never following links) before anything is added to
  git: how much it grew (``sandbox.limits.disk_mb`` stops a worktree of gigabytes
  before it reaches the object store) and which special files it holds (a FIFO
  would hang ``git add``; they cannot be committed and are removed);
- ``ignored`` lists what the agent made that git ignores (a ``.gitignore`` that
  hides a ``conftest.py``, say): not committed, so never judged, and shown as
  evidence;
- ``checkout`` gives the gates a fresh detached worktree of the commit: no ignored
  or untracked file of the agent's is in it, and the task's own worktree is never
  touched by a gate.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from activities.host import tree
from activities.host.git import git, git_ok, repo_lock
from activities.host.worktree import excluding, printable

BLOCK = 4096
"""What one entry costs at least on disk (and an inode): a link or an empty file is not free."""


@dataclass
class Scan:
    size: int = 0
    """What the tree outside ``.git`` takes: each entry rounded up to a block (hard links
    counted once), so a million empty files or links count as the gigabytes they cost."""
    largest: list[tuple[int, str]] = field(default_factory=list)
    special: list[str] = field(default_factory=list)
    """FIFOs, sockets, device nodes, nested repositories' ``.git`` and folders deeper than
    a walk goes (removed by ``scan(remove_special=True)``)."""


def _blocks(size: int) -> int:
    return max(BLOCK, -(-size // BLOCK) * BLOCK)


def scan(top: str, *, remove_special: bool = False) -> Scan:
    """Walk the worktree without following anything; call it off the event loop."""
    found = Scan()
    seen: set[tuple[int, int]] = set()
    sizes: list[tuple[int, str]] = []
    for entry in tree.walk(top):
        if entry.rel == ".git":
            continue
        st = entry.st
        special = entry.is_git or entry.too_deep
        if stat.S_ISREG(st.st_mode):
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            found.size += _blocks(st.st_size)
            sizes.append((st.st_size, entry.rel))
        elif stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
            found.size += BLOCK
        else:
            special = True
        if special:
            found.special.append(printable(entry.rel))
            if remove_special:
                with contextlib.suppress(OSError):
                    if entry.is_dir:
                        tree.remove(entry.dir_fd, entry.name)
                    else:
                        os.unlink(entry.name, dir_fd=entry.dir_fd)
    found.largest = sorted(sizes, reverse=True)[:5]
    return found


def over_limit(before: int, after: Scan, limit_mb: int) -> str:
    """The evidence when the worktree grew by more than ``limit_mb``; empty when not."""
    grown = after.size - before
    if grown <= limit_mb * 1024 * 1024:
        return ""
    largest = ", ".join(f"{printable(p)} ({n / 1048576:.0f} MB)" for n, p in after.largest)
    return (
        f"the worktree grew by {grown / 1048576:.0f} MB in this attempt, over "
        f"sandbox.limits.disk_mb ({limit_mb} MB); nothing was committed; largest: {largest}"
    )


def empty_if_over(places: list[Path], limit_mb: int) -> str:
    """The agent's own folders (its output folder, its HOME) count against the same
    limit as the worktree: over it, they are emptied, and the evidence says so."""
    sizes = {p: scan(str(p)).size for p in places if p.is_dir() and not p.is_symlink()}
    total = sum(sizes.values())
    if total <= limit_mb * 1024 * 1024:
        return ""
    for place in sizes:
        for entry in list(os.scandir(place)):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
    return (
        f"the agent's own folders (its HOME and output folder) hold {total / 1048576:.0f} MB, "
        f"over sandbox.limits.disk_mb ({limit_mb} MB); they were emptied"
    )


async def ignored(tree: str, byproducts: list[str]) -> list[str]:
    """Untracked files git ignores (folders shown once, as ``dir/``), byproducts aside."""
    out = await git(
        [
            "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory",
            "--", *excluding(byproducts),
        ],
        tree,
    )  # fmt: skip
    return sorted(printable(p) for p in out.split("\0") if p)


@contextlib.asynccontextmanager
async def checkout(
    repo: str, commit: str, folder: Path, try_no: int, locks: Path
) -> AsyncIterator[Path]:
    """A fresh detached worktree of ``commit`` in ``folder``, removed afterwards.

    One per try: a try the server gave up on (its worker was cut off) may still be
    running and must not remove the tree the next try judges. The trees earlier tries
    left (a killed worker removes nothing) go when the next try starts, since the
    server has already given up on those tries."""
    path = folder / f"checkout-{try_no}"
    for left in sorted(folder.glob("checkout-*")):
        await _remove(repo, left, locks)
    folder.mkdir(parents=True, exist_ok=True)
    async with repo_lock(locks, repo):
        await git(["worktree", "add", "-q", "--detach", "--force", str(path), commit], repo)
    try:
        yield path
    finally:
        await _remove(repo, path, locks)


async def _remove(repo: str, path: Path, locks: Path) -> None:
    """Remove a checkout this module made; anything else found under its name (a link,
    a FIFO, a file) is unlinked, never followed or opened."""
    try:
        is_tree = stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return
    async with repo_lock(locks, repo):
        removed = False
        if is_tree:
            remove = ["worktree", "remove", "--force", "--force", str(path)]
            removed = await git_ok(remove, repo) and not os.path.lexists(path)
            if os.path.lexists(path):
                await asyncio.to_thread(shutil.rmtree, path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        if not removed:  # git's record of a tree it did not remove outlives it: drop it
            await git(["worktree", "prune"], repo, check=False)
