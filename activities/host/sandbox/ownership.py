"""Who owns the worktree while a command runs in it, and afterwards.

The worktree belongs to the worker between runs: the worker's git commits it,
and nothing the task's uid left there may be trusted to stay put. Before a run
that may write, its content is lent to the task's uid; the folder itself stays
the worker's, group-writable and sticky, so ``.git`` and protected files cannot
be replaced. After the run (and after every process of the uid is dead, so
nothing races the walk) it is taken back. A crash half-way is undone by the
retry from the record made before anything changed.

The agent's own places (its output folder, its HOME) are the opposite: they are
the task uid's for good, and the worker only ever reads from them, without
following links (``activities.host.files.read_untrusted``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Mapping
from typing import Any


def record(path: str, keep: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """What to restore: the folder's mode and owner, and the modes of the folders above the
    ``keep`` files (they stay the worker's while the tree is lent, see ``lend_tree``)."""
    st = os.lstat(path)
    above: dict[str, int] = {}
    for rel in keep:
        parent = os.path.dirname(rel)
        while parent and parent not in above:
            above[parent] = stat.S_IMODE(os.lstat(os.path.join(path, parent)).st_mode)
            parent = os.path.dirname(parent)
    return {
        "path": path,
        "mode": stat.S_IMODE(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
        "above_kept": above,
    }


def lend_tree(rec: Mapping[str, Any], uid: int, gid: int, keep: set[str]) -> None:
    """Give the worktree's content to the task's uid, but ``.git`` and the ``keep`` paths.
    The folders above a kept file stay the worker's too, group-writable and sticky like
    the top: the agent may add files there, never rename the folder or what it did not
    make (else ``mv tests tests.old`` would set a protected file aside). Hard-linked
    files are skipped: their other name may be outside the worktree."""
    top = rec["path"]
    above: dict[str, int] = rec.get("above_kept") or {}
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath == top:
            dirnames[:] = [d for d in dirnames if d != ".git"]
            filenames = [f for f in filenames if f != ".git"]
        for name in (*dirnames, *filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, top)
            if rel in keep:
                continue
            if rel in above:
                os.lchown(full, rec["uid"], gid)
                os.chmod(full, 0o1770 | (above[rel] & 0o005))
                continue
            with contextlib.suppress(FileNotFoundError):
                est = os.lstat(full)
                if stat.S_ISREG(est.st_mode) and est.st_nlink > 1:
                    continue
                os.lchown(full, uid, gid)
    os.chown(top, rec["uid"], gid)
    os.chmod(top, 0o1770 | (rec["mode"] & 0o005))


def take_back(rec: Mapping[str, Any]) -> list[str]:
    """Everything under the folder back to its owner; set-id bits of what others made go.

    A ``.git`` below the top is a repository the agent made, with a config of its
    choosing: owned by the worker, git would trust it and run what it names. It is
    removed first, and its path returned, so the attempt can say so."""
    top, uid, gid = rec["path"], rec["uid"], rec["gid"]
    if not os.path.isdir(top) or os.path.islink(top):
        return []
    removed = remove_nested_git(top)
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath == top:
            dirnames[:] = [d for d in dirnames if d != ".git"]
            filenames = [f for f in filenames if f != ".git"]
        for name in (*dirnames, *filenames):
            full = os.path.join(dirpath, name)
            with contextlib.suppress(FileNotFoundError):
                est = os.lstat(full)
                if est.st_uid == uid and est.st_gid == gid:
                    continue
                os.lchown(full, uid, gid)
                if not stat.S_ISLNK(est.st_mode) and est.st_mode & (stat.S_ISUID | stat.S_ISGID):
                    os.chmod(full, stat.S_IMODE(est.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
    for rel, mode in (rec.get("above_kept") or {}).items():
        full = os.path.join(top, rel)
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(full).st_mode):  # the agent could not replace it
                os.chmod(full, mode)
    os.chown(top, uid, gid)
    os.chmod(top, rec["mode"])
    return removed


def remove_nested_git(top: str) -> list[str]:
    """Remove every ``.git`` (folder, file or link) below the worktree's own; their paths."""
    removed: list[str] = []
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [*dirnames, *filenames]:
            if name != ".git" or dirpath == top:
                continue
            full = os.path.join(dirpath, name)
            removed.append(os.path.relpath(full, top))
            if name in dirnames and not os.path.islink(full):
                dirnames.remove(name)
                shutil.rmtree(full, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(full)
        if dirpath == top:
            dirnames[:] = [d for d in dirnames if d != ".git"]
    return sorted(removed)


def give(path: str, uid: int, gid: int) -> None:
    """Make ``path`` a folder of the task's uid alone (created when missing). A link or a
    file in its place is refused: the worker never follows what a sandbox could plant."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
