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
following links (``activities.files.read_untrusted``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from typing import Any


def record(path: str) -> dict[str, Any]:
    """What to restore: the folder's mode and owner."""
    st = os.lstat(path)
    return {"path": path, "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid}


def lend_tree(rec: Mapping[str, Any], uid: int, gid: int, keep: set[str]) -> None:
    """Give the worktree's content to the task's uid, but ``.git`` and the ``keep`` paths.
    Hard-linked files are skipped: their other name may be outside the worktree."""
    top = rec["path"]
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath == top:
            dirnames[:] = [d for d in dirnames if d != ".git"]
            filenames = [f for f in filenames if f != ".git"]
        for name in (*dirnames, *filenames):
            full = os.path.join(dirpath, name)
            if os.path.relpath(full, top) in keep:
                continue
            with contextlib.suppress(FileNotFoundError):
                est = os.lstat(full)
                if stat.S_ISREG(est.st_mode) and est.st_nlink > 1:
                    continue
                os.lchown(full, uid, gid)
    os.chown(top, rec["uid"], gid)
    os.chmod(top, 0o1770 | (rec["mode"] & 0o005))


def take_back(rec: Mapping[str, Any]) -> None:
    """Everything under the folder back to its owner; set-id bits of what others made go."""
    top, uid, gid = rec["path"], rec["uid"], rec["gid"]
    if not os.path.isdir(top) or os.path.islink(top):
        return
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
    os.chown(top, uid, gid)
    os.chmod(top, rec["mode"])


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
