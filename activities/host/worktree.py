"""A task's git worktree seen from the worker: what the attempt changed, what is dirty,
what a byproduct is, what lies outside the worktree, and the repository's worktrees.

The plain helpers the activities share (make, verify, the workspace's life in
``activities.workspace``); nothing here is an activity.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from activities.host.git import GitError, git, git_ok
from loop.contracts import Workspace
from loop.errors import permanent
from loop.hardened.files import open_untrusted

# Byproducts of running Python and pytest in a tree: never the agent's work.
BYPRODUCT_GLOBS = ("**/__pycache__", "**/*.pyc", "**/.pytest_cache")
"""What running Python and pytest leave behind, whatever the agent."""


def _pathspecs(magic: str, globs: Sequence[str]) -> list[str]:
    """Git pathspecs for globs where a glob naming a folder covers what is in it."""
    found: list[str] = []
    for g in (*BYPRODUCT_GLOBS, *globs):
        g = g.rstrip("/")
        found += [f":({magic}){g}", f":({magic}){g}/**"]
    return found


def excluding(globs: Sequence[str]) -> list[str]:
    """Pathspecs after ``--``: the whole tree but byproducts (``Workspace.byproducts``)."""
    return [".", *_pathspecs("exclude,glob", globs)]


def only(globs: Sequence[str]) -> list[str]:
    """Pathspecs after ``--``: byproducts alone."""
    return _pathspecs("glob", globs)


_MAX_LISTED = 10


def listing(paths: list[str]) -> str:
    shown = ", ".join(paths[:_MAX_LISTED])
    more = len(paths) - _MAX_LISTED
    return f"{shown} (+{more} more)" if more > 0 else shown


def printable(path: str) -> str:
    """A path that can travel in a payload: bytes that are not UTF-8 become \\xNN."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def split_z(out: str) -> list[str]:
    return [p for p in out.split("\0") if p]


def status_paths(out: str) -> list[str]:
    """Paths of ``git status --porcelain -z``: ``XY path``, renames followed by the old path."""
    entries = out.split("\0")
    paths: list[str] = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        paths.append(entry[3:])
        if entry[0] in "RC" and i < len(entries):
            paths.append(entries[i])  # the old name of a staged rename changed too
            i += 1
    return paths


def exists(path: str | Path) -> bool:
    """Also true for a dangling symlink: something is in the way either way."""
    return os.path.lexists(path)


def is_dir(path: str | Path) -> bool:
    return os.path.isdir(path)


def _realpath(path: str | Path) -> str:
    return os.path.realpath(path)


def _same_path(a: str | Path, b: str | Path) -> bool:
    return _realpath(a) == _realpath(b)


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


# --------------------------------------------------------------------------- helpers


async def repo_top(path: str) -> str:
    """The main repository's top level, refusing inputs that no retry can fix."""
    p = path
    if not exists(p):
        raise permanent(f"repository {path} does not exist")
    if not is_dir(p):
        raise permanent(f"repository {path} is not a directory")
    # One call where the answer is the common one; what is wrong is told by the two below.
    both = await git(["rev-parse", "--is-bare-repository", "--show-toplevel"], p, check=False)
    bare, _, top = both.partition("\n")
    if bare == "false" and top and "\n" not in top:
        return _realpath(top)
    try:
        bare = await git(["rev-parse", "--is-bare-repository"], p)
    except GitError as e:
        raise permanent(f"{path} is not a git repository ({e.message})") from None
    if bare == "true":
        raise permanent(f"{path} is a bare git repository; a task needs one with a working tree")
    try:
        top = await git(["rev-parse", "--show-toplevel"], p)
    except GitError as e:
        raise permanent(f"{path} is not inside a git working tree ({e.message})") from None
    if not top:
        raise permanent(f"{path} is not inside a git working tree")
    return _realpath(top)


async def rev(cwd: str | Path, rev: str) -> str | None:
    out = await git(["rev-parse", "--verify", "-q", rev], cwd, check=False)
    return out or None


async def is_ancestor(cwd: str | Path, ancestor: str, descendant: str) -> bool:
    return await git_ok(["merge-base", "--is-ancestor", ancestor, descendant], cwd)


