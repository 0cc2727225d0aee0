"""Files the worker writes, and files a sandbox wrote that the worker must read.

Atomic writes: a crash mid-write leaves the previous version. Files that several
workers update (``notes.md``, ``memory.json``) are read, changed and replaced
under an exclusive ``flock`` of a lock file next to them, so two tasks
summarizing at once never lose each other's update.

Files an agent could have written (its output file, anything in its own
folders) are hostile input: they are read with ``loop.hardened.files.read_untrusted``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (via ``<path>.lock``) across threads and processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update_atomic(path: Path, change: Callable[[str], str], default: str = "") -> str:
    """Read, change and atomically replace a shared file under its lock."""
    with locked(path):
        current = path.read_text() if path.exists() else default
        updated = change(current)
        write_atomic(path, updated)
        return updated
