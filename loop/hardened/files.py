"""Reading a file that a sandbox (an agent, a gate, a runner) may have written.

Such a file is hostile input: it may be a link to the worker's secrets, a FIFO that
blocks the reader forever, a device, a file of gigabytes. ``read_untrusted`` opens it
without following a link (``O_NOFOLLOW``), without blocking (``O_NONBLOCK``), without
making it the reader's terminal (``O_NOCTTY``), accepts a regular file only, and reads
at most a cap (the head, or the tail with ``tail=True``). Call it off the event loop
(``asyncio.to_thread``) in async code.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class NotRegular(OSError):
    """The path names something other than a regular file (a FIFO, a device, a folder)."""


def open_untrusted(path: Path | str) -> int:
    """A descriptor for reading ``path`` under the rules above (the caller closes it).

    Raises ``OSError`` when it cannot be opened (a link among them) and ``NotRegular``
    when it is not a regular file (its descriptor closed already)."""
    fd = os.open(path, FLAGS)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegular(f"{Path(path).name} is not a regular file; not read")
    return fd


def read_untrusted(path: Path, limit: int, *, tail: bool = False) -> tuple[bytes, str]:
    """At most ``limit`` bytes of ``path`` and what was wrong with it ("" when nothing):
    ``missing``, a link, not a regular file, larger than ``limit`` (then its head, or
    its tail)."""
    try:
        fd = open_untrusted(path)
    except FileNotFoundError:
        return b"", "missing"
    except NotRegular as e:
        return b"", str(e)
    except OSError as e:
        if os.path.islink(path):
            return b"", f"{path.name} is a symbolic link; not followed"
        return b"", f"{path.name} cannot be opened: {e.strerror}"
    try:
        st = os.fstat(fd)
        start = max(0, st.st_size - limit) if tail else 0
        if start:
            os.lseek(fd, start, os.SEEK_SET)
        chunks: list[bytes] = []
        left = limit
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    cut = ""
    if st.st_size > limit:
        where = "last" if tail else "first"
        cut = f"{path.name} is {st.st_size} bytes; read the {where} {limit}"
    return b"".join(chunks), cut
