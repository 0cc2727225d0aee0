"""Unpacking a tar archive from outside (a repository's ``git archive``, an sdist).

``tarfile``'s ``data`` filter refuses what could reach past the destination (``..``,
a name that is absolute once its leading ``/`` is dropped, links that lead outside,
devices and FIFOs), owns every file by the unpacking user and drops the setuid, setgid
and sticky bits and the group and other write bits. Python has it from 3.11.4;
Loopwork runs on any 3.11 (Debian 12 ships 3.11.2), where ``unpack`` makes the same
checks itself, member by member before each is written, so a link an earlier member
made is followed as the filter would follow it.
"""

from __future__ import annotations

import copy
import os
import tarfile
from pathlib import Path


class Refused(tarfile.TarError):
    """A member the ``data`` filter would not unpack; its message names the member."""


def unpack(tar: tarfile.TarFile, dest: Path) -> None:
    """Every member of ``tar`` into ``dest``, under the ``data`` filter's rules."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
    else:
        unpack_checked(tar, dest)


def unpack_checked(tar: tarfile.TarFile, dest: Path) -> None:
    """The ``data`` filter's rules applied here, for a Python that lacks it."""
    root = os.path.realpath(dest)
    for member in tar.getmembers():
        tar.extract(_checked(member, root), root, numeric_owner=True)


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([root, path]) == root


def _checked(member: tarfile.TarInfo, root: str) -> tarfile.TarInfo:
    safe = copy.copy(member)
    name = safe.name = member.name.lstrip("/")  # as the filter: "/a" is written as "a"
    target = os.path.realpath(os.path.join(root, name))
    if not _inside(target, root):
        raise Refused(f"{name}: would be written outside {root}")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise Refused(f"{name}: a device or FIFO")
    if member.issym() or member.islnk():
        if os.path.isabs(member.linkname):
            raise Refused(f"{name}: a link to an absolute path ({member.linkname})")
        # A hard link names a member; a symbolic one is read from the folder it is made in.
        base = root if member.islnk() else os.path.realpath(os.path.dirname(f"{root}/{name}"))
        if not _inside(os.path.realpath(os.path.join(base, member.linkname)), root):
            raise Refused(f"{name}: a link outside {root} ({member.linkname})")
    safe.uid, safe.gid = os.geteuid(), os.getegid()  # by number: the names are not looked up
    mode = member.mode & 0o755
    if member.isreg() or member.islnk():
        safe.mode = (mode if mode & 0o100 else mode & ~0o111) | 0o600
    else:
        safe.mode = 0o755  # folders and links: what the filter leaves to the umask
    return safe
