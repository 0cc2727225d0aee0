"""A run's launcher plan, and talking to the launcher over its control socket.

The worker gives the launcher (``launch.py``, forked by the ``zygote``) its plan and one
end of a socket pair, and reads back what happened: the listening socket of a ``proxy``
sandbox, ``ready`` (the command is about to run), an ``error`` (setup failed: the
run never started), or ``exec_failed`` (the command could not be started). The
plan holds no secret: the environment travels beside it, in the zygote's request,
never as an argument.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LAUNCH = Path(__file__).with_name("launch.py")
SETUP_TIMEOUT_S = 30.0


@dataclass
class Launch:
    """One run for the zygote (``zygote``): the plan, the fds its launcher gets at the
    same numbers, our end of its control socket."""

    plan: dict[str, Any]
    pass_fds: tuple[int, ...]
    control: socket.socket
    _child_fds: list[int] = field(default_factory=list)

    def close_child_fds(self) -> None:
        """Our copies of what the launcher inherited; call once it has started."""
        for fd in self._child_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._child_fds.clear()

    def close(self) -> None:
        self.close_child_fds()
        self.control.close()


def prepare(plan: dict[str, Any], extra_fds: tuple[int, ...] = ()) -> Launch:
    """The launch of ``plan`` (its ``control_fd`` is filled in here)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    child_fd = theirs.detach()
    return Launch(
        plan=plain({**plan, "control_fd": child_fd}),
        pass_fds=(child_fd, *extra_fds),
        control=ours,
        _child_fds=[child_fd],
    )


def plain(value: Any) -> Any:
    """``value`` with the plain types marshal writes (a level is an enum, a str of its own)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str.__str__(value)  # the text itself, whatever a subclass's __str__ says
    raise TypeError(f"not for a launcher's plan: {value!r}")


@dataclass
class Setup:
    """What the launcher said before the command ran."""

    ready: bool = False
    error: str = ""
    listener: socket.socket | None = None
    """The egress proxy's socket in the run's namespace."""
    gateway: socket.socket | None = None
    """The model gateway's socket in the run's namespace."""


def read_setup(control: socket.socket, timeout_s: float = SETUP_TIMEOUT_S) -> Setup:
    """Block until the launcher is ready or says why not (run it in a thread)."""
    setup = Setup()
    control.settimeout(timeout_s)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 4096, 2)
        except TimeoutError:
            setup.error = f"the sandbox launcher said nothing for {timeout_s:g} s"
            return setup
        except OSError as e:
            setup.error = f"the sandbox launcher's control socket failed: {e}"
            return setup
        if not data:
            setup.error = setup.error or "the sandbox launcher ended before it was ready"
            return setup
        message = json.loads(data)
        names = message.get("listeners") or []
        for i, fd in enumerate(fds):
            name = names[i] if i < len(names) else ""
            if name == "proxy":
                setup.listener = socket.socket(fileno=fd)
            elif name == "gateway":
                setup.gateway = socket.socket(fileno=fd)
            else:
                os.close(fd)
        if message.get("error"):
            setup.error = str(message["error"])
            return setup
        if message.get("ready"):
            setup.ready = True
            return setup


def read_exec_failure(control: socket.socket) -> tuple[str, int]:
    """After the run: why the command could not be started, if it could not."""
    control.setblocking(False)
    try:
        data = control.recv(4096)
    except (BlockingIOError, OSError):
        return "", 0
    if not data:
        return "", 0
    message = json.loads(data)
    return str(message.get("exec_failed", "")), int(message.get("code", 0))


STRICT_FIXED = [
    "--ro-bind", "/", "/",
    "--dev", "/dev",
    "--perms", "1777", "--tmpfs", "/dev/shm",
    "--proc", "/proc",
    "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
    "--hostname", "loop-sandbox",
    "--new-session", "--die-with-parent",
    "--cap-drop", "ALL",
    "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
]  # fmt: skip
"""bubblewrap's part of strict: a read-only host, its own /dev, /proc and pids; the view
(``mounts``) goes on top. The network namespace is the launcher's, not bubblewrap's."""


def setpriv_args(setpriv: str, uid: int, gid: int) -> list[str]:
    return [
        setpriv,
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def plan(
    *,
    mode: str,
    uid: int,
    gid: int,
    network: str,
    ops: list[Any],
    cwd: str,
    argv: list[str],
    rlimits: dict[str, int],
    cgroup_procs: list[str],
    seccomp_fd: int,
    bwrap: str = "",
    setpriv: str = "",
    proxy_port: int = 0,
    gateway_port: int = 0,
) -> dict[str, Any]:
    """The launcher's plan for one run (``ops``: ``mounts.Op`` values, in order)."""
    from activities.host.sandbox.mounts import bwrap_args  # the one place ops become bwrap words

    if mode == "strict":
        argv = [
            bwrap,
            *STRICT_FIXED,
            "--seccomp", str(seccomp_fd),
            *bwrap_args(ops),
            "--chdir", cwd,
            "--",
            *setpriv_args(setpriv, uid, gid),
            *argv,
        ]  # fmt: skip
    return {
        "mode": mode,
        "uid": uid,
        "gid": gid,
        "net": network,
        "proxy_port": proxy_port,
        "gateway_port": gateway_port,
        "mounts": [
            {
                "kind": o.kind,
                "path": o.path,
                "writable": o.writable,
                "size": o.size,
                "source": o.source,
            }
            for o in ops
        ],
        "cwd": cwd,
        "argv": argv,
        "rlimits": rlimits,
        "cgroup_procs": cgroup_procs,
        "seccomp_fd": seccomp_fd,
    }
