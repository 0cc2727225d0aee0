"""Probes remembered per worker: a program the sandbox found once is not probed again
while nothing the probe depended on has changed.

``run.missing_programs`` starts a sandbox only to ask ``command -v`` whether the task's
uid can find and execute each program its command names (three runs per task, ~60 ms
CPU each). The answer depends on the sandbox (its level, the task file's
policy, the view planned for the command, its PATH), on the uid, and on the files: every
candidate a PATH lookup tries (``dir/word`` in each PATH folder, there or not), every
folder on the way to it and every link it goes through. So a probe that found
everything is remembered under a key holding all of those, the files by identity
(device, inode, mode, owner, group; a file also by size, mtime and ctime): a program
replaced, moved, made unreadable, shadowed earlier in PATH, or a folder on the way
closed, makes a new key and the probe runs again. Only a full success is remembered;
a program missing is probed every time (the task ends BLOCKED anyway).

The uid enters the key only where it can matter: task uids have no groups and own
nothing outside their task's own folders, so any two see the same permissions on a
file no task uid owns and no ACL names. A key is not made at all (the probe always
runs) for a command whose files lie in the task's own tree, its writable places,
LOOP_HOME or the hidden folders, or that a relative PATH folder could change.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence

from activities.host.sandbox.paths import under
from activities.host.sandbox.uids import is_task_uid

MAX_REMEMBERED = 512
_ACL = ("system.posix_acl_access", "system.posix_acl_default")

_lock = threading.Lock()
_found: OrderedDict[Hashable, None] = OrderedDict()


class _Uncacheable(Exception):
    """A file the probe depends on is the task's, or cannot be pinned down."""


def _identity(path: str, st: os.stat_result) -> tuple[int, ...]:
    base = (st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid)
    if stat.S_ISDIR(st.st_mode):
        return base  # its mtime changes with every file made beside ours (/tmp)
    return (*base, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _per_uid(path: str, st: os.stat_result) -> bool:
    """Whether two task uids could see different permissions on ``path``."""
    if is_task_uid(st.st_uid) or is_task_uid(st.st_gid):
        return True
    try:
        return any(name in _ACL for name in os.listxattr(path, follow_symlinks=False))
    except OSError:
        return False  # no extended attributes here: no ACL either


class _Walk:
    """The identities of the files behind a set of paths, and whether the uid matters."""

    def __init__(self, avoid: Sequence[str]) -> None:
        self.avoid = [a for a in avoid if a]
        self.seen: dict[str, tuple[int, ...] | None] = {}
        self.per_uid = False

    def path(self, path: str, hops: int = 0) -> None:
        """``path``, each folder above it and, for a link, where it leads."""
        if hops > 40:
            raise _Uncacheable(path)
        current = "/"
        for part in [p for p in path.split("/") if p]:
            current = os.path.join(current, part)
            if current in self.seen:
                continue
            if any(under(current, a) for a in self.avoid):
                raise _Uncacheable(current)
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                self.seen[current] = None
                return
            except OSError as e:
                raise _Uncacheable(current) from e
            self.seen[current] = _identity(current, st)
            self.per_uid = self.per_uid or _per_uid(current, st)
            if stat.S_ISLNK(st.st_mode):
                target = os.path.join(os.path.dirname(current), os.readlink(current))
                rest = path[len(current) :].lstrip("/")
                self.path(os.path.normpath(os.path.join(target, rest)), hops + 1)
                return


def fingerprint(
    words: Sequence[str], path_env: str, avoid: Sequence[str]
) -> tuple[tuple[tuple[str, tuple[int, ...] | None], ...], bool] | None:
    """What a probe of ``words`` under ``path_env`` depends on in the file system, and
    whether the uid matters to it; None when it cannot be remembered."""
    folders = [d for d in path_env.split(":") if d]
    if any(not d.startswith("/") for d in folders):
        return None
    walk = _Walk(avoid)
    try:
        for word in words:
            if word.startswith("/"):
                walk.path(os.path.normpath(word))
            else:
                for folder in folders:
                    walk.path(os.path.normpath(os.path.join(folder, word)))
    except _Uncacheable:
        return None
    return tuple(sorted(walk.seen.items())), walk.per_uid


def remembered(key: Hashable) -> bool:
    with _lock:
        if key in _found:
            _found.move_to_end(key)
            return True
        return False


def remember(key: Hashable) -> None:
    with _lock:
        _found[key] = None
        _found.move_to_end(key)
        while len(_found) > MAX_REMEMBERED:
            _found.popitem(last=False)
