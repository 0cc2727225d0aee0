"""The repository's environment on this host: found by its key, or built once under a lock
(docs/guides/environment.md).

    LOOP_HOME/envs/<key>/tree/<path>  what the setup made, where it made it: the worker's,
                                      read-only to everyone (bound read-only into runs)
    LOOP_HOME/envs/<key>/home/        the setup's HOME, without its caches (a virtualenv
                                      may point at an interpreter a tool installed there)
    LOOP_HOME/envs/<key>/meta.json    written last: the environment is whole
    LOOP_HOME/envs/<key>/users/<id>   the tasks holding it, from their build step to their end
    LOOP_HOME/envs/<key>.lock         held while the key is built

The setup runs in ``tree``, a checkout of the commit, which its sandbox shows at
``SETUP_TREE`` too, as its cwd: whatever it records (a virtualenv's scripts, an editable
install's path) names ``SETUP_TREE``, where every later run finds its own tree. What
the setup made outside ``paths`` goes with the checkout; the environment never holds
the repository's code, so a gate imports the code of the commit it judges.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import platform
import shutil
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from activities.host import sandbox, tree
from activities.host.files import write_atomic
from activities.host.git import git, path_lock, repo_lock
from activities.host.proc import ProcResult, tail_of
from activities.host.sandbox.paths import DEFAULT_PATH, sandbox_path, toolchain, under
from loop.contracts import (
    BuiltEnvironment,
    SandboxLevel,
    SandboxPolicy,
    TaskSpec,
)
from loop.redact import redact, redact_file
from loop.rules import environment as rules
from loop.rules.commands import programs

ENVS = "envs"
META = "meta.json"
USERS = "users"
USED = "used"
"""Touched each time a task takes the environment: when it was last used."""
TAIL_CHARS = 800
"""What a failed setup's reason quotes of its log."""
CACHES = (".cache", ".npm", ".cache-uv")
"""What of the setup's HOME goes after the build: download caches, never used again."""


class SetupFailed(Exception):
    """A setup command failed, or made none of the paths: one line, with its log's tail."""


@dataclass
class Plan:
    """What an environment will be made of, and its key."""

    key: str
    setup: list[str]
    paths: list[str]
    files: dict[str, str]
    """Its key files at the commit: path -> git's blob id (a hash of the content)."""
    origin: str
    toolchains: list[str]
    """Where the setup's programs live: the only host folders it may point at."""


def envs(home: Path) -> Path:
    return Path(home) / ENVS


def lock_of(home: Path, key: str) -> Path:
    return envs(home) / f"{key}.lock"


async def plan(spec: TaskSpec, repo: str, commit: str) -> Plan:
    """The setup, paths and key of ``spec``'s environment at ``commit`` of ``repo``.

    Raises ``SetupFailed`` when ``auto`` finds nothing to set up there."""
    env = spec.environment
    assert env is not None
    listing = await _listing(repo, commit)
    if env.setup == "auto":
        text = {}
        for name in rules.READ_FOR_AUTO:
            if name in listing:
                text[name] = await git(["cat-file", "blob", listing[name]], repo)
        found = rules.detect(listing.keys(), text)
        if found is None:
            raise SetupFailed(
                f"environment: auto found nothing to set up at {commit[:12]} (no "
                ".loopwork/setup.sh, devcontainer postCreateCommand, lockfile, pyproject, "
                "requirements file, package.json or go.mod); write environment.setup"
            )
        setup, paths, origin = found.setup, env.wanted_paths(found.paths), found.origin
    else:
        setup, paths, origin = list(env.setup), env.wanted_paths(), "the task file"
    files = {p: listing[p] for p in rules.key_files(rules.globs_for(env), listing)}
    chain, programs_in = await asyncio.to_thread(toolchain_of, setup, spec.sandbox)
    key = rules.key(
        setup=setup, paths=paths, files=files, level=str(spec.sandbox.mode), toolchain=chain
    )
    return Plan(key, setup, paths, files, origin, programs_in)


async def _listing(repo: str, commit: str) -> dict[str, str]:
    """Every file at ``commit``: path -> blob id."""
    out = await git(["ls-tree", "-r", "-z", "--full-tree", commit], repo)
    found: dict[str, str] = {}
    for entry in out.split("\0"):
        meta, _, path = entry.partition("\t")
        words = meta.split()
        if len(words) == 3 and words[1] == "blob":
            found[path] = words[2]
    return found


