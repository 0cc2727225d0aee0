"""Walking a tree an agent made, as root, without being led anywhere by it.

``os.walk`` follows paths by name (a folder swapped for a link between two
calls leads elsewhere), recurses (a chain of 1,500 folders is a
``RecursionError``) and gives up on paths longer than the kernel takes. This
walk opens every folder relative to its parent's descriptor with
``O_NOFOLLOW``, is a loop with its own stack, and holds one descriptor per
level. Folders deeper than ``MAX_DEPTH`` are not entered: they are yielded
with ``too_deep`` set, and ``remove`` takes such a subtree away level by level
with two descriptors at most.

Nothing is ever descended through a ``.git`` entry: a repository's git folder is
not the agent's to shape, and one the agent made is removed whole.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

MAX_DEPTH = 256
"""Folder levels below the top that are walked; deeper ones count as one entry."""
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Entry:
    """One entry, valid while the walk is at it: act on it through ``dir_fd``/``name``."""

    rel: str
    """Its path below the top (``a/b/c``)."""
    name: str
    dir_fd: int
    """The open folder it is in; operations use ``dir_fd=`` and never follow links."""
    st: os.stat_result
    depth: int
    too_deep: bool = False

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)

    @property
    def is_git(self) -> bool:
        """``.git`` as git would read the name (``.GIT``, ``.git.``, ``.git `` too)."""
        return self.name.lower().rstrip(" .") == ".git"


def walk(top: str) -> Iterator[Entry]:
    """Every entry below ``top``, a folder before what it holds (descend order)."""
    root = os.open(top, _DIR)
    stack: list[tuple[int, str, Iterator[os.DirEntry[str]], int]] = [
        (root, "", iter(list(os.scandir(root))), 1)
    ]
    try:
        while stack:
            fd, prefix, entries, depth = stack[-1]
            item = next(entries, None)
            if item is None:
                stack.pop()
                os.close(fd)
                continue
            try:
                st = os.stat(item.name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            rel = f"{prefix}{item.name}"
            entry = Entry(rel, item.name, fd, st, depth)
            if entry.is_dir and not entry.is_git and depth >= MAX_DEPTH:
                entry.too_deep = True
            yield entry
            if not entry.is_dir or entry.is_git or entry.too_deep:
                continue
            try:
                child = os.open(item.name, _DIR, dir_fd=fd)
            except OSError:
                continue  # gone, or replaced by something that is not a folder
            try:
                listing = iter(list(os.scandir(child)))
            except OSError:
                os.close(child)
                continue
            stack.append((child, f"{rel}/", listing, depth + 1))
    finally:
        for fd, *_ in stack:
            with contextlib.suppress(OSError):
                os.close(fd)


def remove(dir_fd: int, name: str) -> None:
    """Remove the folder ``name`` (in ``dir_fd``) and everything in it, however deep: its
    subfolders are moved up beside it, one level at a time, and emptied in turn."""
    pending = [name]
    moved = 0
    while pending:
        current = pending[-1]
        try:
            fd = os.open(current, _DIR, dir_fd=dir_fd)
        except FileNotFoundError:
            pending.pop()
            continue
        except OSError:  # not a folder (any more): a file or a link
            with contextlib.suppress(FileNotFoundError):
                os.unlink(current, dir_fd=dir_fd)
            pending.pop()
            continue
        try:
            subfolders = []
            for item in list(os.scandir(fd)):
                if item.is_dir(follow_symlinks=False):
                    subfolders.append(item.name)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(item.name, dir_fd=fd)
            for sub in subfolders:
                moved += 1
                target = f".loop-removing-{os.getpid()}-{moved}"
                os.rename(sub, target, src_dir_fd=fd, dst_dir_fd=dir_fd)
                pending.append(target)
        finally:
            os.close(fd)
        if not subfolders:
            os.rmdir(current, dir_fd=dir_fd)
            pending.pop()
