"""Untrusted subprocesses (agents, gates) with heartbeats, timeouts and group kills.

Why a module of its own: the agent and the gates share every hard part. The
child runs in its own session so that a timeout or a cancellation kills the
whole process group, grandchildren included; its output goes through a pipe to a
log file under the run folder that the worker writes (an agent may print
megabytes; only a tail is returned): the child holds no descriptor of the log, so
what it printed cannot be rewritten or cut afterwards (a gate's verdict reads the
runner's own output there);
and while it runs, the activity heartbeats from a background task so a dead
worker is noticed in seconds and a cancellation reaches us at all.

The pid and start time are written to ``pid_file`` so that a retried activity
(after a ``kill -9`` of the worker) can kill the orphaned group first.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

from pydantic import BaseModel
from temporalio import activity

from loop.contracts import OUTPUT_TAIL_CHARS

T = TypeVar("T")
HEARTBEAT_EVERY_S = 1.0
KILL_GRACE_S = 2.0
LOG_BYTES = 256 << 20
"""A log keeps this much of a run's output; the rest is read and counted, not kept."""
DRAIN_S = 1.0
"""How long output may still arrive after the process is gone (a grandchild that has
left its group holds the pipe; the sandbox kills it)."""


def watch_children_by_pidfd() -> bool:
    """Have asyncio learn of a subprocess's exit from a pidfd on the event loop.

    Python 3.11's default watcher starts a thread per subprocess to block in
    ``waitpid`` and wakes the loop through its self-pipe: a task starts some forty
    (git, launchers), and those threads cost the worker more CPU than the waits.
    3.12 picks the pidfd watcher itself where the kernel has ``pidfd_open``; so does
    this, on 3.11, for the running loop (the worker's; any other loop's subprocesses
    are told their exit through it). True when it was installed.
    """
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # a kernel before 5.3, or a seccomp filter that refuses it
        return False
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(watcher)
    return True


class ProcResult(BaseModel):
    exit_code: int | None
    timed_out: bool = False
    output_tail: str = ""
    duration_s: float = 0.0
    log_path: str = ""
    sandbox: str = ""
    """How it was confined (``activities.host.sandbox``); empty for Loopwork's own helpers."""
    refused: list[str] = []
    """Writes outside the worktree the sandbox refused, as found in the output."""
    refused_protected: list[str] = []
    """Protected files of the worktree a write to which the sandbox refused."""
    network_refused: list[str] = []
    """Destinations the egress proxy refused (``host:port: why``)."""
    removed: list[str] = []
    """What the sandbox removed from the worktree afterwards (repositories made inside it)."""
    not_started: str = ""
    """Why the command itself never ran (missing, not executable); the exit code is then
    126 or 127 set by Loopwork, not by the command."""


def tail_of(path: Path, chars: int = OUTPUT_TAIL_CHARS) -> str:
    """The last ``chars`` characters of a file, decoded leniently (agents print binary too)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - chars * 4))
            data = f.read()
    except FileNotFoundError:
        return ""
    text = data.decode("utf-8", errors="replace").replace("\x00", "")
    text = text[-chars:]
    if size > len(data):
        text = f"[… {size - len(data)} earlier bytes in the log]\n" + text
    return text


@dataclass
class _Beat:
    """The running activity's heartbeat: when it began, and what its beats carry."""

    began: float
    details: Callable[[], object] | None = None


_beat: contextvars.ContextVar[_Beat | None] = contextvars.ContextVar("loop_beat", default=None)


def began() -> None:
    """Mark the start of the activity running in this context (``Liveness`` does)."""
    _beat.set(_Beat(time.monotonic()))


@contextlib.contextmanager
def reporting(details: Callable[[], object]) -> Iterator[None]:
    """While the block runs, every heartbeat of this activity carries ``details()``: what
    a long step has done so far, which the server keeps with the pending activity and
    ``loop status`` and the review page read from its description (no history event)."""
    beat = _beat.get()
    if beat is None:
        yield
        return
    beat.details = details
    try:
        yield
    finally:
        beat.details = None


def _details() -> tuple[object, ...]:
    beat = _beat.get()
    if beat is None or beat.details is None:
        return ()
    try:
        return (beat.details(),)
    except (OSError, ValueError):
        return ()  # a progress that cannot be read now is sent with the next beat


def _tracked() -> bool:
    """Inside an activity the server tracks: a local one has no heartbeat to send (its
    workflow task is what the server watches), and unit tests run outside any."""
    return activity.in_activity() and not activity.info().is_local


def heartbeat(*details: object) -> None:
    """Heartbeat where the server tracks the activity, from its first second on: most
    steps end sooner, and a beat the server gets is a request it serves for nothing
    (the heartbeat timeout is several seconds); a no-op elsewhere."""
    if not _tracked():
        return
    beat = _beat.get()
    if beat is None or time.monotonic() - beat.began >= HEARTBEAT_EVERY_S:
        activity.heartbeat(*(details or _details()))


def start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime) follows the parenthesised command, which may hold spaces.
    return stat.rsplit(")", 1)[1].split()[19]