def toolchain_of(setup: list[str], policy: SandboxPolicy) -> tuple[str, list[str]]:
    """The host's part of the key (platform, the worker's Python, and each program the
    setup names as its sandbox finds it: a new interpreter or npm builds again), and the
    folders those programs live in (what a built environment may point at)."""
    if policy.mode == SandboxLevel.OFF:
        path_env = os.environ.get("PATH", DEFAULT_PATH)
    else:
        path_env = sandbox_path(os.environ.get("PATH", DEFAULT_PATH), dict(os.environ))
    found: list[tuple[str, str, int, int]] = []
    for command in setup:
        for name in programs(["bash", "-c", command]):
            where = shutil.which(name, path=path_env) if "/" not in name else None
            if not where:
                continue
            real = os.path.realpath(where)
            st = os.stat(real)
            found.append((name, real, st.st_size, st.st_mtime_ns))
    key = json.dumps(
        [platform.system(), platform.machine(), platform.libc_ver(), sys.version, found]
    )
    return key, toolchain(real for _, real, _, _ in found)


def read_meta(folder: Path) -> dict[str, object] | None:
    """A whole environment's record; None while it is missing or being built."""
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and (folder / "tree").is_dir() else None


def hold(folder: Path, task_id: str) -> dict[str, object] | None:
    """Mark ``folder``'s environment as held by ``task_id`` (``prune`` spares it until the
    task ends) and used now; its record, or None when it is not (or no longer) whole:
    marked first, then read, so a prune that removed it meanwhile is seen."""
    try:
        (folder / USERS).mkdir(exist_ok=True)
        (folder / USERS / task_id).touch()
        (folder / USED).touch()
    except FileNotFoundError:
        return None
    meta = read_meta(folder)
    if meta is None:
        (folder / USERS / task_id).unlink(missing_ok=True)
    return meta


def release(home: Path, task_id: str) -> None:
    """The task ended: it holds no environment any more."""
    for mark in envs(home).glob(f"*/{USERS}/{task_id}"):
        mark.unlink(missing_ok=True)


@dataclass
class Kept:
    """One environment as ``loop env ls`` shows it."""

    key: str
    repository: str
    size: int
    built_at: float
    last_used: float
    holders: list[str]


def listing(home: Path) -> list[Kept]:
    """Every whole environment on this host, the most recently used first."""
    found: list[Kept] = []
    for folder in sorted(envs(home).glob("*/")):
        meta = read_meta(folder)
        if meta is None:
            continue
        try:
            used = (folder / USED).stat().st_mtime
        except OSError:
            used = float(str(meta.get("built_at", 0)))
        holders = sorted(p.name for p in (folder / USERS).glob("*"))
        found.append(
            Kept(
                key=folder.name,
                repository=str(meta.get("repository", "")),
                size=int(str(meta.get("size", 0))),
                built_at=float(str(meta.get("built_at", 0))),
                last_used=used,
                holders=holders,
            )
        )
    return sorted(found, key=lambda k: k.last_used, reverse=True)


def prune(home: Path, *, older_than_s: float | None, max_bytes: int | None) -> list[Kept]:
    """Remove the environments nobody holds that were last used longer ago than
    ``older_than_s``, then the least recently used ones until the rest fit in
    ``max_bytes``; one being built or held by a task is never removed. What was removed."""
    kept = listing(home)
    now = time.time()
    gone: list[Kept] = []
    total = sum(k.size for k in kept)
    for k in reversed(kept):  # the least recently used first
        old = older_than_s is not None and now - k.last_used > older_than_s
        big = max_bytes is not None and total > max_bytes
        if (old or big) and _remove_unheld(home, k.key):
            gone.append(k)
            total -= k.size
    return gone