async def wip_commit(ws: Workspace, attempt: int) -> str:
    """Record the attempt's worktree as a commit: the artifact verify checks and a retry
    restores. Running it twice for the same attempt must not stack empty commits."""
    message = f"loop({ws.task_id}): attempt {attempt}"
    await git(["add", "-A", "--", *excluding(ws.byproducts)], ws.path)
    head = await git(["symbolic-ref", "-q", "HEAD"], ws.path, check=False)
    if head != f"refs/heads/{ws.branch}":
        # The agent detached HEAD or switched branches: its work goes back on the task
        # branch (at the commit it ended on, tree and index kept), which is what the
        # verdict, the commit and the merge name.
        await git(["checkout", "-q", "-B", ws.branch], ws.path)
    staged = not await git_ok(["diff", "--cached", "--quiet"], ws.path)
    if not staged and await git(["log", "-1", "--format=%s"], ws.path) == message:
        return await git(["rev-parse", "HEAD"], ws.path)
    await git(["commit", "-q", "--no-verify", "--allow-empty", "-m", message], ws.path)
    return await git(["rev-parse", "HEAD"], ws.path)


async def changed_files(ws: Workspace, commit: str) -> list[str]:
    """The attempt's diff against base, by path: without rename detection a moved
    protected file shows up under its old name too."""
    out = await git(["diff", "--name-only", "--no-renames", "-z", ws.base_commit, commit], ws.path)
    return sorted(printable(p) for p in split_z(out))


async def diff_stat(ws: Workspace, commit: str) -> tuple[list[str], int]:
    """The attempt's diff against base in one git call: the paths it changes (as
    ``changed_files``) and the lines it adds and removes, a binary file counting one."""
    out = await git(["diff", "--numstat", "--no-renames", "-z", ws.base_commit, commit], ws.path)
    paths, lines = [], 0
    for entry in split_z(out):
        added, _, rest = entry.partition("\t")
        removed, _, path = rest.partition("\t")
        both = (added, removed)
        lines += 1 if "-" in both else sum(int(n) for n in both if n.isdigit())
        paths.append(printable(path))
    return sorted(paths), lines


async def restore(ws: Workspace, commit: str) -> None:
    """Put the worktree back at ``commit`` so a retry or the next attempt starts clean."""
    await git(["reset", "-q", "--hard", commit], ws.path)
    await git(["clean", "-q", "-fd"], ws.path)


async def dirty_files(path: str, byproducts: Sequence[str] = ()) -> list[str]:
    """Changes not yet committed: what a reset or a removal would destroy."""
    out = await git(["status", "--porcelain", "-z", "-uall", "--", *excluding(byproducts)], path)
    return [printable(p) for p in status_paths(out)]


def _fingerprint(path: Path) -> str:
    """What is at ``path`` now, never following a link or blocking on a FIFO."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path)
            return "symlink:" + hashlib.sha256(os.fsencode(target)).hexdigest()
        if stat.S_ISDIR(st.st_mode):
            return "directory"  # an untracked nested repository, listed as ``dir/``
        if not stat.S_ISREG(st.st_mode):
            return f"special:{stat.S_IFMT(st.st_mode):o}:{st.st_ino}"
        digest = hashlib.sha256()
        with os.fdopen(open_untrusted(path), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()
    except FileNotFoundError:
        return "deleted"
    except OSError as e:
        return f"unreadable: {e.strerror}"


async def outside_snapshot(repo_top: str, exclude: list[str]) -> dict[str, str]:
    """What the main repository's working tree holds beyond its HEAD, by content.

    Comparing a snapshot from before an attempt with one from after shows writes an
    agent made outside its worktree (an absolute path, ``../..``) into the main tree.
    A host's mirror of a remote repository has no working tree: nothing to compare.
    """
    if await git(["rev-parse", "--is-bare-repository"], repo_top) == "true":
        return {}
    out = await git(["status", "--porcelain", "-z", "-uall"], repo_top)
    return await asyncio.to_thread(_snapshot, repo_top, status_paths(out), exclude)


def _snapshot(repo_top: str, paths: list[str], exclude: list[str]) -> dict[str, str]:
    skip = [_realpath(d) for d in exclude]
    snapshot: dict[str, str] = {}
    for p in paths:
        full = os.path.join(repo_top, p)
        if not any(_under(_realpath(full), d) for d in skip):
            snapshot[p] = _fingerprint(Path(full))
    return snapshot


def outside_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    changed = (p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    return sorted(printable(p) for p in changed)


# --------------------------------------------------------------------------- worktree list


async def worktrees(top: str) -> list[dict[str, str]]:
    """``git worktree list --porcelain -z`` as one dict per worktree (``worktree``,
    ``HEAD``, ``branch``; flags such as ``bare`` map to "")."""
    out = await git(["worktree", "list", "--porcelain", "-z"], top)
    entries: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for field in out.split("\0"):
        if not field:
            if current:
                entries.append(current)
            current = {}
            continue
        key, _, value = field.partition(" ")
        current[key] = value
    if current:
        entries.append(current)
    return entries


def find_worktree(entries: list[dict[str, str]], path: str | Path) -> dict[str, str] | None:
    for e in entries:
        if "worktree" in e and _same_path(e["worktree"], path):
            return e
    return None
