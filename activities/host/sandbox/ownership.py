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
following links (``loop.hardened.files.read_untrusted``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from typing import Any

from activities.host import tree


def record(path: str, keep: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]  # read only
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
    for entry in tree.walk(top):
        if entry.is_git or entry.rel in keep:
            continue
        with contextlib.suppress(FileNotFoundError):
            if entry.rel in above:
                os.chown(entry.name, rec["uid"], gid, dir_fd=entry.dir_fd, follow_symlinks=False)
                os.chmod(entry.name, 0o1770 | (above[entry.rel] & 0o005), dir_fd=entry.dir_fd)
            elif not (stat.S_ISREG(entry.st.st_mode) and entry.st.st_nlink > 1):
                os.chown(entry.name, uid, gid, dir_fd=entry.dir_fd, follow_symlinks=False)
    os.chown(top, rec["uid"], gid)
    os.chmod(top, 0o1770 | (rec["mode"] & 0o005))


def take_back(rec: Mapping[str, Any]) -> list[str]:
    """Everything under the folder back to its owner; set-id bits of what others made go.

    The top first: whatever happens below, the task's uid has no way in any more. A
    ``.git`` below the top is a repository the agent made, with a config of its choosing
    (owned by the worker, git would trust it); a folder deeper than ``tree.MAX_DEPTH``
    is more than any review or git can take. Both are removed, and their paths
    returned, so the attempt can say so. Files with other names (hard links) are left
    as they are: their other name may be outside the worktree."""
    top, uid, gid = rec["path"], rec["uid"], rec["gid"]
    if not os.path.isdir(top) or os.path.islink(top):
        return []
    os.chown(top, uid, gid)
    os.chmod(top, rec["mode"])
    removed: list[str] = []
    above: dict[str, int] = rec.get("above_kept") or {}
    for entry in tree.walk(top):
        if entry.rel == ".git":
            continue
        try:
            if entry.is_git or entry.too_deep:
                removed.append(entry.rel + ("" if entry.is_git else " (too deep)"))
                if entry.is_dir:
                    tree.remove(entry.dir_fd, entry.name)
                else:
                    os.unlink(entry.name, dir_fd=entry.dir_fd)
                continue
            st = entry.st
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and st.st_uid != uid:
                continue
            if (st.st_uid, st.st_gid) != (uid, gid):
                os.chown(entry.name, uid, gid, dir_fd=entry.dir_fd, follow_symlinks=False)
            if entry.rel in above:
                os.chmod(entry.name, above[entry.rel], dir_fd=entry.dir_fd)
            elif not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                mode = stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
                os.chmod(entry.name, mode, dir_fd=entry.dir_fd)
        except OSError:
            continue  # gone meanwhile; nothing of the uid runs any more to have moved it
    return sorted(removed)


def give(path: str, uid: int, gid: int) -> None:
    """Make ``path`` a folder of the task's uid alone (created when missing). A link or a
    file in its place is refused: the worker never follows what a sandbox could plant.

    A folder that was another uid's (a retry after a crash that leased another one) is
    given whole, so the agent can write what its earlier try made; hard-linked files
    are left alone, their other name may be anywhere."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        owner = os.fstat(fd).st_uid
        os.fchown(fd, uid, gid)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    if owner in (uid, 0):
        return  # ours already, or new: nothing below belongs to anyone else
    for entry in tree.walk(path):
        st = entry.st
        if st.st_uid == uid or (stat.S_ISREG(st.st_mode) and st.st_nlink > 1):
            continue
        with contextlib.suppress(OSError):
            os.chown(entry.name, uid, gid, dir_fd=entry.dir_fd, follow_symlinks=False)
