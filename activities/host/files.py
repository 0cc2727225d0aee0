"""Files the worker writes, and files a sandbox wrote that the worker must read.

Atomic writes: a crash mid-write leaves the previous version. Files that several
workers update (``notes.md``, ``memory.json``) are read, changed and replaced
under an exclusive ``flock`` of a lock file next to them, so two tasks
summarizing at once never lose each other's update.

Files an agent could have written (its output file, anything in its own
folders) are hostile input: ``read_untrusted`` opens them without following a
link and without blocking on a FIFO, accepts a regular file only, and reads at
most a cap. Call it off the event loop (``asyncio.to_thread``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
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


def read_untrusted(path: Path, limit: int) -> tuple[bytes, str]:
    """At most ``limit`` bytes of a file a sandbox may have written, and what was wrong
    with it ("" when nothing): missing, a link, not a regular file, larger than ``limit``."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return b"", "missing"
    except OSError as e:
        if os.path.islink(path):
            return b"", f"{path.name} is a symbolic link; not followed"
        return b"", f"{path.name} cannot be opened: {e.strerror}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b"", f"{path.name} is not a regular file; not read"
        chunks: list[bytes] = []
        left = limit
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    cut = f"{path.name} is {st.st_size} bytes; read the first {limit}" if st.st_size > limit else ""
    return b"".join(chunks), cut
