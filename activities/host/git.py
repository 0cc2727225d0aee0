"""Running git from activities: the hardened runner (``loop.hardened.git``), its errors
as ``GitError``, and the per-repository lock (``path_lock``: the same for any lock
file, such as an attempt's).

The configuration and environment of every call are ``loop.hardened.git``'s (no hooks,
no fsmonitor, no external diff, no ``GIT_*`` from outside, no prompt, the C locale).
git runs as a subprocess on the event loop, never blocking it, because the same
worker heartbeats other activities meanwhile.

``repo_lock`` exists because git itself does not serialise everything that
touches shared state of a repository: two ``git worktree add`` or a merge
racing a ref update in the same repository can fail on ``*.lock`` files or,
worse, lose an update. Tasks in one worker share an asyncio lock; workers in
other processes share a file lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import weakref
from collections.abc import AsyncIterator
from pathlib import Path

from loop.hardened import git as hardened_git


class GitError(Exception):
    """A git command that exited non-zero; ``str()`` is one line for logs and failures."""

    def __init__(self, command: list[str], exit_code: int, stderr: str, stdout: str = "") -> None:
        super().__init__(command, exit_code, stderr, stdout)
        self.command = command
        self.exit_code = exit_code
        self.stderr = stderr
        self.stdout = stdout

    @property
    def message(self) -> str:
        """The most telling line git printed (``fatal:``/``error:`` first)."""
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        for ln in lines:
            if ln.startswith(("fatal:", "error:")):
                return ln
        if lines:
            return lines[0]
        out = [ln.strip() for ln in self.stdout.splitlines() if ln.strip()]
        return out[-1] if out else ""

    def __str__(self) -> str:
        cmd = " ".join(self.command)
        if len(cmd) > 200:
            cmd = cmd[:197] + "..."
        text = f"`{cmd}` exited {self.exit_code}"
        detail = self.message
        return f"{text}: {detail[:300]}" if detail else text


async def _run(args: list[str], cwd: Path | str, index: Path | None = None) -> tuple[int, str, str]:
    try:
        done = await hardened_git.run(args, cwd, index=index)
    except OSError as e:  # missing cwd or no git binary: report it like git would
        raise GitError(
            ["git", *args], 127, f"fatal: cannot run git in {cwd}: {e.strerror or e}"
        ) from e
    # surrogateescape: non-UTF-8 file names survive the round trip back to the filesystem.
    return done.code, done.text, done.err


async def git(
    args: list[str], cwd: Path | str, *, check: bool = True, index: Path | None = None
) -> str:
    """Run git in ``cwd`` and return its stdout without the one trailing newline
    (``index``: a scratch index file instead of the repository's)."""
    code, out, err = await _run(args, cwd, index)
    if check and code != 0:
        raise GitError(["git", *args], code, err, out)
    return out[:-1] if out.endswith("\n") else out


async def git_ok(args: list[str], cwd: Path | str) -> bool:
    """True when git exits 0: for the commands whose answer is their exit code."""
    code, _, _ = await _run(args, cwd)
    return code == 0


# asyncio locks belong to one event loop; tests (and embedders) may run several loops.
# A lock is kept while a coroutine holds or awaits it, so keys used once (an attempt's
# folder) do not pile up in a long-running worker.
_locks: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, weakref.WeakValueDictionary[str, asyncio.Lock]
] = weakref.WeakKeyDictionary()


def _process_lock(key: str) -> asyncio.Lock:
    per_loop = _locks.setdefault(asyncio.get_running_loop(), weakref.WeakValueDictionary())
    lock = per_loop.get(key)
    if lock is None:
        lock = per_loop[key] = asyncio.Lock()
    return lock


def lock_file(locks_dir: Path, repo_top: str) -> Path:
    digest = hashlib.sha1(repo_top.encode(), usedforsecurity=False).hexdigest()
    return Path(locks_dir) / f"{digest}.lock"


def _close_after(acquired: asyncio.Future[None], fd: int) -> None:
    if not acquired.cancelled():
        acquired.exception()  # retrieved, so asyncio does not log it as forgotten
    os.close(fd)


def _taken_at_once(fd: int) -> bool:
    """The flock when nobody holds it, without a thread; False when someone does."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except BaseException:
        os.close(fd)
        raise
    return True


@contextlib.asynccontextmanager
async def repo_lock(locks_dir: Path, repo_top: str) -> AsyncIterator[None]:
    """Hold the repository's lock (``path_lock`` of its file in ``locks_dir``)."""
    async with path_lock(lock_file(locks_dir, repo_top)):
        yield


@contextlib.asynccontextmanager
async def path_lock(path: Path) -> AsyncIterator[None]:
    """Hold the lock file ``path``: in-process first, so one coroutine at a time waits on
    the file lock (each waiter occupies a thread), then the cross-process flock."""
    async with _process_lock(str(path)):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if not _taken_at_once(fd):
            acquire = asyncio.ensure_future(asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX))
            try:
                await asyncio.shield(acquire)
            except BaseException:
                # A thread blocked in flock cannot be interrupted; closing the fd once it
                # returns releases whatever it got, without making the canceller wait.
                acquire.add_done_callback(lambda f: _close_after(f, fd))
                raise
        try:
            yield
        finally:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