def _remove_unheld(home: Path, key: str) -> bool:
    """Remove one environment if no task holds it and nobody builds it (its lock, not
    waited for). Set aside first, then looked at: a task that marked it before sees it
    come back, one that marks it after finds it gone (``hold``) and builds it again."""
    folder = envs(home) / key
    aside = envs(home) / f".removing-{key}"
    fd = os.open(lock_of(home, key), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        shutil.rmtree(aside, ignore_errors=True)  # what a prune cut short left
        try:
            os.rename(folder, aside)
        except FileNotFoundError:
            return False
        if any((aside / USERS).glob("*")):
            os.rename(aside, folder)
            return False
    finally:
        os.close(fd)
    shutil.rmtree(aside, ignore_errors=True)
    return True


def built(
    meta: dict[str, object], folder: Path, *, cached: bool, seconds: float
) -> BuiltEnvironment:
    return BuiltEnvironment.model_validate(
        {
            **{k: v for k, v in meta.items() if k in BuiltEnvironment.model_fields},
            "root": str(folder / "tree"),
            "cached": cached,
            "seconds": round(seconds, 3),
        }
    )


@dataclass
class Builder:
    """One build of one environment for one task, on this host."""

    home: Path
    locks: Path
    spec: TaskSpec
    repo: str
    """Where the commit is (a task's clone)."""
    commit: str
    state_dir: Path
    """The worker's folder for the setup's logs (in the task's run folder)."""
    hidden: list[Path]
    host: str = ""
    repository: str = ""
    """What ``loop env ls`` names it by."""

    async def find_or_build(self, planned: Plan) -> BuiltEnvironment:
        """The environment of ``planned``: found, found after another task built it, or
        built now. Raises ``SetupFailed`` with the reason when its setup fails."""
        started = time.monotonic()
        folder = envs(self.home) / planned.key
        cached = True
        meta = hold(folder, self.spec.id) if folder.is_dir() else None
        if meta is None:
            async with path_lock(lock_of(self.home, planned.key)):
                meta = hold(folder, self.spec.id) if folder.is_dir() else None
                if meta is None:
                    await self._build(planned, folder)
                    meta, cached = hold(folder, self.spec.id), False
        assert meta is not None
        return built(meta, folder, cached=cached, seconds=time.monotonic() - started)

    async def _build(self, planned: Plan, folder: Path) -> None:
        env = self.spec.environment
        assert env is not None
        started = time.monotonic()
        await asyncio.to_thread(shutil.rmtree, folder, True)  # a build a crash cut short
        folder.mkdir(parents=True, exist_ok=True, mode=0o755)
        work = folder / "tree"
        async with repo_lock(self.locks, self.repo):
            await git(
                ["worktree", "add", "-q", "--detach", "--force", str(work), self.commit], self.repo
            )
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for i in range(len(planned.setup)):  # what a crashed try of this build left running
            await sandbox.kill_leftovers(self.state_dir, f"setup-{i + 1}")
        try:
            await self._run_setup(planned, work, folder / "home", started + env.timeout)
            kept = [p for p in planned.paths if _is_folder(work / p)]
            if not kept:
                raise SetupFailed(
                    f"environment setup made none of {', '.join(planned.paths)} in the tree; "
                    "environment.paths names what the setup makes"
                )
            await asyncio.to_thread(self._keep_only, folder, kept)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, folder, True)
            await self._prune_worktrees()
            raise
        await self._prune_worktrees()
        size, shows = await asyncio.to_thread(_seal, folder, planned.toolchains)
        meta: dict[str, object] = {
            "key": planned.key,
            "paths": kept,
            "shows": shows,
            "setup": planned.setup,
            "origin": planned.origin,
            "built_seconds": round(time.monotonic() - started, 3),
            "log_path": str(self.state_dir / "setup.log"),
            "size": size,
            "host": self.host,
            "commit": self.commit,
            "repository": self.repository or self.repo,
            "files": planned.files,
            "built_at": time.time(),
        }
        write_atomic(folder / META, json.dumps(meta, indent=2))

    async def _run_setup(self, planned: Plan, work: Path, home: Path, deadline: float) -> None:
        env = self.spec.environment
        assert env is not None
        # The setup's own network: the egress proxy to environment.allow_hosts only.
        policy = self.spec.sandbox.model_copy(
            update={"network": "proxy", "allow_hosts": list(env.allow_hosts)}
        )
        log = self.state_dir / "setup.log"
        log.write_text("")
        for i, command in enumerate(planned.setup):
            name = f"setup-{i + 1}"
            left = deadline - time.monotonic()
            if left <= 0:
                raise SetupFailed(
                    f"environment setup ran out of environment.timeout ({env.timeout} s) "
                    f"before `{command}`"
                )
            ran = await sandbox.run_sandboxed(
                sandbox.SandboxRun(
                    argv=["bash", "-c", command],
                    kind="setup",
                    policy=policy,
                    task_id=self.spec.id,
                    home=self.home,
                    tree=work,
                    state_dir=self.state_dir,
                    name=name,
                    limit_s=left,
                    agent_home=home,
                    # Every command sees what any of them runs: `.venv/bin/pip` names no
                    # interpreter, the one `python3 -m venv` made it from.
                    readable=[Path(p) for p in planned.toolchains],
                    hidden=self.hidden,
                    builds=True,
                )
            )
            await asyncio.to_thread(redact_file, Path(ran.log_path))
            await asyncio.to_thread(_append, log, command, Path(ran.log_path), ran.network_refused)
            if ran.exit_code != 0 or ran.timed_out:
                raise SetupFailed(_failure(command, ran, log))

    def _keep_only(self, folder: Path, kept: list[str]) -> None:
        """The tree holds the kept paths and nothing else, each where the setup made it."""
        work, aside = folder / "tree", folder / ".kept"
        aside.mkdir()
        for i, rel in enumerate(kept):
            os.rename(work / rel, aside / str(i))
        shutil.rmtree(work)
        work.mkdir(mode=0o755)
        for i, rel in enumerate(kept):
            (work / rel).parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            os.rename(aside / str(i), work / rel)
        aside.rmdir()
        for cache in CACHES:
            shutil.rmtree(folder / "home" / cache, ignore_errors=True)

    async def _prune_worktrees(self) -> None:
        async with repo_lock(self.locks, self.repo):
            await git(["worktree", "prune"], self.repo, check=False)


