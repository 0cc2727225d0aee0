"""Writes the sandbox refused, read from what the command printed.

A write outside the worktree that the sandbox refused (EROFS on the read-only
host, EACCES where the task's uid has no right) is as much an attempt to leave
the worktree as one that went through, so it is evidence for a policy
violation. Only the path the error message is about counts: the one right
before ``: Read-only file system`` (``touch: cannot touch '/etc/x': …``, ``bash:
line 3: tests/t.py: …``) or right after it (Python's ``[Errno 30] Read-only file
system: '/etc/x'``), never other paths on the line (the script that printed it).
Lines that say they are about running or reading something are not writes. The
text is the command's own, so this can be fooled, but only into blocking its own
task.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from activities.host.sandbox.paths import NEVER_BOUND, under

SCAN_BYTES = 1 << 20
MAX_REFUSED = 20

_MESSAGE = r"(Read-only file system|Permission denied|Device or resource busy)"
_OPEN, _CLOSE = "'\"‘“", "'\"’”"
_BEFORE = re.compile(rf"(?:[{_OPEN}]([^{_CLOSE}\n]+)[{_CLOSE}]|([^\s{_OPEN}]+)):\s*{_MESSAGE}")
_AFTER = re.compile(
    rf"{_MESSAGE}:\s*[{_OPEN}]([^{_CLOSE}\n]+)[{_CLOSE}]"
    rf"(?:\s*->\s*[{_OPEN}]([^{_CLOSE}\n]+)[{_CLOSE}])?"
)
"""Python's form; with ``'a' -> 'b'`` (a link or a rename) the write is to ``b``."""
_NOT_A_WRITE = re.compile(
    r"failed to execute|cannot execute|exec(ve)? failed|can't execute"  # starting a program
    r"|cannot open directory|cannot access|cannot read|could not open|opendir",  # reading
    re.I,
)


_NODE = re.compile(
    rf"(EROFS: read-only file system|EACCES: permission denied|EBUSY: resource busy or locked)"
    rf", \w+ [{_OPEN}]([^{_CLOSE}\n]+)[{_CLOSE}]"
)
"""Node's form (Claude Code, Codex): ``EROFS: read-only file system, open '/x'``."""


_ANY = re.compile(
    r"Read-only file system|Permission denied|Device or resource busy|EROFS|EACCES|EBUSY", re.I
)
WINDOW = 1_000
"""Characters around each message a path is looked for in: the patterns backtrack over a
line of a megabyte without one (a test that prints a long line) in quadratic time."""


def _found(line: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for hit in _ANY.finditer(line):
        part = line[max(0, hit.start() - WINDOW) : hit.end() + WINDOW]
        found += [(q or bare, why) for q, bare, why in _BEFORE.findall(part)]
        found += [(dst or src, why) for why, src, dst in _AFTER.findall(part)]
        found += [(path, why) for why, path in _NODE.findall(part)]
    return list(dict.fromkeys(found))


def _tail(log_path: Path) -> str:
    try:
        with log_path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - SCAN_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def refused_protected(
    log_path: Path, worktree: str, protected: list[str], aliases: tuple[str, ...] = ()
) -> list[str]:
    """Protected files of the worktree (relative paths) that the output says a write to
    was refused; ``aliases`` are other places the worktree is at (a link to it)."""
    if not protected:
        return []
    wanted = set(protected)
    found: list[str] = []
    for line in _tail(log_path).splitlines():
        if _NOT_A_WRITE.search(line):
            continue
        for raw, _ in _found(line.replace("\\n", "\n").replace('\\"', '"')):
            path = raw.strip()
            if path.startswith("/"):
                path = os.path.normpath(path)
                top = next((t for t in (worktree, *aliases) if under(path, t)), "")
                if not top:
                    continue
                path = os.path.relpath(path, top)
            path = os.path.normpath(path)
            if path in wanted and path not in found:
                found.append(path)
    return found[:MAX_REFUSED]


def refused_writes(log_path: Path, worktree: str, aliases: tuple[str, ...] = ()) -> list[str]:
    """Paths outside the worktree that the output says a write to was refused.

    Read-only file system (EROFS) is a refused write by definition; Permission denied
    (EACCES) may also be a refused read of something the task had no business reading.
    Inside the worktree the sandbox refuses only protected files (``diff_scope``'s call)
    and its environment (read-only, laid there); ``aliases`` are other places the
    worktree is at.
    """
    refused: dict[str, str] = {}
    for line in _tail(log_path).splitlines():
        if _NOT_A_WRITE.search(line):
            continue
        for raw, why in _found(line):
            path = os.path.normpath(raw.strip())
            if not path.startswith("/") or any(under(path, t) for t in (worktree, *aliases)):
                continue  # relative paths are inside the worktree
            if any(under(path, p) for p in NEVER_BOUND):
                continue
            refused.setdefault(path, why)
            if len(refused) >= MAX_REFUSED:
                return [f"{p} ({w})" for p, w in refused.items()]
    return [f"{p} ({w})" for p, w in refused.items()]
