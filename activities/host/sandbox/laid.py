"""A repository's environment, laid into the tree of one run (docs/guides/environment.md).

``basic`` and ``strict`` bind each of its folders read-only from where the worker keeps
it (``LOOP_HOME/envs/<key>/tree``) onto the same path of the tree, and link
``SETUP_TREE`` to the tree (``mounts.plan_view``): nothing is copied, whatever its size,
and a write into it fails (EROFS). A bind needs a folder to go on: ``places`` makes the
missing ones before the run, replacing a link or a file found on the way (never
following it), and ``remove`` takes away what it made once the run is over, so the
worktree keeps no empty ``.venv`` that would show as a file the agent made.

``off`` has no binds: each folder is a link in the tree to the kept one while the run
lasts. The run is the worker's user there and can write through it, and what the
setup recorded points at the folder it was built in, not at the tree.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass

from loop.contracts import BuiltEnvironment

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Laid:
    """What a run gets of an environment."""

    root: str
    """Where the worker keeps it: each of ``paths`` below it, as built."""
    paths: tuple[str, ...]
    shows: tuple[str, ...] = ()
    """Host paths it needs to see read-only (the interpreter of a virtualenv)."""

    @classmethod
    def of(cls, built: BuiltEnvironment | None) -> Laid | None:
        if built is None or built.failed:
            return None
        return cls(built.root, tuple(built.paths), tuple(built.shows))

    def binds(self, tree: str) -> list[tuple[str, str]]:
        """(kept at, laid at) of each folder."""
        return [(os.path.join(self.root, p), os.path.join(tree, p)) for p in self.paths]


def places(tree: str, laid: Laid, *, links: bool = False) -> list[str]:
    """Make each of ``laid``'s paths a folder of ``tree`` (``links``: a link to the kept
    one), replacing a link or a file in the way; what was made, deepest first."""
    made: list[str] = []
    for rel in laid.paths:
        _place(tree, rel, os.path.join(laid.root, rel) if links else "", made)
    return sorted(made, key=lambda p: p.count("/"), reverse=True)


def _place(tree: str, rel: str, link_to: str, made: list[str]) -> None:
    parts = rel.split("/")
    fd = os.open(tree, _DIR)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            here = "/".join(parts[: i + 1])
            try:
                st: os.stat_result | None = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISDIR(st.st_mode):
                if not last:
                    fd = _enter(fd, part)
                    continue
                if not link_to:
                    return  # a folder to bind onto
                with contextlib.suppress(OSError):
                    os.rmdir(part, dir_fd=fd)  # an empty folder gives way to the link
                    st = None
                if st is not None:
                    return  # a folder of the tree's own: kept, and used as it is
            if st is not None:
                os.unlink(part, dir_fd=fd)  # a link or a file where a folder goes
            if last and link_to:
                os.symlink(link_to, part, dir_fd=fd)
                made.append(here)
                return
            os.mkdir(part, 0o755, dir_fd=fd)
            made.append(here)
            if not last:
                fd = _enter(fd, part)
    finally:
        os.close(fd)


def _enter(fd: int, part: str) -> int:
    inner = os.open(part, _DIR, dir_fd=fd)
    os.close(fd)
    return inner


def remove(tree: str, made: list[str]) -> None:
    """Take away the folders and links ``places`` made (an empty folder only: one still
    holding something is the run's and stays)."""
    for rel in made:
        path = os.path.join(tree, rel)
        with contextlib.suppress(OSError):
            if os.path.islink(path):
                os.unlink(path)
            else:
                os.rmdir(path)
