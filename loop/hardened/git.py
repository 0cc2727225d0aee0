"""The one way Loopwork runs git: a fixed configuration and environment for every call.

Every call pins what a repository's or a user's configuration could otherwise change
under us: an identity (a worker's machine may have none), no commit signing and no
hooks (an internal commit must not wait for a passphrase or run a repository's
pre-commit checks), no fsmonitor, external diff, textconv or replace objects (each
names a command or changes what git shows), nothing read from a repository nested
in a worktree, no terminal prompts (a worker has no person to answer them) and the
C locale (so messages we parse look the same everywhere). Variables a parent process
may have exported (``GIT_DIR``, ``GIT_CONFIG_*``, ``GIT_EXTERNAL_DIFF``) are dropped:
they would point a call at another repository or another program.

``run`` is the asynchronous form (activities, the review page): it never blocks the
event loop, caps what it reads and can time out. ``run_sync`` serves the edges that
have no event loop (loading a task file, making the demo's repository).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

CONFIG = (
    "-c", "user.name=Loopwork",
    "-c", "user.email=loopwork@localhost",
    "-c", "commit.gpgsign=false",
    "-c", "tag.gpgsign=false",
    "-c", "core.hooksPath=/dev/null",
    # A worktree is the agent's: a repository it made inside it has a config of the
    # agent's choosing, and git would run that config's commands (fsmonitor) when it
    # recurses into it. Nothing recurses, nothing runs.
    "-c", "core.fsmonitor=false",
    "-c", "diff.external=",
    "-c", "diff.ignoreSubmodules=all",
    "-c", "status.submoduleSummary=false",
    "-c", "submodule.recurse=false",
    "-c", "protocol.file.allow=never",
)  # fmt: skip
"""``-c`` options of every call (a repository's own config cannot undo a ``-c``)."""

DROPPED = (
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_PREFIX",
    "GIT_EXTERNAL_DIFF", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
    "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND",
    "GIT_ASKPASS", "GIT_PAGER", "GIT_EDITOR", "GIT_TRACE", "GIT_REPLACE_REF_BASE",
)  # fmt: skip
"""Variables that would redirect a call away from the ``cwd`` we give it, or run a
program of someone else's choosing."""


def environment(index: Path | None = None, allow: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a git call: the caller's, minus ``DROPPED`` and every
    ``GIT_CONFIG_KEY_*``/``VALUE_*``, plus a scratch ``index`` when given, plus ``allow``
    (variables the caller sets on purpose, e.g. ``GIT_SSH_COMMAND`` for a remote)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in DROPPED and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))
    }
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", GIT_NO_REPLACE_OBJECTS="1")
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)  # a scratch index of the worker's own
    env.update(allow or {})
    return env


@dataclass
class Result:
    code: int
    out: bytes
    err: str
    cut: bool = False
    """``out`` stopped at the caller's ``limit`` (git was killed)."""

    @property
    def text(self) -> str:
        """stdout as text; bytes that are not UTF-8 survive as surrogates (file names)."""
        return self.out.decode("utf-8", errors="surrogateescape")


class Timeout(Exception):
    pass


async def run(
    args: list[str],
    cwd: Path | str,
    *,
    index: Path | None = None,
    limit: int | None = None,
    within_s: float | None = None,
    config: tuple[str, ...] = (),
) -> Result:
    """git ``args`` in ``cwd``. Raises ``OSError`` when git cannot start and ``Timeout``
    after ``within_s`` seconds (git is killed); ``limit`` caps the bytes of stdout."""
    proc = await asyncio.create_subprocess_exec(
        "git",
        *CONFIG,
        *config,
        *args,
        cwd=str(cwd),
        env=environment(index),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None

    async def collect() -> tuple[bytes, bytes, bool]:
        assert proc.stdout is not None and proc.stderr is not None
        if limit is None:
            out, err = await proc.communicate()
            return out, err, False
        errs = asyncio.ensure_future(proc.stderr.read())
        out = await proc.stdout.read(limit + 1)
        cut = len(out) > limit
        if cut:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            out = out[:limit]
        err = await errs
        await proc.wait()
        return out, err, cut

    work = asyncio.ensure_future(collect())
    try:
        out, err, cut = await asyncio.wait_for(asyncio.shield(work), within_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(Exception):
            await work
        raise Timeout(f"git {' '.join(args[:3])} took longer than {within_s:g} s") from None
    except asyncio.CancelledError:
        # Killing git mid-operation can leave index.lock or a half-moved ref behind; git
        # calls are short, so let this one finish before the cancellation goes on.
        with contextlib.suppress(Exception):
            await work
        raise
    assert proc.returncode is not None
    return Result(proc.returncode, out, err.decode("utf-8", errors="replace"), cut)


def run_sync(
    args: list[str],
    cwd: Path | str | None = None,
    *,
    timeout: float | None = None,
    allow: dict[str, str] | None = None,
    config: tuple[str, ...] = (),
) -> Result:
    """``run`` for the edges without an event loop. Raises ``Timeout`` like ``run``."""
    try:
        done = subprocess.run(
            ["git", *CONFIG, *config, *args],
            cwd=None if cwd is None else str(cwd),
            env=environment(allow=allow),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise Timeout(f"git {' '.join(args[:3])} took longer than {timeout:g} s") from None
    return Result(done.returncode, done.stdout, done.stderr.decode("utf-8", errors="replace"))
