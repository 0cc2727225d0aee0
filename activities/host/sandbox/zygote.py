"""The zygote: one long-lived launcher per worker process that forks every sandboxed run.

Starting ``python -I -S -B launch.py`` for each run cost ~15 ms of CPU in the interpreter's
start and its imports alone; the zygote pays that once. It is ``launch.py`` itself, run
as root with the worker's interpreter isolated from the environment, started on the first
sandboxed run (off the event loop) with one end of a ``SOCK_SEQPACKET`` pair. Per run the
worker sends it one request: the plan, the cwd and the environment (``marshal``), and by
``SCM_RIGHTS`` a status socket of the run's own, stdin (``/dev/null``), the log for
stdout and stderr, and every fd the plan names (its control socket, the seccomp filter,
a gate's report channel). The zygote forks; the child starts a session, gets those fds at
the numbers the plan names and no other, and runs the launcher's ``run``. The zygote
answers the child's pid on the status socket, reaps it, and answers its exit status there.

The environment is in the request, never an argument: the socket pair is the worker's
and the zygote's alone. The zygote reads nothing a task controls before it forks (the
request is the worker's), imports only the standard library, is single-threaded, and
changes none of its own state a child would inherit (signals, umask, namespaces,
cgroups, limits: each child sets its own); see docs/architecture.md ("The trust
boundary").

When the worker ends, the zygote reads EOF and exits without touching its runs (a
retried step kills them through their pid files, as before). When the zygote ends
mid-run, each pending run's status socket reads EOF: the run's group is killed and
its wait raises ``ProcessLost`` (the activity is retried); the next run starts a new
zygote.
"""

from __future__ import annotations

import asyncio
import marshal
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from activities.host.proc import ProcessLost, kill_group
from activities.host.sandbox.launcher import LAUNCH, Launch, plain

REPLY_BYTES = 4096
START_TIMEOUT_S = 30.0
"""How long a blocking start waits for the zygote's answer (its first start included)."""


class Child:
    """A run's launcher, forked by the zygote: what ``run_process`` needs of a process."""

    def __init__(self, pid: int, status: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        status.setblocking(False)
        self._status = status
        self._exit = asyncio.ensure_future(self._read())

    async def _read(self) -> int:
        try:
            data = await asyncio.get_running_loop().sock_recv(self._status, REPLY_BYTES)
        finally:
            self._status.close()
        self.returncode = _exit_code(data, self.pid)
        return self.returncode

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


class Zygote:
    """The worker's zygote, started when first needed and again after it ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: tuple[subprocess.Popen[bytes], socket.socket] | None = None
        """The running zygote and our end of its socket, replaced together."""

    def _live(self) -> socket.socket | None:
        current = self._current
        if current is not None and current[0].poll() is None:
            return current[1]
        return None

    def _started(self) -> socket.socket:
        """The zygote's socket, starting it first if it is not running (blocks)."""
        with self._lock:
            live = self._live()
            if live is not None:
                return live
            if self._current is not None:
                self._current[1].close()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with theirs:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-B", str(LAUNCH), str(theirs.fileno())],
                    pass_fds=(theirs.fileno(),),
                    env={"LANG": "C.UTF-8"},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    start_new_session=True,  # a terminal's ^C is not for it
                )
            self._current = (proc, ours)
            return ours

    def _ended(self, sock: socket.socket) -> None:
        """``sock`` refused a request: the zygote behind it is gone; the next starts anew."""
        with self._lock:
            if self._current is not None and self._current[1] is sock:
                self._current[0].kill()
                self._current[0].wait()

    def _request(
        self, sock: socket.socket, launch: Launch, cwd: Path, env: Mapping[str, str], log: int
    ) -> socket.socket:
        """Send one run's request; our end of its status socket."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            request = {
                "plan": launch.plan,
                "fds": list(launch.pass_fds),
                "cwd": str(cwd),
                "env": plain(dict(env)),
            }
            fds = [theirs.fileno(), null, log, log, *launch.pass_fds]
            socket.send_fds(sock, [marshal.dumps(request)], fds)
        except BaseException:
            mine.close()
            raise
        finally:
            os.close(null)
            theirs.close()
        return mine

    def _sent(
        self, sock: socket.socket, launch: Launch, cwd: Path, env: Mapping[str, str], log: int
    ) -> socket.socket:
        """The request sent to a live zygote (a new one if ``sock``'s had ended)."""
        try:
            return self._request(sock, launch, cwd, env, log)
        except (BrokenPipeError, ConnectionResetError):
            self._ended(sock)
        return self._request(self._started(), launch, cwd, env, log)

    async def spawn(self, launch: Launch, cwd: Path, env: Mapping[str, str], log: int) -> Child:
        """Start ``launch`` (``proc.Spawn``): stdout and stderr to ``log``."""
        sock = self._live() or await asyncio.to_thread(self._started)
        status = self._sent(sock, launch, cwd, env, log)
        status.setblocking(False)
        try:
            reply = await asyncio.get_running_loop().sock_recv(status, REPLY_BYTES)
        except BaseException:
            status.close()
            raise
        return Child(_pid(reply, status), status)

    def start(self, launch: Launch, cwd: Path, env: Mapping[str, str], log: int) -> Started:
        """``spawn`` for a caller without an event loop (the host probe, in a thread)."""
        status = self._sent(self._started(), launch, cwd, env, log)
        status.settimeout(START_TIMEOUT_S)
        try:
            return Started(_pid(status.recv(REPLY_BYTES), status), status)
        except OSError:
            status.close()
            raise


class Started:
    """A run started by ``Zygote.start``: its exit is waited for by blocking."""

    def __init__(self, pid: int, status: socket.socket) -> None:
        self.pid = pid
        self._status = status

    def wait(self, timeout_s: float) -> int:
        """The exit code; TimeoutError after ``timeout_s`` (the run's group is killed)."""
        self._status.settimeout(timeout_s)
        try:
            data = self._status.recv(REPLY_BYTES)
        except TimeoutError:
            kill_group(self.pid)
            raise
        finally:
            self._status.close()
        return _exit_code(data, self.pid)


def _exit_code(reply: bytes, pid: int) -> int:
    """The run's exit code from the zygote's answer; none (the zygote ended) means
    nothing reaps or reports the run any more: it must not go on unwatched."""
    if not reply:
        kill_group(pid)
        raise ProcessLost(f"the sandbox's zygote ended while run {pid} ran")
    return int(marshal.loads(reply)["exit"])


def _pid(reply: bytes, status: socket.socket) -> int:
    if not reply:
        status.close()
        raise ProcessLost("the sandbox's zygote ended before it started the run")
    message = marshal.loads(reply)
    if "pid" not in message:
        status.close()
        raise RuntimeError(f"the sandbox's zygote could not start the run: {message['error']}")
    return int(message["pid"])


ZYGOTE = Zygote()
"""This worker process's zygote."""
