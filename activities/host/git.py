"""Running git from activities without surprises.

Every call pins what a user's configuration could otherwise change under us:
an identity (a worker's machine may have none), no commit signing and no hooks
(an internal commit must not wait for a passphrase or run a repository's
pre-commit checks), nothing read from a repository nested in a worktree (an
agent could have made one, with a config that names commands), no terminal
prompts (a worker has no person to answer them) and the C locale (so messages
we parse look the same everywhere). Variables such as ``GIT_DIR`` that a parent
process (a git hook, an IDE) may have exported are dropped, since they would
point every call at another repository. git runs as a subprocess on the event
loop, never blocking it, because the same worker heartbeats other activities
meanwhile.

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

_CONFIG = (
    "-c", "user.name=Loopwork",
    "-c", "user.email=loopwork@localhost",
    "-c", "commit.gpgsign=false",
    "-c", "core.hooksPath=/dev/null",
    # A worktree is the agent's: a repository it made inside it has a config of the
    # agent's choosing, and git would run that config's commands (fsmonitor) as the
    # worker when it recurses into it. Nothing recurses, nothing runs.
    "-c", "core.fsmonitor=false",
    "-c", "diff.ignoreSubmodules=all",
    "-c", "status.submoduleSummary=false",
    "-c", "submodule.recurse=false",
    "-c", "protocol.file.allow=never",
)  # fmt: skip

# Variables that would redirect git away from the ``cwd`` we give it.
_REPO_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)


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


def _env(index: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)  # a scratch index of the worker's own
    return env


async def _run(args: list[str], cwd: Path | str, index: Path | None = None) -> tuple[int, str, str]:
    command = ["git", *args]
    try:
        proc = await asyncio.create_subprocess_exec(
            "git",
            *_CONFIG,
            *args,
            cwd=str(cwd),
            env=_env(index),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as e:  # missing cwd or no git binary: report it like git would
        raise GitError(command, 127, f"fatal: cannot run git in {cwd}: {e.strerror or e}") from e
    communicate = asyncio.ensure_future(proc.communicate())
    try:
        out, err = await asyncio.shield(communicate)
    except asyncio.CancelledError:
        # Killing git mid-operation can leave index.lock or a half-moved ref behind;
        # git calls are short, so let this one finish before the cancellation goes on.
        with contextlib.suppress(Exception):
            await communicate
        raise
    assert proc.returncode is not None
    # surrogateescape: non-UTF-8 file names survive the round trip back to the filesystem.
    return (
        proc.returncode,
        out.decode("utf-8", errors="surrogateescape"),
        err.decode("utf-8", errors="replace"),
    )


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
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _process_lock(repo_top: str) -> asyncio.Lock:
    per_loop = _locks.setdefault(asyncio.get_running_loop(), {})
    return per_loop.setdefault(repo_top, asyncio.Lock())


def lock_file(locks_dir: Path, repo_top: str) -> Path:
    digest = hashlib.sha1(repo_top.encode(), usedforsecurity=False).hexdigest()
    return Path(locks_dir) / f"{digest}.lock"


def _close_after(acquired: asyncio.Future[None], fd: int) -> None:
    if not acquired.cancelled():
        acquired.exception()  # retrieved, so asyncio does not log it as forgotten
    os.close(fd)


@contextlib.asynccontextmanager
async def repo_lock(locks_dir: Path, repo_top: str) -> AsyncIterator[None]:
    """Hold the repository's lock: in-process first, so one coroutine at a time waits on
    the file lock (each waiter occupies a thread), then the cross-process flock."""
    async with _process_lock(repo_top):
        path = lock_file(locks_dir, repo_top)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
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