class Proc(Protocol):
    """What ``run_process`` needs of a process: an ``asyncio.subprocess.Process``, or a
    sandboxed run the zygote forked (``sandbox.zygote.Child``), not a child of ours."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def kill(self) -> None: ...


Spawn = Callable[[Path, Mapping[str, str], int], Awaitable[Proc]]
"""Starts a process in ``cwd`` with ``env``, its stdout and stderr to the fd given."""


class ProcessLost(Exception):
    """What would have reported the process's exit is gone (the sandbox's zygote ended):
    the process was killed, and what ran it fails (and is retried)."""


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


KILL_WAIT_S = 3.0
"""How long a sweep keeps killing before it reports that something outlived it."""


def kill_until_gone(alive: Callable[[], Iterable[int]], wait_s: float = KILL_WAIT_S) -> bool:
    """SIGKILL every process ``alive`` lists until it lists none; True when that happened
    within ``wait_s``. Asked again each round, since what is being killed may fork."""
    deadline = time.monotonic() + wait_s
    while True:
        pids = list(alive())
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def kill_stale(pid_file: Path) -> bool:
    """Kill the process group a crashed earlier try left behind. True when one was found."""
    try:
        record = json.loads(pid_file.read_text())
    except (OSError, ValueError):
        return False
    pid, started = int(record["pid"]), record.get("start")
    alive = start_time(pid)
    pid_file.unlink(missing_ok=True)
    if alive is None or alive != started:
        return False
    kill_group(pid)
    return True


async def _terminate(proc: Proc) -> None:
    kill_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError, ProcessLost):
        await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
    # The leader may be gone while a grandchild in the group still runs.
    kill_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(ProcessLost):
        await proc.wait()


class _Copier:
    """The worker's end of a run's output pipe: what arrives goes to the log, up to
    ``LOG_BYTES``; past that, a line says how much more there was."""

    def __init__(self, read_fd: int, log: BinaryIO) -> None:
        self.fd = read_fd
        self.log = log
        self.kept = 0
        self.dropped = 0
        self.done = asyncio.get_running_loop().create_future()
        os.set_blocking(read_fd, False)
        asyncio.get_running_loop().add_reader(read_fd, self._read)

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._stop()
                return
            room = LOG_BYTES - self.kept
            if room > 0:
                self.log.write(data[:room])
                self.log.flush()  # in the file as it arrives: progress reads its last line
                self.kept += min(room, len(data))
            self.dropped += max(0, len(data) - max(room, 0))

    def _stop(self) -> None:
        if not self.done.done():
            asyncio.get_running_loop().remove_reader(self.fd)
            self.done.set_result(None)

    async def finish(self) -> None:
        """Read to the end, or for ``DRAIN_S`` at most; then close the read end."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.done), DRAIN_S)
        self._read()
        self._stop()
        os.close(self.fd)
        if self.dropped:
            self.log.write(f"\n[output cut: {self.dropped} more bytes not kept]\n".encode())
        self.log.flush()


async def run_process(
    argv: list[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    limit_s: float,
    log_path: Path,
    pid_file: Path | None = None,
    tail_chars: int = OUTPUT_TAIL_CHARS,
    pass_fds: tuple[int, ...] = (),
    spawn: Spawn | None = None,
    started: Callable[[Proc], Awaitable[None]] | None = None,
) -> ProcResult:
    """Run ``argv`` for at most ``limit_s`` seconds; kill its group on timeout or cancel.

    A command that cannot be started (missing, not executable) is reported as exit
    code 127/126 with the reason in the tail, like a shell would, because for an
    agent or a gate that is evidence, not a crash of Loopwork. ``started`` runs once
    the process exists (the sandbox's hand-shake with its launcher); what it raises
    ends the process and propagates. ``spawn`` starts it instead of an exec of ``argv``
    (the sandbox's zygote; ``argv`` then only names it); ``ProcessLost`` propagates.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    with log_path.open("wb") as log:
        read_end, write_end = os.pipe()
        copier = _Copier(read_end, log)
        try:
            proc: Proc
            if spawn is not None:
                proc = await spawn(cwd, env, write_end)
            else:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=str(cwd),
                    env=dict(env),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=write_end,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=pass_fds,
                )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as e:
            os.close(write_end)
            await copier.finish()
            code = 127 if isinstance(e, FileNotFoundError) else 126
            message = f"cannot start {argv[0]!r}: {e.strerror or e}"
            log.write(message.encode())
            return ProcResult(
                exit_code=code, output_tail=message, log_path=str(log_path), not_started=message
            )
        except BaseException:
            os.close(write_end)
            await asyncio.shield(copier.finish())
            raise
        os.close(write_end)
        if pid_file is not None:
            pid_file.write_text(json.dumps({"pid": proc.pid, "start": start_time(proc.pid)}))
        timed_out = False
        try:
            if started is not None:
                await started(proc)
            deadline = began + limit_s
            while True:
                heartbeat()
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    await _terminate(proc)
                    break
                try:
                    await asyncio.wait_for(
                        asyncio.shield(proc.wait()), min(HEARTBEAT_EVERY_S, left)
                    )
                    break
                except TimeoutError:
                    continue
        except BaseException:
            await asyncio.shield(_terminate(proc))
            raise
        finally:
            if proc.returncode is not None:
                # Children that outlived the leader in its group (background jobs). A
                # `setsid` grandchild has left the group: only the sandbox (a pid
                # namespace, the task uid, a cgroup) reaches it; mode off does not.
                kill_group(proc.pid)
            if pid_file is not None:
                pid_file.unlink(missing_ok=True)
            await asyncio.shield(copier.finish())
    return ProcResult(
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        output_tail=tail_of(log_path, tail_chars),
        duration_s=round(time.monotonic() - began, 3),
        log_path=str(log_path),
    )


async def heartbeating(awaitable: Awaitable[T]) -> T:
    """Await something slow (a model call, a big search), heartbeating every second from
    the first on."""
    if not _tracked():
        return await awaitable

    async def beat() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_EVERY_S)
            activity.heartbeat(*_details())

    ticker = asyncio.create_task(beat())
    try:
        return await awaitable
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