def _is_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _append(log: Path, command: str, part: Path, refused: list[str]) -> None:
    with log.open("a") as out:
        out.write(f"$ {command}\n")
        with contextlib.suppress(OSError):
            out.write(part.read_text(errors="replace"))
        for host in refused:
            out.write(f"[loopwork] the egress proxy refused: {host}\n")


def _failure(command: str, ran: ProcResult, log: Path) -> str:
    """One line: the command, how it ended, the proxy's refusals, the log's tail."""
    how = "timed out" if ran.timed_out else f"exited {ran.exit_code}"
    refused = f"; the egress proxy refused {', '.join(ran.network_refused)}"
    tail = redact(tail_of(Path(ran.log_path), TAIL_CHARS))
    lines = " | ".join(line.strip() for line in tail.splitlines() if line.strip())
    return (
        f"environment setup failed: `{command}` {how}{refused if ran.network_refused else ''} "
        f"(log {log}): {lines}"
    )


def _seal(folder: Path, toolchains: list[str]) -> tuple[int, list[str]]:
    """The environment as it stays: the worker's, readable and never writable by anyone
    else, no set-id bit; its size, and the host folders its links point into that a run
    must see (``shows``): the setup's HOME, and a toolchain of the setup's own programs
    (the interpreter a virtualenv was made from). A link's text is the setup's, so a
    folder it names is shown only if it is one of those."""
    size = 0
    me, group = os.getuid(), os.getgid()
    kept_home = str(folder / "home")
    targets: list[str] = []
    for top in (folder / "tree", folder / "home"):
        if not top.is_dir():
            continue
        for entry in tree.walk(str(top)):
            st = entry.st
            size += st.st_blocks * 512
            if stat.S_ISLNK(st.st_mode):
                os.chown(entry.name, me, group, dir_fd=entry.dir_fd, follow_symlinks=False)
                target = os.readlink(entry.name, dir_fd=entry.dir_fd)
                if target.startswith("/"):
                    targets.append(os.path.normpath(target))
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and st.st_uid != me:
                continue  # another name may be anywhere: left as it is (read-only anyway)
            os.chown(entry.name, me, group, dir_fd=entry.dir_fd, follow_symlinks=False)
            executable = stat.S_ISDIR(st.st_mode) or st.st_mode & 0o111
            os.chmod(entry.name, 0o755 if executable else 0o644, dir_fd=entry.dir_fd)
        os.chmod(top, 0o755)
    shows = {kept_home for t in targets if under(t, kept_home)}
    outside = [t for t in targets if not under(t, str(folder))]
    shows.update(p for p in toolchain(outside) if any(under(p, t) for t in toolchains))
    return size, sorted(shows)
